"""Broken sockets and stopped guardians (issue 12, cases 1 and 2), with real processes:
a clear answer every time, and nothing started by mistake."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from mcp import Client

from tests.helpers import apoll, poll, sigstop, tether_processes
from tests.mcp_helpers import bash, call_error, execution, initialize, run
from tether.frontend.guardians.locator import HELLO_TIMEOUT_S
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.limits import RPC_SLACK_S
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``tether`` console script, as a person runs it."""
    script = Path(sys.executable).with_name("tether")
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("damage", ["deleted", "replaced"])
async def test_lost_socket_is_bound_again(damage: str, tether_env: Config, workspace: Path) -> None:
    async with Client(build_server(tether_env)) as first:
        session = await initialize(first, workspace)
        sock = guardian_paths(tether_env, "local", str(workspace)).socket
        original = sock.lstat().st_ino
        sock.unlink()
        if damage == "replaced":
            sock.write_text("not a socket")
        # The front-end already connected keeps working...
        assert (await run(first, session, "echo still-here"))["output"].strip() == "still-here"
        # ...and the guardian notices and listens again, so new front-ends reach it too.
        poll(lambda: _is_socket(sock) and sock.lstat().st_ino != original,
             what="the guardian to bind its socket again")
        async with Client(build_server(tether_env)) as second:
            again = await initialize(second, workspace, session["thread_id"])
            assert again["guardian"]["instance_id"] == session["guardian"]["instance_id"]
            assert (await run(second, again, "echo reached"))["output"].strip() == "reached"
    assert len(tether_processes(tether_env.runtime_dir, "tether-guardian")) == 1
    status = tether("guardians", "status", "--workspace", str(workspace), "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["answering"] is True
    stopped = tether("guardians", "stop", "--workspace", str(workspace), "--yes")
    assert stopped.returncode == 0, stopped.stderr
    assert not psutil.pid_exists(session["guardian"]["pid"]) or psutil.Process(
        session["guardian"]["pid"]).status() == psutil.STATUS_ZOMBIE


async def test_stopped_guardian_is_unresponsive_not_a_failed_start(
    tether_env: Config, workspace: Path
) -> None:
    async with Client(build_server(tether_env)) as first:
        session = await initialize(first, workspace)
        pid = session["guardian"]["pid"]
        sigstop(pid)
        try:
            # Seen stopped before anything is sent: said at once, not after the call's
            # deadline (RPC_SLACK_S, 10 s), by a front-end that already had a handle.
            started = time.monotonic()
            listed = await execution(first, session, {"type": "list"}, expect_error=True)
            assert time.monotonic() - started < RPC_SLACK_S / 2
            assert listed["code"] == "guardian_unresponsive", listed
            assert listed["data"]["process_status"] == "stopped"
            assert listed["data"]["input_sent"] is False
            assert f"`kill -CONT {pid}` resumes it" in listed["message"]
            assert f"tether guardians restart --workspace {workspace} --yes" in listed["message"]
            status_call = await call_error(first, "Initialize", {
                "type": "status", "workspace_root": str(workspace),
                "thread_id": session["thread_id"]})
            assert status_call["code"] == "guardian_unresponsive", status_call
            async with Client(build_server(tether_env)) as fresh:
                started = time.monotonic()
                refused = await call_error(fresh, "BashCommand", {
                    "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                    "action_json": {"type": "command", "command": f"touch {workspace}/ran"}})
                elapsed = time.monotonic() - started
                assert refused["code"] == "guardian_unresponsive", refused
                assert refused["data"]["input_sent"] is False
                # Seen stopped before the handshake: no wait at all (a handshake gave up
                # after about 2 s), and no wait claimed.
                assert "is stopped (SIGSTOP" in refused["message"], refused["message"]
                assert "did not answer within" not in refused["message"]
                assert elapsed < HELLO_TIMEOUT_S, elapsed
            status = tether("guardians", "status", "--workspace", str(workspace), "--json")
            shown = json.loads(status.stdout)
            assert (shown["alive"], shown["answering"], shown["process_status"]) == (
                True, False, "stopped")
            assert len(tether_processes(tether_env.runtime_dir, "tether-guardian")) == 1
        finally:
            os.kill(pid, signal.SIGCONT)
        # Continued, the same guardian serves again: nothing was started in between.
        after = (await execution(first, session, {"type": "list"}))["data"]["executions"]
        assert after == []
        ran = await run(first, session, "echo back")
        assert ran["output"].strip() == "back"
    assert not (workspace / "ran").exists()
    assert [p.pid for p in tether_processes(tether_env.runtime_dir, "tether-guardian")] == [pid]


async def test_guardians_stop_by_identity_when_it_does_not_answer(
    tether_env: Config, workspace: Path
) -> None:
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        sleeper = await bash(client, session, {"type": "command", "command": "sleep 60",
                                               "is_background": True})
    pid = session["guardian"]["pid"]
    sigstop(pid)
    asked = tether("guardians", "stop", "--workspace", str(workspace))
    assert asked.returncode == 2
    assert "does not answer" in asked.stdout and f"pid {pid}" in asked.stdout
    assert psutil.Process(pid).status() == psutil.STATUS_STOPPED  # asking changed nothing
    stopped = tether("guardians", "stop", "--workspace", str(workspace), "--yes")
    assert stopped.returncode == 0, stopped.stderr
    assert "SIGTERM" in stopped.stdout and "SIGKILL" not in stopped.stdout
    poll(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
         what="the guardian to exit")
    # A clean shutdown (SIGTERM after SIGCONT): the running record was finalised by it.
    async with Client(build_server(tether_env)) as client:
        again = await initialize(client, workspace, session["thread_id"])
        record = (await execution(client, again, {
            "type": "get", "execution_id": sleeper["execution_id"]}))["data"]["execution"]
        # (hung up: it exited, or its end was not seen within the grace period)
        assert record["status"] in ("exited", "unknown")
        assert record["reason"] != "guardian_lost"  # finalised by the guardian, not reconciled
    # restart too: the silent guardian is stopped by identity, and a new one answers.
    second = again["guardian"]
    sigstop(second["pid"])
    restarted = tether("guardians", "restart", "--workspace", str(workspace), "--yes")
    assert restarted.returncode == 0, restarted.stderr
    assert "SIGTERM" in restarted.stdout and "started guardian" in restarted.stdout
    poll(lambda: not psutil.pid_exists(second["pid"])
         or psutil.Process(second["pid"]).status() == psutil.STATUS_ZOMBIE, what="old guardian exit")
    fresh = json.loads(tether("guardians", "status", "--workspace", str(workspace), "--json").stdout)
    assert fresh["answering"] is True and fresh["instance_id"] != second["instance_id"]


async def test_input_to_a_stopped_guardian_is_refused_at_once(
    tether_env: Config, workspace: Path
) -> None:
    """A front-end that already talks to a guardian sees it stopped before sending (its
    process state) and refuses every call at once, with the cause and both remedies; an
    input call used to wait 13 s and fail with a bare guardian_unavailable."""
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        cat = await bash(client, session, {"type": "command", "command": "cat > /dev/null",
                                           "is_background": True})
        pid = session["guardian"]["pid"]
        args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                "wait_for_seconds": 1}
        sigstop(pid)
        try:
            for action in (
                    {"type": "command", "command": f"touch {workspace}/ran-fg"},
                    {"type": "command", "command": f"touch {workspace}/ran-bg",
                     "is_background": True},
                    {"type": "send_text", "execution_id": cat["execution_id"], "text": "typed",
                     "submit": True},
                    {"type": "status_check", "execution_id": cat["execution_id"]}):
                started = time.monotonic()
                refused = await call_error(client, "BashCommand", {**args, "action_json": action})
                assert time.monotonic() - started < RPC_SLACK_S / 2, action
                assert refused["code"] == "guardian_unresponsive", (action, refused)
                assert refused["data"]["input_sent"] is False, action
                assert refused["data"]["process_status"] == "stopped"
                assert f"(guardian pid {pid}) is stopped (SIGSTOP" in refused["message"]
                assert f"`kill -CONT {pid}` resumes it" in refused["message"]
                assert (f"`tether guardians restart --workspace {workspace} --yes` replaces it"
                        in refused["message"]), refused["message"]
        finally:
            os.kill(pid, signal.SIGCONT)
        back = await run(client, session, "echo back")
        assert back["output"].strip() == "back"
        # Nothing refused was carried out once the guardian went on.
        listed = (await execution(client, session, {"type": "list"}))["data"]["executions"]
        assert [r["command"] for r in listed] == ["echo back", "cat > /dev/null"]
        echoed = await bash(client, session, {"type": "screen",
                                              "execution_id": cat["execution_id"]})
        assert "typed" not in echoed["screen"]["text"]
    assert not (workspace / "ran-fg").exists() and not (workspace / "ran-bg").exists()


async def test_a_call_on_a_guardian_stopped_while_it_waited_says_so(
    tether_env: Config, workspace: Path
) -> None:
    """Stopped after the request reached it: the call can only wait out its deadline, and
    then says the guardian is stopped, and that whether the input arrived is unknown."""
    marker = workspace / "started"
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        pid = session["guardian"]["pid"]
        pending = asyncio.ensure_future(call_error(client, "BashCommand", {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": {"type": "command", "command": f"touch {marker}; sleep 30"},
            "wait_for_seconds": 3}))
        try:
            await apoll(marker.exists, what="the command to start")
            sigstop(pid)  # while the guardian waits to answer
            refused = await pending
        finally:
            os.kill(pid, signal.SIGCONT)
            pending.cancel()
        assert refused["code"] == "guardian_unresponsive", refused
        assert refused["data"]["input_sent"] == "unknown"
        assert refused["data"]["process_status"] == "stopped"
        assert f"resume it with `kill -CONT {pid}`" in refused["message"], refused["message"]
        assert "Whether the input arrived is unknown" in refused["message"]
