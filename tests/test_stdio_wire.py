"""Raw JSON-RPC lines written to a real ``tether serve``'s stdin (issue 12, case 3 and 5):
every request gets an answer with its id, and bad text is refused, never altered."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import stdio_params
from tether.shared.config import Config


class RawServe:
    """``tether serve`` with pipes: write raw lines, read replies by id."""

    def __init__(self) -> None:
        params = stdio_params()
        self.proc = subprocess.Popen([params.command, *params.args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._buffer = b""
        self._replies: dict[Any, dict[str, Any]] = {}

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: int, method: str, params: dict[str, Any]) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                              "params": params}).encode())

    def reply(self, rid: Any, timeout: float = 15.0) -> dict[str, Any]:
        """The reply with ``rid`` (``None``: an error reply without an id)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while rid not in self._replies:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply with id {rid!r} within {timeout}s (got {self._replies})"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            assert chunk, "tether serve closed stdout"
            self._buffer += chunk
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if "id" in message:
                    self._replies[message["id"]] = message
        return self._replies.pop(rid)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def serve(tether_env: Config) -> Iterator[RawServe]:
    raw = RawServe()
    raw.request(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "raw", "version": "0"}})
    assert "result" in raw.reply(0)
    raw.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    yield raw
    raw.close()


def _call(name: str, arguments: dict[str, Any], rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


def _tool_result(serve: RawServe, rid: int) -> dict[str, Any]:
    reply = serve.reply(rid)
    assert "result" in reply, reply
    content: dict[str, Any] = reply["result"]["structuredContent"]
    return content


def test_unparseable_and_invalid_lines_get_error_replies(serve: RawServe) -> None:
    serve.send(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{')
    broken = serve.reply(9)
    assert broken["error"]["code"] == -32700
    serve.send(b"not json at all")
    assert serve.reply(None)["error"]["code"] == -32700
    serve.send(b"[1, 2]")
    assert serve.reply(None)["error"]["code"] == -32600
    serve.send(b'{"jsonrpc":"2.0","id":10}')
    assert serve.reply(10)["error"]["code"] == -32600
    serve.send(b'{"jsonrpc":"1.0","id":"s-11","method":"ping"}')
    assert serve.reply("s-11")["error"]["code"] == -32600
    serve.send(b'{"jsonrpc":"2.0","id":12,"method":"ping","params":{"k\\ud800":1}}')
    surrogate_key = serve.reply(12)
    assert surrogate_key["error"]["code"] == -32602
    assert "params" in surrogate_key["error"]["message"]
    serve.send(b'{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":5}}')
    assert serve.reply(13)["error"]["code"] == -32602
    serve.send(b'{"jsonrpc":"2.0","id":14,"method":"ping","params":{"x":NaN}}')
    assert serve.reply(14)["error"]["code"] == -32700
    serve.request(15, "ping", {})
    assert serve.reply(15)["result"] == {}  # still serving


@pytest.mark.parametrize("case", ["escaped_command", "raw_invalid_utf8", "text", "workspace"])
def test_bad_text_is_refused_with_field_and_offset(
    case: str, serve: RawServe, workspace: Path
) -> None:
    serve.send(json.dumps(_call("Initialize", {"type": "first_call",
                                               "workspace_root": str(workspace)}, 1)).encode())
    session = _tool_result(serve, 1)["data"]
    scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    marker = workspace / "ran"
    if case == "escaped_command":
        line = json.dumps(_call("BashCommand", {**scope, "action_json": {
            "type": "command", "command": f"touch {marker} a\ud800b"}}, 2)).encode()
        field, offset = "action_json.command", len(f"touch {marker} a")
    elif case == "raw_invalid_utf8":
        template = json.dumps(_call("BashCommand", {**scope, "action_json": {
            "type": "command", "command": f"touch {marker} @@"}}, 2)).encode()
        line = template.replace(b"@@", b"\xff\xfe")  # not UTF-8: never replaced by U+FFFD
        field, offset = "action_json.command", len(f"touch {marker} ")
    elif case == "text":
        line = json.dumps(_call("BashCommand", {**scope, "action_json": {
            "type": "send_text", "text": "ok\udfffno"}}, 2)).encode()
        field, offset = "action_json.text", 2
    else:
        line = json.dumps(_call("Initialize", {"type": "first_call",
                                               "workspace_root": "/tmp/\ud800"}, 2)).encode()
        field, offset = "workspace_root", 5
    serve.send(line)
    refused = _tool_result(serve, 2)
    assert refused["code"] == "invalid_request", refused
    assert refused["data"] == {"input_sent": False, "field": field, "offset": offset}
    assert f"offset {offset}" in refused["message"]
    serve.send(json.dumps(_call("Execution", {**scope, "action": {"type": "list"}}, 3)).encode())
    assert _tool_result(serve, 3)["data"]["executions"] == []
    assert not marker.exists()
