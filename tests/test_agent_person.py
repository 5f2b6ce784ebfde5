"""Managed agents from the outside (issue 14): the environment stamp on every process Tether
starts (docs/tools.md#trees-and-parents), ``tether agents`` for a person, and older guardians
(docs/protocol.md#versions-and-capabilities)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.agent_helpers import (
    LAUNCHER,
    TETHER,
    fake_argv,
    get,
    gone,
    launch,
    launched_by,
    pid_of,
    wait_state,
)
from tests.helpers import poll, start_guardian
from tests.mcp_helpers import agent, bash, initialize, run
from tests.test_modes import change_mode
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.methods import AGENT_LIFECYCLE_ACTIONS
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

# CLAUDE_CODE_FORCE_SYNC_OUTPUT: Claude Code then marks each redraw (terminal/frames).
STAMP = ('echo "stamp $TETHER_EXECUTION_ID $TETHER_THREAD_ID $TETHER_WORKSPACE '
         '$CLAUDE_CODE_FORCE_SYNC_OUTPUT"')


async def test_every_process_tether_starts_is_stamped(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    expected = f"{session['thread_id']} {workspace} 1"
    # A command in the main shell runs in the shell's process (its environment is the
    # shell's): which execution it is, is found by ancestry (see the CLI test below).
    shell = await run(client, session, STAMP)
    assert shell["output"].strip() == f"stamp  {expected}"
    started = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": STAMP})
    background = await bash(client, session, {"type": "status_check",
                                              "execution_id": started["execution_id"]}, wait=10)
    assert background["output"].strip() == f"stamp {background['execution_id']} {expected}"
    launched = (await agent(client, session, {"action": "launch", "argv": [
        "sh", "-c", STAMP + "; sleep 30"]}))["data"]["agent"]
    eid = launched["execution_id"]
    deadline = time.monotonic() + 10
    while True:
        read = (await agent(client, session, {"action": "read", "target": eid}))["data"]
        if "stamp " in read["text"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert read["text"].strip() == f"stamp {eid} {expected}"
    await agent(client, session, {"action": "close", "target": eid})


async def test_person_detaches_and_archives_with_the_cli(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, workspace)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"tether": TETHER, "scrub": False, "launches": [{
        "workspace": str(workspace), "argv": fake_argv(tmp_path / "c.log"), "recognizer": "claude",
        "title": "helper", "labels": {"tether.open.ui-1": "true", "tether.open.ui-2": "false",
                                      "team": "blue"}}]}))
    # The launcher runs as a command in the main shell: no TETHER_EXECUTION_ID there, so its
    # front-end finds the command's execution through its process ancestry.
    started = await run(client, session, f"{sys.executable} {LAUNCHER} {spec} "
                                         f"{tmp_path / 'out.json'}", wait=0)
    result = launched_by(tmp_path / "out.json")[0]["data"]
    child = result["agent"]["execution_id"]
    assert result["agent"]["parent_execution_id"] == started["execution_id"]
    assert result["parent_source"] == "ancestry"
    before = (await wait_state(client, session, child, "idle"))["agent"]

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TETHER, "agents", *args, "--workspace", str(workspace)],
                              capture_output=True, text=True, timeout=60)

    listed = tether("list")
    assert listed.returncode == 0 and child in listed.stdout and "helper" in listed.stdout
    detached = tether("detach", child)
    assert detached.returncode == 0, detached.stderr
    after = (await get(client, session, child))["agent"]
    assert after["parent_execution_id"] is None and after["parent_workspace"] is None
    assert after["labels"] == {"team": "blue"}
    unchanged = ("agent_state", "generation", "runtime", "status", "title", "archived_at",
                 "command", "thread_id", "notify_on_finish")
    assert {k: after[k] for k in unchanged} == {k: before[k] for k in unchanged}
    assert not gone(pid_of(after))

    archived = tether("archive", child[:-4])  # a unique start of the id names it
    assert archived.returncode == 0 and f"archived: {child}" in archived.stdout, archived.stderr
    record = (await wait_state(client, session, child, "closed"))["agent"]
    assert record["archived_at"] is not None and gone(pid_of(record))
    assert child not in tether("list").stdout
    everything = json.loads(tether("list", "--all", "--json").stdout)
    assert [a["execution_id"] for a in everything] == [child]
    back = (await agent(client, session, {"action": "unarchive", "target": child}))["data"]["agent"]
    assert back["archived_at"] is None and back["generation"] == 2
    await wait_state(client, session, child, "idle")
    assert child in tether("list").stdout
    await agent(client, session, {"action": "close", "target": child})
    refused = tether("detach", "ag_nope")
    assert refused.returncode == 2 and "not_found" in refused.stderr


async def test_older_guardian_refuses_every_lifecycle_action(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    start_guardian(workspace, tether_env, "1.4")
    log = tmp_path / "agent.log"
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        target = (await bash(client, session, {"type": "command", "is_background": True,
                                               "command": "sleep 30"}))["execution_id"]
        attempts: dict[str, dict[str, Any]] = {
            "launch": {"argv": fake_argv(log)}, "close": {}, "resume": {}, "archive": {},
            "unarchive": {}, "cancel": {}, "label": {"labels": {"a": "b"}},
            "notifications": {"parent": target},
        }
        assert set(attempts) == AGENT_LIFECYCLE_ACTIONS
        refusals = [{"action": "list", "parent": target},
                    {"action": "wait", "target": target, "events": ["notification"]}]
        for action, extra in attempts.items():
            refusals.append({"action": action, "target": target, **extra})
        for args in refusals:
            refused = await agent(client, session, args, error=True)
            assert refused["code"] == "capability_missing", args
            assert refused["data"]["capability"] == "agent_lifecycle"
            assert refused["data"]["guardian_protocol"] == "1.4"
            assert refused["data"]["input_sent"] is False
        # What 1.4 could do still works: agent CLIs observed in this thread.
        listed = (await agent(client, session, {"action": "list"}))["data"]
        assert listed["executions"] == [] and "agents" not in listed
    poll(lambda: not log.exists(), timeout=0.5, what="nothing launched")
    assert not log.exists()


async def test_lifecycle_actions_pass_the_mode_and_authority_checks(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """Starting or typing (launch, resume, unarchive, cancel) needs mode wcgw; closing,
    archiving and labelling need BashCommand authority only; reading needs neither."""
    session = await initialize(client, workspace)
    log = tmp_path / "agent.log"
    eid = (await launch(client, session, log))["execution_id"]
    await wait_state(client, session, eid, "idle")
    await change_mode(client, session, "architect")
    for args in ({"action": "launch", "argv": fake_argv(log)}, {"action": "resume", "target": eid},
                 {"action": "unarchive", "target": eid}, {"action": "cancel", "target": eid}):
        refused = await agent(client, session, args, error=True)
        assert refused["code"] == "mode_denied" and refused["data"]["input_sent"] is False, args
    labelled = await agent(client, session, {"action": "label", "target": eid,
                                             "labels": {"note": "architect may label"}})
    assert labelled["data"]["agent"]["labels"] == {"note": "architect may label"}
    assert [a["execution_id"] for a in (await agent(client, session, {"action": "list"}))[
        "data"]["agents"]] == [eid]
    closed = (await agent(client, session, {"action": "close", "target": eid}))["data"]["agent"]
    assert closed["agent_state"] == "closed"
