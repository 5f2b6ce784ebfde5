"""A thread's main shell replaced without a reset_shell is said, never silent.

When the shell of generation N ends (its guardian died, exited idle, or the shell itself
exited), the next call starts generation N + 1 in the last known directory, with none of the
old shell's environment. The reattaching Initialize and the first command in the new shell
carry ``shell_replaced`` (old generation, reason, cwd) and a sentence saying so; later commands
do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.helpers import apoll
from tests.mcp_helpers import call, initialize, run
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def _command(client: Client, session: dict[str, Any], command: str) -> tuple[dict[str, Any], str]:
    """A command's data and its text."""
    result = await client.call_tool("BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": command}, "wait_for_seconds": 10})
    assert result.structured_content is not None and result.structured_content["ok"], result
    return result.structured_content["data"], result.content[0].text  # type: ignore[union-attr]


async def test_a_shell_lost_with_its_guardian_is_said_to_be_replaced(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    moved = await run(client, session, "cd sub && export TARGET=release")
    assert moved["cwd"] == str(workspace / "sub")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)

    opened = await call(client, "Initialize", {"type": "first_call", "workspace_root":
                                               str(workspace), "thread_id": session["thread_id"]})
    again = opened["data"]
    assert again["reattached"] is True and again["generation"] == 2
    replaced = again["shell_replaced"]
    assert {k: replaced[k] for k in ("previous_generation", "generation", "reason", "cwd")} == {
        "previous_generation": 1, "generation": 2, "reason": "guardian_lost",
        "cwd": str(workspace / "sub")}
    assert f"restored to {workspace / 'sub'}" in replaced["message"]
    assert "environment variables" in replaced["message"]

    data, text = await _command(client, again, "pwd; echo TARGET=$TARGET")
    assert data["output"].split() == [str(workspace / "sub"), "TARGET="]
    assert data["shell_replaced"]["reason"] == "guardian_lost"
    assert data["shell_replaced"]["previous_generation"] == 1
    assert f"[warning: {replaced['message']}]" in text
    later, later_text = await _command(client, again, "true")
    assert "shell_replaced" not in later and "warning" not in later_text


async def test_a_shell_ended_by_an_idle_exit_is_said_to_be_replaced(
    tether_env: Config, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARDIAN_IDLE_S", "1")
    async with Client(build_server(Config.from_env())) as client:
        session = await initialize(client, workspace)
        await run(client, session, "cd sub && V=1")
        await apoll(lambda: _gone(session["guardian"]["pid"]), timeout=15,
                    what="the guardian to exit when idle")
        data, text = await _command(client, session, "pwd; echo V=$V")
        assert data["output"].split() == [str(workspace / "sub"), "V="]
        assert (data["shell_replaced"]["reason"], data["generation"]) == ("guardian_idle_exit", 2)
        assert "idle period" in text


async def test_a_shell_that_exited_is_said_to_be_replaced(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    await run(client, session, "cd sub")
    ended = await run(client, session, "exit 3")
    assert (ended["status"], ended["exit_code"]) == ("exited", 3)
    data, _ = await _command(client, session, "pwd")
    assert data["shell_replaced"]["reason"] == "shell_exited"
    assert data["output"].strip() == str(workspace / "sub")
    # A reset is asked for: it says nothing.
    reset = await call(client, "Initialize", {"type": "reset_shell", "workspace_root":
                                              str(workspace), "thread_id": session["thread_id"]})
    assert "shell_replaced" not in reset["data"]
    after, _ = await _command(client, session, "true")
    assert "shell_replaced" not in after and after["generation"] == 3


async def test_a_removed_directory_is_reported_by_its_path_and_a_new_shell_starts_in_the_workspace(
    client: Client, workspace: Path
) -> None:
    """The kernel says "<path> (deleted)" for a removed working directory: the cwd is its path
    (as pwd says it); a shell that replaces this one starts in the workspace, and the notice
    names where it did start (before: "<path> (deleted)", and $HOME)."""
    session = await initialize(client, workspace)
    gone = await run(client, session, "mkdir gone && cd gone && rmdir ../gone; pwd")
    assert gone["cwd"] == str(workspace / "gone") == gone["output"].strip(), gone
    await run(client, session, "exit")
    data, _ = await _command(client, session, "pwd")
    assert data["output"].strip() == str(workspace), data
    assert data["shell_replaced"]["cwd"] == str(workspace), data["shell_replaced"]
    assert f"{workspace} ({workspace / 'gone'} is gone)" in data["shell_replaced"]["message"]
