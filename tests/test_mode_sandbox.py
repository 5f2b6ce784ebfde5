"""The architect sandbox and a mode change's fresh shell (docs/security.md#profiles-and-modes), through the
real MCP client,
a real guardian and real shells. The sandbox is tested past the command check: input is
sent straight to the guardian, checked against the thread's mode, as a checker bug would
let it through."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import start_guardian
from tests.mcp_helpers import bash, call, call_error, initialize, run
from tests.test_modes import change_mode
from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.transport.mcp_server import build_server
from tether.guardian.runtime.sandbox import landlock_abi
from tether.protocol.method_table import EXEC_START
from tether.protocol.methods import ModeSpec, mode_fingerprint
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio

#: Each tries one way out of the sandbox; each must fail.
ESCAPES = {
    "touch sneaked": "sneaked",
    "mkdir made_dir": "made_dir",
    "echo x > written": "written",
    "ln -s kept linked": "linked",
    "rm kept": None,
    "mv kept moved": "moved",
    ": > kept": None,
    # A file's mode, owner, times and attributes (Landlock guards contents and names only).
    "chmod 4777 kept": None,
    "touch -d 2001-01-01 kept": None,
    "python3 -c 'import os; os.setxattr(\"kept\", \"user.x\", b\"1\")'": None,
}


async def past_the_check(tether_env: Config, session: dict[str, Any], command: str,
                         **extra: Any) -> Any:
    """Run ``command`` as the guardian would after a (buggy) architect check let it pass."""
    locator = GuardianLocator(tether_env, "local")
    try:
        return await locator.call(
            session["workspace_root"], EXEC_START,
            {"principal": "local", "workspace_root": session["workspace_root"],
             "thread_id": session["thread_id"], "command": command,
             "idempotency_key": os.urandom(8).hex(), "wait_ms": 10_000,
             "mode_fingerprint": mode_fingerprint(ModeSpec(name="architect")), **extra},
            timeout_s=15)
    finally:
        locator.close()


async def test_an_architect_shell_writes_nothing_even_past_the_check(
        client: Client, tether_env: Config, workspace: Path) -> None:
    (workspace / "kept").write_text("kept\n")
    session = await initialize(client, workspace)
    changed = await change_mode(client, session, "architect")
    if landlock_abi() < 1:  # say so, and the rest rests on the check alone
        assert changed["sandbox"] is None and "Landlock" in changed["sandbox_missing"]
        return
    assert changed["sandbox"].startswith("landlock abi")
    before = sorted(p.name for p in workspace.iterdir())
    kept_stat = (workspace / "kept").stat()
    for command in ESCAPES:
        done = await past_the_check(tether_env, session, command)
        assert done.execution.exit_code != 0, command
    assert sorted(p.name for p in workspace.iterdir()) == before
    assert (workspace / "kept").read_text() == "kept\n"
    after = (workspace / "kept").stat()
    assert (after.st_mode, after.st_mtime_ns) == (kept_stat.st_mode, kept_stat.st_mtime_ns)
    assert not os.listxattr(workspace / "kept")
    # A background job of the thread is sandboxed too.
    job = await past_the_check(tether_env, session, "touch from_job", is_background=True)
    other = await initialize(client, workspace)  # a wcgw thread: its shell's terminal
    other_tty = (await run(client, other, "tty"))["output"].strip()
    assert other_tty.startswith("/dev/pts/")
    info = guardian_paths(tether_env, "local", session["workspace_root"])
    guardian_pid = int(json.loads(info.info.read_text())["pid"])
    for command in (
        # Tether's own socket (and any other by path), signals out, TCP.
        f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).connect(\"{info.socket}\")'",
        f"kill -0 {guardian_pid}",
        "exec 3<>/dev/tcp/127.0.0.1/9",
        # Another thread's terminal: neither written to (a forged screen) nor typed into
        # (TIOCSTI needs only a read-only descriptor; root may use it on any terminal).
        f"echo forged > {other_tty}",
        f"python3 -c 'import fcntl, os, termios; fd = os.open(\"{other_tty}\", os.O_RDONLY); "
        "fcntl.ioctl(fd, termios.TIOCSTI, b\"x\")'",
        # TCP past Landlock (MPTCP), a Unix datagram socket by path, root's powers.
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)'",
        "python3 -c 'import socket; socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)'",
        "grep -q '^CapEff:.*f' /proc/self/status",  # no capability beyond reading
    ):
        done = await past_the_check(tether_env, session, command)
        assert done.execution.exit_code != 0, command
    # What architect is for still works: reading, /dev/null, the terminal.
    done = await past_the_check(tether_env, session, "cat kept > /dev/null && ls && tty")
    assert done.execution.exit_code == 0 and "kept" in done.output.text
    assert not (workspace / "from_job").exists() and job.execution.execution_id


async def test_a_mode_change_gives_the_thread_a_fresh_shell(
        client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    await run(client, session, "alias cat='touch aliased'; f() { touch f_ran; }; X=1")
    changed = await change_mode(client, session, "architect")
    assert changed["generation"] == session["generation"] + 1
    shown = await run(client, session, "cat /dev/null; type -t f; echo x${X}x")
    assert "xx" in shown["output"] and not (workspace / "aliased").exists()
    assert "function" not in shown["output"]
    back = await change_mode(client, session, "wcgw")
    assert back["generation"] == changed["generation"] + 1 and "sandbox" not in back
    assert (await run(client, session, "touch made && echo ok"))["exit_code"] == 0
    assert (workspace / "made").exists()
    same = await change_mode(client, session, "wcgw")  # no change: the same shell
    assert same["generation"] == back["generation"]


async def test_a_mode_change_waits_for_the_running_command(
        client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    running = await bash(client, session, {"type": "command", "command": "sleep 30"}, wait=0)
    assert running["status"] == "running"
    refused = await call_error(client, "Initialize", {
        "type": "change_mode", "workspace_root": session["workspace_root"],
        "thread_id": session["thread_id"], "mode": "architect"})
    assert refused["code"] == "shell_busy" and "Nothing was changed" in refused["message"]
    status = (await call(client, "Initialize", {
        "type": "status", "workspace_root": session["workspace_root"],
        "thread_id": session["thread_id"]}))["data"]
    assert status["mode"] == "wcgw"
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"]})
    # The reply to the key need not wait for the shell to be back at its prompt: wait for
    # the command's end as a client would, then change the mode.
    ended = await bash(client, session, {"type": "status_check",
                                         "execution_id": running["execution_id"]}, wait=20)
    assert ended["status"] == "exited", ended
    assert (await change_mode(client, session, "architect"))["mode"] == "architect"


async def test_an_older_guardian_says_architect_is_not_sandboxed(
        tether_env: Config, workspace: Path) -> None:
    start_guardian(workspace, tether_env, "1.5")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        changed = await change_mode(client, session, "architect")
        assert changed["sandbox"] is None
        assert "protocol 1.5 has no mode sandbox" in changed["sandbox_missing"]
        assert "tether guardians restart" in changed["sandbox_missing"]
        assert changed["generation"] == session["generation"]  # no fresh shell there
