"""Imported first by the guardian's entry point: keep out what the guardian never uses.

The guardian talks ZeroMQ over a local socket and never TLS, but asyncio imports ``ssl``
(which maps libssl) only to offer TLS transports: about 2 MB of the guardian's resident
memory (SPEC §11: idle RSS at most 40 MB). With ``ssl`` marked absent, asyncio simply offers
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
"""

from __future__ import annotations

import sys
import types

if "asyncio" not in sys.modules and "ssl" not in sys.modules:
    sys.modules["ssl"] = None  # type: ignore[assignment]
if "asyncio" not in sys.modules and "_hashlib" not in sys.modules:
    sys.modules["_hashlib"] = None  # type: ignore[assignment]

if "pydantic" not in sys.modules:
    _no_plugins = types.ModuleType("pydantic.plugin._loader", "The guardian uses no pydantic plugins.")
    _no_plugins.get_plugins = lambda: ()  # type: ignore[attr-defined]
    sys.modules["pydantic.plugin._loader"] = _no_plugins
