"""Size limits are enforced whole, in the unit the docs name, before anything happens
(docs/security.md#local-permissions-and-limits).

Sizes of what reaches a terminal or a process are UTF-8 bytes; a refusal is
``limit_exceeded`` naming the field, the size, the limit and what to do instead, and leaves
no record and types nothing. A program reading whole lines (canonical mode) is never sent a
line longer than the kernel's line buffer holds, which would lose its tail without a trace.
Malformed cursors are ``invalid_cursor``. Real MCP client, real guardian, real PTYs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import guardian_thread
from tests.mcp_helpers import agent, bash, call_error, execution, initialize, run
from tether.frontend.guardians.locator import GuardianHandle
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import (
    MAX_ARGV_BYTES,
    MAX_CANONICAL_LINE_BYTES,
    MAX_CURSOR,
    MAX_PATH,
    MAX_PROMPT_BYTES,
    MAX_TEXT_BYTES,
)
from tether.protocol.method_table import (
    AGENT_LAUNCH,
    AGENT_LIST,
    AGENT_PROMPT,
    EXEC_INPUT,
    EXEC_READ,
    EXEC_START,
    EXEC_STATUS,
    EXEC_WAIT,
)
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

#: Prints 42 once the shell runs the line (the typed line itself shows ``6*7``), then counts
#: the bytes of its input: a program reading whole lines, as the reviewer's ``wc -c``.
LINE_READER = "echo $((6*7)); wc -c"


async def _status_until(client: Client, session: dict[str, Any], done: Callable[[dict[str, Any]], bool],
                        what: str, execution_id: str | None = None, timeout: float = 15.0,
                        ) -> dict[str, Any]:
    """Poll ``status_check`` until ``done(status)``; that status."""
    deadline = time.monotonic() + timeout
    action: dict[str, Any] = {"type": "status_check"}
    if execution_id:
        action["execution_id"] = execution_id
    while True:
        status = await bash(client, session, action, wait=0.2)
        if done(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout}s: {status}")


async def _output_shows(client: Client, session: dict[str, Any], text: str,
                        execution_id: str | None = None) -> dict[str, Any]:
    return await _status_until(client, session, lambda s: text in s["output"],
                               f"showing {text!r}", execution_id)


async def _ended(client: Client, session: dict[str, Any],
                 execution_id: str | None = None) -> dict[str, Any]:
    return await _status_until(client, session, lambda s: s["status"] != "running", "ended",
                               execution_id)


async def _agents(client: Client, session: dict[str, Any]) -> list[dict[str, Any]]:
    listed = await agent(client, session, {"action": "list", "include_archived": True})
    return list(listed["data"]["agents"])


# -- 1. argv is measured in UTF-8 bytes, in all --------------------------------------------


async def test_argv_over_its_byte_limit_is_refused_before_any_record(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    launch = {"action": "launch", "provider": "command"}
    # The reviewer's argv: 40 arguments of 60,000 bytes (each under the old per-element check).
    many = await agent(client, session, {**launch, "argv": ["echo"] + ["y" * 60000] * 40},
                       error=True)
    assert many["code"] == "limit_exceeded", many
    size = 5 + 40 * 60001  # each argument's bytes plus 1
    assert many["data"] == {"input_sent": False, "field": "argv", "limit": MAX_ARGV_BYTES,
                            "size": size}
    assert f"{size} bytes" in many["message"] and str(MAX_ARGV_BYTES) in many["message"]
    assert "file" in many["message"] and len(many["message"]) < 400
    # 30,000 characters, 90,000 bytes: under a character count, over the byte limit.
    euro = await agent(client, session, {**launch, "argv": ["cat", "€" * 30000]}, error=True)
    assert euro["code"] == "limit_exceeded" and euro["data"]["size"] == 4 + 90001, euro
    assert await _agents(client, session) == []
    assert (await execution(client, session, {"type": "list"}))["data"]["executions"] == []
    # At the limit exactly, the launch goes ahead ("true" + NUL, then the argument + NUL).
    fits = ["true", "y" * (MAX_ARGV_BYTES - 5 - 1)]
    launched = (await agent(client, session, {**launch, "argv": fits}))["data"]["agent"]
    assert [a["execution_id"] for a in await _agents(client, session)] == [
        launched["execution_id"]]
    over = await agent(client, session, {**launch, "argv": [*fits[:1], fits[1] + "y"]},
                       error=True)
    assert over["code"] == "limit_exceeded" and over["data"]["size"] == MAX_ARGV_BYTES + 1


async def test_the_guardian_measures_argv_and_typed_text_in_bytes_too(
    tether_env: Config, workspace: Path
) -> None:
    """A front-end that checks nothing (an older one, a bug) still cannot get them through."""
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        with pytest.raises(TetherError) as argv:
            await handle.call(AGENT_LAUNCH, {
                **scope, "provider": "command", "argv": ["cat", "€" * 30000],
                "idempotency_key": "big-argv"}, timeout_s=10)
        assert argv.value.code == ErrorCode.LIMIT_EXCEEDED, argv.value
        assert argv.value.data["size"] == 4 + 90001 and argv.value.data["field"] == "argv"
        listed = await handle.call(AGENT_LIST, {**scope, "include_archived": True}, timeout_s=10)
        assert listed.agents == []
        with pytest.raises(TetherError) as command:
            await handle.call(EXEC_START, {**scope, "command": "echo " + "€" * 22000,
                                             "idempotency_key": "big-command"}, timeout_s=10)
        assert command.value.code == ErrorCode.LIMIT_EXCEEDED, command.value
        assert "file" in command.value.message
        with pytest.raises(TetherError) as prompt:
            await handle.call(AGENT_PROMPT, {**scope, "execution_id": "ag_x", "prompt_id": "p",
                                               "text": "€" * 6000}, timeout_s=10)
        assert prompt.value.code == ErrorCode.LIMIT_EXCEEDED, prompt.value
        assert prompt.value.data["size"] == 18000


# -- 2. a launch that cannot spawn is unknown, not exited ---------------------------------


async def test_a_launch_that_cannot_spawn_is_unknown_with_its_reason(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    failed = await agent(client, session, {"action": "launch", "provider": "command",
                                           "argv": ["/nonexistent/tether-no-such-program"]},
                         error=True)
    assert failed["code"] == "spawn_failed" and failed["data"]["input_sent"] is False, failed
    record = (await agent(client, session, {"action": "get",
                                            "target": failed["data"]["execution_id"]}))["data"]
    agent_record = record["agent"]
    # no exit was observed (docs/tools.md#unknown-is-not-success)
    assert agent_record["status"] == "unknown", agent_record
    assert agent_record["exit_code"] is None
    assert agent_record["reason"].startswith("spawn_failed: ")
    assert agent_record["agent_state"] == "error"
    assert record["events"][-1]["reason"].startswith("spawn_failed: ")


# -- 3. lines for a program that reads whole lines -----------------------------------------


async def test_a_line_longer_than_the_terminal_holds_is_refused_whole(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    reader = await bash(client, session, {"type": "command", "command": LINE_READER}, wait=0)
    await _output_shows(client, session, "42")
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    refused = await call_error(client, "BashCommand", {**args, "action_json": {
        "type": "send_text", "text": "a" * 10000, "submit": True}})
    assert refused["code"] == "limit_exceeded", refused
    assert refused["data"] == {"input_sent": False, "limit": MAX_CANONICAL_LINE_BYTES,
                               "size": 10000, "line": 1, "terminal_mode": "cooked"}
    assert str(MAX_CANONICAL_LINE_BYTES) in refused["message"]
    assert "file" in refused["message"] and "Nothing was typed" in refused["message"]
    # The last line counts without Enter too (it waits in the same buffer); bytes, not
    # characters: 1,400 euro signs are 4,200 bytes.
    last = await call_error(client, "BashCommand", {**args, "action_json": {
        "type": "send_text", "text": "short\n" + "€" * 1400}})
    assert (last["code"], last["data"]["line"], last["data"]["size"]) == (
        "limit_exceeded", 2, 4200)
    # Lines up to the limit go through, however long the text.
    fits = "a" * MAX_CANONICAL_LINE_BYTES + "\n" + "b" * MAX_CANONICAL_LINE_BYTES
    sent = await bash(client, session, {"type": "send_text", "text": fits, "submit": True})
    assert sent["input_sent"] is True
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-d"]})
    done = await _ended(client, session)
    assert done["execution_id"] == reader["execution_id"] and done["exit_code"] == 0
    # wc counted both whole lines and their line ends: nothing of the refused text, nothing lost.
    assert done["output"].split()[-1] == str(2 * (MAX_CANONICAL_LINE_BYTES + 1)), done["output"]


async def test_a_program_reading_keys_takes_long_lines(
    client: Client, workspace: Path, tmp_path: Path
) -> None:
    """Raw mode has no line buffer: editors and agent TUIs get the whole text."""
    script = tmp_path / "raw_count.py"
    script.write_text(
        "import os, tty\n"
        "tty.setraw(0)\n"
        "print('raw-' + 'ready', flush=True)\n"
        "n = 0\n"
        "while n < 10000:\n"
        "    n += len(os.read(0, 65536))\n"
        "print(f'got {n}', flush=True)\n")
    session = await initialize(client, workspace)
    await bash(client, session, {"type": "command", "command": f"{sys.executable} {script}"},
               wait=0)
    await _output_shows(client, session, "raw-ready")
    sent = await bash(client, session, {"type": "send_text", "text": "a" * 10000})
    assert sent["input_sent"] is True and sent["terminal_mode"] == "raw", sent
    done = await _ended(client, session)
    assert "got 10000" in done["output"], done


async def test_a_refused_long_line_answers_the_same_to_a_repeat(
    tether_env: Config, workspace: Path
) -> None:
    """The refusal is the key's outcome: its repeat answers it again and types nothing."""
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        eid = await _line_reader(handle, scope)
        typed = {**scope, "execution_id": eid, "text": "x" * 5000, "idempotency_key": "long"}
        answers = []
        for _ in range(2):
            with pytest.raises(TetherError) as refused:
                await handle.call(EXEC_INPUT, typed, timeout_s=10)
            answers.append(refused.value)
        assert [a.code for a in answers] == [ErrorCode.LIMIT_EXCEEDED] * 2
        assert answers[0].message == answers[1].message
        assert answers[0].data == answers[1].data == {
            "input_sent": False, "limit": MAX_CANONICAL_LINE_BYTES, "size": 5000, "line": 1,
            "terminal_mode": "cooked"}
        await handle.call(EXEC_INPUT, {**scope, "execution_id": eid, "text": "ok",
                                         "submit": True, "idempotency_key": "ok"}, timeout_s=10)
        await handle.call(EXEC_INPUT, {**scope, "execution_id": eid, "keys": ["Ctrl-d"],
                                         "idempotency_key": "eof"}, timeout_s=10)
        status = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid,
                                                   "wait_ms": 10_000}, timeout_s=20)
        assert status.execution.status == "exited", status
        assert status.output.text.split()[-1] == "3"  # "ok" and its line end, nothing else


async def test_a_prompt_with_a_line_too_long_for_a_line_reader_is_refused(
    client: Client, workspace: Path
) -> None:
    """Agent.prompt checks lines as send_text does, before its receipt and any byte."""
    session = await initialize(client, workspace)
    # A REPL that reads whole lines (no readline: the terminal stays in cooked mode).
    repl = ("python3 -c 'import sys\nwhile True:\n sys.stdout.write(\"$ \"); sys.stdout.flush()"
            "\n print(len(sys.stdin.readline()))'")
    started = await bash(client, session, {"type": "command", "command": repl,
                                           "is_background": True})
    eid = started["execution_id"]
    turn = await bash(client, session, {"type": "wait_for_turn", "execution_id": eid,
                                        "recognizer": "shell"})
    assert turn["outcome"] == "turn_ready"
    prompt = {"action": "prompt", "target": eid, "recognizer": "shell", "timeout_seconds": 2}
    refused = await agent(client, session, {**prompt, "prompt_id": "long", "text": "a" * 5000},
                          error=True)
    assert refused["code"] == "limit_exceeded", refused
    assert refused["data"]["input_sent"] is False and refused["data"]["terminal_mode"] == "cooked"
    fits = await agent(client, session, {**prompt, "prompt_id": "fits", "text": "a" * 4000})
    assert fits["data"]["receipt"]["delivered"] is True
    await _output_shows(client, session, "4001", execution_id=eid)  # the whole line arrived
    status = await bash(client, session, {"type": "status_check", "execution_id": eid})
    assert "5001" not in status["output"]  # the refused one never reached it


async def _line_reader(handle: GuardianHandle, scope: dict[str, Any]) -> str:
    """A background ``wc -c`` whose terminal is in line mode; its execution id."""
    start = {**scope, "command": LINE_READER, "background": True, "idempotency_key": "wc"}
    eid = str((await handle.call(EXEC_START, start, timeout_s=10)).execution.execution_id)
    deadline = time.monotonic() + 15
    while True:
        status = await handle.call(EXEC_STATUS, {**scope, "execution_id": eid,
                                                   "wait_ms": 200}, timeout_s=10)
        if "42" in status.output.text:
            return eid
        assert time.monotonic() < deadline, status.output.text


# -- 4. limit messages name the field, the unit and what to do -----------------------------


async def test_length_limits_say_characters_and_name_the_field(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    launch = {"action": "launch", "provider": "command", "argv": ["true"]}
    title = await agent(client, session, {**launch, "title": "t" * 201}, error=True)
    assert title["code"] == "limit_exceeded", title
    assert title["message"] == "title is 201 characters; the limit is 200 characters"
    assert title["data"] == {"input_sent": False, "field": "title", "size": 201, "limit": 200,
                             "unit": "characters"}
    label = await agent(client, session, {**launch, "labels": {"k": "v" * 1025}}, error=True)
    assert label["code"] == "limit_exceeded", label
    assert label["message"] == "labels.k is 1025 characters; the limit is 1024 characters"
    assert await _agents(client, session) == []


async def test_typed_text_limits_say_what_to_do(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    text = await call_error(client, "BashCommand", {**args, "action_json": {
        "type": "send_text", "text": "€" * 22000}})
    assert text["code"] == "limit_exceeded" and text["data"]["size"] == 66000, text
    assert str(MAX_TEXT_BYTES) in text["message"] and "file" in text["message"]
    prompt = await agent(client, session, {"action": "prompt", "target": "ag_x",
                                           "prompt_id": "p", "text": "x" * 16385}, error=True)
    assert prompt["code"] == "limit_exceeded", prompt
    assert str(MAX_PROMPT_BYTES) in prompt["message"] and "file" in prompt["message"]


async def test_an_over_long_workspace_root_is_over_the_limit_not_missing(
    client: Client, tmp_path: Path
) -> None:
    root = str(tmp_path) + "/" + "d" * 4500
    refused = await call_error(client, "Initialize", {"type": "first_call", "workspace_root": root})
    assert refused["code"] == "limit_exceeded", refused
    assert refused["data"]["limit"] == MAX_PATH and refused["data"]["size"] == len(root)
    assert "not a directory" not in refused["message"]
    assert len(refused["message"]) < 300  # a short prefix at most, never the whole value


# -- 4 and 5. a cursor that Tether cannot have issued is invalid_cursor --------------------


async def test_empty_and_over_long_cursors_are_invalid_cursors(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    out = await run(client, session, "echo hello")
    eid = out["execution_id"]
    read = {"type": "read", "execution_id": eid}
    for cursor in ("", "c" * (MAX_CURSOR + 1)):
        refused = await execution(client, session, {**read, "cursor": cursor}, expect_error=True)
        assert refused["code"] == "invalid_cursor", refused
        assert refused["data"]["input_sent"] is False and len(refused["message"]) < 300
        # In observe, a bad cursor is its item's error (good siblings are still read); one
        # over the size limit is a bad budget, which refuses the request.
        items = [{"execution_id": eid, "cursor": cursor}, {"execution_id": eid, "source": "screen"}]
        if cursor:
            over = await execution(client, session, {"type": "observe", "items": items},
                                   expect_error=True)
            assert over["code"] == "limit_exceeded", over
        else:
            observed = (await execution(client, session, {"type": "observe", "items": items}))
            first, second = observed["data"]["items"]
            assert [e["code"] for e in first["errors"]] == ["invalid_cursor"], observed
            assert second["status"] == "ok" and not second["errors"]
        waited = await execution(client, session, {"type": "wait", "execution_ids": [eid],
                                                   "after": cursor}, expect_error=True)
        assert waited["code"] == "invalid_cursor", waited
        by_agent = await agent(client, session, {"action": "read", "target": eid,
                                                 "cursor": cursor}, error=True)
        assert by_agent["code"] == "invalid_cursor", by_agent
    # No cursor at all is the first page, as before.
    first = (await execution(client, session, read))["data"]
    assert "hello" in first["text"]


async def test_the_guardian_refuses_an_empty_cursor(tether_env: Config, workspace: Path) -> None:
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        eid = await _line_reader(handle, scope)
        for method, params in (
            (EXEC_READ, {"execution_id": eid, "cursor": ""}),
            (EXEC_WAIT, {"execution_ids": [eid], "after": "", "timeout_ms": 0}),
        ):
            with pytest.raises(TetherError) as refused:
                await handle.call(method, {**scope, **params}, timeout_s=10)
            assert refused.value.code == ErrorCode.INVALID_CURSOR, (method, refused.value)
