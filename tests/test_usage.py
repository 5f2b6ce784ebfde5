"""The usage log (docs/person.md#usage-log) of a real session, and ``tether report`` over it and over bad
logs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from secrets import token_urlsafe
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import stdio_client

from tests.conftest import stdio_params
from tests.mcp_helpers import (
    agent,
    bash,
    call,
    call_error,
    execution,
    http_client,
    http_server,
    initialize,
    prompt_log,
    write_principals,
)
from tests.test_agent import _start_fake
from tether.frontend.person.report import build_report
from tether.frontend.transport.mcp_server import build_server
from tether.frontend.usage import (
    MAX_PHASE_PAIRS,
    CallRecorder,
    UsageFile,
    UsageLog,
    outcome_fields,
)
from tether.protocol.limits import MAX_COMMAND_BYTES
from tether.shared.config import Config

TETHER = str(Path(sys.executable).with_name("tether"))


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _report(log: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run([TETHER, "report", "--log", str(log), "--json", *extra],
                          capture_output=True, text=True, timeout=30, check=True)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@contextlib.asynccontextmanager
async def _serve(log: Path, stderr: Path, **env: str) -> AsyncIterator[Client]:
    """A real ``tether serve`` over stdio logging usage into ``log``, its stderr in ``stderr``
    (the SDK's stdio client ends the process on exit; teardown stops the guardians)."""
    params = stdio_params({"TETHER_USAGE_LOG": str(log), **env})
    with stderr.open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


def _group(report: dict[str, Any], tool: str, action: str) -> dict[str, Any]:
    found = [g for g in report["workflows"] if (g["tool"], g["action"]) == (tool, action)]
    assert len(found) == 1, (tool, action, report["workflows"])
    group: dict[str, Any] = found[0]
    return group


@pytest.mark.anyio
async def test_session_of_twenty_calls(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "logs" / "usage.jsonl"
    monkeypatch.setenv("TETHER_USAGE_LOG", str(log))
    secrets = ["secret-cmd-alpha", "secret-bg-beta", "secret-typed-gamma", "secret-prompt-delta"]
    seen: list[str] = [str(workspace), str(tmp_path), str(tether_env.state_home)]
    async with Client(build_server(tether_env)) as client:
        s = await initialize(client, workspace)  # 1
        scope = {"thread_id": s["thread_id"], "workspace_root": s["workspace_root"]}
        fg = await bash(client, s, {"type": "command", "command": f"echo {secrets[0]}"}, 10)  # 2
        bg = await bash(client, s, {"type": "command", "is_background": True,  # 3
                                    "command": f"echo {secrets[1]}; sleep 30"})
        await bash(client, s, {"type": "status_check", "execution_id": fg["execution_id"]}, 0)  # 4
        await bash(client, s, {"type": "screen", "execution_id": bg["execution_id"]})  # 5
        await bash(client, s, {"type": "send_text", "text": secrets[2],  # 6
                               "execution_id": bg["execution_id"]}, 0)
        await execution(client, s, {"type": "list"})  # 7
        await execution(client, s, {"type": "get", "execution_id": fg["execution_id"]})  # 8
        page = (await execution(client, s, {"type": "read", "execution_id": fg["execution_id"],  # 9
                                            "page_bytes": 8}))["data"]
        seen.append(page["next_cursor"])
        await execution(client, s, {"type": "read", "execution_id": fg["execution_id"],  # 10
                                    "cursor": page["next_cursor"]})
        observed = await client.call_tool("Execution", {**scope, "action": {  # 11
            "type": "observe", "items": [{"execution_id": fg["execution_id"]},
                                         {"execution_id": "ex_missing"}]}})
        assert observed.structured_content and observed.structured_content["status"] == \
            "completed_with_issues"
        waited = await execution(client, s, {"type": "wait",  # 12
                                             "execution_ids": [bg["execution_id"]],
                                             "events": ["exited"], "timeout_seconds": 0})
        seen.append(waited["data"]["cursor"])
        missing = await execution(client, s, {"type": "get", "execution_id": "ex_nope"},  # 13
                                  expect_error=True)
        assert missing["code"] == "not_found"
        wrong = await call_error(client, "BashCommand", {  # 14
            "thread_id": "th_other", "workspace_root": str(workspace),
            "action_json": {"type": "command", "command": "echo secret-cmd-alpha"}})
        assert wrong["code"] == "session_mismatch"
        bad = await call_error(client, "BashCommand", {**scope, "action_json": {"type": "nope"}})
        assert bad["code"] == "invalid_request"  # 15
        await call(client, "Agent", {**scope, "action": "list"})  # 16
        prompt = await call_error(client, "Agent", {  # 17
            **scope, "action": "prompt", "target": bg["execution_id"], "prompt_id": "p1",
            "text": secrets[3], "recognizer": "claude", "timeout_seconds": 0})
        assert prompt["code"] == "input_not_ready"
        await execution(client, s, {"type": "explain", "execution_id": bg["execution_id"]})  # 18
        await bash(client, s, {"type": "send_keys", "keys": ["Ctrl-c"],  # 19
                               "execution_id": bg["execution_id"]}, 0)
        await call(client, "Initialize", {"type": "status", **scope})  # 20
        seen += [s["thread_id"], fg["execution_id"], bg["execution_id"]]

    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    for needle in secrets + seen:
        assert needle not in text, f"usage log leaks {needle!r}"
    events = _events(log)
    calls = [e for e in events if e["event"] == "tool_call"]
    assert len(calls) == 20
    call_ids = {e["usage_call_id"] for e in calls}
    assert len(call_ids) == 20
    started = {e["usage_call_id"] for e in events if e["event"] == "tool_started"}
    assert started == call_ids
    phases = [e for e in events if e["event"] == "tool_phase"]
    assert phases and {e["usage_call_id"] for e in phases} <= call_ids
    for call_id in call_ids:  # every phase start has its finish
        mine = [e for e in phases if e["usage_call_id"] == call_id]
        assert sum(e["edge"] == "start" for e in mine) == sum(e["edge"] == "finish" for e in mine)
    names = {e["phase"] for e in phases}
    assert {"validation", "admission", "catalog", "runtime_capture", "prompt_rpc",
            "wait_sleep", "finalize"} <= names
    assert all(e["usage_schema"] == 1 for e in calls)
    assert all(e.get("workflow_schema") == 1 for e in calls if e["tool"] in ("Execution", "Agent"))
    command = [e for e in calls if (e["tool"], e["action"]) == ("BashCommand", "command")]
    assert {(e.get("requested_wait_ms"), e.get("effective_wait_ms")) for e in command} >= \
        {(10_000, 10_000), (None, 0)}

    report = _report(log)
    assert report["tool_calls"] == 20 and report["malformed_lines"] == 0
    assert _group(report, "BashCommand", "command")["count"] == 3
    assert _group(report, "BashCommand", "command")["error_codes"] == {"session_mismatch": 1}
    assert _group(report, "BashCommand", "other")["error_codes"] == {"invalid_request": 1}
    get = _group(report, "Execution", "get")
    assert get["count"] == 2 and get["error_codes"] == {"not_found": 1}
    assert get["duration_ms"]["p50"] is not None and get["duration_ms"]["unknown"] == 0
    observe = _group(report, "Execution", "observe")
    assert observe["observe"]["requested_items"]["sum"] == 2
    assert observe["observe"]["returned_items"]["sum"] == 2
    assert observe["observe"]["items_with_issues"]["sum"] == 1
    assert observe["error_codes"] == {} and observe["error_results"] == 0  # not an error
    assert observe["issue_codes"] == {"execution_observation_issues": 1}
    assert _group(report, "Execution", "wait")["catalog"] == {"timeout": 1}
    prompt_group = _group(report, "Agent", "prompt")
    assert prompt_group["error_codes"] == {"input_not_ready": 1}
    assert prompt_group["receipts"]["delivered"] == {"unknown": 1}
    assert _report(log, "--last", "5")["tool_calls"] == 5
    human = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                           timeout=30, check=True).stdout
    assert "session_mismatch×1" in human and "not_found×1" in human


def test_malformed_line_and_missing_field_stay_unknown(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    good = {"event": "tool_call", "usage_schema": 1, "tool": "Execution", "action": "get",
            "backend": "native", "duration_ms": 4.0, "outcome": "ok", "code": None,
            "ts_unix_ms": 1}
    no_duration = {k: v for k, v in good.items() if k != "duration_ms"}
    no_tool = {k: v for k, v in good.items() if k != "tool"}
    observe = {**good, "action": "observe", "observe_requested_items": 3}  # no returned count
    lines = [json.dumps(good), "{not json", json.dumps(no_duration), json.dumps(no_tool),
             json.dumps({"event": "tool_phase", "usage_call_id": "x"}), json.dumps(observe),
             json.dumps({**good, "action": "list", "duration_ms": "fast"})]
    log.write_text("\n".join(lines) + "\n")
    report = _report(log)
    assert report["malformed_lines"] == 1
    assert report["tool_calls"] == 5 and report["lines_seen"] == 7
    get = _group(report, "Execution", "get")
    assert get["duration_ms"] == {"p50": 4.0, "p95": 4.0, "known": 1, "unknown": 1}
    assert _group(report, "unknown", "get")["count"] == 1
    listed = _group(report, "Execution", "list")
    assert listed["duration_ms"]["p50"] is None and listed["duration_ms"]["unknown"] == 1
    counters = _group(report, "Execution", "observe")["observe"]
    assert counters["requested_items"]["sum"] == 3
    assert counters["returned_items"] == {"sum": None, "calls_known": 0, "calls_unknown": 1}
    text = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert "1 malformed lines" in text and "unknown" in text
    # Auxiliary events are set aside before --last: the window is the last two tool calls.
    window = build_report(lines, last=2, since_minutes=0, now_ms=0).to_dict()
    assert window["tool_calls"] == 2 and window["auxiliary_events"] == 1


def test_rotation_keeps_files_private_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    sink = UsageFile(path, max_bytes=4096)
    for i in range(400):
        sink.write({"event": "tool_call", "n": i, "pad": "x" * 40})
    sink.close()
    rotated = sorted(tmp_path.iterdir())
    assert [p.name for p in rotated] == ["usage.jsonl", "usage.jsonl.1", "usage.jsonl.2",
                                         "usage.jsonl.3"]
    for p in rotated:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
        assert p.stat().st_size < 4096 + 100
    last = _events(path)[-1] if path.stat().st_size else _events(rotated[1])[-1]
    assert last["n"] == 399


def test_phase_pairs_are_capped_with_one_marker(tmp_path: Path) -> None:
    sink = UsageFile(tmp_path / "u.jsonl")
    recorder = CallRecorder(sink, "abc", clock=lambda: 0.0)
    for _ in range(MAX_PHASE_PAIRS + 5):
        with recorder.phase("catalog"):
            pass
    sink.close()
    events = _events(tmp_path / "u.jsonl")
    assert sum(e["edge"] == "start" for e in events) == MAX_PHASE_PAIRS
    assert sum(e["edge"] == "marker" for e in events) == 1
    assert recorder.summary["catalog"]["count"] == MAX_PHASE_PAIRS + 5  # still summarised
    os.remove(tmp_path / "u.jsonl")


def test_since_minutes_window_and_undated_calls() -> None:
    now = 10 * 60_000
    def call(ts: Any) -> str:
        event = {"event": "tool_call", "usage_schema": 1, "tool": "Execution", "action": "get",
                 "backend": "native", "duration_ms": 1.0, "outcome": "ok"}
        if ts is not None:
            event["ts_unix_ms"] = ts
        return json.dumps(event)
    lines = [call(now - 5 * 60_000), call(now - 30_000), call(None), call(now - 1000)]
    recent = build_report(lines, last=None, since_minutes=1, now_ms=now).to_dict()
    assert recent["tool_calls"] == 2 and recent["window"]["undated_excluded"] == 1
    everything = build_report(lines, last=None, since_minutes=0, now_ms=now).to_dict()
    assert everything["tool_calls"] == 4  # 0 means no time limit; undated calls count
    last_recent = build_report(lines, last=1, since_minutes=1, now_ms=now).to_dict()
    assert last_recent["tool_calls"] == 1


@pytest.mark.anyio
async def test_odd_arguments_are_refused_cleanly_and_logged_once_each(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    log, stderr = tmp_path / "usage.jsonl", tmp_path / "serve.err"
    async with _serve(log, stderr) as client:
        s = await initialize(client, workspace)
        scope = {"thread_id": s["thread_id"], "workspace_root": s["workspace_root"]}
        command = {"type": "command", "command": "echo hi"}
        shapes: list[tuple[str, dict[str, Any], tuple[str, str, str]]] = [
            ("Agent", {**scope, "action": ["list"]}, ("Agent", "other", "native")),
            ("Agent", {**scope, "action": "list", "backend": {"x": 1}}, ("Agent", "list", "other")),
            ("Initialize", {"workspace_root": str(workspace), "type": ["status"]},
             ("Initialize", "other", "native")),
            ("BashCommand", {**scope, "action_json": {**command, "type": ["command"]}},
             ("BashCommand", "other", "native")),
            ("Execution", {**scope, "action": {"type": {"a": 1}}}, ("Execution", "other", "native")),
            ("BashCommand", {**scope, "action_json": command, "wait_for_seconds": 1e308},
             ("BashCommand", "command", "native")),
            ("BashCommand", {**scope, "action_json": command, "wait_for_seconds": 1e306},
             ("BashCommand", "command", "native")),
        ]
        for tool, args, _ in shapes:
            refused = await call_error(client, tool, args)  # not a JSON-RPC internal error
            assert refused["code"] == "invalid_request", (tool, args, refused)
    events = _events(log)
    calls = [e for e in events if e["event"] == "tool_call"]
    started = [e for e in events if e["event"] == "tool_started"]
    assert len(calls) == len(started) == 1 + len(shapes)
    assert sorted(e["usage_call_id"] for e in calls) == sorted(e["usage_call_id"] for e in started)
    assert [(e["tool"], e["action"], e["backend"]) for e in calls[1:]] == \
        [shape for _, _, shape in shapes]
    assert all((e["outcome"], e["code"]) == ("error", "invalid_request") for e in calls[1:])
    said = stderr.read_text()
    assert "Traceback" not in said and "usage log" not in said, said


@pytest.mark.anyio
async def test_a_failure_inside_the_log_is_said_once_and_never_fails_the_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    usage = UsageLog(UsageFile(tmp_path / "usage.jsonl"))
    # A result no tool returns (structured content that is not an object): reading its
    # outcome raises inside the logging code.
    odd = types.CallToolResult.model_construct(content=[], structured_content=["odd"],
                                               is_error=False)

    async def run() -> types.CallToolResult:
        return odd

    with caplog.at_level(logging.WARNING, logger="tether.frontend.usage"):
        for _ in range(2):
            assert await usage.around("Execution", {"action": {"type": "list"}}, run) is odd
    assert usage.sink is not None
    usage.sink.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "tether.frontend.usage"]
    assert len(warnings) == 1 and "outcome_fields failed" in warnings[0], warnings
    calls = [e for e in _events(tmp_path / "usage.jsonl") if e["event"] == "tool_call"]
    assert [(e["action"], e["outcome"]) for e in calls] == [("list", "unknown")] * 2


def _waits(log: Path) -> list[tuple[Any, ...]]:
    """(code, requested policy, requested ms, effective ms) of each BashCommand call."""
    return [(e["code"], e.get("requested_wait_policy"), e.get("requested_wait_ms"),
             e.get("effective_wait_ms")) for e in _events(log)
            if e["event"] == "tool_call" and e["tool"] == "BashCommand"]


@pytest.mark.anyio
async def test_wait_fields_record_what_the_call_did(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    log = tmp_path / "usage.jsonl"
    async with _serve(log, tmp_path / "serve.err") as client:
        s = await initialize(client, workspace)
        scope = {"thread_id": s["thread_id"], "workspace_root": s["workspace_root"]}

        async def command(line: str, **extra: Any) -> types.CallToolResult:
            action = {"type": "command", "command": line, **extra.pop("action", {})}
            return await client.call_tool("BashCommand", {**scope, "action_json": action, **extra})

        # The validated values are what is logged (an integer of seconds, as a wait).
        running = await command("sleep 30", wait_for_seconds=1)
        assert running.structured_content and running.structured_content["data"]["status"] == \
            "running"
        background = await command("sleep 30", action={"is_background": True})
        assert not background.is_error
        # Refused before any wait was taken: by the guardian, by the front-end, by validation.
        assert (await command("echo busy")).structured_content["code"] == "shell_busy"
        mismatch = await client.call_tool("BashCommand", {
            **scope, "thread_id": "th_other",
            "action_json": {"type": "command", "command": "echo x"}})
        assert mismatch.structured_content["code"] == "session_mismatch"
        too_long = await command("x" * (MAX_COMMAND_BYTES + 1), wait_for_seconds=2)
        assert too_long.structured_content["code"] == "limit_exceeded"
        # A mode change waits for the busy main shell: a second thread takes the mode.
        other = await initialize(client, workspace)
        scope = {"thread_id": other["thread_id"], "workspace_root": other["workspace_root"]}
        await call(client, "Initialize", {"type": "change_mode", "mode": "architect", **scope})
        assert (await command("touch x")).structured_content["code"] == "mode_denied"
    assert _waits(log) == [
        (None, "explicit", 1000, 1000),
        (None, "default", None, 0),
        ("shell_busy", "default", None, None),
        ("session_mismatch", "default", None, None),
        ("limit_exceeded", "unknown", None, None),
        ("mode_denied", "default", None, None),
    ]
    waits = _group(_report(log), "BashCommand", "command")["effective_wait_ms"]
    assert (waits["known"], waits["unknown"]) == (2, 4)


@pytest.mark.anyio
async def test_a_call_denied_over_http_waited_for_nothing(
    tether_env: Config, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "usage.jsonl"
    monkeypatch.setenv("TETHER_USAGE_LOG", str(log))  # inherited by tether serve --http
    reader = token_urlsafe(32)
    principals = write_principals(tmp_path / "principals.toml", [
        {"id": "reader", "token": reader, "profile": "read-only", "workspaces": [str(workspace)]}])
    with http_server(principals) as url:
        async with http_client(url, reader) as client:
            denied = await call_error(client, "BashCommand", {
                "thread_id": "th_x", "workspace_root": str(workspace), "wait_for_seconds": 3,
                "action_json": {"type": "command", "command": "echo x"}})
            assert denied["code"] == "tool_denied"
    assert _waits(log) == [("tool_denied", "unknown", None, None)]


def _doctor_on_usage(log: Path, **env: str) -> list[dict[str, Any]]:
    """``tether doctor --json``'s findings about the usage log at ``log``."""
    done = subprocess.run([TETHER, "doctor", "--json"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "TETHER_USAGE_LOG": str(log), **env})
    findings = json.loads(done.stdout)["findings"]
    return [f for f in findings if f["what"].startswith("usage log")]


def _unusable(tmp_path: Path, kind: str) -> Path:
    if kind == "directory":
        (tmp_path / "logs.jsonl").mkdir(mode=0o600)  # chmod 600 does not make it a file
        return tmp_path / "logs.jsonl"
    if kind == "under a file":
        (tmp_path / "plain").write_text("")
        return tmp_path / "plain" / "usage.jsonl"
    assert kind == "on /proc"
    return Path("/proc/tether-usage.jsonl")


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["directory", "under a file", "on /proc"])
async def test_an_unusable_log_is_said_once_and_serving_goes_on(
    tether_env: Config, workspace: Path, tmp_path: Path, kind: str
) -> None:
    log, stderr = _unusable(tmp_path, kind), tmp_path / "serve.err"
    async with _serve(log, stderr) as client:
        s = await initialize(client, workspace)
        for _ in range(3):
            await execution(client, s, {"type": "list"})
        said = stderr.read_text()
    assert said.count("usage log") == 1 and f"usage log {log} cannot be written" in said, said
    assert {"directory": "Is a directory", "under a file": "a file, not a directory",
            "on /proc": "/proc/tether-usage.jsonl"}[kind] in said, said
    assert "Traceback" not in said
    findings = _doctor_on_usage(log)
    assert [f["level"] for f in findings] == ["action"], findings


def test_doctor_checks_the_log_is_a_regular_file_it_can_create_or_write(
    tether_env: Config, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo, 0o600)
    cases = {
        _unusable(tmp_path, "directory"): "is a directory",
        _unusable(tmp_path, "under a file"): "is a file, not a directory",
        tmp_path / "plain" / "deeper" / "usage.jsonl": "is a file, not a directory",
        _unusable(tmp_path, "on /proc"): "pseudo-filesystem",
        fifo: "not a regular file",
    }
    for log, why in cases.items():
        findings = _doctor_on_usage(log)
        assert len(findings) == 1 and findings[0]["level"] == "action", (log, findings)
        assert why in findings[0]["what"], (log, findings)
    fresh = _doctor_on_usage(tmp_path / "new" / "usage.jsonl")
    assert [f["level"] for f in fresh] == ["ok"] and "does not exist yet" in fresh[0]["what"]


@pytest.mark.anyio
async def test_a_full_log_that_cannot_rotate_stops_growing_and_says_so(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    log, stderr = tmp_path / "usage.jsonl", tmp_path / "serve.err"
    # A rotation that the filesystem refuses: renaming usage.jsonl.2 onto a directory fails,
    # for root too (a directory that refuses renames would not stop root).
    (tmp_path / "usage.jsonl.2").write_text("")
    (tmp_path / "usage.jsonl.3").mkdir()
    (tmp_path / "usage.jsonl.3" / "keep").write_text("")
    limit = 4096
    async with _serve(log, stderr, TETHER_USAGE_LOG_MAX_BYTES=str(limit)) as client:
        s = await initialize(client, workspace)
        for _ in range(40):  # about ten times the limit, were it appended
            await execution(client, s, {"type": "list", "limit": 1})
        assert limit <= log.stat().st_size < limit + 1024  # at most one line past it
        said = stderr.read_text()
        assert said.count("cannot be rotated") == 1 and f"usage log {log} reached its limit" in \
            said, said
        over = _doctor_on_usage(log, TETHER_USAGE_LOG_MAX_BYTES=str(limit))
        assert [f["level"] for f in over] == ["action"], over
        assert "cannot be rotated" in over[0]["what"] and "over its limit" in over[0]["what"]
        # Once the way is clear, the next line rotates the log and logging goes on.
        (tmp_path / "usage.jsonl.3" / "keep").unlink()
        (tmp_path / "usage.jsonl.3").rmdir()
        await execution(client, s, {"type": "list", "limit": 1})
    assert (tmp_path / "usage.jsonl.1").stat().st_size >= limit
    assert [e["event"] for e in _events(log)][-1] == "tool_call"
    assert [f["level"] for f in _doctor_on_usage(log, TETHER_USAGE_LOG_MAX_BYTES=str(limit))] \
        == ["ok"]


@pytest.mark.anyio
async def test_a_repeated_prompt_is_counted_apart_from_deliveries(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    log = tmp_path / "usage.jsonl"
    async with _serve(log, tmp_path / "serve.err") as client:
        s = await initialize(client, workspace)
        eid = await _start_fake(client, s, tmp_path / "agent.log")
        prompt = {"action": "prompt", "target": eid, "prompt_id": "p-once", "text": "hello",
                  "recognizer": "claude", "timeout_seconds": 15}
        answers = [(await agent(client, s, prompt))["data"] for _ in range(3)]
    assert [(a["replayed"], a["input_sent"]) for a in answers] == \
        [(False, True), (True, False), (True, False)]
    assert prompt_log(tmp_path / "agent.log") == ["hello"]
    prompts = [e for e in _events(log) if e["event"] == "tool_call" and e["action"] == "prompt"]
    assert [(e["receipt_replayed"], e["receipt_input_sent"]) for e in prompts] == \
        [(False, True), (True, False), (True, False)]
    receipts = _group(_report(log), "Agent", "prompt")["receipts"]
    assert receipts["calls"] == {"new": 1, "repeat": 2}
    assert receipts["delivered"] == {"true": 1} and receipts["input_sent"] == {"true": 1}
    text = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert "calls new×1, repeat×2 (2 repeated a prompt_id" in text and "delivered true×1" in text


def _call_line(**fields: Any) -> str:
    event = {"event": "tool_call", "usage_schema": 1, "tool": "Execution", "action": "get",
             "backend": "native", "duration_ms": 1.0, "outcome": "ok", "code": None,
             "ts_unix_ms": 1, **fields}
    return json.dumps(event)


def test_error_codes_count_every_error_and_nothing_else(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    log.write_text("\n".join([
        _call_line(outcome="error", code=None), _call_line(outcome="error", code=None),
        _call_line(outcome="error", code="not_found"),
        _call_line(outcome="error", code="unknown"),  # what the writer logs for an odd code
        _call_line(outcome="completed_with_issues", code="execution_observation_issues"),
        _call_line(outcome="ok", code=None)]) + "\n")
    get = _group(_report(log), "Execution", "get")
    assert get["error_codes"] == {"unknown": 3, "not_found": 1} and get["error_results"] == 4
    assert get["issue_codes"] == {"execution_observation_issues": 1}
    text = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert "not_found×1, unknown×3" in text
    assert "completed with issues (not errors): execution_observation_issues×1" in text


def test_the_writer_keeps_a_well_formed_code_it_does_not_know() -> None:
    def logged(code: Any) -> Any:
        content = {"ok": False, "status": "error", "code": code, "message": "m"}
        result = types.CallToolResult(content=[], structured_content=content, is_error=True)
        return outcome_fields(result)["code"]

    assert logged("not_found") == "not_found"
    assert logged("quota_exceeded_v2") == "quota_exceeded_v2"  # a newer guardian's code
    for odd in ("Not_Found", "rm -rf /", "x" * 49, "\x1b[2Jcode", 7, ["not_found"]):
        assert logged(odd) == "unknown", odd
    assert logged(None) is None


def test_lines_of_other_schema_versions_are_set_aside_and_named(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    no_version = json.loads(_call_line(duration_ms=8.0))
    del no_version["usage_schema"]
    log.write_text("\n".join([
        _call_line(duration_ms=7.0), _call_line(duration_ms=8.0),
        _call_line(usage_schema=2, duration_ms=9000.0),
        _call_line(usage_schema=99, duration_ms=9000.0),
        _call_line(usage_schema=None, duration_ms=9000.0), json.dumps(no_version),
        _call_line(usage_schema=True, duration_ms=9000.0),  # not the integer 1
        _call_line(usage_schema="1", duration_ms=9000.0)]) + "\n")
    report = _report(log)
    assert report["tool_calls_in_log"] == 8 and report["tool_calls"] == 2
    assert report["other_schema_calls"] == {"2": 1, "99": 1, "null": 1, "missing": 1, "other": 2}
    assert _group(report, "Execution", "get")["duration_ms"]["p95"] == 8.0  # none mixed in
    assert _report(log, "--last", "1")["tool_calls"] == 1
    text = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert "6 tool calls set aside, by usage_schema: 2×1, 99×1, missing×1, null×1, other×2" \
        in text and "reads version 1" in text


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_numbers_that_are_not_finite_are_unknown_and_refused(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    huge = "1" + "0" * 400  # JSON allows it; no float holds it
    lines = [_call_line(duration_ms=4.0), _call_line(duration_ms=6.0)]
    for raw in ("NaN", "Infinity", "-Infinity", "1e400", huge):
        lines.append(_call_line(duration_ms=0.5).replace('"duration_ms": 0.5',
                                                         f'"duration_ms": {raw}'))
    wait = _call_line(tool="BashCommand", action="command", requested_wait_policy="default",
                      effective_wait_ms=0)
    lines += [wait.replace('"effective_wait_ms": 0', '"effective_wait_ms": Infinity'),
              _call_line(ts_unix_ms=0).replace('"ts_unix_ms": 0', '"ts_unix_ms": NaN'),
              json.dumps({"event": "tool_phase", "usage_call_id": ["unhashable"], "edge": "finish",
                          "phase": "catalog", "duration_ms": 1.0})]
    log.write_text("\n".join(lines) + "\n")
    done = subprocess.run([TETHER, "report", "--log", str(log), "--json"], capture_output=True,
                          text=True, timeout=30, check=True)
    report = _strict(done.stdout)
    durations = _group(report, "Execution", "get")["duration_ms"]
    assert (durations["known"], durations["unknown"], durations["p95"]) == (3, 5, 6.0)
    waits = _group(report, "BashCommand", "command")["effective_wait_ms"]
    assert (waits["known"], waits["unknown"]) == (0, 1)
    assert _report(log, "--since-minutes", "1")["window"]["undated_excluded"] == 1
    for bad in ("nan", "inf", "-inf", "1e400", "-1", "soon"):
        refused = subprocess.run([TETHER, "report", "--log", str(log), "--json",
                                  "--since-minutes", bad], capture_output=True, text=True,
                                 timeout=30)
        assert refused.returncode == 2 and "--since-minutes" in refused.stderr, (bad, refused)
        assert refused.stdout == ""
    assert _strict(subprocess.run([TETHER, "report", "--log", str(log), "--json",
                                   "--since-minutes", "1e300"], capture_output=True, text=True,
                                  timeout=30, check=True).stdout)["tool_calls"] == 8


def test_the_text_report_never_prints_the_logs_escape_sequences(tmp_path: Path) -> None:
    log = tmp_path / "usage.jsonl"
    title = "\x1b]0;pwned\x07\x1b[31m"
    log.write_text("\n".join([
        _call_line(tool=title, action="prompt", receipt_observed=True),
        _call_line(outcome="completed_with_issues", code="\x1b[2J"),
        _call_line(outcome="error", code=title)]) + "\n")
    text = subprocess.run([TETHER, "report", "--log", str(log)], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    assert "\x1b" not in text and "\x07" not in text, text
    assert "\\x1b]0;pwned\\x07\\x1b[31m.prompt (native) prompt receipts" in text
    assert "completed with issues (not errors): \\x1b[2J×1" in text
