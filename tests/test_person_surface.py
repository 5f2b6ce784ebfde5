"""What a person and an agent read in text: ids by a unique prefix, guardians listed and
shown in words, the usage report found through TETHER_USAGE_LOG, summaries without Python's
``None`` and with an unknown record's reason, one code for an unknown thread."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.mcp_helpers import bash, call, call_error, initialize, run
from tests.person_terminal import TETHER
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


def tether(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60,
                          env=env)


def _unique_start(ids: list[str], of: str) -> str:
    """The shortest start of ``of`` that no other id in ``ids`` shares."""
    for size in range(1, len(of) + 1):
        if not any(other.startswith(of[:size]) for other in ids if other != of):
            return of[:size]
    raise AssertionError(f"{of} is a start of another id")


async def test_ids_may_be_abbreviated_to_a_unique_prefix(client: Client,
                                                         workspace: Path) -> None:
    session = await initialize(client, workspace)
    first = await run(client, session, "echo first-output")
    second = await run(client, session, "echo second-output")
    ids = [first["execution_id"], second["execution_id"]]
    start = _unique_start(ids, ids[0])
    if start == ids[0]:
        pytest.skip("the two ids differ only in their last character")
    shown = tether("show", start)
    assert shown.returncode == 0, shown.stderr
    assert f"execution_id: {ids[0]}" in shown.stdout
    tailed = tether("tail", start)
    assert tailed.returncode == 0 and "first-output" in tailed.stdout, tailed.stderr
    # The common start of both is ambiguous: refused, naming them.
    common = next(ids[0][:size] for size in range(len(ids[0]), 0, -1)
                  if ids[1].startswith(ids[0][:size]))
    refused = tether("show", common)
    assert refused.returncode == 2, refused.stdout
    assert "invalid_request" in refused.stderr and all(i in refused.stderr for i in ids)
    assert "give more of the id" in refused.stderr
    # A start of no id stays not_found.
    missing = tether("show", "ex_zzzzzzzz")
    assert missing.returncode == 2 and "not_found" in missing.stderr


async def test_guardians_list_and_status_speak_text(client: Client, workspace: Path,
                                                    tether_env: Config) -> None:
    none = tether("guardians", "list")
    assert none.returncode == 0 and "no guardian" in none.stdout, none
    absent = tether("guardians", "status", "--workspace", str(workspace))
    assert absent.returncode == 1 and "no guardian is running" in absent.stdout, absent
    session = await initialize(client, workspace)
    pid = session["guardian"]["pid"]
    status = tether("guardians", "status", "--workspace", str(workspace))
    assert status.returncode == 0, status.stderr
    assert "running and answering" in status.stdout and f"pid: {pid}" in status.stdout
    assert "None" not in status.stdout and "auth_token" not in status.stdout
    as_json = json.loads(tether("guardians", "status", "--workspace", str(workspace),
                                "--json").stdout)
    assert (as_json["alive"], as_json["answering"], as_json["pid"]) == (True, True, pid)


def test_report_reads_the_log_tether_usage_log_names(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    log.write_text("")
    env = {**os.environ, "TETHER_USAGE_LOG": str(log)}
    named = tether("report", "--json", env=env)
    assert named.returncode == 0, named.stderr
    assert isinstance(json.loads(named.stdout), dict)
    unset = {k: v for k, v in os.environ.items() if k != "TETHER_USAGE_LOG"}
    neither = tether("report", env=unset)
    assert neither.returncode == 2 and "TETHER_USAGE_LOG" in neither.stderr


async def test_summaries_print_no_none_and_say_why_a_record_is_unknown(
        client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    sleeper = await bash(client, session, {"type": "command", "command": "sleep 30",
                                           "is_background": True}, wait=0.2)
    scoped = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}

    async def listing() -> str:
        result = await client.call_tool("Execution", {**scoped, "action": {"type": "list"}})
        return str(result.content[0].text)  # type: ignore[union-attr]

    running = await listing()
    assert f"{sleeper['execution_id']} running " in running and "None" not in running, running
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    lost = await listing()
    assert f"{sleeper['execution_id']} unknown (guardian_lost) " in lost, lost
    assert "None" not in lost
    checked = await client.call_tool("BashCommand", {
        **scoped, "action_json": {"type": "status_check",
                                  "execution_id": sleeper["execution_id"]}})
    text = str(checked.content[0].text)  # type: ignore[union-attr]
    assert "[unknown (guardian_lost);" in text, text


async def test_an_unknown_thread_is_session_mismatch_from_every_tool(
        client: Client, workspace: Path) -> None:
    await initialize(client, workspace)  # a guardian runs: the guardian's answer too
    root = str(workspace)
    codes: dict[str, Any] = {}
    for kind in ("first_call", "status"):
        codes[kind] = (await call_error(client, "Initialize", {
            "type": kind, "workspace_root": root, "thread_id": "th_nosuchthread"}))["code"]
    codes["BashCommand"] = (await call_error(client, "BashCommand", {
        "thread_id": "th_nosuchthread", "workspace_root": root,
        "action_json": {"type": "status_check"}}))["code"]
    codes["Execution"] = (await call_error(client, "Execution", {
        "thread_id": "th_nosuchthread", "workspace_root": root,
        "action": {"type": "list"}}))["code"]
    assert set(codes.values()) == {"session_mismatch"}, codes
    assert (await call(client, "Initialize", {"type": "status", "workspace_root": root}))
