"""Scripted model APIs on 127.0.0.1 for ``scripts/interop`` (no network, no real model).

One HTTP server answers three wire formats, each just far enough for the real CLIs:

- Anthropic Messages (``POST /v1/messages``, SSE when ``stream``) for Claude Code;
- OpenAI Responses (``POST /v1/responses``, SSE) for Codex;
- OpenAI Chat Completions (``POST /v1/chat/completions``, SSE) for OpenCode.

What the "model" says is decided by markers in the latest user text, so the driver controls
every turn:

- ``TETHER-RUN``: call the program's shell tool with ``touch created_by_agent.txt`` (the
  driver denies it and checks the file never appears);
- ``TETHER-APPEND``: call the shell tool with ``echo ran >> approved_by_agent.txt`` (the
  approvals check answers it through ``Agent respond``: denied, the file must not appear;
  approved, it must hold one line — the command ran once);
- ``TETHER-PLAN``: (Claude Code in plan mode) present a plan with ``ExitPlanMode``;
- ``TETHER-SLOW``: stream a long answer slowly (about 60 s) so the driver can watch the
  program busy and cancel it;
- ``TETHER-STALL``: answer nothing at all for about 60 s (not even the response headers), so
  the driver can cancel a turn before the program has any of the answer (Claude Code then
  puts the cancelled prompt back into its input box);
- a tool result (approved or denied) or anything else: a short text answer.

Every request is appended to a JSON-lines log (``--log``) with the marker it carried and the
text the user typed (``user_parts``: the parts of the latest user message, tool results and
the program's own ``<system-reminder>``-style wrappers left out), so the driver can count how
many times a prompt reached the model (a prompt delivered once reaches it once) and compare
what arrived with what it sent, exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MARKER = re.compile(r"TETHER-[A-Z]+(?:-[0-9a-z]+)?")
SLOW_SECONDS = 60.0
SHELL_COMMAND = "touch created_by_agent.txt"
APPEND_COMMAND = "echo ran >> approved_by_agent.txt"


def _texts(value: Any) -> list[str]:
    """Every string inside a message content value (strings, parts, nested lists)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _texts(item)]
    if isinstance(value, dict):
        out: list[str] = []
        for key in ("text", "content", "output", "input_text"):
            if key in value:
                out += _texts(value[key])
        return out
    return []


def _last_is_tool_result(items: list[Any]) -> bool:
    """Whether the conversation ends with tool results and nothing the user typed."""
    if not items:
        return False
    last = items[-1]
    if not isinstance(last, dict):
        return False
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        return True
    if last.get("role") == "tool":
        return True
    content = last.get("content")
    if not isinstance(content, list) or not content:
        return False
    # Claude Code sends the user's next prompt in the same message as a rejected tool's
    # result: that is a new prompt, not a bare tool result.
    return all(isinstance(part, dict) and part.get("type") == "tool_result" for part in content)


def _last_user_text(items: list[Any]) -> str:
    """What the user typed last (tool results inside the message left out)."""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                content = [part for part in content
                           if not (isinstance(part, dict) and part.get("type") == "tool_result")]
            return "\n".join(_texts(content))
    return ""


#: A part of a user message that the program wrapped around context of its own (Claude Code's
#: ``<system-reminder>``, Codex's ``<environment_context>``, ...): not what the user typed.
_WRAPPER = re.compile(r"\A\s*<([a-z_-]+)>.*</\1>\s*\Z", re.DOTALL)


def _last_user_parts(items: list[Any]) -> list[str]:
    """The text parts of the latest user message, as the program sent them, minus tool
    results and the program's own wrapped context: what the user typed, part by part."""
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                parts = [text for part in content
                         if not (isinstance(part, dict) and part.get("type") == "tool_result")
                         for text in _texts(part)]
            else:
                parts = _texts(content)
            return [text for text in parts if not _WRAPPER.match(text)]
    return []


def _first_user_text(items: list[Any]) -> str:
    for item in items:
        if isinstance(item, dict) and item.get("role") == "user":
            text = "\n".join(_texts(item.get("content")))
            if "TETHER-" in text:
                return text
    return ""


def _tool_outputs(items: list[Any]) -> list[str]:
    """The text of every tool result in the conversation, oldest first."""
    out: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out.append("\n".join(_texts(item.get("output"))))
        elif item.get("role") == "tool":
            out.append("\n".join(_texts(item.get("content"))))
        elif isinstance(item.get("content"), list):
            out += ["\n".join(_texts(part.get("content"))) for part in item["content"]
                    if isinstance(part, dict) and part.get("type") == "tool_result"]
    return out


Decision = tuple[str, str, dict[str, Any]]
"""``(kind, value, args)``: ``("tool", name, arguments)``, ``("slow", "", {})`` or
``("text", answer, {})``."""


def decide(items: list[Any], shell_tools: list[str], all_tools: list[str]) -> Decision:
    """The scripted turn for a conversation (see the module docstring)."""
    first = _first_user_text(items)
    if "TETHER-MCP" in first:
        return _mcp_turn(first, _tool_outputs(items), all_tools)
    if _last_is_tool_result(items):
        return "text", "Understood: the command was not run. Nothing else to do.", {}
    text = _last_user_text(items)
    if "TETHER-RUN" in text and shell_tools:
        return "tool", shell_tools[0], {}
    if "TETHER-APPEND" in text and shell_tools:
        return "append", shell_tools[0], {}
    if "TETHER-PLAN" in text and "ExitPlanMode" in all_tools:
        # Claude Code in plan mode: present a plan, which the user must confirm.
        return "tool", "ExitPlanMode", {"plan": "1. Create notes.txt\n2. Write one line in it"}
    if "TETHER-SLOW" in text:
        return "slow", "", {}
    found = MARKER.search(text)
    if found:
        return "text", f"Received {found.group(0)}. Hello from the scripted model.", {}
    return "text", "OK.", {}


def _mcp_turn(first: str, outputs: list[str], tools: list[str]) -> Decision:
    """Tether as the client's MCP server: Initialize, then a BashCommand; then, when the
    file tools are offered, EditFiles creates ``interop.txt``, ReadFiles reads it with its
    revision, and EditFiles changes it against that revision; then report."""
    workspace = re.search(r"workspace=([^\s\"'\\]+)", first)
    init = next((t for t in tools if t.endswith("Initialize")), None)
    bash = next((t for t in tools if t.endswith("BashCommand")), None)
    read = next((t for t in tools if t.endswith("ReadFiles")), None)
    edit = next((t for t in tools if t.endswith("EditFiles")), None)
    if workspace is None or init is None or bash is None:
        return "text", f"MCP-FAIL: Tether tools not offered (tools: {', '.join(tools)[:300]})", {}
    root = workspace.group(1)
    if not outputs:
        return "tool", init, {"type": "first_call", "workspace_root": root}
    thread = re.search(r'thread_id"?\s*[:=]\s*"?([A-Za-z0-9_-]+)', outputs[0]) or re.search(
        r"thread ([A-Za-z0-9_-]+) in", outputs[0])
    if thread is None:
        return "text", f"MCP-FAIL: no thread_id in the Initialize result: {outputs[0][:300]}", {}
    scope = {"thread_id": thread.group(1), "workspace_root": root}
    if len(outputs) == 1:
        return "tool", bash, {**scope, "action_json": {"type": "command",
                                                       "command": "echo tether-interop-$((6*7))"}}
    if "tether-interop-42" not in outputs[1]:
        return "text", f"MCP-FAIL: BashCommand said: {outputs[1][:300]}", {}
    if read is None or edit is None:
        return "text", "MCP-OK tether-interop-42 came back through Tether.", {}
    return _files_turn(outputs[2:], scope, read, edit)


#: What the file checks write, and what the file must hold at the end.
FILES_FIRST, FILES_LAST = "one\n", "two\n"


def _files_turn(outputs: list[str], scope: dict[str, Any], read: str, edit: str) -> Decision:
    if not outputs:
        return "tool", edit, {**scope, "edits": [{"path": "interop.txt", "content": FILES_FIRST}]}
    if len(outputs) == 1:
        if "created" not in outputs[0]:
            return "text", f"MCP-FAIL: EditFiles did not create the file: {outputs[0][:300]}", {}
        return "tool", read, {**scope, "paths": ["interop.txt"]}
    if len(outputs) == 2:
        revision = re.search(r"r1-[0-9a-f]{32}", outputs[1])
        if revision is None:
            return "text", f"MCP-FAIL: no revision in the ReadFiles result: {outputs[1][:300]}", {}
        return "tool", edit, {**scope, "edits": [{
            "path": "interop.txt", "revision": revision.group(0),
            "blocks": [{"search": FILES_FIRST, "replace": FILES_LAST}]}]}
    if "written" in outputs[2] and re.search(r"r1-[0-9a-f]{32}", outputs[2]):
        return "text", ("MCP-OK tether-interop-42 came back through Tether; interop.txt created, "
                        "read and edited against its revision."), {}
    return "text", f"MCP-FAIL: the EditFiles against the revision said: {outputs[2][:300]}", {}


class Models:
    """The shared state of the server: the request log."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.count = 0

    def record(self, path: str, body: dict[str, Any], items: list[Any], decision: Decision,
               tether_tools: dict[str, Any]) -> None:
        entry = {"t": time.time(), "path": path, "model": body.get("model"),
                 "markers": sorted(set(MARKER.findall(_last_user_text(items)))),
                 "user_parts": _last_user_parts(items),
                 "tool_result": _last_is_tool_result(items), "decision": decision[0],
                 # What the program told the model of the last tool call (a denial's words).
                 "last_tool_output": next(reversed(_tool_outputs(items)), None),
                 "value": decision[1][:200], "tools": len(body.get("tools") or [])}
        if tether_tools:
            # The schemas exactly as the client handed them to the model: compared with
            # Tether's own by the driver, to see what a client rewrites.
            entry["tether_tools"] = tether_tools
        with self.lock:
            self.count += 1
            with self.log.open("a") as out:
                out.write(json.dumps(entry) + "\n")
            if os.environ.get("TETHER_INTEROP_DUMP"):
                with Path(os.environ["TETHER_INTEROP_DUMP"]).open("a") as out:
                    out.write(json.dumps(body) + "\n")


def make_handler(models: Models) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        # -- plumbing ------------------------------------------------------------------

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                data = json.loads(raw or b"{}")
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse_start(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

        def _event(self, name: str | None, payload: Any) -> None:
            chunk = (f"event: {name}\n" if name else "") + f"data: {json.dumps(payload)}\n\n"
            self.wfile.write(chunk.encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [
                    {"id": "scripted-model", "object": "model", "created": 0, "owned_by": "tether"}],
                    "models": []})
            else:
                self._json(200, {"ok": True})

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            body = self._body()
            path = self.path.split("?", 1)[0]
            try:
                if _stalls(body):
                    # Logged on arrival: the driver cancels once the request has come.
                    items = list(body.get("messages") or body.get("input") or [])
                    models.record(self.path, body, items, ("stall", "", {}), {})
                    if not _stalled(self.connection):
                        self.close_connection = True
                        return  # the client gave up (cancelled): answer nothing
                if path.endswith("/messages/count_tokens"):
                    self._json(200, {"input_tokens": 12})
                elif path.endswith("/messages"):
                    self._anthropic(body)
                elif path.endswith("/responses"):
                    self._responses(body)
                elif path.endswith("/chat/completions"):
                    self._chat(body)
                else:
                    self._json(404, {"error": {"type": "not_found", "message": path}})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client cancelled: exactly what the cancel test does

        # -- Anthropic Messages ----------------------------------------------------------

        def _anthropic(self, body: dict[str, Any]) -> None:
            items = list(body.get("messages") or [])
            names = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
            decision = decide(items, [n for n in names if n == "Bash"], names)
            models.record(self.path, body, items, decision, {
                str(t.get("name")): t.get("input_schema") for t in body.get("tools") or []
                if isinstance(t, dict) and "tether" in str(t.get("name"))})
            model = body.get("model") or "claude-scripted"
            msg_id = f"msg_{models.count:06d}"
            usage = {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
                     "cache_read_input_tokens": 0}
            kind, value, call_args = decision
            if not body.get("stream"):
                content: list[dict[str, Any]] = [{"type": "text", "text": value or "OK."}]
                self._json(200, {"id": msg_id, "type": "message", "role": "assistant",
                                 "model": model, "content": content, "stop_reason": "end_turn",
                                 "stop_sequence": None, "usage": usage})
                return
            self._sse_start()
            self._event("message_start", {"type": "message_start", "message": {
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}})
            if kind in ("tool", "append"):
                command = APPEND_COMMAND if kind == "append" else SHELL_COMMAND
                self._event("content_block_start", {"type": "content_block_start", "index": 0,
                    "content_block": {"type": "tool_use", "id": f"toolu_{models.count:06d}",
                                      "name": value, "input": {}}})
                args = json.dumps(call_args or {"command": command,
                                                 "description": "Create an empty file"})
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": args}})
                stop = "tool_use"
            else:
                self._event("content_block_start", {"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}})
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": "Working slowly" if kind == "slow" else value}})
                if kind == "slow":
                    self._slow(lambda piece: self._event("content_block_delta", {
                        "type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": piece}}))
                stop = "end_turn"
            self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
            self._event("message_delta", {"type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": 5}})
            self._event("message_stop", {"type": "message_stop"})

        # -- OpenAI Responses ------------------------------------------------------------

        def _responses(self, body: dict[str, Any]) -> None:
            items = list(body.get("input") or [])
            names, schemas = _responses_tools(body.get("tools") or [])
            shell = [n for n in names if n in ("shell", "exec_command", "shell_command", "local_shell")]
            decision = decide(items, shell, names)
            models.record(self.path, body, items, decision,
                          {n: v for n, v in schemas.items() if "tether" in n})
            resp_id = f"resp_{models.count:06d}"
            self._sse_start()
            base: dict[str, Any] = {
                "id": resp_id, "object": "response", "created_at": int(time.time()),
                "status": "in_progress", "model": body.get("model"), "output": []}
            self._event("response.created", {"type": "response.created", "response": base})
            kind, value, call_args = decision
            if kind in ("tool", "append"):
                command = APPEND_COMMAND if kind == "append" else SHELL_COMMAND
                if call_args:
                    args = call_args
                elif value == "exec_command":
                    # Asking for escalation is what makes Codex show its approval question.
                    args = {"cmd": command, "sandbox_permissions": "require_escalated",
                            "justification": "Create an empty file in the project?"}
                elif value == "shell_command":
                    args = {"command": command}
                else:
                    args = {"command": ["bash", "-lc", command]}
                namespace, _, name = value.rpartition("/")
                item: dict[str, Any] = {"type": "function_call", "id": f"fc_{models.count}",
                                        "call_id": f"call_{models.count}", "name": name,
                                        "arguments": json.dumps(args), "status": "completed"}
                if namespace:
                    item["namespace"] = namespace
                self._event("response.output_item.added",
                            {"type": "response.output_item.added", "output_index": 0, "item": item})
                self._event("response.output_item.done",
                            {"type": "response.output_item.done", "output_index": 0, "item": item})
            else:
                item_id = f"msg_{models.count}"
                self._event("response.output_item.added", {
                    "type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "message", "id": item_id, "role": "assistant",
                             "status": "in_progress", "content": []}})
                text = "Working slowly" if kind == "slow" else value
                self._event("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "delta": text})
                if kind == "slow":
                    self._slow(lambda piece: self._event("response.output_text.delta", {
                        "type": "response.output_text.delta", "item_id": item_id,
                        "output_index": 0, "content_index": 0, "delta": piece}))
                    text += " ... done."
                self._event("response.output_item.done", {
                    "type": "response.output_item.done", "output_index": 0,
                    "item": {"type": "message", "id": item_id, "role": "assistant",
                             "status": "completed",
                             "content": [{"type": "output_text", "text": text, "annotations": []}]}})
            done = {**base, "status": "completed", "usage": {
                "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 15}}
            self._event("response.completed", {"type": "response.completed", "response": done})

        # -- OpenAI Chat Completions -------------------------------------------------------

        def _chat(self, body: dict[str, Any]) -> None:
            items = list(body.get("messages") or [])
            names = [str((t.get("function") or {}).get("name")) for t in body.get("tools") or []
                     if isinstance(t, dict)]
            decision = decide(items, [n for n in names if n == "bash"], names)
            models.record(self.path, body, items, decision, {
                str((t.get("function") or {}).get("name")): (t.get("function") or {}).get("parameters")
                for t in body.get("tools") or [] if isinstance(t, dict)
                and "tether" in str((t.get("function") or {}).get("name"))})
            chat_id = f"chatcmpl-{models.count:06d}"
            model = body.get("model") or "scripted-model"
            kind, value, call_args = decision
            if not body.get("stream"):
                self._json(200, {"id": chat_id, "object": "chat.completion", "created": 0,
                                 "model": model, "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": value or "OK."}}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                           "total_tokens": 15}})
                return
            self._sse_start()

            def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
                self._event(None, {"id": chat_id, "object": "chat.completion.chunk", "created": 0,
                                   "model": model, "choices": [{"index": 0, "delta": delta,
                                                                "finish_reason": finish}]})

            chunk({"role": "assistant", "content": ""})
            if kind in ("tool", "append"):
                args = json.dumps(call_args or {"command": APPEND_COMMAND if kind == "append"
                                                else SHELL_COMMAND,
                                                 "description": "Create an empty file"})
                chunk({"tool_calls": [{"index": 0, "id": f"call_{models.count}", "type": "function",
                                       "function": {"name": value, "arguments": args}}]})
                chunk({}, "tool_calls")
            else:
                chunk({"content": "Working slowly" if kind == "slow" else value})
                if kind == "slow":
                    self._slow(lambda piece: chunk({"content": piece}))
                chunk({}, "stop")
            self._event(None, {"id": chat_id, "object": "chat.completion.chunk", "created": 0,
                               "model": model, "choices": [],
                               "usage": {"prompt_tokens": 10, "completion_tokens": 5,
                                         "total_tokens": 15}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _slow(self, send: Any) -> None:
            deadline = time.monotonic() + SLOW_SECONDS
            while time.monotonic() < deadline:
                time.sleep(1.0)
                send(".")

    return Handler


def _stalls(body: dict[str, Any]) -> bool:
    """Whether a main-model request (one that offers tools) is a ``TETHER-STALL`` turn: the
    last marker the user typed is that one (a prompt typed after it is a new turn)."""
    items = list(body.get("messages") or body.get("input") or [])
    markers = MARKER.findall(_last_user_text(items))
    return bool(body.get("tools")) and bool(markers) and markers[-1] == "TETHER-STALL"


def _stalled(conn: socket.socket) -> bool:
    """Say nothing for up to ``SLOW_SECONDS``; ``False`` as soon as the client hangs up
    (what a cancel does), ``True`` when the time ran out with the client still there."""
    deadline = time.monotonic() + SLOW_SECONDS
    while time.monotonic() < deadline:
        readable, _, _ = select.select([conn], [], [], 0.5)
        if readable:
            try:
                if conn.recv(1, socket.MSG_PEEK) == b"":
                    return False
            except OSError:
                return False
            # Bytes of another request on a kept-alive connection: nothing to do with us.
            time.sleep(0.5)
    return True


def _responses_tools(tools: list[Any]) -> tuple[list[str], dict[str, Any]]:
    """Tool names (``namespace/name`` inside a namespace) and schemas of a Responses request."""
    names: list[str] = []
    schemas: dict[str, Any] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict):
                    name = f"{tool.get('name')}/{inner.get('name')}"
                    names.append(name)
                    schemas[name] = inner.get("parameters")
        elif tool.get("name"):
            names.append(str(tool["name"]))
            schemas[str(tool["name"])] = tool.get("parameters")
    return names, schemas


def serve(port: int, log: Path) -> ThreadingHTTPServer:
    """Start the server on 127.0.0.1:``port`` (0 picks one) in a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(Models(log)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    server = serve(args.port, args.log)
    print(server.server_address[1], flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


if __name__ == "__main__":
    main()
