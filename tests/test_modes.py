"""Thread modes through the real MCP client and a real guardian (docs/security.md#profiles-and-modes): what
each mode runs,
what it refuses (naming segment and rule, typing nothing), and that the mode outlives the
front-end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.mcp_helpers import agent, bash, call, call_error, execution, initialize, prompt_log, run
from tests.test_agent import _start_fake
from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import EXEC_START
from tether.protocol.methods import ModeSpec, mode_fingerprint
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

CODE_WRITER = {"allowed_commands": ["ls", "cat", "git"], "allowed_globs": ["notes/*.md"]}


async def change_mode(client: Client, session: dict[str, Any], mode: str,
                      code_writer: dict[str, Any] | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"type": "change_mode", "workspace_root": session["workspace_root"],
                            "thread_id": session["thread_id"], "mode": mode}
    if code_writer is not None:
        args["code_writer"] = code_writer
    data: dict[str, Any] = (await call(client, "Initialize", args))["data"]
    return data


async def refused(client: Client, session: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": action}
    return await call_error(client, "BashCommand", args)


async def history(client: Client, session: dict[str, Any]) -> list[str]:
    listed = (await execution(client, session, {"type": "list", "limit": 128}))["data"]
    return [record["command"] for record in listed["executions"]]


async def test_code_writer_checks_every_segment(client: Client, workspace: Path) -> None:
    (workspace / "x").write_text("keep me\n")
    session = await initialize(client, workspace)
    data = await change_mode(client, session, "code_writer", CODE_WRITER)
    assert data["mode"] == "code_writer" and data["code_writer"] == CODE_WRITER

    piped = await run(client, session, "ls | cat")
    assert piped["exit_code"] == 0 and "x" in piped["output"].split()

    for line, segment in [("ls; rm x", "rm x"), ("ls && $(rm x)", "rm x"),
                          ("echo `rm x`", "rm x"), ("cat <(rm x)", "rm x"), ("ls | sh", "sh")]:
        err = await refused(client, session, {"type": "command", "command": line})
        assert err["code"] == "mode_denied", line
        assert f"`{segment}`" in err["message"] and "allowed_commands" in err["message"], err
        assert any(v["segment"] == segment and v["rule"] == "allowed_commands"
                   for v in err["data"]["violations"]), err
        assert err["data"]["input_sent"] is False

    assert (workspace / "x").read_text() == "keep me\n"
    assert await history(client, session) == ["ls | cat"]  # nothing refused reached the shell

    (workspace / "notes").mkdir()
    wrote = await run(client, session, "cat x > notes/copy.md")
    assert wrote["exit_code"] == 0 and (workspace / "notes" / "copy.md").read_text() == "keep me\n"
    outside = await refused(client, session, {"type": "command", "command": "cat x > copy.txt"})
    assert outside["data"]["violations"][0]["rule"] == "allowed_globs"
    assert not (workspace / "copy.txt").exists()


async def test_architect_writes_nothing(client: Client, workspace: Path) -> None:
    (workspace / "x").write_text("data\n")
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    err = await refused(client, session, {"type": "command", "command": "cat x > out.txt"})
    assert err["code"] == "mode_denied"
    assert err["data"]["violations"][0] == {
        "segment": "> out.txt", "rule": "no_writes",
        "detail": "architect mode writes no files; only /dev/null"}
    assert not (workspace / "out.txt").exists()
    read = await run(client, session, "cat x 2>/dev/null | wc -l")
    assert read["exit_code"] == 0 and read["output"].strip() == "1"

    typed = await refused(client, session, {"type": "send_text", "text": "rm x", "submit": True})
    assert typed["data"]["violations"][0]["rule"] == "no_typing"
    recall = await refused(client, session, {"type": "send_keys", "keys": ["Up", "Enter"]})
    assert recall["data"]["violations"][0]["rule"] == "restricted_keys"
    reader = await bash(client, session, {"type": "command", "command": "cat",
                                          "is_background": True})
    stopped = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                           "execution_id": reader["execution_id"]}, wait=5)
    assert stopped["status"] == "exited"
    assert (workspace / "x").exists()


async def test_a_value_evaluated_as_code_does_not_get_past_a_restricted_mode(
    client: Client, workspace: Path,
) -> None:
    """The reviewer's bypasses: a loop sets a variable to a command in quotes, then bash
    evaluates it (prompt expansion, an arithmetic offset). Refused; nothing runs."""
    session = await initialize(client, workspace)
    # A value set while the thread was unrestricted is as dangerous as one set by a loop.
    await run(client, session, f"planted='$(touch {workspace}/planted)'")
    await change_mode(client, session, "architect")
    for command in (f"for x in '$(touch {workspace}/p1)'; do echo ${{x@P}}; done",
                    f"for x in 'a[$(touch {workspace}/p2)]'; do echo ${{HOME:x}}; done",
                    'echo "${planted@P}"',
                    "for PROMPT_COMMAND in 'touch p3'; do echo; done"):
        err = await refused(client, session, {"type": "command", "command": command})
        assert err["code"] == "mode_denied", (command, err)
    assert not [p for p in workspace.iterdir() if p.name in ("p1", "p2", "p3", "planted")]
    # An option made by an expansion: find -delete, which architect refuses when typed.
    (workspace / "victim").write_text("kept\n")
    err = await refused(client, session, {
        "type": "command", "command": "for x in -delete; do find . -name victim $x; done"})
    assert err["code"] == "mode_denied" and (workspace / "victim").exists()
    # /dev/stdout reopened onto a file read from; a here-document bash expands.
    for command in ("echo overwritten 1<victim >/dev/stdout",
                    f"for x in '$(touch {workspace}/p4)'; do cat <<E; done\n${{x@P}}\nE",
                    "ls() { cat victim; }",
                    "cat <<'E'\"F\"\nEF\nrm -f victim\n'E'\"F\"\n",
                    "echo $(echo a#b) ; rm -f victim\n)",
                    "echo {PROMPT_COMMAND}>/dev/null"):
        err = await refused(client, session, {"type": "command", "command": command})
        assert err["code"] == "mode_denied", (command, err)
    assert (workspace / "victim").read_text() == "kept\n" and not (workspace / "p4").exists()
    fine = await run(client, session, "for f in a b; do echo ${f}-${HOME:0:1}; done")
    assert fine["output"].split() == ["a-/", "b-/"]


async def test_what_bash_reads_differently_inside_an_expansion_does_not_get_past_a_mode(
    client: Client, workspace: Path,
) -> None:
    """The fifth round's bypasses inside `${...}` (which bashlex does not parse): an operator
    that assigns, arithmetic in an operator's word, quotes that bash 5.2 reads differently.
    Refused, and nothing runs, not even at the next prompt."""
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    for command in (f"echo ${{PROMPT_COMMAND[1]=touch {workspace}/assigned}}",
                    f"for y in 'a[$(touch {workspace}/arith)]'; do echo ${{x:-$[y]}}; done",
                    f"echo \"${{x:-'}}\" '}}\" ; touch {workspace}/quoted ; echo \"'\" #\""):
        err = await refused(client, session, {"type": "command", "command": command})
        assert err["code"] == "mode_denied", (command, err)
    assert (await run(client, session, "true"))["exit_code"] == 0  # PROMPT_COMMAND runs here
    assert sorted(p.name for p in workspace.iterdir()) == ["sub"]


async def test_a_loop_over_tethers_own_variables_does_not_break_command_tracking(
    client: Client, workspace: Path,
) -> None:
    """`for __tether_nonce in x` overwrote the nonce of the end markers: the command never
    ended for Tether. Refused; the shell goes on ending commands."""
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    for name in ("__tether_nonce", "__tether_cmd"):
        command = f"for {name} in x; do true; done"
        err = await refused(client, session, {"type": "command", "command": command})
        assert err["data"]["violations"][0]["rule"] == "no_assignments", err
    done = await run(client, session, "echo tracked", wait=5)
    assert done["status"] == "exited" and done["output"].strip() == "tracked"


async def test_code_writer_writes_land_only_where_its_globs_say(
    tether_env: Config, workspace: Path, tmp_path: Path,
) -> None:
    """A real `tether serve` started in the workspace. `**` matched .git/config, where
    `pager = touch x` ran at the next `git log`; /proc/self/cwd named the shell's directory
    for bash and the front-end's for the check, so a write the globs allowed on paper landed
    outside. Refused; nothing written anywhere."""
    outside = tmp_path / "outside"
    outside.mkdir()
    async with Client(stdio_params().model_copy(update={"cwd": str(workspace)})) as client:
        session = await initialize(client, workspace)
        await change_mode(client, session, "code_writer", {
            "allowed_commands": ["echo", "cd", "git"], "allowed_globs": ["*.md", "**"]})
        assert (await run(client, session, "git init -q"))["exit_code"] == 0
        config = (workspace / ".git" / "config").read_text()
        for command in ("echo '[core]' >> .git/config", "echo 'pager = touch made' >> .git/config"):
            err = await refused(client, session, {"type": "command", "command": command})
            assert err["data"]["violations"][0]["rule"] == "allowed_globs", err
        assert (workspace / ".git" / "config").read_text() == config
        assert (await run(client, session, f"cd {outside}"))["exit_code"] == 0
        for command in ("echo pwned > /proc/self/cwd/NOTES.md",):
            err = await refused(client, session, {"type": "command", "command": command})
            assert err["data"]["violations"][0]["rule"] == "allowed_globs", err
    assert not (outside / "NOTES.md").exists() and not (workspace / "NOTES.md").exists()


async def test_a_restricted_mode_sends_the_main_shell_only_an_interrupt(
    client: Client, workspace: Path,
) -> None:
    """Tab Tab sent while a main-shell command ran waited in the terminal; readline read them
    with the next command line, its completion pager ate part of it and the rest ran as
    another command. A restricted mode sends the main shell (its command) only Ctrl-c."""
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    running = await run(client, session, "tail -f /dev/null", wait=0.2)
    assert running["status"] == "running"
    for keys in (["Tab", "Tab"], ["Enter"], ["Ctrl-d"], ["Ctrl-c", "Space"]):
        for target in ({}, {"execution_id": running["execution_id"]}):
            err = await refused(client, session, {"type": "send_keys", "keys": keys, **target})
            assert [v["rule"] for v in err["data"]["violations"]] == ["main_shell_keys"], err
            assert err["data"]["input_sent"] is False and "Ctrl-c" in err["message"]
    stopped = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"]}, wait=5)
    assert stopped["status"] == "exited"
    after = await run(client, session, "echo after")
    assert after["output"].strip() == "after"
    assert await history(client, session) == ["echo after", "tail -f /dev/null"]


async def test_a_restricted_mode_sends_keys_only_to_its_own_background_executions(
    client: Client, workspace: Path,
) -> None:
    """An architect thread pressed Enter in an agent's terminal (launched by a wcgw thread)
    and so approved what the agent asked. Refused (key_target); its own background
    executions still take the restricted keys."""
    wcgw = await initialize(client, workspace)
    asks = f"read -p 'Allow? [Enter=yes] ' x; touch {workspace}/approved; sleep 30"
    launched = (await agent(client, wcgw, {"action": "launch", "provider": "command",
                                            "argv": ["bash", "-c", asks]}))["data"]["agent"]
    other = await bash(client, wcgw, {"type": "command", "command": "cat", "is_background": True})
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    err = await refused(client, session, {"type": "send_keys", "keys": ["Enter"],
                                          "execution_id": launched["execution_id"]})
    assert [v["rule"] for v in err["data"]["violations"]] == ["key_target"], err
    assert err["data"]["input_sent"] is False and "wcgw" in err["message"]
    hidden = await refused(client, session, {"type": "send_keys", "keys": ["Enter"],
                                             "execution_id": other["execution_id"]})
    assert hidden["code"] == "not_found"  # another thread's terminal is not even visible
    own = await bash(client, session, {"type": "command", "command": "cat", "is_background": True})
    typed = await bash(client, session, {"type": "send_keys", "keys": ["Enter"],
                                         "execution_id": own["execution_id"]})
    assert typed["input_sent"] is True
    assert not (workspace / "approved").exists()


async def test_mode_survives_a_new_front_end(tether_env: Config, workspace: Path) -> None:
    (workspace / "x").write_text("data\n")
    async with Client(build_server(tether_env)) as first:
        session = await initialize(first, workspace)
        await change_mode(first, session, "code_writer", CODE_WRITER)
    async with Client(build_server(tether_env)) as second:  # nothing carried over in memory
        status = (await call(second, "Initialize", {
            "type": "status", "workspace_root": str(workspace),
            "thread_id": session["thread_id"]}))["data"]
        assert status["mode"] == "code_writer" and status["code_writer"] == CODE_WRITER
        err = await refused(second, session, {"type": "command", "command": "rm x"})
        assert err["code"] == "mode_denied"
        assert (workspace / "x").exists()
        await change_mode(second, session, "wcgw")
        assert (await run(second, session, "rm x"))["exit_code"] == 0
        assert not (workspace / "x").exists()


async def test_mode_arguments_are_checked(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    base = {"workspace_root": session["workspace_root"], "thread_id": session["thread_id"]}
    missing = await call_error(client, "Initialize", {**base, "type": "change_mode",
                                                      "mode": "code_writer"})
    assert missing["code"] == "invalid_request" and "allowed_commands" in missing["message"]
    stray = await call_error(client, "Initialize", {**base, "type": "change_mode",
                                                    "mode": "architect",
                                                    "code_writer": CODE_WRITER})
    assert stray["code"] == "invalid_request"
    status = (await call(client, "Initialize", {**base, "type": "status"}))["data"]
    assert status["mode"] == "wcgw"
    first = (await call(client, "Initialize", {"workspace_root": str(workspace),
                                               "mode": "architect"}))["data"]
    assert first["mode"] == "architect" and first["thread_id"] != session["thread_id"]


async def test_agent_prompting_needs_wcgw(client: Client, workspace: Path, tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = await _start_fake(client, session, log)
    prompt = {"action": "prompt", "target": eid, "prompt_id": "p1", "text": "hello agent",
              "recognizer": "claude", "timeout_seconds": 15}
    for mode, config in (("architect", None), ("code_writer", CODE_WRITER)):
        await change_mode(client, session, mode, config)
        err = await agent(client, session, prompt, error=True)
        assert err["code"] == "mode_denied" and err["data"]["rule"] == "agent_input_needs_wcgw"
        assert err["data"]["input_sent"] is False and mode in err["message"]
        seen = (await agent(client, session, {"action": "get", "target": eid}))["data"]
        assert seen["execution"]["execution_id"] == eid  # observing is still allowed
    assert prompt_log(log) == []
    await change_mode(client, session, "wcgw")
    receipt = (await agent(client, session, prompt))["data"]["receipt"]
    assert receipt["delivered"] is True and receipt.get("replayed") is None
    assert prompt_log(log) == ["hello agent"]


async def test_a_mode_changed_by_another_front_end_holds_at_once(
        tether_env: Config, workspace: Path) -> None:
    async with Client(build_server(tether_env)) as first, \
            Client(build_server(tether_env)) as second:
        session = await initialize(first, workspace)
        assert (await run(first, session, "echo warm"))["exit_code"] == 0  # first knows: wcgw
        await change_mode(second, session, "architect")
        err = await refused(first, session, {"type": "command", "command": "touch made"})
        assert err["code"] == "mode_denied" and err["data"]["violations"][0]["rule"] == (
            "read_only_commands")
        assert (await run(first, session, "ls"))["exit_code"] == 0  # checked again, allowed
        assert not (workspace / "made").exists()


async def test_the_guardian_refuses_input_checked_against_another_mode(
        client: Client, tether_env: Config, workspace: Path) -> None:
    session = await initialize(client, workspace)
    await change_mode(client, session, "architect")
    locator = GuardianLocator(tether_env, "local")
    try:
        start = {"principal": "local", "workspace_root": session["workspace_root"],
                 "thread_id": session["thread_id"], "command": "touch sneaked",
                 "idempotency_key": "k1"}
        for guard in ({}, {"mode_fingerprint": mode_fingerprint(ModeSpec())}):
            with pytest.raises(TetherError) as caught:
                await locator.call(session["workspace_root"], EXEC_START, {**start, **guard},
                                   timeout_s=10)
            assert caught.value.code == ErrorCode.MODE_CHANGED
            assert caught.value.data == {"mode": "architect", "input_sent": False}
        checked = {"mode_fingerprint": mode_fingerprint(ModeSpec(name="architect"))}
        done = await locator.call(session["workspace_root"], EXEC_START,
                                  {**start, **checked, "command": "true", "wait_ms": 5000},
                                  timeout_s=10)
        assert done.execution.exit_code == 0
    finally:
        locator.close()
    assert not (workspace / "sneaked").exists()
    assert await history(client, session) == ["true"]
