"""Who may do what: profiles, allow_tools, workspaces and the Agent action classes
(docs/security.md#profiles-and-modes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.mcp_helpers import call_error, initialize
from tether.frontend.policy.authority import (
    LOCAL,
    Caller,
    agent_action_class,
    authorize_agent_action,
    tools_for,
)
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ModeSpec
from tether.shared.config import Config

ARCHITECT = ModeSpec(name="architect")
WCGW = ModeSpec()


def test_profiles_and_allow_tools() -> None:
    assert tools_for("read-only", None) == {"Initialize", "Execution"}
    assert tools_for("terminal", None) == {"Initialize", "BashCommand", "Execution", "Agent"}
    assert tools_for("read-only", ["Execution", "Agent"]) == {"Initialize", "Execution", "Agent"}
    assert tools_for("full", ["Execution"]) == {"Initialize", "Execution"}
    with pytest.raises(ValueError, match="cannot grant BashCommand to profile read-only"):
        tools_for("read-only", ["BashCommand"])
    with pytest.raises(ValueError, match="unknown tools"):
        tools_for("full", ["Shell"])


def test_workspaces_are_roots_and_what_is_under_them() -> None:
    caller = Caller("http:a", "full", tools_for("full", None), ("/srv/a",))
    caller.check_workspace("/srv/a")
    caller.check_workspace("/srv/a/project")
    for outside in ("/srv/ab", "/srv", "/"):
        with pytest.raises(TetherError) as caught:
            caller.check_workspace(outside)
        assert caught.value.code == ErrorCode.WORKSPACE_DENIED
    LOCAL.check_workspace("/anything")


@pytest.mark.parametrize(("action", "kind"), [
    ("list", "observe"), ("get", "observe"), ("read", "observe"), ("explain", "observe"),
    ("wait", "observe"), ("notifications", "observe"), ("approvals", "observe"),
    ("close", "control"), ("archive", "control"), ("label", "control"),
    ("prompt", "input"), ("cancel", "input"), ("launch", "input"), ("resume", "input"),
    ("unarchive", "input"), ("respond", "input"), ("something_new", "input"),
])
def test_agent_actions_are_classified(action: str, kind: str) -> None:
    assert agent_action_class(action) == kind
    observer = Caller("http:w", "read-only", tools_for("read-only", ["Execution", "Agent"]))
    if kind == "observe":
        authorize_agent_action(observer, action, None)
        authorize_agent_action(LOCAL, action, ARCHITECT)
        return
    with pytest.raises(TetherError) as no_bash:
        authorize_agent_action(observer, action, WCGW)
    assert no_bash.value.code == ErrorCode.TOOL_DENIED
    assert no_bash.value.data["rule"] == "bash_authority"
    authorize_agent_action(LOCAL, action, WCGW)
    if kind == "control":
        authorize_agent_action(LOCAL, action, ARCHITECT)
        return
    with pytest.raises(TetherError) as restricted:
        authorize_agent_action(LOCAL, action, ARCHITECT)
    assert restricted.value.code == ErrorCode.MODE_DENIED
    assert restricted.value.data == {"mode": "architect", "action": action,
                                     "rule": "agent_input_needs_wcgw", "input_sent": False}


@pytest.mark.anyio
async def test_stdio_profile_flags_limit_the_local_principal(tether_env: Config,
                                                              workspace: Path) -> None:
    params = stdio_params()
    params = params.model_copy(update={"args": [*params.args, "--profile", "read-only",
                                                "--allow-tool", "Execution",
                                                "--allow-tool", "Agent"]})
    async with Client(params) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == [
            "Agent", "Execution", "Initialize"]
        session = await initialize(client, workspace)
        assert (session["principal"], session["profile"]) == ("local", "read-only")
        err = await call_error(client, "BashCommand", {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": {"type": "command", "command": "touch nope"}})
        assert err["code"] == "tool_denied"
    assert not (workspace / "nope").exists()
