"""The installed import names: everything lives under ``tether.``, nothing at the top level."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _import(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Run outside the checkout, so the current directory cannot lend the bare folder names.
    return subprocess.run([sys.executable, "-c", f"import {name}"], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def test_packages_install_under_the_tether_namespace(tmp_path: Path) -> None:
    for name in ("tether.guardian", "tether.frontend", "tether.protocol", "tether.shared",
                 "tether.guardian.rpc.daemon"):
        assert _import(name, tmp_path).returncode == 0, name
    for bare in ("shared", "protocol", "frontend", "guardian"):
        result = _import(bare, tmp_path)
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, bare
