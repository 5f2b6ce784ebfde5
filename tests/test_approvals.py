"""Approvals end to end (issue 32, docs/tools.md#approvals): the scripted fake agent asks to
run a command, an orchestrator lists the question and answers it once through the real MCP
client, a person answers one in ``tether attach --write``, a parent hears of its child's
question across restarts, and the operator hook hears of every notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.agent_helpers import (
    FAKE_AGENT,
    TETHER,
    fake_argv,
    launch,
    launched_by,
    run_prompt,
    wait_state,
)
from tests.conftest import stdio_params
from tests.helpers import poll, start_guardian
from tests.mcp_helpers import agent, bash, execution, initialize, kill_front_end, prompt_log
from tests.person_terminal import PersonTerminal
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def answers(path: Path) -> list[dict[str, Any]]:
    """What the fake agent was answered, one entry per answer (its ``--answer-log``)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def ask(client: Client, session: dict[str, Any], eid: str, command: str,
              prompt_id: str) -> dict[str, Any]:
    """Prompt the fake agent, which then asks to run ``command``; the pending approval."""
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": prompt_id,
                                  "text": command, "timeout_seconds": 0})

    async def listed() -> dict[str, Any] | None:
        found = (await agent(client, session, {"action": "approvals", "target": eid}))["data"]
        pending = [a for a in found["approvals"] if a["request"]["detail"] == command]
        return pending[0] if pending else None

    deadline = time.monotonic() + 15
    while (approval := await listed()) is None:
        assert time.monotonic() < deadline, "no approval listed"
        time.sleep(0.05)
    return approval


async def test_listed_denied_once_and_a_repeat_types_nothing(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    log, said = tmp_path / "agent.log", tmp_path / "answers.log"
    eid = (await launch(client, session, log, "--approval", "--busy-seconds", "0.2",
                        "--answer-log", str(said)))["execution_id"]
    await wait_state(client, session, eid, "idle")

    approval = await ask(client, session, eid, "touch denied.txt", "p1")
    assert approval["status"] == "pending" and approval["execution_id"] == eid
    request = approval["request"]
    assert (request["what"], request["tool"], request["detail"]) == (
        "command", "Bash command", "touch denied.txt")
    assert request["question"] == "Do you want to proceed?"
    assert [(o["key"], o["label"], o["kind"]) for o in request["options"]] == [
        ("1", "Yes", "approve"), ("2", "No", "deny")]
    assert request["options"][0]["selected"] is True
    assert "Do you want to proceed?" in approval["screen"]
    assert approval["generation"] == 1 and approval["recognizer"] == "claude"

    answered = (await agent(client, session, {"action": "respond", "approval_id":
                                              approval["approval_id"], "choice": "deny"}))["data"]
    assert answered["replayed"] is False and answered["input_sent"] is True
    response = answered["response"]
    assert (response["option"], response["keys"], response["left_approval"]) == ("2", ["2"], True)
    assert answered["approval"]["resolved"]["how"] == "denied"
    assert answered["approval"]["resolved"]["by"] == "respond"
    assert [a["answer"] for a in answers(said)] == ["denied"]

    again = (await agent(client, session, {"action": "respond", "approval_id":
                                           approval["approval_id"], "choice": "approve"}))["data"]
    assert again["replayed"] is True and again["input_sent"] is False
    assert again["response"] == response  # the first outcome, whatever the second asked
    await wait_state(client, session, eid, "idle")
    assert [a["answer"] for a in answers(said)] == ["denied"]  # nothing more was typed
    assert prompt_log(log) == ["touch denied.txt"]

    pending = (await agent(client, session, {"action": "approvals"}))["data"]["approvals"]
    assert pending == []
    every = (await agent(client, session, {"action": "approvals", "pending_only": False}))
    assert [a["approval_id"] for a in every["data"]["approvals"]] == [approval["approval_id"]]

    # A choice that is not offered types nothing; approve picks the yes.
    second = await ask(client, session, eid, "touch approved.txt", "p2")
    refused = await agent(client, session, {"action": "respond", "approval_id":
                                            second["approval_id"], "choice": "7"}, error=True)
    assert refused["code"] == "invalid_request" and refused["data"]["input_sent"] is False
    ok = (await agent(client, session, {"action": "respond", "approval_id":
                                        second["approval_id"], "choice": "approve"}))["data"]
    assert ok["approval"]["resolved"]["how"] == "approved" and ok["response"]["keys"] == ["1"]
    assert [a["answer"] for a in answers(said)] == ["denied", "approved"]


async def test_a_person_answers_in_attach_then_respond_is_stale(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    said = tmp_path / "answers.log"
    eid = (await launch(client, session, tmp_path / "agent.log", "--approval",
                        "--answer-log", str(said)))["execution_id"]
    await wait_state(client, session, eid, "idle")
    approval = await ask(client, session, eid, "rm -rf build", "p1")

    writer = PersonTerminal(["attach", eid, "--write"])
    try:
        writer.wait_for("Do you want to proceed?")
        typed_at = time.monotonic()
        writer.type(b"2")

        async def resolved() -> dict[str, Any] | None:
            listed = (await agent(client, session, {"action": "approvals", "target": eid,
                                                    "pending_only": False}))["data"]
            found = listed["approvals"][0]
            return found if found["status"] == "resolved" else None

        while (done := await resolved()) is None:
            assert time.monotonic() - typed_at < 5, "the person's answer was not seen"
            time.sleep(0.02)
        assert time.monotonic() - typed_at < 1.0  # within a second
        assert done["resolved"]["how"] == "denied" and done["resolved"]["by"] == "input"
        writer.type(b"\x1c")
        assert writer.wait_exit() == 0
    finally:
        writer.close()
    stale = await agent(client, session, {"action": "respond", "approval_id":
                                          approval["approval_id"], "choice": "approve"}, error=True)
    assert stale["code"] == "approval_stale" and stale["data"]["input_sent"] is False
    await wait_state(client, session, eid, "idle")
    assert [a["answer"] for a in answers(said)] == ["denied"]  # only the person's


async def test_person_cli_lists_and_answers(client: Client, workspace: Path,
                                            tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    said = tmp_path / "answers.log"
    eid = (await launch(client, session, tmp_path / "agent.log", "--approval",
                        "--busy-seconds", "0.2", "--answer-log", str(said)))["execution_id"]
    await wait_state(client, session, eid, "idle")
    approval = await ask(client, session, eid, "make deploy", "p1")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60)

    listed = run("approvals", "--workspace", str(workspace))
    assert listed.returncode == 0, listed.stderr
    assert approval["approval_id"] in listed.stdout and "make deploy" in listed.stdout
    approved = run("approve", approval["approval_id"][:8])
    assert approved.returncode == 0, approved.stderr
    assert "left the screen" in approved.stdout
    assert [a["answer"] for a in answers(said)] == ["approved"]
    repeat = run("deny", approval["approval_id"])
    assert repeat.returncode == 0 and "already answered, nothing typed" in repeat.stdout
    assert [a["answer"] for a in answers(said)] == ["approved"]
    rows = json.loads(run("approvals", "--all", "--json").stdout)
    assert [(r["approval_id"], r["status"], r["resolved"]["how"]) for r in rows] == [
        (approval["approval_id"], "resolved", "approved")]


HOOK = """import json, sys, time
data = sys.stdin.read()
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(json.loads(data)) + "\\n")
if len(sys.argv) > 2:
    time.sleep(float(sys.argv[2]))
"""


async def test_child_approval_reaches_parent_once_across_restarts(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook, heard = tmp_path / "hook.py", tmp_path / "heard.jsonl"
    hook.write_text(HOOK)
    monkeypatch.setenv("TETHER_NOTIFY_COMMAND", json.dumps([sys.executable, str(hook),
                                                            str(heard)]))
    plog = tmp_path / "parent.log"
    first = Client(stdio_params())
    await first.__aenter__()
    session = await initialize(first, workspace)
    parent = (await launch(first, session, plog, "--run-prompts", "--busy-seconds", "0.2"))[
        "execution_id"]
    await wait_state(first, session, parent, "idle")
    text = run_prompt(tmp_path / "p.json", tmp_path / "p.out", False, [
        {"workspace": str(workspace), "argv": fake_argv(tmp_path / "c.log", "--approval"),
         "recognizer": "claude"}])
    await agent(first, session, {"action": "prompt", "target": parent, "prompt_id": "spawn",
                                 "text": text, "timeout_seconds": 0})
    child = launched_by(tmp_path / "p.out")[0]["data"]["agent"]["execution_id"]
    await wait_state(first, session, parent, "idle")
    await wait_state(first, session, child, "idle")

    await agent(first, session, {"action": "prompt", "target": child, "prompt_id": "task",
                                 "text": "git push --force", "timeout_seconds": 0})
    waited = (await agent(first, session, {"action": "wait", "target": parent,
                                           "events": ["notification"], "timeout_seconds": 15}))
    notices = [n for n in waited["data"]["notifications"] if n["kind"] == "approval"]
    assert len(notices) == 1
    notice = notices[0]
    assert notice["child_execution_id"] == child
    request = notice["approval"]["request"]
    assert (request["what"], request["detail"]) == ("command", "git push --force")
    assert [o["key"] for o in request["options"]] == ["1", "2"]
    approval_id = notice["approval"]["approval_id"]
    typed = f"[tether] agent {child} is waiting for an approval (notification {notice['id']},"
    poll(lambda: any(line.startswith(typed) and approval_id in line and "git push --force" in line
                     for line in prompt_log(plog)), timeout=15,
         what="the approval notice typed into the parent")
    await kill_front_end(first, tether_env)

    def approval_notices(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        return [(n["id"], n["approval"]["approval_id"]) for n in rows if n["kind"] == "approval"]

    async with Client(stdio_params()) as second:
        again = await initialize(second, workspace, session["thread_id"])
        rows = (await agent(second, again, {"action": "notifications", "parent": parent}))
        assert approval_notices(rows["data"]["notifications"]) == [(notice["id"], approval_id)]
        guardian = psutil.Process(again["guardian"]["pid"])
        guardian.kill()
        guardian.wait(timeout=10)
        third = await initialize(second, workspace, session["thread_id"])
        after = (await agent(second, third, {"action": "notifications", "parent": parent}))
        rows_after = after["data"]["notifications"]
        assert approval_notices(rows_after) == [(notice["id"], approval_id)]
        lost = next(n for n in rows_after if n["kind"] == "approval")["approval"]
        assert lost["status"] == "resolved" and lost["resolved"]["how"] == "unknown"
        assert lost["resolved"]["by"] == "guardian_lost"
        stale = await agent(second, third, {"action": "respond", "approval_id": approval_id,
                                            "choice": "approve"}, error=True)
        assert stale["code"] == "approval_stale"
    assert sum(line.startswith(typed) for line in prompt_log(plog)) == 1
    assert prompt_log(tmp_path / "c.log") == ["git push --force"]
    # The operator hook heard the question once (and the parent's finished turns).
    heard_rows = [json.loads(line) for line in heard.read_text().splitlines()]
    asked = [h for h in heard_rows if h["kind"] == "approval"]
    assert [h["approval"]["approval_id"] for h in asked] == [approval_id]
    assert asked[0]["approval"]["request"]["detail"] == "git push --force"
    ids = [h["notice_id"] for h in heard_rows]
    assert len(ids) == len(set(ids))


async def test_a_hanging_hook_is_killed_and_the_guardian_answers(
    client: Client, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook, heard = tmp_path / "hook.py", tmp_path / "heard.jsonl"
    hook.write_text(HOOK)
    monkeypatch.setenv("TETHER_NOTIFY_COMMAND", f"{sys.executable} {hook} {heard} 600")
    monkeypatch.setenv("TETHER_NOTIFY_TIMEOUT_S", "1")
    session = await initialize(client, workspace)
    eid = (await launch(client, session, tmp_path / "agent.log", "--approval",
                        "--busy-seconds", "0.1"))["execution_id"]
    await wait_state(client, session, eid, "idle")
    first = await ask(client, session, eid, "echo one", "p1")
    poll(lambda: heard.exists() and heard.read_text().count("\n") >= 1, timeout=10,
         what="the hook's first run")
    started = time.monotonic()
    # The hook sleeps: the guardian answers meanwhile, promptly.
    listed = (await agent(client, session, {"action": "approvals"}))["data"]["approvals"]
    assert [a["approval_id"] for a in listed] == [first["approval_id"]]
    assert time.monotonic() - started < 0.9
    await agent(client, session, {"action": "respond", "approval_id": first["approval_id"],
                                  "choice": "approve"})
    await wait_state(client, session, eid, "idle")
    second = await ask(client, session, eid, "echo two", "p2")
    # Killed at its deadline, the hook runs again for the next notice (the finished turn
    # and the second question), each once.
    poll(lambda: sum(json.loads(line)["kind"] == "approval"
                     for line in heard.read_text().splitlines()) == 2, timeout=15,
         what="the hook's run for the second approval")
    hooks = [p for p in psutil.process_iter(["cmdline"])
             if str(hook) in " ".join(p.info["cmdline"] or [])]
    assert len(hooks) <= 1  # the first run was killed at its deadline
    rows = [json.loads(line) for line in heard.read_text().splitlines()]
    assert [r["approval"]["approval_id"] for r in rows if r["kind"] == "approval"] == [
        first["approval_id"], second["approval_id"]]
    assert os.path.exists(heard)


async def test_an_older_guardian_refuses_approvals_before_anything_is_typed(
    tether_env: Config, workspace: Path
) -> None:
    start_guardian(workspace, tether_env, "1.8")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        for args in ({"action": "approvals"},
                     {"action": "respond", "approval_id": "ap_x", "choice": "approve"}):
            refused = await agent(client, session, args, error=True)
            assert refused["code"] == "capability_missing", refused
            assert refused["data"]["capability"] == "approvals"
            assert refused["data"]["input_sent"] is False


async def test_an_observed_program_has_approvals_too(client: Client, workspace: Path,
                                                     tmp_path: Path) -> None:
    """A program run as a background command, once a recognizer was asked about it."""
    session = await initialize(client, workspace)
    said = tmp_path / "answers.log"
    eid = (await bash(client, session, {
        "type": "command", "is_background": True, "command":
        f"{sys.executable} {FAKE_AGENT} --log {tmp_path / 'agent.log'} --approval "
        f"--answer-log {said}"}))["execution_id"]
    await bash(client, session, {"type": "wait_for_turn", "execution_id": eid,
                                 "recognizer": "claude", "quiet_ms": 100})
    await execution(client, session, {"type": "explain", "execution_id": eid,
                                       "recognizer": "claude"})  # now under the watch
    await bash(client, session, {"type": "send_text", "execution_id": eid,
                                 "text": "npm publish", "submit": True})
    deadline = time.monotonic() + 15
    while True:
        listed = (await agent(client, session, {"action": "approvals", "target": eid}))
        if listed["data"]["approvals"]:
            break
        assert time.monotonic() < deadline, "no approval of the observed program"
        time.sleep(0.05)
    approval = listed["data"]["approvals"][0]
    assert approval["request"]["detail"] == "npm publish" and approval["provider"] == "claude"
    answered = (await agent(client, session, {"action": "respond", "approval_id":
                                              approval["approval_id"], "choice": "2"}))["data"]
    assert answered["response"]["left_approval"] is True
    assert answered["approval"]["resolved"]["how"] == "denied"
    assert [a["answer"] for a in answers(said)] == ["denied"]
