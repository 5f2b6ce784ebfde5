"""Turn recognition and the Agent tool through the real MCP client (issue 6, docs/tools.md#recognizers,
docs/tools.md#once-only)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.helpers import AGENT_SCREEN_STATES, apoll, fixture_file, poll
from tests.mcp_helpers import agent, bash, execution, initialize, kill_front_end, prompt_log, run
from tests.person_terminal import TETHER
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio

FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"


async def _until_state(client: Client, session: dict[str, Any], eid: str, state: str,
                       timeout: float = 10.0) -> None:
    """Poll ``explain`` (claude rules) until the screen is recognised as ``state``."""
    deadline = time.monotonic() + timeout
    while True:
        explained = (await execution(client, session, {"type": "explain", "execution_id": eid,
                                                       "recognizer": "claude"}))["data"]
        if explained["recognition"]["state"] == state:
            return
        assert time.monotonic() < deadline, f"never recognised {state}: {explained}"
        await anyio.sleep(0.02)


async def _start_fake(client: Client, session: dict[str, Any], log: Path,
                      extra: str = "") -> str:
    started = await bash(client, session, {
        "type": "command", "is_background": True, "rows": 40, "cols": 120,
        "command": f"{sys.executable} {FAKE_AGENT} --log {log} {extra}"})
    eid = str(started["execution_id"])
    turn = await bash(client, session, {"type": "wait_for_turn", "execution_id": eid,
                                        "recognizer": "claude", "timeout_seconds": 15})
    assert turn["outcome"] == "turn_ready", turn
    return eid


@pytest.mark.parametrize("name", sorted(AGENT_SCREEN_STATES))
async def test_fixture_screens_are_recognised(name: str, client: Client, workspace: Path) -> None:
    expected_text = fixture_file(f"agent-screens/{name}.txt").read_text().rstrip("\n")
    ansi = fixture_file(f"agent-screens/{name}.ansi")
    session = await initialize(client, workspace)
    started = await bash(client, session, {
        "type": "command", "is_background": True, "rows": 40, "cols": 120,
        "command": f"cat {ansi}; sleep 30"})
    eid = started["execution_id"]
    poll_screen = {"type": "screen", "execution_id": eid}
    deadline = time.monotonic() + 10  # by time, not by count: a screen call takes ~2 ms now
    while (await bash(client, session, poll_screen))["screen"]["text"] != expected_text:
        assert time.monotonic() < deadline, f"{name}: the fixture's screen never showed"
        await anyio.sleep(0.02)
    explained = (await execution(client, session, {"type": "explain", "execution_id": eid,
                                                   "recognizer": "claude"}))["data"]
    decision = explained["recognition"]
    assert decision["state"] == AGENT_SCREEN_STATES[name]
    assert decision["recognizer"] == "claude" and decision["rule"]
    assert decision["priority"] is not None


async def test_prompt_is_delivered_once(client: Client, workspace: Path, tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = await _start_fake(client, session, log)
    listed = (await agent(client, session, {"action": "list"}))["data"]["executions"]
    assert listed == []  # a python script is not a known agent CLI: no silent guessing
    prompt = {"action": "prompt", "target": eid, "prompt_id": "p1", "text": "hello agent",
              "recognizer": "claude", "timeout_seconds": 15}
    first = (await agent(client, session, prompt))["data"]
    receipt = first["receipt"]
    assert (receipt["delivered"], receipt["activity_observed"], receipt["wait_reached"]) == (
        True, True, True)
    assert receipt["generation"] == 1 and receipt["execution_id"] == eid
    assert prompt_log(log) == ["hello agent"]

    again = (await agent(client, session, prompt))["data"]
    assert again["replayed"] is True
    assert again["receipt"]["baseline"] == receipt["baseline"]
    assert prompt_log(log) == ["hello agent"]

    conflict = await agent(client, session, {**prompt, "text": "something else"}, error=True)
    assert conflict["code"] == "prompt_id_conflict" and conflict["data"]["input_sent"] is False

    await agent(client, session, {**prompt, "prompt_id": "p2", "text": "long job",
                                   "timeout_seconds": 0})
    # p2 returns once Enter is typed; the fake redraws as busy a moment later.
    await _until_state(client, session, eid, "busy")
    busy = await agent(client, session, {**prompt, "prompt_id": "p3", "text": "too early"},
                        error=True)
    assert busy["code"] == "input_not_ready" and busy["data"]["input_sent"] is False
    assert busy["data"]["state"] == "busy"
    assert prompt_log(log) == ["hello agent", "long job"]

    too_big = await agent(client, session, {**prompt, "prompt_id": "p4", "text": "x" * 16385},
                           error=True)
    assert too_big["code"] == "limit_exceeded" and "16384" in too_big["message"]
    herdr = await agent(client, session, {**prompt, "backend": "herdr"}, error=True)
    assert herdr["code"] == "herdr_disabled"
    assert herdr["data"] == {"operator_action_required": True, "input_sent": False,
                             "reason": "configuration_missing"}


async def test_echo_or_marker_text_is_not_activity(client: Client, workspace: Path,
                                                   tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    shell = await bash(client, session, {"type": "command", "is_background": True,
                                         "command": "PS1='$ ' bash --norc -i"})
    turn = await bash(client, session, {"type": "wait_for_turn", "execution_id":
                                        shell["execution_id"], "recognizer": "shell"})
    assert turn["outcome"] == "turn_ready"
    echoed = (await agent(client, session, {
        "action": "prompt", "target": shell["execution_id"], "prompt_id": "e1",
        "text": "echo some words", "recognizer": "shell", "timeout_seconds": 2}))["data"]
    assert echoed["receipt"]["delivered"] is True
    assert echoed["receipt"]["activity_observed"] is False  # only the echo and a new prompt

    log = tmp_path / "agent.log"
    eid = await _start_fake(client, session, log)
    marker = (await agent(client, session, {
        "action": "prompt", "target": eid, "prompt_id": "m1", "recognizer": "claude",
        "text": "esc to interrupt", "timeout_seconds": 10}))["data"]["receipt"]
    assert marker["delivered"] is True and marker["activity_unconfirmable"] is True
    assert marker["activity_observed"] is False
    assert prompt_log(log) == ["esc to interrupt"]


async def test_receipt_survives_front_end_and_guardian_crashes(
    tether_env: Any, workspace: Path, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    first = Client(stdio_params())
    await first.__aenter__()
    session = await initialize(first, workspace)
    eid = await _start_fake(first, session, log)
    prompt = {"action": "prompt", "target": eid, "prompt_id": "keep", "text": "survive",
              "recognizer": "claude", "timeout_seconds": 15}
    receipt = (await agent(first, session, prompt))["data"]["receipt"]
    await kill_front_end(first, tether_env)

    async with Client(stdio_params()) as second:
        again = await initialize(second, workspace, session["thread_id"])
        waited = (await agent(second, again, {"action": "wait", "target": eid,
                                               "prompt_id": "keep", "timeout_seconds": 0}))
        assert waited["data"]["receipt"]["baseline"] == receipt["baseline"]
        guardian = psutil.Process(again["guardian"]["pid"])
        guardian.kill()
        guardian.wait(timeout=10)
        poll(lambda: prompt_log(log) == ["survive"], what="log to stay at one line")
        after = (await agent(second, again, {"action": "wait", "target": eid,
                                              "prompt_id": "keep", "timeout_seconds": 0}))
        assert after["data"]["receipt"]["delivered"] is True
        assert after["data"]["receipt"]["baseline"] == receipt["baseline"]
        refused = await agent(second, again, {**prompt, "prompt_id": "new"}, error=True)
        assert refused["code"] == "not_running" and refused["data"]["input_sent"] is False
        assert refused["data"]["status"] == "unknown"
        assert prompt_log(log) == ["survive"]


def _stored_receipt(catalog: Path, prompt_id: str) -> dict[str, Any] | None:
    """A receipt as the catalog holds it (read-only: the guardian owns the file)."""
    db = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT receipt FROM receipts WHERE prompt_id = ?", (prompt_id,)).fetchone()
    finally:
        db.close()
    return None if row is None else dict(json.loads(row[0]))


async def test_guardian_lost_while_typing_leaves_delivery_unknown(
    client: Client, workspace: Path, tether_env: Config, tmp_path: Path
) -> None:
    """A guardian SIGKILLed while it types a prompt never leaves ``delivered: false`` behind
    (the program may have the text): the repeat of the prompt_id and ``tether show`` say
    ``unknown`` (guardian_lost), and nothing is typed again."""
    session = await initialize(client, workspace)
    got = tmp_path / "got"
    # Reads lines without echo, so the prompt spends its echo wait (0.5 s) typing.
    started = await bash(client, session, {"type": "command", "is_background": True, "command":
        f"stty -echo; while printf '$ '; IFS= read -r line; do echo \"$line\" >> {got}; done"})
    eid = started["execution_id"]
    turn = await bash(client, session, {"type": "wait_for_turn", "execution_id": eid,
                                        "recognizer": "shell", "timeout_seconds": 10})
    assert turn["outcome"] == "turn_ready", turn
    catalog = guardian_paths(tether_env, "local", str(workspace)).catalog
    prompt = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
              "action": "prompt", "target": eid, "prompt_id": "p1", "text": "hello there",
              "recognizer": "shell", "timeout_seconds": 5}
    guardian = psutil.Process(session["guardian"]["pid"])
    outcome: dict[str, Any] = {}

    async def prompting() -> None:
        outcome["first"] = (await client.call_tool("Agent", prompt)).structured_content

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(prompting)
        typing = await apoll(lambda: (r := _stored_receipt(catalog, "p1")) and r, what="receipt")
        guardian.kill()
    assert typing["delivered"] == "unknown" and typing["reason"] == "delivery_in_progress"
    assert outcome["first"]["code"] == "guardian_unavailable"
    assert outcome["first"]["data"]["input_sent"] == "unknown"

    again = (await agent(client, session, {k: v for k, v in prompt.items()
                                           if k not in ("thread_id", "workspace_root")}))
    receipt = again["data"]["receipt"]
    assert again["data"]["replayed"] is True and again["data"]["input_sent"] is False
    assert (receipt["delivered"], receipt["reason"]) == ("unknown", "guardian_lost")
    shown = subprocess.run([TETHER, "show", eid, "--json"], capture_output=True, text=True,
                           timeout=60, check=True)
    [listed] = json.loads(shown.stdout)["receipts"]
    assert (listed["delivered"], listed["reason"]) == ("unknown", "guardian_lost")
    shown = subprocess.run([TETHER, "show", eid], capture_output=True, text=True, timeout=60,
                           check=True)
    assert "delivered unknown (guardian_lost)" in shown.stdout, shown.stdout
    assert not got.exists() or got.read_text().count("hello there") <= 1


async def test_concurrent_prompts_type_one_text(client: Client, workspace: Path,
                                                tmp_path: Path) -> None:
    """Issue 12 case 8: one input lock per terminal, from the readiness check to Enter. Two
    prompts at once with different prompt_ids: one is typed, the other refused untyped."""
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = await _start_fake(client, session, log, "--busy-seconds 0.5")
    delivered: list[str] = []
    for round_ in range(3):
        calls = [{"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                  "action": "prompt", "target": eid, "prompt_id": f"r{round_}-{side}",
                  "text": f"round {round_} from {side}", "recognizer": "claude",
                  "timeout_seconds": 10} for side in ("a", "b")]
        results = await asyncio.gather(*(client.call_tool("Agent", args) for args in calls))
        contents = [r.structured_content for r in results]
        assert all(c is not None for c in contents)
        won = [(args, c) for args, c in zip(calls, contents, strict=True) if c and c["ok"]]
        lost = [(args, c) for args, c in zip(calls, contents, strict=True) if c and not c["ok"]]
        assert len(won) == 1 and len(lost) == 1, contents
        assert lost[0][1]["code"] in ("input_not_ready", "target_busy"), lost[0][1]
        assert lost[0][1]["data"]["input_sent"] is False
        assert won[0][1]["data"]["receipt"]["wait_reached"] is True
        delivered.append(won[0][0]["text"])
        no_receipt = await agent(client, session, {
            "action": "wait", "target": eid, "prompt_id": lost[0][0]["prompt_id"],
            "timeout_seconds": 0}, error=True)
        assert no_receipt["code"] == "not_found"
    assert prompt_log(log) == delivered


async def test_get_list_and_wait_carry_the_recognition(client: Client, workspace: Path,
                                                       tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    # Named ``claude``, so that ``auto`` recognition (what wait uses) picks Claude's rules.
    named = tmp_path / "bin" / "claude"
    named.parent.mkdir()
    named.write_text(f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = {str(FAKE_AGENT)!r}\n"
                     f"runpy.run_path({str(FAKE_AGENT)!r}, run_name='__main__')\n")
    named.chmod(0o755)
    started = await bash(client, session, {
        "type": "command", "is_background": True, "rows": 40, "cols": 120,
        "command": f"{named} --log {tmp_path / 'agent.log'} --approval --busy-seconds 0.2"})
    eid = str(started["execution_id"])
    await _until_state(client, session, eid, "awaiting_input")
    listed = (await agent(client, session, {"action": "list"}))["data"]["executions"]
    assert [r["execution_id"] for r in listed] == [eid]
    assert listed[0]["recognition"]["state"] == "awaiting_input"
    got = (await agent(client, session, {"action": "get", "target": eid}))["data"]["execution"]
    assert got["recognition"]["state"] == "awaiting_input"
    assert got["recognition"]["attention"] is None and got["recognition"]["rule"]
    start = (await agent(client, session, {"action": "wait", "target": eid,
                                            "timeout_seconds": 0}))["data"]
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "w1",
                                   "text": "do it", "recognizer": "claude", "timeout_seconds": 0})
    waited = await agent(client, session, {
        "action": "wait", "target": eid, "after": start["cursor"],
        "events": ["awaiting_approval", "exited"], "timeout_seconds": 10})
    data = waited["data"]
    assert data["outcome"] == "changed"
    [item] = data["changed"]
    assert item["fired"] == ["awaiting_approval"]  # which requested event happened
    assert item["recognition"]["state"] == "awaiting_approval"
    assert item["recognition"]["attention"] == "approval"
    assert data["recognition"]["rule"] == item["recognition"]["rule"]


async def test_prompt_enter_is_not_swallowed_by_a_paste_burst_rule(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """Codex 0.171 takes an Enter that follows typed text within ~120 ms for part of a paste
    (a newline in the draft). The prompt waits for the echo to settle before Enter, so the
    prompt is submitted, once."""
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = await _start_fake(client, session, log, "--paste-burst-ms 150 --busy-seconds 0.3")
    sent = (await agent(client, session, {
        "action": "prompt", "target": eid, "prompt_id": "burst", "text": "submit me whole",
        "recognizer": "claude", "timeout_seconds": 15}))["data"]["receipt"]
    assert (sent["delivered"], sent["activity_observed"], sent["wait_reached"]) == (True, True, True)
    assert prompt_log(log) == ["submit me whole"]


async def test_an_agent_cli_stays_listed_behind_newer_commands(
    tether_env: Any, workspace: Path, tmp_path: Path
) -> None:
    """Agent.list keeps agents before it applies ``limit``: a running ``codex`` behind 20
    newer commands is listed with the default limit and with limit 1 (the limit used to
    apply to the thread's newest records first, and the agent fell out of every list); and
    ``next_before`` pages to older agents."""
    codex = tmp_path / "bin" / "codex"
    codex.parent.mkdir()
    codex.write_text("#!/bin/sh\nsleep 60\n")
    codex.chmod(0o755)
    async with Client(stdio_params()) as client:
        session = await initialize(client, workspace)
        eid = (await bash(client, session, {"type": "command", "command": str(codex),
                                            "is_background": True}, wait=0))["execution_id"]
        for i in range(20):
            await run(client, session, f"echo {i}")

        async def listed(**limit: int) -> list[str]:
            data = (await agent(client, session, {"action": "list", **limit}))["data"]
            return [r["execution_id"] for r in data["executions"]]

        assert await listed() == [eid]
        assert await listed(limit=1) == [eid]
        # Pages, as Execution's list: a second agent first, then next_before to the older.
        newer = (await bash(client, session, {"type": "command", "command": f"{codex} again",
                                              "is_background": True}, wait=0))["execution_id"]
        first = (await agent(client, session, {"action": "list", "limit": 1}))["data"]
        assert [r["execution_id"] for r in first["executions"]] == [newer]
        older = (await agent(client, session, {"action": "list", "limit": 1,
                                               "before": first["next_before"]}))["data"]
        assert [r["execution_id"] for r in older["executions"]] == [eid]
        assert "next_before" not in older
        for target in (eid, newer):
            await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                         "execution_id": target})
