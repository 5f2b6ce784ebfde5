"""The guardian's lean imports (guardian/lean.py) change what is loaded, never a result."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import wcwidth

_WIDTHS = """
import hashlib, sys
import tether.guardian.lean
import pyte.screens
widths = bytes(w & 0xFF for w in map(pyte.screens.wcwidth, map(chr, range(0x110000))))
print(hashlib.sha256(widths).hexdigest())
print(",".join(sorted(m for m in sys.modules if m.startswith("wcwidth"))))
import shutil
print(shutil._BZ2_SUPPORTED, shutil._LZMA_SUPPORTED)
"""


def test_a_guardian_process_has_the_same_character_widths_from_the_extension_alone() -> None:
    run = subprocess.run([sys.executable, "-c", _WIDTHS], capture_output=True, text=True,
                         timeout=60, check=True)
    digest, modules, archives = run.stdout.split("\n")[:3]
    expected = bytes(w & 0xFF for w in map(wcwidth.wcwidth, map(chr, range(0x110000))))
    assert digest == hashlib.sha256(expected).hexdigest()
    if getattr(wcwidth, "HAS_C_EXTENSION", False):
        assert modules == "wcwidth,wcwidth._wcwidth_c"  # not the tables, not textwrap
    assert archives == "False False"  # shutil without bz2 and lzma


_HOST = """
import asyncio, sys
import tether.guardian.lean
import ssl, wcwidth
print(sys.modules["wcwidth"] is wcwidth, "wcswidth" in dir(sys.modules["wcwidth"]), ssl.OPENSSL_VERSION != "")
"""


def test_a_process_that_already_runs_asyncio_keeps_its_modules() -> None:
    # A test runner, or any host importing guardian modules: nothing is taken from it.
    run = subprocess.run([sys.executable, "-c", _HOST], capture_output=True, text=True,
                         timeout=60, check=True)
    same_package, full_package, has_ssl = run.stdout.split()
    assert same_package == "True"
    assert full_package == "True"
    assert has_ssl == "True"
