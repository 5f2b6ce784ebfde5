"""Imported first by the guardian's entry point: keep out what the guardian never uses.

The guardian talks ZeroMQ over a local socket and never TLS, but asyncio imports ``ssl``
(which maps libssl) only to offer TLS transports: about 2 MB of the guardian's resident
memory (docs/development.md#benchmarks: idle RSS at most 40 MB). With ``ssl`` marked absent, asyncio simply
offers
no TLS. Only a process that has not imported asyncio yet is changed: a test runner or any
other host that imports guardian modules keeps its ``ssl``.

``_hashlib`` is OpenSSL's hashing, which maps libcrypto (about 3.5 MB resident) as soon as
``hashlib``, ``hmac`` or ``secrets`` is imported. The guardian hashes only with SHA-256 and
HMAC-SHA-256, which the standard library also implements itself (``_sha256``); with
``_hashlib`` marked absent, ``hashlib`` and ``hmac`` fall back to those built-ins.

Pydantic looks for plugins (the ``pydantic`` entry-point group) the first time it builds a
validator: that imports ``importlib.metadata`` (with ``email``, ``zipfile``, ``csv``, ...) and
reads every installed distribution's metadata, about 2.5 MB resident for a lookup that finds
nothing in a guardian. Its private loader module is replaced by one that reports no plugins.
If a later pydantic no longer has that module, the stand-in is simply never used.

``shutil`` (which ptyprocess imports for ``which``) imports ``bz2`` and ``lzma`` only to offer
those archive formats, mapping libbz2 and liblzma (about 0.3 MB); both are marked absent, and
``shutil`` then offers neither.

``wcwidth`` (pyte's character widths) imports its whole package to offer one function: tables,
text wrapping, grapheme segmentation, about 1.5 MB resident. pyte needs only ``wcwidth()``,
which the package itself takes from its C extension when it has one; the guardian loads that
extension alone, behind a stand-in package that offers that one function exactly as the real
package does (the extension's function behind the same ``lru_cache``). Without the extension
(or with ``WCWIDTH_PYTHON`` set, which asks the package for its Python code) the real package
is imported as usual.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import types

if "asyncio" not in sys.modules and "ssl" not in sys.modules:
    sys.modules["ssl"] = None  # type: ignore[assignment]
if "asyncio" not in sys.modules and "_hashlib" not in sys.modules:
    sys.modules["_hashlib"] = None  # type: ignore[assignment]
if "shutil" not in sys.modules:
    for _archive in ("bz2", "lzma"):
        sys.modules.setdefault(_archive, None)  # type: ignore[arg-type]


def _wcwidth_extension_alone() -> None:
    spec = importlib.util.find_spec("wcwidth")
    if spec is None or not spec.submodule_search_locations or os.environ.get("WCWIDTH_PYTHON"):
        return
    stand_in = types.ModuleType("wcwidth", "wcwidth's C extension alone (tether.guardian.lean)")
    stand_in.__path__ = list(spec.submodule_search_locations)
    sys.modules["wcwidth"] = stand_in
    try:
        extension = importlib.import_module("wcwidth._wcwidth_c")
    except ImportError:  # no extension here: the package's Python code, imported as usual
        del sys.modules["wcwidth"]
        return
    stand_in.wcwidth = functools.lru_cache(maxsize=1024)(extension.wcwidth)  # type: ignore[attr-defined]


if "asyncio" not in sys.modules and "wcwidth" not in sys.modules:
    _wcwidth_extension_alone()

if "pydantic" not in sys.modules:
    _no_plugins = types.ModuleType("pydantic.plugin._loader", "The guardian uses no pydantic plugins.")
    _no_plugins.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules["pydantic.plugin._loader"] = _no_plugins
