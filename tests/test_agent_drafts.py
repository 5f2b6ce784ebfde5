"""Prompts never merge into a draft (issue 30): a real guardian, real PTYs, the MCP client and
the scripted fake agent, which logs every prompt it receives and can hold a draft in its box
(``--draft``) or put an interrupted prompt back there, as Claude Code does."""

from __future__ import annotations

import json
import pathlib
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.agent_helpers import fake_argv, launch, launched_by, run_prompt, wait_state
from tests.helpers import poll, start_guardian
from tests.mcp_helpers import agent, bash, initialize, prompt_log
from tests.test_compatibility import raw_replies
from tether.frontend.transport.mcp_server import build_server
from tether.guardian.agents.recognize import (
    RuleFileError,
    ScreenView,
    default_rule_sets,
    find_draft,
    parse_rule_file,
    recognize,
)
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures" / "agents"


async def screen_text(client: Client, session: dict[str, object], eid: str) -> str:
    page = await agent(client, session, {"action": "read", "target": eid, "source": "screen"})
    return str(page["data"]["text"])


async def test_a_draft_refuses_the_prompt_and_replace_draft_sends_exactly_the_new_text(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = (await launch(client, session, log, "--busy-seconds", "0.3",
                        "--draft", "half a thought"))["execution_id"]
    await wait_state(client, session, eid, "idle")
    refused = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p1",
                                            "text": "say hello", "timeout_seconds": 5}, error=True)
    assert refused["code"] == "input_not_empty", refused
    assert refused["data"]["input_sent"] is False and refused["data"]["draft_cleared"] is False
    assert "half a thought" in refused["message"] and "replace_draft: true" in refused["message"]
    assert "half a thought" in refused["data"]["draft"]
    # Nothing was typed: the box holds the draft alone, and the agent received nothing.
    assert "> half a thought" in await screen_text(client, session, eid)
    assert "say hello" not in await screen_text(client, session, eid)
    assert prompt_log(log) == []

    # The refusal left no receipt: the same prompt id, now replacing the draft.
    done = (await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p1",
                                          "text": "say hello", "replace_draft": True,
                                          "timeout_seconds": 10}))["data"]
    assert done["receipt"]["delivered"] is True and done["replayed"] is False
    poll(lambda: prompt_log(log) == ["say hello"], timeout=10, what="the prompt, exactly")
    await wait_state(client, session, eid, "idle")
    # An empty box: replace_draft changes nothing, the prompt goes as it is.
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p2",
                                  "text": "again", "replace_draft": True, "timeout_seconds": 10})
    poll(lambda: prompt_log(log) == ["say hello", "again"], timeout=10, what="the second prompt")
    await agent(client, session, {"action": "close", "target": eid})


async def test_a_draft_that_will_not_clear_refuses_with_nothing_typed(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = (await launch(client, session, log, "--draft", "stuck", "--sticky-draft"))[
        "execution_id"]
    await wait_state(client, session, eid, "idle")
    began = time.monotonic()
    refused = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p",
                                            "text": "new text", "replace_draft": True,
                                            "timeout_seconds": 5}, error=True)
    assert time.monotonic() - began < 10
    assert refused["code"] == "input_not_empty", refused
    assert refused["data"] == {"input_sent": False, "draft": "'> stuck'",
                               "draft_cleared": False, "keys_sent": True}
    assert "could not be cleared" in refused["message"]
    assert "> stuck" in await screen_text(client, session, eid)
    assert "new text" not in await screen_text(client, session, eid)
    assert prompt_log(log) == []
    await agent(client, session, {"action": "close", "target": eid})


async def test_cancel_then_prompt_with_replace_draft_sends_exactly_the_new_text(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """Claude Code puts a cancelled prompt back into its box; the next prompt typed after it
    reached the model as "go slow pleasesay hello 0" (issue 30, defect 1)."""
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = (await launch(client, session, log, "--busy-seconds", "60",
                        "--restore-on-interrupt"))["execution_id"]
    await wait_state(client, session, eid, "idle")
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "slow",
                                  "text": "go slow please", "timeout_seconds": 0})
    await wait_state(client, session, eid, "running")
    cancelled = (await agent(client, session, {"action": "cancel", "target": eid}))["data"]
    assert cancelled["acknowledged"] is True
    await wait_state(client, session, eid, "idle")

    merged = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "s0",
                                           "text": "say hello 0", "timeout_seconds": 5},
                         error=True)
    assert merged["code"] == "input_not_empty" and merged["data"]["input_sent"] is False
    assert "go slow please" in merged["message"]
    assert prompt_log(log) == ["go slow please"]

    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "s0",
                                  "text": "say hello 0", "replace_draft": True,
                                  "timeout_seconds": 5})
    poll(lambda: prompt_log(log) == ["go slow please", "say hello 0"], timeout=10,
         what="exactly the new text")
    await agent(client, session, {"action": "close", "target": eid})


async def test_an_archived_agent_names_unarchive(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    eid = (await launch(client, session, tmp_path / "a.log"))["execution_id"]
    await wait_state(client, session, eid, "idle")
    await agent(client, session, {"action": "close", "target": eid})
    closed = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "c",
                                           "text": "hi"}, error=True)
    assert closed["code"] == "not_running" and "Agent resume starts it again" in closed["message"]
    await agent(client, session, {"action": "archive", "target": eid})
    archived = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "a",
                                             "text": "hi"}, error=True)
    assert archived["code"] == "not_running" and archived["data"]["input_sent"] is False
    assert "unarchive" in archived["message"] and "resume starts" not in archived["message"]


# -- rule files ----------------------------------------------------------------------------


def test_every_shipped_rule_file_says_how_its_box_shows_a_draft() -> None:
    sets = default_rule_sets()
    assert {"claude", "codex", "opencode", "gemini", "aider", "shell"} <= set(sets)
    for name, rules in sets.items():
        assert rules.draft is not None, name
        assert rules.draft.clear_keys, name


def test_drafts_in_the_recorded_screens_and_only_there() -> None:
    """Of every recorded screen of Claude Code, Codex and OpenCode, exactly those with text
    typed into the box (a draft, a slash command being typed) show a draft; placeholders
    ('Ask Codex to do anything', 'Ask anything… "…"') and empty boxes do not."""
    found: dict[str, str] = {}
    for meta in sorted(FIXTURES.glob("*/*.json")):
        recognizer = json.loads(meta.read_text())["recognizer"]
        view = ScreenView.from_text(meta.with_suffix(".txt").read_text())
        draft = find_draft(view, recognizer)
        if draft is not None:
            found[f"{meta.parent.name}/{meta.stem}"] = draft
    assert set(found) == {
        "claude-2.1.332/06_typed_draft", "claude-2.1.332/07_slash_menu",
        "codex-0.171.0/06_typed_draft", "codex-0.171.0/07_slash_menu",
        "opencode-1.18.33/02_typed_draft"}, found
    assert all("a draft not sent" in text or "/model" in text for text in found.values())


@pytest.mark.parametrize(("recognizer", "rows"), [
    ("claude", ["─" * 40, "❯ go slow please", "─" * 40, "  ? for shortcuts"]),
    ("claude", ["╭" + "─" * 38 + "╮", "│ > half a thought" + " " * 20 + "│", "╰" + "─" * 38 + "╯"]),
    ("gemini", ["╭" + "─" * 38 + "╮", "│ > fix it" + " " * 28 + "│", "╰" + "─" * 38 + "╯"]),
    ("aider", ["some output", "> refactor this"]),
])
def test_a_draft_is_found(recognizer: str, rows: list[str]) -> None:
    view = ScreenView.from_text("\n".join(rows))
    assert recognize(view, recognizer).state == "awaiting_input"
    assert find_draft(view, recognizer) is not None


@pytest.mark.parametrize(("recognizer", "rows"), [
    ("claude", ["─" * 40, "❯", "─" * 40]),
    ("claude", ["─" * 40, '❯ Try "refactor <filepath>"', "─" * 40]),
    ("codex", ["› say hi", "• Hello.", "", "› Ask Codex to do anything", "", "  model · dir"]),
    ("codex", ["› Explain this codebase", "", "  model · dir"]),
    ("gemini", ["╭" + "─" * 38 + "╮", "│ >   Type your message or @path/to/file │",
                "╰" + "─" * 38 + "╯"]),
    ("aider", ["some output", "> "]),
])
def test_an_empty_box_or_a_placeholder_is_no_draft(recognizer: str, rows: list[str]) -> None:
    assert find_draft(ScreenView.from_text("\n".join(rows)), recognizer) is None


def test_the_draft_table_is_checked_when_rules_load() -> None:
    base = 'name = "x"\n{}\n[[rule]]\nid = "a"\nstate = "busy"\npriority = 1\ncontains = "w"\n'
    table = '[draft]\ncontains = "> "\n'
    assert parse_rule_file("x.toml", base.format("").encode()).draft is None
    parsed = parse_rule_file("x.toml", base.format(table + 'clear_keys = ["Ctrl-u"]').encode())
    assert parsed.draft is not None and parsed.draft.clear_keys == ("Ctrl-u",)
    assert parsed.draft.clear_per_character is False
    for bad, message in [
        ("", "clear_keys must be a list of 1 to 8 key names"),
        ('clear_keys = []', "clear_keys must be a list"),
        ('clear_keys = ["Hyper-x"]', "unknown key 'Hyper-x'"),
        ('clear_keys = ["Backspace"]\nclear_per_character = 1', "clear_per_character must be"),
        ('clear_keys = ["Backspace"]\nwhatever = 1', "unknown key"),
    ]:
        with pytest.raises(RuleFileError, match=message):
            parse_rule_file("x.toml", base.format(table + bad).encode())


async def test_a_notice_for_a_parent_with_a_draft_stays_pending(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """A finish notice is never typed into a parent's draft: it waits, untyped, and is typed
    once the parent is next idle with an empty box."""
    session = await initialize(client, workspace)
    plog = tmp_path / "parent.log"
    parent = (await launch(client, session, plog, "--run-prompts", "--busy-seconds", "0.2"))[
        "execution_id"]
    await wait_state(client, session, parent, "idle")
    text = run_prompt(tmp_path / "p.json", tmp_path / "p.out", False, [
        {"workspace": str(workspace), "argv": fake_argv(tmp_path / "c.log", "--busy-seconds", "0.5"),
         "recognizer": "claude"}])
    await agent(client, session, {"action": "prompt", "target": parent, "prompt_id": "spawn",
                                  "text": text, "timeout_seconds": 0})
    child = launched_by(tmp_path / "p.out")[0]["data"]["agent"]["execution_id"]
    await wait_state(client, session, parent, "idle")
    await wait_state(client, session, child, "idle")
    # Someone typed into the parent's box and has not sent it.
    await bash(client, session, {"type": "send_text", "execution_id": parent,
                                 "text": "parent draft"})
    screen = await screen_text(client, session, parent)
    assert "> parent draft" in screen, screen

    await agent(client, session, {"action": "prompt", "target": child, "prompt_id": "task",
                                  "text": "do the task", "timeout_seconds": 15})
    notices = (await agent(client, session, {"action": "wait", "target": parent,
                                             "events": ["notification"], "timeout_seconds": 15}))
    [notice] = notices["data"]["notifications"]
    prompt_id = f"notify-{notice['id']}"
    # For a while (the delivery is tried at once, when the child's turn ends): nothing typed.
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert prompt_log(plog) == [text]
        assert "> parent draft" in await screen_text(client, session, parent)
        await anyio.sleep(0.1)
    missing = await agent(client, session, {"action": "wait", "target": parent,
                                            "prompt_id": prompt_id, "timeout_seconds": 0},
                          error=True)
    assert missing["code"] == "not_found"
    rows = (await agent(client, session, {"action": "notifications", "parent": parent}))["data"]
    assert rows["notifications"][0]["delivered_prompt_id"] is None

    # The parent sends its own draft; at its next idle the notice is typed, on its own.
    await bash(client, session, {"type": "send_keys", "execution_id": parent, "keys": ["Enter"]})
    typed = f"[tether] agent {child} finished a turn (notification {notice['id']},"
    poll(lambda: len(prompt_log(plog)) == 3, timeout=15, what="the notice after the draft")
    log = prompt_log(plog)
    assert log[:2] == [text, "parent draft"] and log[2].startswith(typed), log
    await agent(client, session, {"action": "close", "target": child})
    await agent(client, session, {"action": "close", "target": parent})


async def test_a_1_7_guardian_is_refused_replace_draft_and_launch_env(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    """An older guardian would ignore both (unknown keys are ignored): the front-end refuses
    them before sending anything, and the guardian itself refuses them to other clients."""
    info = start_guardian(workspace, tether_env, "1.7")
    log = tmp_path / "a.log"
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        env = await agent(client, session, {"action": "launch", "provider": "command",
                                            "argv": fake_argv(log), "env": {"A": "1"}}, error=True)
        assert env["code"] == "capability_missing" and env["data"]["capability"] == "launch_env"
        assert env["data"]["input_sent"] is False
        assert (await agent(client, session, {"action": "list"}))["data"]["agents"] == []
        eid = (await launch(client, session, log, "--draft", "x"))["execution_id"]
        await wait_state(client, session, eid, "idle")
        draft = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p",
                                              "text": "hi", "replace_draft": True}, error=True)
        assert draft["code"] == "capability_missing"
        assert draft["data"]["capability"] == "replace_draft"
        await agent(client, session, {"action": "close", "target": eid})
    scope = {"principal": "local", "workspace_root": str(workspace), "thread_id": "th_x"}
    replies = raw_replies(info, [1, 7], [
        ("agent.prompt", {**scope, "execution_id": eid, "prompt_id": "q", "text": "hi",
                          "replace_draft": True}),
        ("agent.launch", {**scope, "argv": fake_argv(log), "env": {"A": "1"},
                          "idempotency_key": "k1"})])
    assert [r["error"]["data"]["capability"] for r in replies] == ["replace_draft", "launch_env"]
    assert prompt_log(log) == []
