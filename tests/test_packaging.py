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


def test_a_subcommand_module_is_imported_with_its_objects_frozen(tmp_path: Path) -> None:
    # The collector is paused while the module loads and back on afterwards, with what the
    # import built out of its way (frozen): a long-lived `tether serve` never walks it again.
    probe = ("import gc; from tether.shared.console import import_frozen; "
             "before = gc.get_freeze_count(); m = import_frozen('tether.frontend.transport.mcp_server'); "
             "print(gc.isenabled(), gc.get_freeze_count() > before + 10000, m.__name__)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout.split() == ["True", "True", "tether.frontend.transport.mcp_server"], result.stderr
