"""Live upgrade (docs/protocol.md#live-upgrade): a guardian re-executes itself with the
installed code and keeps every terminal, shell, agent and key.

"The installed code" is a copy of this tree in a temporary directory whose
``protocol/versions.py`` says another ``CODE_VERSION``, named to the guardian by
``TETHER_GUARDIAN_CODE`` (set before the guardian starts, as an installation's files would
change under a running guardian).
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.agent_helpers import fake_argv
from tests.helpers import open_thread, poll, start_guardian
from tests.mcp_helpers import prompt_log
from tether.frontend.guardians.locator import GuardianHandle, GuardianLocator, read_info
from tether.frontend.person.upgrades import upgrade
from tether.guardian.history.journal import Journal
from tether.guardian.rpc.handoff import installed_command
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import (
    AGENT_GET,
    AGENT_LAUNCH,
    AGENT_NOTIFICATIONS,
    AGENT_PROMPT,
    EXEC_GET,
    EXEC_START,
    EXEC_STATUS,
    GUARDIAN_UPGRADE,
    HELLO,
    Method,
)
from tether.protocol.versions import MAJOR, Capability, known_minor_versions
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent
NEW_VERSION = "0.1.0+live-upgrade-test"
PREVIOUS = str(known_minor_versions()[-2])


def installed_copy(tmp_path: Path, *, code_version: str = NEW_VERSION,
                   plant_import_error: bool = False) -> Path:
    """A copy of this tree laid out as an installation (``tether/<room>``), with its own
    CODE_VERSION (and, if asked, a module that fails to import)."""
    code = tmp_path / "installed"
    for room in ("protocol", "shared", "frontend", "guardian"):
        shutil.copytree(ROOT / room, code / "tether" / room,
                        ignore=shutil.ignore_patterns("__pycache__"))
    versions = code / "tether" / "protocol" / "versions.py"
    text = versions.read_text()
    assert 'CODE_VERSION = "' in text
    versions.write_text(text.replace('CODE_VERSION = "0.1.0"', f'CODE_VERSION = "{code_version}"'))
    if plant_import_error:
        journal = code / "tether" / "guardian" / "history" / "journal.py"
        journal.write_text(journal.read_text() + "\nimport tether_module_that_does_not_exist\n")
    return code


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def numbers(data: bytes) -> list[int]:
    return [int(line[1:]) for line in data.decode(errors="replace").split()
            if line.startswith("n") and line[1:].isdigit()]


async def hello_of(handle: GuardianHandle) -> Any:
    latest = known_minor_versions()[-1]
    return await handle.call(HELLO, {"client_min": [MAJOR, 0],
                                     "client_max": [latest.major, latest.minor]}, timeout_s=5)


async def call(locator: GuardianLocator, workspace: Path, method: Method[Any, Any],
               params: dict[str, Any], timeout_s: float = 15) -> Any:
    return await locator.call(str(workspace), method, params, timeout_s=timeout_s)


async def test_upgrade_keeps_every_terminal(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARDIAN_CODE", str(installed_copy(tmp_path)))
    locator = GuardianLocator(tether_env)
    try:
        handle = await locator.handle(str(workspace))
        scope = await open_thread(handle, workspace)
        before = read_info(guardian_paths(tether_env, "local", str(workspace)))
        assert before is not None and before["code_version"] == "0.1.0"

        port = free_port()
        server = await call(locator, workspace, EXEC_START, {
            **scope, "command": f"{sys.executable} -m http.server {port} --bind 127.0.0.1",
            "background": True, "idempotency_key": "server"})
        counter = await call(locator, workspace, EXEC_START, {
            **scope, "background": True, "idempotency_key": "counter",
            "command": f"{sys.executable} -u -c 'import time\nfor i in range(10**6):\n"
                       " print(f\"n{i}\"); time.sleep(0.01)'"})
        poll(lambda: answers(port), timeout=15, what="the http server")
        plog, clog = tmp_path / "parent.log", tmp_path / "child.log"
        parent = (await call(locator, workspace, AGENT_LAUNCH, {
            **scope, "argv": fake_argv(plog, "--busy-seconds", "0.2"), "recognizer": "claude",
            "idempotency_key": "parent"})).agent.execution_id
        child = (await call(locator, workspace, AGENT_LAUNCH, {
            **scope, "argv": fake_argv(clog, "--busy-seconds", "6"), "recognizer": "claude",
            "parent_execution_id": parent, "idempotency_key": "child"})).agent.execution_id

        async def state(execution_id: str) -> str:
            got = await call(locator, workspace, AGENT_GET, {**scope, "execution_id": execution_id})
            return str(got.agent.agent_state)

        await until(lambda: _is(state(parent), "idle"), what="the parent idle")
        await until(lambda: _is(state(child), "idle"), what="the child idle")
        await call(locator, workspace, AGENT_PROMPT, {
            **scope, "execution_id": child, "prompt_id": "task", "text": "do the task",
            "timeout_ms": 0})
        await until(lambda: _is(state(child), "running"), what="the child's turn")
        sleeper = await call(locator, workspace, EXEC_START, {
            # Longer than the issue's `sleep 3`: on a loaded machine the hand-over may take
            # that long, and the command must run across it.
            **scope, "command": "sleep 6; echo done", "idempotency_key": "sleep", "wait_ms": 0})
        sleep_id = sleeper.execution.execution_id
        assert sleeper.execution.status == "running"

        pids = {}
        for eid in (server.execution.execution_id, counter.execution.execution_id, parent, child):
            record = (await call(locator, workspace, EXEC_GET, {**scope, "execution_id": eid}))
            pids[eid] = record.execution.runtime.pid
        guardian_pid = int(before["pid"])

        # A call in flight across the hand-over (a wait), and a keyed command sent during it.
        waiting = asyncio.ensure_future(call(locator, workspace, EXEC_STATUS, {
            **scope, "execution_id": sleep_id, "wait_ms": 20_000}, timeout_s=30))
        await asyncio.sleep(0.2)
        once = tmp_path / "once.txt"
        asked = time.monotonic()
        upgraded = await handle.call(GUARDIAN_UPGRADE, {"reason": "test"}, timeout_s=60)
        assert upgraded.handing_over and upgraded.to_code_version == NEW_VERSION
        keyed = {**scope, "command": f"echo once >> {once}", "background": True,
                 "idempotency_key": "once"}
        during = await call(locator, workspace, EXEC_START, keyed, timeout_s=30)

        paths = guardian_paths(tether_env, "local", str(workspace))
        await until(lambda: _announced(paths), what="the new code's guardian.json")
        hello = await until(lambda: _new_code(handle), what="the new code's hello")
        took = time.monotonic() - asked
        assert hello.instance_id == before["instance_id"], hello
        assert hello.guardian_protocol == str(known_minor_versions()[-1])
        after = read_info(guardian_paths(tether_env, "local", str(workspace)))
        assert after is not None and int(after["pid"]) == guardian_pid
        assert after["code_version"] == NEW_VERSION and after["auth_token"] == before["auth_token"]
        assert psutil.Process(guardian_pid).is_running()
        for eid, pid in pids.items():
            proc = psutil.Process(pid)
            assert proc.is_running() and proc.ppid() == guardian_pid, (eid, pid)
        assert answers(port)
        # The command and the agent's turn run across the hand-over.
        across = await call(locator, workspace, EXEC_GET, {**scope, "execution_id": sleep_id})
        assert across.execution.status == "running", across
        assert await state(child) == "running"

        finished = await waiting
        assert finished.execution.execution_id == sleep_id
        done = await call(locator, workspace, EXEC_STATUS, {
            **scope, "execution_id": sleep_id, "wait_ms": 10_000})
        assert (done.execution.status, done.execution.exit_code) == ("exited", 0), done
        assert "done" in done.output.text

        # The keyed command ran once, whether it was answered before or after the hand-over.
        again = await call(locator, workspace, EXEC_START, keyed)
        assert again.execution.execution_id == during.execution.execution_id
        poll(lambda: once.exists() and once.read_text() == "once\n", timeout=10,
             what="the keyed command's one line")

        # The agent's turn completes under the new code; its parent's notice arrives once.
        await until(lambda: _is(state(child), "idle"), what="the child's turn to end")
        noticed = await call(locator, workspace, AGENT_NOTIFICATIONS, {
            **scope, "parent": parent, "timeout_ms": 10_000})
        assert len(noticed.notifications) == 1, noticed
        typed = f"[tether] agent {child} finished a turn"
        poll(lambda: any(line.startswith(typed) for line in prompt_log(plog)), timeout=15,
             what="the notice typed into the parent")
        await until(lambda: _is(state(parent), "idle"), what="the parent idle")
        assert sum(line.startswith(typed) for line in prompt_log(plog)) == 1
        assert prompt_log(clog) == ["do the task"]

        # The numbered output: no gap and no duplicate across the hand-over.
        eid = counter.execution.execution_id
        mark = numbers(_journal(tether_env, workspace, eid))[-1]
        poll(lambda: numbers(_journal(tether_env, workspace, eid))[-1] > mark + 10,
             what="the counter going on")
        seen = numbers(_journal(tether_env, workspace, eid))
        assert seen == list(range(len(seen))), [
            (a, b) for a, b in itertools.pairwise(seen) if b != a + 1][:5]
        print(f"hand-over: {took:.2f} s from the request to the new code's first answer")
    finally:
        locator.close()
        keep_log(tether_env, workspace, tmp_path)


def keep_log(config: Config, workspace: Path, tmp_path: Path) -> None:
    """The guardian's log beside the test's files (its state directory goes at teardown)."""
    log = guardian_paths(config, "local", str(workspace)).log
    if log.exists():
        shutil.copy(log, tmp_path / "guardian.log")


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 20.0,
                what: str = "condition") -> Any:
    """Await ``check()`` until it gives something true (its value), at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def _is(value: Any, wanted: str) -> bool | None:
    return True if await value == wanted else None


async def _announced(paths: Any) -> bool:
    info = read_info(paths)
    return info is not None and info.get("code_version") == NEW_VERSION


async def _new_code(handle: GuardianHandle) -> Any:
    try:
        hello = await hello_of(handle)
    except TetherError:
        return None
    return hello if hello.code_version == NEW_VERSION else None


def _journal(config: Config, workspace: Path, execution_id: str) -> bytes:
    paths = guardian_paths(config, "local", str(workspace))
    journal = Journal(paths.journals, execution_id)
    return journal.read(0, journal.end)


async def test_a_failed_dry_run_changes_nothing(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARDIAN_CODE",
                       str(installed_copy(tmp_path, plant_import_error=True)))
    locator = GuardianLocator(tether_env)
    try:
        handle = await locator.handle(str(workspace))
        scope = await open_thread(handle, workspace)
        counter = await call(locator, workspace, EXEC_START, {
            **scope, "background": True, "idempotency_key": "counter",
            "command": "for i in $(seq 1 100000); do echo n$i; sleep 0.02; done"})
        with pytest.raises(TetherError) as refused:
            await handle.call(GUARDIAN_UPGRADE, {"reason": "test"}, timeout_s=60)
        assert refused.value.code == ErrorCode.UPGRADE_FAILED, refused.value
        assert "tether_module_that_does_not_exist" in refused.value.message
        hello = await hello_of(handle)
        assert hello.code_version == "0.1.0" and hello.upgraded_unix_ms is None
        # The old guardian serves on: the running command and new ones.
        got = await call(locator, workspace, EXEC_GET, {
            **scope, "execution_id": counter.execution.execution_id})
        assert got.execution.status == "running"
        ran = await call(locator, workspace, EXEC_START, {
            **scope, "command": "echo still", "idempotency_key": "still", "wait_ms": 10_000})
        assert ran.execution.exit_code == 0 and "still" in ran.output.text
    finally:
        locator.close()


def start_from(code: Path, workspace: Path, config: Config,
               protocol: str | None = None) -> dict[str, Any]:
    """A guardian started from the tree ``code`` (as a person's older installation would
    have started it); its guardian.json once it has announced itself."""
    argv = [*installed_command({"TETHER_GUARDIAN_CODE": str(code)}), str(workspace)]
    if protocol:
        argv += ["--protocol", protocol]
    paths = guardian_paths(config, "local", str(workspace))
    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    return poll(lambda: read_info(paths), what="guardian.json of the guardian")


async def test_the_previous_minor_gains_what_it_lacked(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARDIAN_CODE", str(installed_copy(tmp_path)))
    start_guardian(workspace, tether_env, protocol=PREVIOUS)
    paths = guardian_paths(tether_env, "local", str(workspace))
    locator = GuardianLocator(tether_env)
    try:
        handle = await locator.handle(str(workspace))
        scope = await open_thread(handle, workspace)
        assert str(handle.version) == PREVIOUS
        assert str(Capability.LIVE_UPGRADE) not in handle.capabilities
        counter = await call(locator, workspace, EXEC_START, {
            **scope, "background": True, "idempotency_key": "counter",
            "command": "for i in $(seq 1 100000); do echo n$i; sleep 0.02; done"})
        with pytest.raises(TetherError) as lacking:
            await handle.call(GUARDIAN_UPGRADE, {"dry_run": True}, timeout_s=10)
        assert lacking.value.code == ErrorCode.CAPABILITY_MISSING
        assert "tether guardians upgrade --workspace" in lacking.value.message

        outcome = await upgrade(paths, str(workspace))
        assert outcome.status == 0 and "upgraded the guardian" in outcome.text, outcome

        # The same handle, never restarted: it handshakes again by itself and uses it.
        tried = await handle.call(GUARDIAN_UPGRADE, {"dry_run": True}, timeout_s=60)
        assert not tried.handing_over and tried.from_code_version == NEW_VERSION
        assert str(Capability.LIVE_UPGRADE) in handle.capabilities
        assert handle.version == known_minor_versions()[-1]
        got = await call(locator, workspace, EXEC_GET, {
            **scope, "execution_id": counter.execution.execution_id})
        assert got.execution.status == "running"

        # It runs other code than the installed one (this tree's): the doctor says so.
        tether = str(Path(sys.executable).with_name("tether"))
        done = subprocess.run([tether, "doctor"], capture_output=True, text=True, timeout=60)
        lines = done.stdout.splitlines()
        at = next(i for i, line in enumerate(lines) if f"runs code {NEW_VERSION}" in line)
        assert lines[at].startswith("ACTION") and "not the installed 0.1.0" in lines[at]
        assert f"tether guardians upgrade --workspace {workspace}" in lines[at + 1]
    finally:
        locator.close()


async def test_a_guardian_too_old_to_hand_over_says_what_a_restart_ends(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    old = installed_copy(tmp_path, code_version="0.0.9")
    table = old / "tether" / "protocol" / "method_table.py"
    table.write_text(table.read_text().replace("HELLO, GUARDIAN_SHUTDOWN, GUARDIAN_UPGRADE,",
                                               "HELLO, GUARDIAN_SHUTDOWN,"))
    service = old / "tether" / "guardian" / "rpc" / "service.py"
    service.write_text(service.read_text().replace(
        "            GUARDIAN_UPGRADE.name: self.upgrade,\n", ""))
    # A build from before live upgrades names no code in its guardian.json and hello.
    daemon = old / "tether" / "guardian" / "rpc" / "daemon.py"
    text = daemon.read_text()
    assert '"code_version": CODE_VERSION,' in text and "code_version=CODE_VERSION," in text
    daemon.write_text(text.replace('"code_version": CODE_VERSION,', "").replace(
        "code_version=CODE_VERSION,", "code_version=None,"))
    info = start_from(old, workspace, tether_env, protocol="1.8")
    locator = GuardianLocator(tether_env)
    try:
        handle = await locator.handle(str(workspace))
        scope = await open_thread(handle, workspace)
        await call(locator, workspace, EXEC_START, {
            **scope, "command": "sleep 600", "background": True, "idempotency_key": "bg"})
        outcome = await upgrade(guardian_paths(tether_env, "local", str(workspace)),
                                str(workspace))
        assert outcome.status == 2, outcome
        assert "too old to hand itself over" in outcome.text
        assert "1 running execution (0 managed agents, 1 background command" in outcome.text
        assert "--restart --yes" in outcome.text
        assert psutil.Process(int(info["pid"])).is_running()
        with pytest.raises(TetherError) as lacking:
            await handle.call(GUARDIAN_UPGRADE, {"dry_run": True}, timeout_s=10)
        assert "too old to hand itself over" in lacking.value.message
        assert f"tether guardians restart --workspace {workspace} --yes" in lacking.value.message
    finally:
        locator.close()
