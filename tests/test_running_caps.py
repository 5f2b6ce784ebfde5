"""Caps on running executions, and a host that runs out (issue 31, defect 4).

One thread started 700 background jobs in 4 s, and nothing stopped it: over HTTP one
principal could run the host out of terminals, or the guardian out of descriptors, for every
other principal. With descriptors gone a start answered ``internal_error`` "out of pty
devices", and left an ``unknown`` record behind, although nothing ran.
"""

from __future__ import annotations

import errno
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from ptyprocess import PtyProcess

from tests.helpers import apoll, guardian_infos, guardian_thread, open_thread, processes_with_env
from tests.mcp_helpers import agent, bash, call_error, initialize
from tether.guardian.runtime.assembly import Runtime
from tether.guardian.runtime.caps import RunningCaps, exhausted
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import EXEC_INPUT, EXEC_LIST, EXEC_START, EXEC_STATUS, GUARDIAN_SHUTDOWN
from tether.protocol.methods import ExecStartParams
from tether.shared.clock import Clock
from tether.shared.config import Config
from tether.shared.paths import GuardianPaths
from tether.shared.store.catalog import Catalog

pytestmark = pytest.mark.anyio

PER_THREAD, PER_GUARDIAN = 12, 20
STARTS = 1000


@pytest.fixture
def capped(tether_env: Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    """Guardians started by this test cap running executions lower than the defaults (the
    same code, reached sooner on a shared 2-core machine)."""
    monkeypatch.setenv("TETHER_MAX_RUNNING_PER_THREAD", str(PER_THREAD))
    monkeypatch.setenv("TETHER_MAX_RUNNING_PER_GUARDIAN", str(PER_GUARDIAN))
    yield Config.from_env()


def _start(scope: dict[str, Any], key: str, command: str = "sleep 30") -> dict[str, Any]:
    return {**scope, "command": command, "background": True, "idempotency_key": key,
            "wait_ms": 0}


async def _ended(thread_ids: list[str]) -> None:
    """Wait until no process of these threads is left (the guardian hung them up)."""
    await apoll(lambda: not any(processes_with_env("TETHER_THREAD_ID", t) for t in thread_ids)
                or None, timeout=20, what="the test's jobs to end")


async def test_a_thousand_starts_are_capped_and_the_guardian_keeps_answering(
    capped: Config, workspace: Path
) -> None:
    async with guardian_thread(capped, workspace) as (handle, first):
        second = await open_thread(handle, workspace)
        third = await open_thread(handle, workspace)
        accepted: list[str] = []
        refusals: list[TetherError] = []
        lists: list[float] = []
        p99 = 0.0
        try:
            for i in range(STARTS):
                try:
                    started = await handle.call(EXEC_START, _start(first, f"a{i}"), timeout_s=20)
                    accepted.append(started.execution.execution_id)
                except TetherError as err:
                    refusals.append(err)
                if i % 10 == 0:  # the guardian answers throughout
                    began = time.perf_counter()
                    await handle.call(EXEC_LIST, {**second, "limit": 5}, timeout_s=10)
                    lists.append(time.perf_counter() - began)
            assert len(accepted) == PER_THREAD
            assert len(refusals) == STARTS - PER_THREAD
            refused = refusals[-1]
            assert refused.code == ErrorCode.LIMIT_EXCEEDED, refused
            assert refused.data == {"input_sent": False, "rule": "running_per_thread",
                                    "limit": PER_THREAD, "running": PER_THREAD}
            assert f"{PER_THREAD} background commands" in refused.message
            assert "TETHER_MAX_RUNNING_PER_THREAD" in refused.message
            assert "nothing was started" in refused.message and "End some" in refused.message
            # A refused start left nothing behind: no record, no process.
            listed = await handle.call(EXEC_LIST, {**first, "limit": 128}, timeout_s=10)
            assert sorted(r.execution_id for r in listed.executions) == sorted(accepted)
            assert all(r.status == "running" for r in listed.executions)
            assert len(processes_with_env("TETHER_THREAD_ID", first["thread_id"])) >= PER_THREAD
            # Another thread is not held back by the first one's cap ...
            others = []
            last: TetherError | None = None
            for i in range(PER_THREAD):
                try:
                    got = await handle.call(EXEC_START, _start(second, f"b{i}"), timeout_s=20)
                    others.append(got.execution.execution_id)
                except TetherError as err:
                    last = err
            # ... until the guardian's own is reached.
            assert len(others) == PER_GUARDIAN - PER_THREAD
            assert last is not None and last.code == ErrorCode.LIMIT_EXCEEDED
            assert last.data["rule"] == "running_per_guardian"
            assert last.data["limit"] == PER_GUARDIAN
            assert "TETHER_MAX_RUNNING_PER_GUARDIAN" in last.message
            # A command in a main shell does not count: a third thread still runs one.
            ran = await handle.call(EXEC_START, {**third, "command": "echo still-here",
                                                   "idempotency_key": "c", "wait_ms": 10_000},
                                    timeout_s=20)
            assert ran.execution.status == "exited" and ran.execution.exit_code == 0
            assert "still-here" in ran.output.text
            # One job ends: there is room for one more, in that thread.
            await handle.call(EXEC_INPUT, {**first, "execution_id": accepted[0],
                                             "keys": ["Ctrl-c"], "idempotency_key": "int"},
                              timeout_s=10)
            await handle.call(EXEC_STATUS, {**first, "execution_id": accepted[0],
                                              "wait_ms": 10_000}, timeout_s=20)
            again = await handle.call(EXEC_START, _start(first, "after"), timeout_s=20)
            assert again.execution.status == "running"
        finally:
            lists.sort()
            if lists:
                p99 = lists[min(len(lists) - 1, int(len(lists) * 0.99))]
                print(f"\n[caps] {STARTS} starts: exec.list p50 {lists[len(lists) // 2] * 1000:.1f}"
                      f" ms, p99 {p99 * 1000:.1f} ms, worst {lists[-1] * 1000:.1f} ms over "
                      f"{len(lists)}")
            await handle.call(GUARDIAN_SHUTDOWN, {}, timeout_s=20)  # hangs every job up
        assert p99 < 1.0  # generous: a benchmark's figure, not a timed assert
    await _ended([first["thread_id"], second["thread_id"]])


async def test_a_guardian_out_of_descriptors_refuses_with_a_limit_error_and_no_record(
    tether_env: Config, workspace: Path
) -> None:
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        [info] = guardian_infos(tether_env.runtime_dir)
        pid = int(info["pid"])
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        # Not one descriptor more than the guardian holds now.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
        try:
            with pytest.raises(TetherError) as refused:
                await handle.call(EXEC_START, _start(scope, "x"), timeout_s=20)
            err = refused.value
            assert err.code == ErrorCode.RESOURCE_EXHAUSTED, err
            assert err.data["resource"] == "descriptors" and err.data["input_sent"] is False
            assert "RLIMIT_NOFILE" in err.message and "nothing was started" in err.message
            # It still answers, and the refusal left no record.
            listed = await handle.call(EXEC_LIST, {**scope, "limit": 128}, timeout_s=10)
            assert listed.executions == []
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        ok = await handle.call(EXEC_START, _start(scope, "y", "echo fine"), timeout_s=20)
        done = await handle.call(EXEC_STATUS, {**scope, "execution_id":
                                                 ok.execution.execution_id, "wait_ms": 10_000},
                                 timeout_s=20)
        assert done.execution.exit_code == 0 and "fine" in done.output.text


# -- a start that fails because something ran out ------------------------------------------


def _runtime(tmp_path: Path) -> tuple[Runtime, Catalog]:
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    paths.scratch.mkdir(parents=True)
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    runtime = Runtime.build(catalog=catalog, paths=paths, principal="local",
                            workspace_root=str(tmp_path), instance_id="g", clock=Clock(),
                            base_env=dict(os.environ), caps=RunningCaps(descriptor_reserve=0))
    return runtime, catalog


@pytest.mark.parametrize(("failure", "probe", "resource_name"), [
    (OSError(errno.EMFILE, "Too many open files"), None, "descriptors"),
    # Python's pty module says only this, without an errno: a new terminal is asked for.
    (OSError("out of pty devices"), OSError(errno.ENOSPC, "No space left on device"),
     "terminals"),
    (OSError("out of pty devices"), OSError(errno.EMFILE, "Too many open files"),
     "descriptors"),
])
async def test_a_spawn_that_runs_out_is_a_limit_error_and_leaves_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: OSError, probe: OSError | None,
    resource_name: str,
) -> None:
    runtime, catalog = _runtime(tmp_path)
    thread = catalog.create_thread("th", "local", str(tmp_path))

    def spawn(*args: Any, **kwargs: Any) -> Any:
        raise failure

    def openpty() -> tuple[int, int]:
        assert probe is not None
        raise probe

    monkeypatch.setattr(PtyProcess, "spawn", spawn)
    monkeypatch.setattr(os, "openpty", openpty)
    params = ExecStartParams.model_validate({
        "principal": "local", "workspace_root": str(tmp_path), "thread_id": thread["thread_id"],
        "command": "sleep 30", "background": True, "idempotency_key": "k", "wait_ms": 0})
    claimed: list[bool] = []
    with pytest.raises(TetherError) as refused:
        await runtime.launcher.start(params, write_timeout_s=1.0,
                                     claim=lambda: claimed.append(True))
    err = refused.value
    assert err.code == ErrorCode.RESOURCE_EXHAUSTED, err
    assert err.data["resource"] == resource_name and err.data["input_sent"] is False
    assert "nothing was started" in err.message
    assert catalog.list_executions(thread["thread_id"], 10) == []
    assert runtime.live.running(thread["thread_id"]) == (0, 0) and not runtime.live
    await runtime.shutdown()
    catalog.close()


def test_other_failures_are_not_called_exhaustion() -> None:
    assert exhausted(OSError(errno.ENOENT, "No such file or directory")) is None
    started = exhausted(OSError(errno.EMFILE, "Too many open files"), started=True)
    assert started is not None and started.data["input_sent"] == "unknown"


def test_the_caps_are_configured_by_name_and_range() -> None:
    config = Config.from_env({"TETHER_MAX_RUNNING_PER_THREAD": "3",
                              "TETHER_MAX_RUNNING_PER_GUARDIAN": "9"})
    assert (config.max_running_per_thread, config.max_running_per_guardian) == (3, 9)
    assert Config.from_env({}).max_running_per_thread == 64
    assert Config.from_env({}).max_running_per_guardian == 256
    for bad in ("0", "-1", "many", "1e3"):
        with pytest.raises(ValueError, match="TETHER_MAX_RUNNING_PER_THREAD"):
            Config.from_env({"TETHER_MAX_RUNNING_PER_THREAD": bad})


def test_each_cap_is_checked_against_its_own_count() -> None:
    caps = RunningCaps(per_thread=2, per_guardian=3, descriptor_reserve=0)
    caps.check((1, 2))
    for running, rule in (((2, 2), "running_per_thread"), ((0, 3), "running_per_guardian")):
        with pytest.raises(TetherError) as refused:
            caps.check(running)
        assert refused.value.data["rule"] == rule


@pytest.fixture
def two_per_thread(tether_env: Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[Config]:
    monkeypatch.setenv("TETHER_MAX_RUNNING_PER_THREAD", "2")
    yield Config.from_env()


async def test_managed_agents_count_and_are_refused_before_any_record(
    two_per_thread: Config, client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    job = await bash(client, session, {"type": "command", "command": "sleep 30",
                                       "is_background": True}, wait=0)
    launched = await agent(client, session, {"action": "launch", "provider": "command",
                                             "argv": ["sleep", "30"]})
    refused = await agent(client, session, {"action": "launch", "provider": "command",
                                            "argv": ["sleep", "31"]}, error=True)
    assert refused["code"] == "limit_exceeded", refused
    assert refused["data"]["rule"] == "running_per_thread" and refused["data"]["limit"] == 2
    listed = (await agent(client, session, {"action": "list"}))["data"]["agents"]
    assert [a["execution_id"] for a in listed] == [launched["data"]["agent"]["execution_id"]]
    over = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "sleep 32", "is_background": True}})
    assert over["code"] == "limit_exceeded" and over["data"]["input_sent"] is False, over
    await agent(client, session, {"action": "close",
                                  "target": launched["data"]["agent"]["execution_id"]})
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                 "execution_id": job["execution_id"]}, wait=0)
    ended = await bash(client, session, {"type": "status_check",
                                         "execution_id": job["execution_id"]}, wait=10)
    assert ended["status"] == "exited"
