"""Helpers for tests: polling with deadlines, and cleaning up every process a test started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import psutil
import pytest

from tether.frontend.guardians.locator import GuardianHandle, GuardianLocator, guardian_command, read_info
from tether.protocol.method_table import THREAD_OPEN
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

T = TypeVar("T")

#: The project's own test fixtures, in the repository (a clean clone runs every test).
FIXTURES = Path(__file__).resolve().parent / "fixtures"
AGENT_SCREENS = FIXTURES / "agent-screens"
#: Each recorded agent screen and the state a recognizer must report for it
#: (tests/fixtures/agent-screens/README.md).
AGENT_SCREEN_STATES = {
    "claude_03_idle_empty": "awaiting_input",
    "claude_05_idle_after_reply": "awaiting_input",
    "claude_06_approval_bash": "awaiting_approval",
    "claude_08_busy_early": "busy",
}


def fixture_file(relative: str) -> Path:
    """A file under tests/fixtures; a missing one fails the test (never skips it)."""
    path = FIXTURES / relative
    if not path.is_file():
        pytest.fail(f"test fixture {path} is missing: tests/fixtures is part of the repository; "
                    "restore it (git checkout -- tests/fixtures)", pytrace=False)
    return path


def missing_fixtures() -> list[Path]:
    """Every agent-screen fixture file that the tests need and that is not there."""
    return [AGENT_SCREENS / f"{name}{suffix}" for name in AGENT_SCREEN_STATES
            for suffix in (".ansi", ".txt") if not (AGENT_SCREENS / f"{name}{suffix}").is_file()]


def poll(check: Callable[[], T | Literal[False] | None], timeout: float = 10.0,
         interval: float = 0.02, what: str = "condition") -> T:
    """Return ``check()`` once it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def apoll(check: Callable[[], T | None], timeout: float = 10.0, interval: float = 0.02,
                what: str = "condition") -> T:
    """:func:`poll` for async tests: sleeps without blocking the loop, so that an in-process
    server (and anything else on the loop) keeps working while it waits."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await anyio.sleep(interval)


def guardian_infos(runtime_dir: Path) -> list[dict[str, Any]]:
    infos = []
    for path in runtime_dir.glob("*/guardian.json"):
        try:
            infos.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return infos


def processes_with_env(name: str, value: str) -> list[psutil.Process]:
    """Processes of this user whose environment has ``name=value`` (what tests started)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(name) == value:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill_tree(runtime_dir: Path) -> list[int]:
    """SIGTERM then SIGKILL everything started under ``runtime_dir``; returns what was left."""
    procs = processes_with_env("TETHER_RUNTIME_DIR", str(runtime_dir))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    return [p.pid for p in procs]


def tether_processes(runtime_dir: Path, marker: str) -> list[psutil.Process]:
    """Processes a test started whose command line contains ``marker`` (e.g. ``serve``)."""
    found = []
    for proc in processes_with_env("TETHER_RUNTIME_DIR", str(runtime_dir)):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(proc.cmdline()):
                found.append(proc)
    return found


def sigstop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped: the signal takes effect when the process
    is next scheduled, not when kill(2) returns, so a call sent at once may still be read."""
    os.kill(pid, signal.SIGSTOP)
    poll(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED,
         what=f"pid {pid} to be stopped")


def start_guardian(workspace: Path, config: Config, protocol: str | None = None) -> dict[str, Any]:
    """A real guardian started by hand (as an older installation would have left it);
    returns its guardian.json once a new instance has announced itself."""
    argv = [*guardian_command(), str(workspace)]
    if protocol:
        argv += ["--protocol", protocol]
    paths = guardian_paths(config, "local", str(workspace))
    old = read_info(paths)
    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    return poll(lambda: (info := read_info(paths)) and info != old and info,
                what="guardian.json of a new guardian")


@contextlib.contextmanager
def small_tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted on ``mount`` with ``options`` (e.g. ``size=64k``), unmounted after.

    Skips the test where it cannot be mounted: that needs root, and CI runs as root.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        # Lazy: a guardian may still hold files open until its own teardown.
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.asynccontextmanager
async def guardian_thread(
    config: Config, workspace: Path
) -> AsyncIterator[tuple[GuardianHandle, dict[str, Any]]]:
    """A handle on ``workspace``'s guardian and the scope of a new thread of it (see
    :func:`open_thread`); the locator is closed after."""
    locator = GuardianLocator(config)
    try:
        handle = await locator.handle(str(workspace))
        yield handle, await open_thread(handle, workspace)
    finally:
        locator.close()


async def open_thread(handle: GuardianHandle, workspace: Path) -> dict[str, Any]:
    """Open a thread of the local principal in ``workspace``; returns the scope of its calls
    (principal, workspace_root, thread_id)."""
    base = {"principal": "local", "workspace_root": str(workspace)}
    thread = await handle.call(THREAD_OPEN, base, timeout_s=10)
    return {**base, "thread_id": thread.thread_id}



#: Directories listed while a test looks (Python's audit events: what is measured is that a
#: directory is listed, not how long it takes). Audit hooks cannot be removed: one hook,
#: installed by the first :func:`listings`.
_LISTED: list[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _LISTED and event in ("os.scandir", "os.listdir", "glob.glob"):
        _LISTED[-1].append(str(args[0]))


@contextlib.contextmanager
def listings() -> Iterator[list[str]]:
    """The directories this process lists inside the ``with``."""
    if not getattr(sys, "_tether_test_audit", False):
        sys.addaudithook(_audit)
        sys._tether_test_audit = True  # type: ignore[attr-defined]
    _LISTED.append([])
    try:
        yield _LISTED[-1]
    finally:
        _LISTED.pop()
