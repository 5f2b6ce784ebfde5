"""The first run of a fresh clone: what ``scripts/serve`` and ``scripts/test`` install, and
that building the package warns of nothing in the project's own layout.

The scripts run for real against a copy of them, with a stand-in Python that records each
``pip install`` instead of reaching an index (the real install is minutes of network)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: A stand-in for python3, and for the venv's python: ``-m venv DIR`` makes DIR/bin/python
#: (itself) and DIR/bin/tether; everything else only leaves its arguments in $LOG.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$LOG"
if [[ "$1" == -m && "$2" == venv ]]; then
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/tether"
  chmod +x "$3/bin/tether"
fi
exit 0
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("_bootstrap.sh", "_sshd.sh", "serve", "test"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    return root


def _run(root: Path, script: str) -> list[str]:
    """Run ``scripts/<script>``; the pip installs it made (their targets, in order)."""
    log = root.parent / "calls.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "LOG": str(log), "PYTHON": str(root.parent / "python3")}
    env.pop("TETHER_BOOTSTRAP_EXTRAS", None)
    # An argument: scripts/test then runs only pytest (the stand-in), not ruff and mypy.
    done = subprocess.run([str(root / "scripts" / script), "-q"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=root)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return [call.split()[-1] for call in calls if "pip install" in call and "--upgrade" not in call]


def test_serve_installs_the_runtime_only_and_test_adds_the_dev_tools_in_place(
        checkout: Path) -> None:
    root = str(checkout)
    assert _run(checkout, "serve") == [root]  # no [dev]: no pytest, ruff, mypy
    made = (checkout / ".venv" / "bin" / "python").stat().st_ino
    assert _run(checkout, "serve") == []  # in step: nothing to do
    assert _run(checkout, "test") == [f"{root}[dev]"]
    assert (checkout / ".venv" / "bin" / "python").stat().st_ino == made  # the same venv
    assert _run(checkout, "serve") == []  # a dev venv serves as it is
    assert _run(checkout, "test") == []
    with (checkout / "pyproject.toml").open("a") as toml:
        toml.write("\n# changed\n")
    assert _run(checkout, "serve") == [f"{root}[dev]"]  # once dev, kept dev (and current)
    stamp = (checkout / ".venv" / ".tether-stamp").read_text().strip()
    digest = hashlib.sha256((checkout / "pyproject.toml").read_bytes()).hexdigest()
    assert stamp == f"{digest}-dev"


def test_building_the_package_warns_of_nothing_in_its_layout(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("protocol", "shared", "frontend", "guardian"):
        shutil.copytree(ROOT / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    build = (f"import sys; from setuptools import setup; sys.argv = ['setup.py', '-q', "
             f"'egg_info', '--egg-base', {str(tmp_path)!r}, 'build_py', '--build-lib', "
             f"{str(tmp_path / 'lib')!r}]; setup()")
    done = subprocess.run([sys.executable, "-W", "always", "-c", build], cwd=source,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # setuptools' own notices (an old one calls pyproject support beta) are not the project's;
    # a warning about the project names one of its packages.
    assert "tether" not in done.stdout + done.stderr, done.stderr
    rules = tmp_path / "lib" / "tether" / "guardian" / "agents" / "recognize" / "rules"
    assert sorted(p.name for p in rules.glob("*.toml")) == sorted(
        p.name for p in (ROOT / "guardian" / "agents" / "recognize" / "rules").glob("*.toml"))
