"""Shared fixtures: private Tether dirs per test, real MCP clients, and cleanup."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.helpers import kill_tree, missing_fixtures
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

REPO = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session: pytest.Session) -> None:
    """A checkout without its test fixtures fails the run up front: tests never skip for a
    missing file."""
    missing = missing_fixtures()
    if missing:
        raise pytest.UsageError(
            "test fixtures missing from the checkout: " + ", ".join(str(p) for p in missing))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tether_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    """Private state and runtime dirs (short paths: ipc paths must stay under 107 bytes).

    Everything a test starts inherits TETHER_RUNTIME_DIR, which is how teardown finds and
    stops every guardian, shell and child it left behind; then the directory is removed.
    """
    base = Path(tempfile.mkdtemp(prefix="tt-", dir="/tmp"))
    os.chmod(base, 0o700)
    runtime = base / "run"
    # Shells source ~/.bashrc: give them a private, empty home so the developer's dotfiles
    # neither slow them down nor get disturbed (a pyenv rehash lock left by a shell that a
    # test killed mid-startup stalls every later shell for a minute).
    home = base / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# test home\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TETHER_HOME", str(base / "state"))
    monkeypatch.setenv("TETHER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TETHER_GUARDIAN_IDLE_S", "600")
    monkeypatch.delenv("TETHER_EXECUTION_ID", raising=False)
    yield Config.from_env()
    kill_tree(runtime)
    # Nothing of the test's is left running: its state goes too (a full suite makes ~900).
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    return root.resolve()


@pytest.fixture
async def client(tether_env: Config) -> AsyncIterator[Client]:
    """The real MCP client against an in-process front-end."""
    async with Client(build_server(tether_env)) as c:
        yield c


@pytest.fixture
async def stdio_client(tether_env: Config) -> AsyncIterator[Client]:
    """The real MCP client against a real ``tether serve`` over stdio."""
    async with Client(stdio_params()) as c:
        yield c


def stdio_params(env_extra: dict[str, str] | None = None) -> StdioServerParameters:
    """How to start ``tether serve`` as a real subprocess over stdio."""
    env = {k: v for k, v in os.environ.items()}
    env.update(env_extra or {})
    tether = Path(sys.executable).with_name("tether")
    return StdioServerParameters(command=str(tether), args=["serve"], env=env)
