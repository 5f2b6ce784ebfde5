"""Plain ``tools/call`` requests skip the SDK's per-request machinery (``frontend/transport/direct.py``):
the answers are the SDK's, byte for byte, in both protocol eras; anything but the plain case
still goes to the SDK; a cancelled call is not answered, and the end of input answers the calls
still running."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import poll, tether_processes
from tests.mcp_helpers import INITIALIZE, INITIALIZED, Lines, json_line, serve_on_pipes, stop_serve
from tether.frontend.transport import direct, stdio
from tether.frontend.transport.mcp_server import build_server
from tether.frontend.usage import UsageLog
from tether.shared.config import Config

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": {"name": "direct-test", "version": "0"}}
def _call(rid: int | str, name: str, arguments: Any, meta: dict[str, Any] | None = None,
          **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, **extra}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


class _Feed:
    """Lines to read, then the end of input once ``answers`` replies were written."""

    def __init__(self, lines: list[bytes], answers: int) -> None:
        self._lines = lines
        self._answers = answers
        self.written: list[bytes] = []
        self._enough = asyncio.Event()

    async def read(self) -> bytes:
        if self._lines:
            return self._lines.pop(0)
        await asyncio.wait_for(self._enough.wait(), 20)
        return b""

    async def write(self, data: bytes) -> None:
        self.written.append(data)
        if len(self.written) >= self._answers:
            self._enough.set()

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


def _requests(meta: dict[str, Any] | None, rel: str) -> list[dict[str, Any]]:
    """Calls with deterministic answers (no guardian): direct ones and ones the SDK must take."""
    return [
        _call(1, "NoSuchTool", {}, meta),                                 # a protocol error
        _call(2, "Initialize", {"workspace_root": rel}, meta),            # refused by Tether
        _call(3, "BashCommand", {"thread_id": 5}, meta),                  # arguments refused
        _call("four", "Initialize", {"workspace_root": rel, "x": "é✓"}, meta),
        _call(5, "NoSuchTool", {}, {**(meta or {}), "progressToken": 9}),  # the SDK's: progress
        {"jsonrpc": "2.0", "id": 6, "method": "tools/call",               # the SDK's: no name
         "params": {"arguments": {}, **({"_meta": meta} if meta else {})}},
        _call(7, "NoSuchTool", {}, {"io.modelcontextprotocol/protocolVersion": "1999-01-01",
                                    "io.modelcontextprotocol/clientCapabilities": {}}
              if meta else MODERN),                                       # the SDK's: bad era
        _call(8, "Explode", {}, meta),                                    # a handler that raises
    ]


async def _serve(lines: list[bytes], answers: int, *, direct_calls: bool) -> list[bytes]:
    feed = _Feed(lines, answers)
    outbound = stdio.Outbound(feed)
    inbound = stdio.Inbound(feed, outbound)
    server = build_server(Config.from_env())
    await stdio.serve(server, inbound, outbound, server.create_initialization_options(),
                      direct=direct_calls)
    return feed.written


@pytest.mark.anyio
@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_direct_answers_are_the_sdks_byte_for_byte(
    tether_env: Config, monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    meta = MODERN if era == "modern" else None
    head = [json_line(INITIALIZE), json_line(INITIALIZED)] if era == "handshake" else []
    calls = [json_line(r) for r in _requests(meta, "relative/path")]
    # The opening request is the SDK's either way: a ping opens the modern session.
    opening = [json_line({"jsonrpc": "2.0", "id": "p", "method": "ping",
                      "params": {"_meta": MODERN}})] if meta else []
    lines = head + opening + calls
    answers = len(calls) + (1 if head else 0) + len(opening)

    started: list[int | str] = []
    run = direct.DirectCalls._run

    async def spy(self: direct.DirectCalls, rid: int | str, version: str, params: Any) -> None:
        started.append(rid)
        await run(self, rid, version, params)

    monkeypatch.setattr(direct.DirectCalls, "_run", spy)
    around = UsageLog.around

    async def explode(self: UsageLog, tool: str, arguments: Any, run: Any) -> Any:
        if tool == "Explode":
            raise RuntimeError("a detail of the front-end's insides")
        return await around(self, tool, arguments, run)

    monkeypatch.setattr(UsageLog, "around", explode)
    by_sdk = await _serve(list(lines), answers, direct_calls=False)
    assert started == []
    by_direct = await _serve(list(lines), answers, direct_calls=True)
    assert sorted(started, key=str) == sorted([1, 2, 3, "four", 8], key=str)
    assert len(by_sdk) == answers

    def by_id(written: list[bytes]) -> dict[Any, bytes]:
        return {json.loads(line)["id"]: line for line in written}

    assert by_id(by_direct) == by_id(by_sdk)
    # An unknown tool is a protocol error (the MCP specification's -32602), not a tool result,
    # answered the same whichever path ran it.
    unknown = json.loads(by_id(by_direct)[1])["error"]
    assert unknown["code"] == -32602 and "unknown tool 'NoSuchTool'" in unknown["message"]
    assert "BashCommand" in unknown["message"]
    assert "error" in json.loads(by_id(by_direct)[6])  # the SDK's own refusal
    raised = json.loads(by_id(by_direct)[8])["error"]
    if era == "modern":
        assert raised == {"code": -32603, "message": "Internal server error"}


# -- through tether serve --------------------------------------------------------------------


@pytest.fixture
def serve(tether_env: Config, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes],
                                                                   Lines, dict[str, Any]]]:
    """``tether serve`` past the handshake with one shell: process, replies, call arguments."""
    with (tmp_path / "serve.log").open("wb") as log:
        proc, stdin, _, replies = serve_on_pipes(log)
        workspace = tmp_path / "ws"
        workspace.mkdir()
        try:
            stdin.write(json_line(_call(1, "Initialize", {"workspace_root": str(workspace)})))
            stdin.flush()
            data = replies.next()["result"]["structuredContent"]["data"]
            args = {"thread_id": data["thread_id"], "workspace_root": data["workspace_root"]}
            yield proc, replies, args
        finally:
            if not stdin.closed:
                stdin.close()
            stop_serve(proc)


def _command(args: dict[str, Any], command: str, **extra: Any) -> dict[str, Any]:
    return {**args, "action_json": {"type": "command", "command": command}, **extra}


def test_a_cancelled_call_is_not_answered_and_the_session_goes_on(
    serve: tuple[subprocess.Popen[bytes], Lines, dict[str, Any]]
) -> None:
    proc, replies, args = serve
    assert proc.stdin is not None

    def send(*messages: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(json_line(m) for m in messages))
        proc.stdin.flush()

    # Whether the command was typed before the cancel is a race either way (as with the SDK);
    # what is certain is that call 2 is never answered.
    send(_call(2, "BashCommand", _command(args, "sleep 1; echo late", wait_for_seconds=10)),
         {"jsonrpc": "2.0", "method": "notifications/cancelled",
          "params": {"requestId": 2, "reason": "test"}},
         _call(3, "BashCommand", {**args, "action_json": {
             "type": "command", "command": "sleep 2; echo next", "is_background": True}}))
    started = replies.next()
    assert started["id"] == 3, f"a cancelled call was answered: {started}"
    execution = started["result"]["structuredContent"]["data"]["execution_id"]
    # Answered after call 2 would have been, had it not been cancelled.
    send(_call(4, "BashCommand", {**args, "wait_for_seconds": 10, "action_json": {
        "type": "status_check", "execution_id": execution}}))
    finished = replies.next()
    assert finished["id"] == 4, f"a cancelled call was answered: {finished}"
    assert finished["result"]["structuredContent"]["data"]["output"].strip() == "next"


def test_the_end_of_input_answers_the_calls_still_running(
    serve: tuple[subprocess.Popen[bytes], Lines, dict[str, Any]], tether_env: Config
) -> None:
    proc, replies, args = serve
    assert proc.stdin is not None
    proc.stdin.write(json_line(_call(2, "BashCommand", _command(args, "sleep 30",
                                                              wait_for_seconds=60))))
    proc.stdin.flush()
    # The call is under way once its command runs; the answer must come from the end of input.
    poll(lambda: tether_processes(tether_env.runtime_dir, "sleep 30"), what="the command")
    started = time.monotonic()
    proc.stdin.close()
    reply = replies.next()
    assert reply["id"] == 2 and reply["error"]["message"] == "Connection closed"
    assert time.monotonic() - started < 10
    assert poll(lambda: proc.poll() is not None, timeout=10)
    assert proc.returncode == 0
