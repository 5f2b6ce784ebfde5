"""``Agent.launch {env}`` and what a resume runs (issue 30, defects 4 and 7): the launch's
variables reach the agent and its resumes and nothing else; a resume keeps the launch's
arguments and replaces only the conversation selector."""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.agent_helpers import FAKE_AGENT, fake_argv, pid_of, wait_state
from tests.conftest import stdio_params
from tests.helpers import poll
from tests.mcp_helpers import agent, initialize
from tether.guardian.agents.providers import launch_plan, resume_argv
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

UUID = "0f5c3a9e-1b2d-4c6e-8f70-123456789abc"


def starts(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def files_holding(roots: list[Path], needle: bytes, *, skip: Path | None = None) -> list[Path]:
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and path != skip and needle in path.read_bytes():
                found.append(path)
    return found


async def test_launch_env_reaches_the_agent_and_its_resume_and_nothing_else(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    first = await initialize(client, workspace)  # this front-end starts the guardian
    secret = f"tok-{secrets.token_hex(16)}"
    usage = tmp_path / "usage.jsonl"
    start_log = tmp_path / "starts.jsonl"
    argv = fake_argv(tmp_path / "a.log", "--start-log", str(start_log), "--show-env", "API_TOKEN",
                     "--show-env", "SECOND_FRONT_END_ONLY")
    # A second front-end, with an environment of its own, launches the agent.
    async with Client(stdio_params({"TETHER_USAGE_LOG": str(usage),
                                    "SECOND_FRONT_END_ONLY": "yes"})) as second:
        session = await initialize(second, workspace, first["thread_id"])
        assert session["guardian"]["pid"] == first["guardian"]["pid"]
        reply = await second.call_tool("Agent", {
            "thread_id": session["thread_id"], "workspace_root": str(workspace),
            "action": "launch", "provider": "command", "argv": argv, "recognizer": "claude",
            "env": {"API_TOKEN": secret}})
        assert not reply.is_error and reply.structured_content is not None, reply
        data = reply.structured_content["data"]
        eid = data["agent"]["execution_id"]
        assert data["env_names"] == ["API_TOKEN"]
        assert secret not in json.dumps(reply.model_dump(mode="json"))
        await wait_state(second, session, eid, "idle")
        assert [s["env"] for s in starts(start_log)] == [
            {"API_TOKEN": secret, "SECOND_FRONT_END_ONLY": None}]
        await agent(second, session, {"action": "close", "target": eid})
        resumed = await second.call_tool("Agent", {
            "thread_id": session["thread_id"], "workspace_root": str(workspace),
            "action": "resume", "target": eid})
        assert secret not in json.dumps(resumed.model_dump(mode="json"))
        data = await wait_state(second, session, eid, "idle")
        assert [s["env"]["API_TOKEN"] for s in starts(start_log)] == [secret, secret]
        agent_pid = pid_of(data["agent"])
        for pid in (agent_pid, first["guardian"]["pid"]):
            assert secret not in " ".join(psutil.Process(pid).cmdline())
        listed = await agent(second, session, {"action": "list"})
        got = await agent(second, session, {"action": "get", "target": eid})
        assert secret not in json.dumps([listed, got])

    # Kept privately: one 0600 file in a 0700 directory; the value is in no other file of
    # Tether's (catalog, journals, guardian log) nor in the usage log.
    state = tether_env.state_home
    [kept] = list(state.rglob(f"agent-env/{eid}.json"))
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert usage.exists() and secret.encode() not in usage.read_bytes()
    assert list(state.rglob("guardian.log")), "the guardian log is where we look"
    assert files_holding([state, tether_env.runtime_dir], secret.encode(), skip=kept) == []
    # Archived: the variables go with it.
    await agent(client, first, {"action": "archive", "target": eid})
    assert not kept.exists()


async def test_launch_env_names_are_checked_and_nothing_starts(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    argv = fake_argv(tmp_path / "a.log")
    for env, code, words in [
        ({"TETHER_EXECUTION_ID": "x"}, "invalid_request", "TETHER_EXECUTION_ID is Tether's own"),
        ({"1BAD": "x"}, "invalid_request", "not a POSIX variable name"),
        ({f"V{i}": "x" for i in range(65)}, "limit_exceeded", "the limit is 64"),
        ({"BIG": "s3cr3t" * 6000}, "limit_exceeded", "the limit is 32768"),
    ]:
        refused = await agent(client, session, {"action": "launch", "provider": "command",
                                                "argv": argv, "env": env}, error=True)
        assert refused["code"] == code and words in refused["message"], refused
        assert "s3cr3t" not in json.dumps(refused)
    listed = await agent(client, session, {"action": "list"})
    assert listed["data"]["agents"] == []


async def test_resume_keeps_the_launch_arguments(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """A Claude Code agent launched with --model, --permission-mode and --mcp-config resumes
    with all of them and --resume <uuid> instead of --session-id (a stand-in ``claude`` on the
    launch's PATH records its arguments, then runs the fake agent)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    start_log = tmp_path / "claude-starts.jsonl"
    fake_claude = bin_dir / "claude"
    fake_claude.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(start_log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"os.execv(sys.executable, [sys.executable, {str(FAKE_AGENT)!r}, '--log', "
        f"{str(tmp_path / 'a.log')!r}])\n")
    fake_claude.chmod(0o755)
    session = await initialize(client, workspace)
    extra = ["--model", "opus", "--permission-mode", "plan", "--mcp-config", "tools.json"]
    launched = (await agent(client, session, {
        "action": "launch", "provider": "claude", "argv": extra,
        "env": {"PATH": f"{bin_dir}:{os.environ['PATH']}"}}))["data"]["agent"]
    eid, conversation = launched["execution_id"], launched["conversation_id"]
    await wait_state(client, session, eid, "idle")
    await agent(client, session, {"action": "close", "target": eid})
    await agent(client, session, {"action": "resume", "target": eid})
    await wait_state(client, session, eid, "idle")
    lines = poll(lambda: (s := [json.loads(x) for x in start_log.read_text().splitlines()])
                 and len(s) == 2 and s, timeout=10, what="two starts")
    assert lines == [["--session-id", conversation, *extra], ["--resume", conversation, *extra]]
    await agent(client, session, {"action": "close", "target": eid})


@pytest.mark.parametrize(("provider", "extra", "resumed"), [
    ("claude", ["--model", "opus", "--mcp-config", "a.json", "b.json", "--permission-mode", "plan"],
     ["claude", "--resume", UUID, "--model", "opus", "--mcp-config", "a.json", "b.json",
      "--permission-mode", "plan"]),
    ("codex", ["--model", "o3", "-c", "sandbox=read-only", "--full-auto"],
     ["codex", "resume", UUID, "--model", "o3", "-c", "sandbox=read-only", "--full-auto"]),
    ("opencode", ["--model", "a/b", "--agent", "build"],
     ["opencode", "--session", UUID, "--model", "a/b", "--agent", "build"]),
])
def test_the_resume_line_replaces_only_the_conversation_selector(
    provider: str, extra: list[str], resumed: list[str]
) -> None:
    plan = launch_plan(provider, extra, new_uuid=lambda: UUID)
    conversation = plan.conversation_id or UUID  # Codex and OpenCode: recorded later
    record = {"provider": provider, "argv": plan.argv, "conversation_id": conversation}
    assert resume_argv(record) == resumed
    # A launch that named the conversation itself: its selector is replaced, not repeated.
    again = launch_plan(provider, extra, conversation_id=UUID)
    assert resume_argv({**record, "argv": again.argv}) == resumed


@pytest.mark.parametrize(("provider", "launched"), [
    ("claude", ["claude", "--resume=old", "--model", "opus", "-c"]),
    ("claude", ["claude", "-r", "--model", "opus", "--fork-session"]),
    ("claude", ["claude", "--session-id", "old", "--model", "opus"]),
    ("codex", ["codex", "resume", "--last", "--model", "opus"]),
    ("opencode", ["opencode", "-s", "ses_old", "--model", "opus", "--continue"]),
])
def test_every_spelling_of_a_selector_is_dropped(provider: str, launched: list[str]) -> None:
    line = resume_argv({"provider": provider, "argv": launched, "conversation_id": UUID})
    assert line[-2:] == ["--model", "opus"] and "old" not in line and "ses_old" not in line
    assert line.count(UUID) == 1


def test_a_command_agent_reruns_its_argv() -> None:
    argv = [sys.executable, "agent.py", "--flag", "x"]
    assert resume_argv({"provider": "command", "argv": argv, "conversation_id": None}) == argv


@pytest.mark.parametrize(("provider", "launched", "again"), [
    # Claude Code's and Codex's positional prompt is not sent again...
    ("claude", ["claude", "--model", "opus", "fix the tests"], ["--model", "opus"]),
    ("claude", ["claude", "fix the tests", "--verbose"], ["--verbose"]),
    ("claude", ["claude", "--verbose", "--", "-fix"], ["--verbose"]),
    ("codex", ["codex", "-m", "o3", "fix the tests"], ["-m", "o3"]),
    ("codex", ["codex", "resume", "old-id", "-m", "o3", "more"], ["-m", "o3"]),
    # ... nor OpenCode's --prompt; its plain word is the project directory, kept.
    ("opencode", ["opencode", "proj", "--prompt", "fix", "--model", "a/b"],
     ["proj", "--model", "a/b"]),
    # Words an option owns stay: a variadic option's, a known option's value that looks like
    # an option, and (kept rather than lost) the word after an option not known here.
    ("claude", ["claude", "--mcp-config", "a.json", "b.json", "--model", "opus"],
     ["--mcp-config", "a.json", "b.json", "--model", "opus"]),
    ("claude", ["claude", "--append-system-prompt", "-be brief", "--verbose"],
     ["--append-system-prompt", "-be brief", "--verbose"]),
    ("claude", ["claude", "--some-new-option", "value", "--model=opus"],
     ["--some-new-option", "value", "--model=opus"]),
])
def test_a_resume_never_sends_the_launch_line_prompt_again(
    provider: str, launched: list[str], again: list[str]
) -> None:
    selector = {"claude": ["--resume"], "codex": ["resume"], "opencode": ["--session"]}[provider]
    line = resume_argv({"provider": provider, "argv": launched, "conversation_id": UUID})
    assert line == [provider, *selector, UUID, *again]
