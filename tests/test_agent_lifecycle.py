"""Managed agents end to end (issue 14, docs/tools.md#managed-agents docs/tools.md#agent-states,
docs/tools.md#close-resume-archive): real PTYs, a real guardian, the
real MCP client, and the scripted fake agent standing in for an agent CLI."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from mcp import Client

from tests.agent_helpers import (
    fake_argv,
    get,
    gone,
    launch,
    launched_by,
    pid_of,
    run_prompt,
    stable,
    transitions,
    wait_state,
)
from tests.conftest import stdio_params
from tests.helpers import poll
from tests.mcp_helpers import agent, initialize, kill_front_end, prompt_log
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


async def test_launch_prompt_close_resume(client: Client, workspace: Path, tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    launched = await launch(client, session, log, "--busy-seconds", "1", title="helper")
    eid = launched["execution_id"]
    assert launched["kind"] == "agent" and launched["provider"] == "command"
    assert launched["agent_state"] == "initializing" and launched["generation"] == 1
    assert launched["title"] == "helper" and launched["parent_execution_id"] is None
    assert launched["notify_on_finish"] is False  # no parent: nobody to notify
    await wait_state(client, session, eid, "idle")

    receipt = (await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "p1",
                                             "text": "hello", "timeout_seconds": 15}))["data"]
    assert receipt["receipt"]["wait_reached"] is True  # "auto" = the recognizer chosen at launch
    data = await wait_state(client, session, eid, "idle")
    assert transitions(data["events"]) == [
        (None, "initializing"), ("initializing", "idle"), ("idle", "running"), ("running", "idle")]
    assert [e["turn_seq"] for e in data["events"]][-2:] == [1, 1]
    seqs = [e["seq"] for e in data["events"]]
    assert seqs == sorted(seqs)

    pid = pid_of(data["agent"])
    closed = (await agent(client, session, {"action": "close", "target": eid}))["data"]["agent"]
    assert closed["agent_state"] == "closed" and closed["status"] == "exited"
    assert gone(pid)
    listed = (await agent(client, session, {"action": "list"}))["data"]["agents"]
    assert [a["execution_id"] for a in listed] == [eid]  # closed is kept, not archived

    resumed = (await agent(client, session, {"action": "resume", "target": eid}))["data"]["agent"]
    assert resumed["generation"] == 2 and resumed["status"] == "running"
    data = await wait_state(client, session, eid, "idle")
    assert pid_of(data["agent"]) != pid
    assert transitions(data["events"])[-3:] == [
        ("idle", "closed"), ("closed", "initializing"), ("initializing", "idle")]
    assert data["events"][-2]["reason"] == "resumed" and data["events"][-2]["generation"] == 2
    assert prompt_log(log) == ["hello"]  # nothing re-sent by the resume
    again = await agent(client, session, {"action": "resume", "target": eid}, error=True)
    assert again["code"] == "invalid_state" and again["data"]["input_sent"] is False
    await agent(client, session, {"action": "close", "target": eid})
    assert prompt_log(log) == ["hello"]


async def test_runtime_death_between_turns_is_an_error(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    eid = (await launch(client, session, tmp_path / "a.log"))["execution_id"]
    idle = await wait_state(client, session, eid, "idle")
    killed_at = int(time.time() * 1000)
    os.kill(pid_of(idle["agent"]), signal.SIGKILL)
    data = await wait_state(client, session, eid, "error", timeout=5)
    last = data["events"][-1]
    assert (last["from_state"], last["to_state"]) == ("idle", "error")
    assert last["reason"] == "runtime_exited: killed by signal 9"
    assert last["at_unix_ms"] - killed_at < 1000
    assert data["agent"]["status"] == "exited" and data["agent"]["exit_code"] == 137
    for _ in range(10):  # the leftover idle screen never moves it back
        assert (await get(client, session, eid))["agent"]["agent_state"] == "error"
        time.sleep(0.05)
    refused = await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "x",
                                            "text": "anyone?"}, error=True)
    assert refused["code"] == "not_running" and refused["data"]["input_sent"] is False


async def test_cancel_waits_for_the_acknowledgement(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    polite = (await launch(client, session, tmp_path / "p.log", "--busy-seconds", "60"))["execution_id"]
    stubborn = (await launch(client, session, tmp_path / "s.log", "--busy-seconds", "60",
                             "--ignore-interrupt"))["execution_id"]
    for eid in (polite, stubborn):
        await wait_state(client, session, eid, "idle")
        await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "work",
                                      "text": "long job", "timeout_seconds": 0})
        await wait_state(client, session, eid, "running")

    done = (await agent(client, session, {"action": "cancel", "target": polite}))["data"]
    assert done["acknowledged"] is True and done["interrupt"] == "Escape"
    assert done["agent"]["agent_state"] == "idle"
    assert (await get(client, session, polite))["events"][-1]["reason"] == "cancel_acknowledged"

    refused = await agent(client, session, {"action": "cancel", "target": stubborn,
                                            "timeout_seconds": 1}, error=True)
    assert refused["code"] == "cancel_not_acknowledged"
    assert refused["data"]["agent_state"] == "running" and refused["data"]["input_sent"] is True
    assert (await get(client, session, stubborn))["agent"]["agent_state"] == "running"
    busy = await agent(client, session, {"action": "prompt", "target": stubborn, "prompt_id": "next",
                                         "text": "are you done?"}, error=True)
    assert busy["code"] == "input_not_ready" and busy["data"]["input_sent"] is False
    assert prompt_log(tmp_path / "s.log") == ["long job"]
    idle = await agent(client, session, {"action": "cancel", "target": polite}, error=True)
    assert idle["code"] == "not_busy" and idle["data"]["input_sent"] is False


async def test_cancel_presses_the_interrupt_as_often_as_the_program_needs(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """OpenCode's first Escape only arms the interrupt ("esc again to interrupt"); its rule
    file says ``interrupt_presses = 2`` and cancel presses twice (found with the real CLI)."""
    session = await initialize(client, workspace)
    eid = (await launch(client, session, tmp_path / "o.log", "--busy-seconds", "60",
                        "--interrupt-presses", "2", recognizer="opencode"))["execution_id"]
    await wait_state(client, session, eid, "idle")
    await agent(client, session, {"action": "prompt", "target": eid, "prompt_id": "work",
                                  "text": "long job", "timeout_seconds": 0})
    await wait_state(client, session, eid, "running")
    done = (await agent(client, session, {"action": "cancel", "target": eid,
                                          "timeout_seconds": 5}))["data"]
    assert done["acknowledged"] is True and done["interrupt"] == "Escape"
    assert done["agent"]["agent_state"] == "idle"
    screen = (await agent(client, session, {"action": "read", "target": eid,
                                            "source": "screen"}))["data"]["text"]
    assert "● Interrupted" in screen
    await agent(client, session, {"action": "close", "target": eid})


async def test_approval_is_attention_and_auto_archive_after_first_turn(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    asking = (await launch(client, session, tmp_path / "q.log", "--approval"))["execution_id"]
    await wait_state(client, session, asking, "idle")
    await agent(client, session, {"action": "prompt", "target": asking, "prompt_id": "q",
                                  "text": "rm -rf build", "timeout_seconds": 0})
    data = await wait_state(client, session, asking, "running", attention="approval")
    assert data["events"][-1]["attention"] == "approval"

    once = await launch(client, session, tmp_path / "o.log", "--busy-seconds", "0.5",
                        auto_archive=True)
    await wait_state(client, session, once["execution_id"], "idle")
    await agent(client, session, {"action": "prompt", "target": once["execution_id"],
                                  "prompt_id": "only", "text": "one thing", "timeout_seconds": 15})
    archived = await wait_state(client, session, once["execution_id"], "closed")
    assert archived["agent"]["archived_at"] is not None
    assert archived["events"][-1]["reason"] == "archived"
    assert gone(pid_of(archived["agent"]))
    listed = (await agent(client, session, {"action": "list"}))["data"]["agents"]
    assert once["execution_id"] not in [a["execution_id"] for a in listed]
    everything = (await agent(client, session, {"action": "list", "include_archived": True}))
    assert once["execution_id"] in [a["execution_id"] for a in everything["data"]["agents"]]


@pytest.mark.parametrize("scrub", [False, True], ids=["stamped-env", "scrubbed-env"])
async def test_three_level_tree_and_archive_cascade(
    scrub: bool, client: Client, workspace: Path, tmp_path: Path
) -> None:
    other_root = tmp_path / "other-ws"
    other_root.mkdir()
    session = await initialize(client, workspace)
    other = await initialize(client, other_root.resolve())
    root = (await launch(client, session, tmp_path / "r.log", "--run-prompts",
                         "--busy-seconds", "0.2"))["execution_id"]
    await wait_state(client, session, root, "idle")

    # The root agent's turn runs a front-end in its own terminal that launches three children:
    # two here (one of which will be held open by a client) and one in another workspace.
    child_argv = fake_argv(tmp_path / "c1.log", "--run-prompts", "--busy-seconds", "0.2")
    text = run_prompt(tmp_path / "r.json", tmp_path / "r.out", scrub, [
        {"workspace": str(workspace), "argv": child_argv, "recognizer": "claude"},
        {"workspace": str(workspace), "argv": fake_argv(tmp_path / "c2.log"), "recognizer": "claude"},
        {"workspace": str(other_root), "argv": fake_argv(tmp_path / "c3.log"), "recognizer": "claude"},
    ])
    await agent(client, session, {"action": "prompt", "target": root, "prompt_id": "spawn",
                                  "text": text, "timeout_seconds": 0})
    results = launched_by(tmp_path / "r.out")
    child, held, remote = (r["data"]["agent"]["execution_id"] for r in results)
    assert {r["data"]["parent_source"] for r in results} == {"ancestry" if scrub else "environment"}
    await wait_state(client, session, child, "idle")

    # The child's turn does the same one level down: a grandchild.
    text = run_prompt(tmp_path / "c1.json", tmp_path / "c1.out", scrub, [
        {"workspace": str(workspace), "argv": fake_argv(tmp_path / "g.log"), "recognizer": "claude"},
    ])
    await agent(client, session, {"action": "prompt", "target": child, "prompt_id": "spawn",
                                  "text": text, "timeout_seconds": 0})
    grandchild = launched_by(tmp_path / "c1.out")[0]["data"]["agent"]["execution_id"]

    records = {eid: (await wait_state(client, session, eid, "idle"))["agent"]
               for eid in (root, child, held, grandchild)}
    records[remote] = (await wait_state(client, other, remote, "idle"))["agent"]
    assert records[child]["parent_execution_id"] == root
    assert records[held]["parent_execution_id"] == root
    assert records[grandchild]["parent_execution_id"] == child
    assert (records[remote]["parent_execution_id"], records[remote]["parent_workspace"]) == (
        root, str(workspace))
    assert records[remote]["workspace_root"] == str(other_root.resolve())
    assert records[child]["notify_on_finish"] is True  # launched from inside an execution
    track = (await agent(client, session, {"action": "list", "parent": root}))["data"]["agents"]
    assert {a["execution_id"] for a in track} == {child, held}

    # A client holds one child open; archiving the root archives the rest of the tree.
    await agent(client, session, {"action": "label", "target": held,
                                  "labels": {"tether.open.person-ui": "true", "team": "blue"}})
    archived = (await agent(client, session, {"action": "archive", "target": root}))["data"]
    assert sorted(archived["archived"]) == sorted([root, child, grandchild])
    assert sorted(archived["detached"]) == sorted([held, remote])
    for eid in (root, child, grandchild):
        record = (await get(client, session, eid))["agent"]
        assert record["archived_at"] is not None and record["agent_state"] == "closed"
        assert gone(pid_of(record))
    kept = (await get(client, session, held))["agent"]
    assert kept["archived_at"] is None and kept["agent_state"] == "idle"
    assert kept["parent_execution_id"] is None and kept["labels"] == {"team": "blue"}
    assert not gone(pid_of(kept))
    moved_on = (await get(client, other, remote))["agent"]
    assert moved_on["archived_at"] is None and moved_on["agent_state"] == "idle"
    assert moved_on["parent_execution_id"] is None and moved_on["parent_workspace"] is None
    assert not gone(pid_of(moved_on))
    assert (await agent(client, session, {"action": "list", "parent": root}))["data"]["agents"] == []


async def test_finish_notice_is_durable_and_typed_once(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    plog = tmp_path / "parent.log"
    first = Client(stdio_params())
    await first.__aenter__()
    session = await initialize(first, workspace)
    parent = (await launch(first, session, plog, "--run-prompts", "--busy-seconds", "0.2"))[
        "execution_id"]
    await wait_state(first, session, parent, "idle")
    text = run_prompt(tmp_path / "p.json", tmp_path / "p.out", False, [
        {"workspace": str(workspace), "argv": fake_argv(tmp_path / "c.log", "--busy-seconds", "0.5"),
         "recognizer": "claude"}])
    await agent(first, session, {"action": "prompt", "target": parent, "prompt_id": "spawn",
                                 "text": text, "timeout_seconds": 0})
    child = launched_by(tmp_path / "p.out")[0]["data"]["agent"]
    assert child["parent_execution_id"] == parent and child["notify_on_finish"] is True
    await wait_state(first, session, parent, "idle")
    await wait_state(first, session, child["execution_id"], "idle")

    await agent(first, session, {"action": "prompt", "target": child["execution_id"],
                                 "prompt_id": "task", "text": "do the task", "timeout_seconds": 15})
    waited = (await agent(first, session, {"action": "wait", "target": parent,
                                           "events": ["notification"], "timeout_seconds": 15}))
    notices = waited["data"]["notifications"]
    assert waited["data"]["outcome"] == "changed" and len(notices) == 1
    notice = notices[0]
    assert (notice["kind"], notice["child_execution_id"], notice["parent_execution_id"],
            notice["turn_seq"]) == ("finished", child["execution_id"], parent, 1)
    typed = f"[tether] agent {child['execution_id']} finished a turn (notification {notice['id']},"
    poll(lambda: any(line.startswith(typed) for line in prompt_log(plog)), timeout=15,
         what="the notice typed into the parent")
    await wait_state(first, session, parent, "idle")
    receipt = (await agent(first, session, {"action": "wait", "target": parent,
                                            "prompt_id": f"notify-{notice['id']}",
                                            "timeout_seconds": 0}))["data"]["receipt"]
    assert receipt["delivered"] is True
    await kill_front_end(first, tether_env)

    async with Client(stdio_params()) as second:
        again = await initialize(second, workspace, session["thread_id"])
        listed = (await agent(second, again, {"action": "notifications", "parent": parent}))
        assert [stable(n) for n in listed["data"]["notifications"]] == [stable(notice)]
        assert listed["data"]["notifications"][0]["delivered_prompt_id"] == f"notify-{notice['id']}"
        for odd in ("\u00b2", "\u0663", "x"):  # digits only in ASCII: "²" broke int(), "٣" was 3
            refused = await agent(second, again, {"action": "notifications", "parent": parent,
                                                  "after": odd}, error=True)
            assert refused["code"] == "invalid_request" and "cursor of an earlier" in \
                refused["message"], refused
        guardian = psutil.Process(again["guardian"]["pid"])
        guardian.kill()
        guardian.wait(timeout=10)
        third = await initialize(second, workspace, session["thread_id"])
        assert third["guardian"]["instance_id"] != again["guardian"]["instance_id"]
        after = (await agent(second, third, {"action": "notifications", "parent": parent}))
        rows = after["data"]["notifications"]
        assert [stable(n) for n in rows if n["kind"] == "finished"] == [stable(notice)]
        # The child's runtime went with the guardian: that is an error, reported once too.
        assert [(n["kind"], n["child_execution_id"]) for n in rows[1:]] == [
            ("error", child["execution_id"])]
        lost = await get(second, third, child["execution_id"])
        assert lost["agent"]["agent_state"] == "error"
        assert lost["events"][-1]["reason"] == "guardian_lost"
        assert sum(line.startswith(typed) for line in prompt_log(plog)) == 1
        assert prompt_log(tmp_path / "c.log") == ["do the task"]
