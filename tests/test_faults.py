"""Fault tests that kill real processes (issue 4): nothing lost, nothing replayed
(docs/protocol.md#deadlines-and-the-guardian-instance, docs/tools.md#recovery-advice)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
import zmq
from mcp import Client

from tests.conftest import stdio_params
from tests.helpers import apoll, guardian_thread, poll, processes_with_env, start_guardian
from tests.mcp_helpers import bash, call_error, execution, initialize, kill_front_end, read_pages, run
from tether.protocol import codec
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import EXEC_INPUT, EXEC_LIST, EXEC_START, EXEC_STATUS
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


async def test_front_end_killed_mid_output_loses_nothing(tether_env: Config, workspace: Path) -> None:
    first = Client(stdio_params())
    await first.__aenter__()
    session = await initialize(first, workspace)
    loop = await run(first, session,
                     "for i in $(seq 1 50); do echo line$i; sleep 0.05; done", wait=0.4)
    assert loop["status"] == "running"
    # The client keeps a catalog cursor, as a reattaching client would: the exit may well
    # happen while no front-end is alive, and a wait after that cursor must still see it.
    listed = await execution(first, session, {"type": "list", "limit": 1})
    baseline = listed["data"]["catalog_cursor"]
    await kill_front_end(first, tether_env)

    async with Client(stdio_params()) as second:
        again = await initialize(second, workspace, session["thread_id"])
        # Let the exit happen before this front-end asks: the cursor must still reveal it.
        with anyio.fail_after(15):
            while (await execution(second, again, {"type": "get",
                                                    "execution_id": loop["execution_id"]})
                   )["data"]["execution"]["status"] == "running":
                await anyio.sleep(0.05)
        waited = await execution(second, again, {
            "type": "wait", "execution_ids": [loop["execution_id"]], "events": ["exited"],
            "after": baseline, "timeout_seconds": 15})
        assert waited["data"]["outcome"] == "changed"
        assert waited["data"]["changed"][0]["exit_code"] == 0
        text = "".join(p["text"] for p in await read_pages(second, again, loop["execution_id"]))
        assert text.split() == [f"line{i}" for i in range(1, 51)]


async def test_guardian_killed_is_reported_unknown(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    before = await run(client, session, "echo history-before-crash")
    sleeper = await run(client, session, "sleep 30", wait=0.3)
    assert sleeper["status"] == "running"
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)

    record = (await execution(client, session, {"type": "get",
                                                "execution_id": sleeper["execution_id"]}))
    lost = record["data"]["execution"]
    assert (lost["status"], lost["reason"], lost["exit_code"]) == ("unknown", "guardian_lost", None)
    # Its final screen was never drawn: that is said, not shown as an empty screen.
    no_screen = await execution(client, session, {
        "type": "read", "execution_id": sleeper["execution_id"], "source": "screen"},
        expect_error=True)
    assert no_screen["code"] == "not_found" and "source=output" in no_screen["message"]
    again = await initialize(client, workspace, session["thread_id"])
    assert again["guardian"]["instance_id"] != session["guardian"]["instance_id"]
    assert again["generation"] == session["generation"] + 1
    old = "".join(p["text"] for p in await read_pages(client, again, before["execution_id"]))
    assert old.strip() == "history-before-crash"
    fresh = await run(client, again, "echo new-guardian-works")
    assert fresh["output"].strip() == "new-guardian-works"


async def test_a_guardian_that_dies_mid_call_is_seen_at_once(client: Client, workspace: Path) -> None:
    """Calls waiting on a guardian that dies fail at once, not at their deadlines: a command
    waiting 20 s reports it cannot say whether its input arrived, and a reattach (retried on
    a new guardian) takes a moment, not its 17 s deadline."""
    session = await initialize(client, workspace)
    await bash(client, session, {"type": "command", "command": "sleep 60", "is_background": True})
    guardian = psutil.Process(session["guardian"]["pid"])
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": {"type": "command", "command": "sleep 30"}, "wait_for_seconds": 20}
    async with anyio.create_task_group() as tasks:
        outcome: dict[str, Any] = {}

        async def waiting() -> None:
            started = time.monotonic()
            outcome["error"] = await call_error(client, "BashCommand", args)
            outcome["took"] = time.monotonic() - started

        tasks.start_soon(waiting)
        def sleeping() -> bool:
            for proc in guardian.children(recursive=True):
                try:
                    if proc.name() == "sleep" and "30" in proc.cmdline():
                        return True
                except psutil.Error:  # one that ended while we looked
                    continue
            return False

        await apoll(sleeping, what="sleep 30 to run")
        guardian.kill()
    assert outcome["took"] < 5, outcome
    assert outcome["error"]["code"] == "guardian_unavailable"
    assert outcome["error"]["data"]["input_sent"] == "unknown"
    started = time.monotonic()
    again = await initialize(client, workspace, session["thread_id"])
    assert time.monotonic() - started < 5
    assert again["guardian"]["instance_id"] != session["guardian"]["instance_id"]


def _request(info: dict[str, Any], method: str, params: dict[str, Any], *,
             auth: str | None = None, deadline_s: float = 60) -> bytes:
    return codec.encode({
        "v": [1, 1], "id": f"r{time.monotonic_ns()}", "method": method, "params": params,
        "deadline_unix_ms": int((time.time() + deadline_s) * 1000),
        "guardian_instance_id": info["instance_id"], "auth": auth or info["auth_token"],
    })


def _reply(sock: zmq.Socket[bytes], timeout_s: float = 10) -> dict[str, Any]:
    assert sock.poll(int(timeout_s * 1000)), "no reply"
    reply: dict[str, Any] = codec.decode(sock.recv())
    return reply


def test_transport_replay_is_not_acted_upon(tether_env: Config, workspace: Path) -> None:
    marker = workspace / "replayed"
    first = start_guardian(workspace, tether_env)
    ctx = zmq.Context()
    # A DEALER without IMMEDIATE: it queues while no peer is bound (the hazard of
    # docs/protocol.md#deadlines-and-the-guardian-instance).
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(first["endpoint"])
    try:
        sock.send(_request(first, "thread.open", {"principal": "local",
                                                   "workspace_root": str(workspace)}))
        thread = _reply(sock)["result"]["thread_id"]
        scope = {"principal": "local", "workspace_root": str(workspace), "thread_id": thread}
        os.kill(first["pid"], signal.SIGTERM)
        poll(lambda: not psutil.pid_exists(first["pid"]) or
             psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE, what="guardian exit")
        start = {**scope, "command": f"touch {marker}", "background": True,
                 "idempotency_key": "replay-1"}
        sock.send(_request(first, "exec.start", start))  # queued: nobody is bound
        second = start_guardian(workspace, tether_env)
        assert second["instance_id"] != first["instance_id"]
        refused = _reply(sock)
        assert refused["ok"] is False
        assert refused["error"]["code"] in ("unauthorized", "wrong_guardian")
        # With the new guardian's token but the old instance id: wrong_guardian.
        sock.send(_request({**second, "instance_id": first["instance_id"]}, "exec.start", start))
        wrong = _reply(sock)
        assert wrong["error"]["code"] == "wrong_guardian"
        assert wrong["error"]["data"]["input_sent"] is False
        # Past its deadline: deadline_expired.
        sock.send(_request(second, "exec.start", start, deadline_s=-1))
        assert _reply(sock)["error"]["code"] == "deadline_expired"
        sock.send(_request(second, "exec.list", {**scope, "limit": 10}))
        assert _reply(sock)["result"]["executions"] == []
        assert not marker.exists()
    finally:
        sock.close(0)
        ctx.term()


async def test_same_idempotency_key_delivers_once(tether_env: Config, workspace: Path) -> None:
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        # "ready" once echo is off, so the terminal's own echo cannot double the text.
        start = {**scope, "command": "stty -echo; echo ready; cat", "background": True,
                 "idempotency_key": "start-once"}
        one = await handle.call(EXEC_START, start, timeout_s=10)
        two = await handle.call(EXEC_START, start, timeout_s=10)
        assert one.execution.execution_id == two.execution.execution_id
        eid = one.execution.execution_id
        for _ in range(100):
            status = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid,
                                                       "wait_ms": 100}, timeout_s=10)
            if "ready" in status.output.text:
                break
        typed = {**scope, "execution_id": eid, "text": "ping-once", "submit": True,
                 "idempotency_key": "type-once", "wait_ms": 500}
        first = await handle.call(EXEC_INPUT, typed, timeout_s=10)
        again = await handle.call(EXEC_INPUT, typed, timeout_s=10)
        assert again.input is not None and first.input is not None
        assert again.input.replayed is True and "replayed" not in first.input.wire()
        listed = await handle.call(EXEC_LIST, {**scope, "limit": 10}, timeout_s=10)
        assert [r.execution_id for r in listed.executions] == [eid]
        status = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid, "wait_ms": 300},
                                   timeout_s=10)
        assert status.output.text.count("ping-once") == 1
        with pytest.raises(TetherError) as conflict:
            await handle.call(EXEC_INPUT, {**typed, "text": "other"}, timeout_s=10)
        assert conflict.value.code == ErrorCode.IDEMPOTENCY_CONFLICT
        assert conflict.value.data["input_sent"] is False


async def test_two_front_ends_share_one_guardian(tether_env: Config, workspace: Path) -> None:
    async with Client(stdio_params()) as one, Client(stdio_params()) as two:
        a = await initialize(one, workspace)
        b = await initialize(two, workspace, a["thread_id"])
        assert a["guardian"]["instance_id"] == b["guardian"]["instance_id"]
        ran_a = await run(one, a, "echo from-one")
        ran_b = await run(two, b, "echo from-two")
        for client, session in ((one, a), (two, b)):
            listed = (await execution(client, session, {"type": "list"}))["data"]["executions"]
            ids = [r["execution_id"] for r in listed]
            assert ran_a["execution_id"] in ids and ran_b["execution_id"] in ids


async def test_old_generation_input_is_refused(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    await run(client, session, "sleep 20", wait=0.3)
    reset = await client.call_tool("Initialize", {"type": "reset_shell", "thread_id": session["thread_id"],
                                                  "workspace_root": str(workspace)})
    assert reset.structured_content is not None
    generation = reset.structured_content["data"]["generation"]
    assert generation == session["generation"] + 1
    await run(client, session, "sleep 20", wait=0.3)
    stale = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "send_text", "text": "typed", "generation": session["generation"]}})
    assert stale["code"] == "stale_generation"
    assert stale["data"]["input_sent"] is False
    ok = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                      "generation": generation})
    assert ok["input_sent"] is True


async def test_recovery_advice_is_recorded(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    uuid = "123e4567-e89b-12d3-a456-426614174000"
    # `claude` is not installed here: the launch fails, but the advice is about the launch.
    launch = await run(client, session, f"claude --session-id {uuid}")
    record = (await execution(client, session, {"type": "get",
                                                "execution_id": launch["execution_id"]}))
    assert record["data"]["execution"]["recovery"] == {
        "advice": "explicit_target", "source": "launch_argument",
        "command": f"claude --resume {uuid}", "current_conversation_verified": False}
    listing = json.dumps((await execution(client, session, {"type": "list"}))["data"])
    assert "claude --resume" in listing


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _running(name: str, value: str, *argv: str) -> list[psutil.Process]:
    """Processes marked ``name=value`` running ``argv`` (one that ends while we look is
    not running)."""
    found = []
    for proc in processes_with_env(name, value):
        with contextlib.suppress(psutil.Error):
            if proc.cmdline() == list(argv):
                found.append(proc)
    return found


def _kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.kill()


async def test_orphans_are_reported_not_adopted(client: Client, workspace: Path) -> None:
    """A background job that ignores the hangup outlives its guardian, and the leader that
    hung it up (pty._JOB_WRAPPER): it is found by its execution mark and reported."""
    session = await initialize(client, workspace)
    stubborn = await bash(client, session, {"type": "command", "is_background": True,
                                            "command": "trap '' HUP; exec sleep 60"})
    eid = stubborn["execution_id"]
    record = (await execution(client, session, {"type": "get", "execution_id": eid}))
    leader = record["data"]["execution"]["runtime"]["pid"]
    [job] = [p.pid for p in await apoll(
        lambda: _running("TETHER_EXECUTION_ID", eid, "sleep", "60"), what="the job")]
    assert job != leader
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    await apoll(lambda: _gone(leader), what="the job's leader to end at the hangup")
    assert psutil.pid_exists(job) and not _gone(job)  # it ignores the hangup
    again = await initialize(client, workspace, session["thread_id"])
    lost = {entry["execution_id"]: entry for entry in again["guardian"]["lost_records"]}
    assert [o["pid"] for o in lost[eid]["orphans"]] == [job] and "orphan" not in lost[eid]
    assert "not adopted" in lost[eid]["orphans"][0]["reason"]
    after = (await execution(client, again, {"type": "get", "execution_id": eid}))
    execution_record = after["data"]["execution"]
    assert execution_record["status"] == "unknown" and execution_record["exit_code"] is None
    assert [o["pid"] for o in execution_record["runtime"]["orphans"]] == [job]
    psutil.Process(job).kill()


async def test_a_lost_guardian_hangs_up_its_background_jobs(client: Client, workspace: Path) -> None:
    """The terminal of a background job closes with its guardian: the job gets SIGHUP, as a
    job in a closed terminal does, instead of running on with no terminal."""
    session = await initialize(client, workspace)
    loop = await bash(client, session, {"type": "command", "is_background": True,
                                        "command": "while :; do sleep 0.1; done"})
    eid = loop["execution_id"]
    await apoll(lambda: _running("TETHER_EXECUTION_ID", eid, "bash", "-c",
                                 "while :; do sleep 0.1; done"), what="the job to run")
    running = processes_with_env("TETHER_EXECUTION_ID", eid)
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    try:
        await apoll(lambda: not processes_with_env("TETHER_EXECUTION_ID", eid), timeout=5,
                    what="the background job to end at the hangup")
    finally:
        _kill_all(running + processes_with_env("TETHER_EXECUTION_ID", eid))
    again = await initialize(client, workspace, session["thread_id"])
    [entry] = [e for e in again["guardian"]["lost_records"] if e["execution_id"] == eid]
    assert "orphan" not in entry and "orphans" not in entry


async def test_a_clean_shutdown_ends_background_jobs_with_129(
    tether_env: Config, client: Client, workspace: Path
) -> None:
    """SIGTERM hangs up the jobs and spares their leaders: a job that ends reports 129 (the
    hangup), and one that ignores it is not reported ended while it still runs."""
    session = await initialize(client, workspace)
    obeys = await bash(client, session, {"type": "command", "is_background": True,
                                         "command": "sleep 30"})
    ignores = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": "trap '' HUP; sleep 30"})
    for started in (obeys, ignores):
        def sleeping(eid: str = started["execution_id"]) -> list[psutil.Process]:
            return _running("TETHER_EXECUTION_ID", eid, "sleep", "30")

        await apoll(sleeping, what="the job to run")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.send_signal(signal.SIGTERM)
    guardian.wait(timeout=10)
    survivors = processes_with_env("TETHER_EXECUTION_ID", ignores["execution_id"])
    try:
        again = await initialize(client, workspace, session["thread_id"])
        ended = (await execution(client, again, {"type": "get", "execution_id":
                                                 obeys["execution_id"]}))["data"]["execution"]
        assert (ended["status"], ended["exit_code"]) == ("exited", 129)
        kept = (await execution(client, again, {"type": "get", "execution_id":
                                                ignores["execution_id"]}))["data"]["execution"]
        assert (kept["status"], kept["reason"]) == ("unknown", "guardian_stopped")
    finally:
        _kill_all(survivors)


async def test_a_command_that_outlived_its_guardian_is_reported(
    client: Client, workspace: Path
) -> None:
    """A command of the main shell that left the shell's session (nohup) outlives its
    guardian: it is found by its thread's mark and reported on the lost record."""
    session = await initialize(client, workspace)
    survivor = "while :; do sleep 0.1; done"
    ran = await run(client, session, f"nohup sh -c '{survivor}' >/dev/null 2>&1", wait=0.3)
    assert ran["status"] == "running"

    def loops() -> list[psutil.Process]:
        return _running("TETHER_THREAD_ID", session["thread_id"], "sh", "-c", survivor)

    [loop] = await apoll(loops, what="the nohup loop")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    try:
        again = await initialize(client, workspace, session["thread_id"])
        lost = {e["execution_id"]: e for e in again["guardian"]["lost_records"]}
        assert loop.pid in [o["pid"] for o in lost[ran["execution_id"]]["orphans"]]
        record = (await execution(client, again, {"type": "get", "execution_id":
                                                  ran["execution_id"]}))["data"]["execution"]
        assert loop.pid in [o["pid"] for o in record["runtime"]["orphans"]]
        assert "TETHER_THREAD_ID" in record["runtime"]["orphans"][0]["reason"]
    finally:
        _kill_all(loops())


async def test_wait_for_turn_on_a_lost_record_says_unknown(client: Client, workspace: Path) -> None:
    """An end nobody saw is not an exit (docs/tools.md#unknown-is-not-success): wait_for_turn on the record
    of a guardian that
    died says ``unknown`` with the record's reason, although the new guardian holds no
    runtime for it (and the process, which ignores the hangup, still lives)."""
    session = await initialize(client, workspace)
    stubborn = await bash(client, session, {"type": "command", "is_background": True,
                                            "command": "trap '' HUP; sleep 30"})
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    result = await client.call_tool("BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "wait_for_turn", "execution_id": stubborn["execution_id"],
                        "timeout_seconds": 5}})
    assert result.structured_content is not None and not result.is_error
    turn = result.structured_content["data"]
    assert turn["outcome"] == "unknown"
    assert (turn["execution"]["status"], turn["execution"]["reason"]) == ("unknown", "guardian_lost")
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("unknown (guardian_lost)") and "exited" not in text
    for proc in processes_with_env("TETHER_EXECUTION_ID", stubborn["execution_id"]):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def test_a_shell_still_dying_does_not_hide_what_it_left_running() -> None:
    """Reconciliation scans /proc right after the guardian died: the main shell may still be
    dying of its hangup. It is the record's runtime (reported as ``orphan``); the ``nohup``
    loop beneath it is reported too, not hidden as the child of a marked process."""
    from tether.guardian.history.reconcile import EXECUTION_MARK, THREAD_MARK, _marked
    from tether.shared.identity import Marked

    shell, loop, sleep = 100, 200, 300
    marks = {
        shell: Marked(1, {THREAD_MARK: "th_a"}),
        loop: Marked(shell, {THREAD_MARK: "th_a"}),
        sleep: Marked(loop, {THREAD_MARK: "th_a"}),
        400: Marked(1, {THREAD_MARK: "th_a", EXECUTION_MARK: "ex_bg"}),  # a job's: not ours
    }
    record = {"execution_id": "ex_cmd", "kind": "command", "thread_id": "th_a"}
    assert _marked(marks, record, shell) == [(loop, THREAD_MARK)]
