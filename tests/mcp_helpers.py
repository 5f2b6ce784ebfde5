"""Calling Tether's tools through a real MCP client, with readable failures."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, cast

import httpx2
import psutil
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import stdio_params
from tests.helpers import poll, tether_processes
from tether.shared.config import Config


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; returns the structured content."""
    result = await client.call_tool(tool, args)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None, result
    assert not result.is_error and content["ok"], content
    return content


async def call_error(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must fail; returns the structured content (with ``code``)."""
    result = await client.call_tool(tool, args)
    content: dict[str, Any] | None = result.structured_content
    assert content is not None, result
    assert result.is_error and not content["ok"], content
    return content


async def agent(client: Client, session: dict[str, Any], args: dict[str, Any],
                error: bool = False) -> dict[str, Any]:
    """Call the Agent tool in ``session``; ``error=True`` expects (and returns) a failure."""
    full = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"], **args}
    if error:
        return await call_error(client, "Agent", full)
    return await call(client, "Agent", full)


def prompt_log(log: Path) -> list[str]:
    """Prompts the fake agent received, in order (one JSON line each in its ``--log``)."""
    if not log.exists():
        return []
    return [json.loads(line)["received"] for line in log.read_text().splitlines() if line]


async def initialize(client: Client, workspace: Path, thread_id: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"type": "first_call", "workspace_root": str(workspace)}
    if thread_id:
        args["thread_id"] = thread_id
    data: dict[str, Any] = (await call(client, "Initialize", args))["data"]
    return data


async def bash(client: Client, session: dict[str, Any], action: dict[str, Any],
               wait: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"thread_id": session["thread_id"],
                            "workspace_root": session["workspace_root"], "action_json": action}
    if wait is not None:
        args["wait_for_seconds"] = wait
    data: dict[str, Any] = (await call(client, "BashCommand", args))["data"]
    return data


async def run(client: Client, session: dict[str, Any], command: str,
              wait: float | None = 10) -> dict[str, Any]:
    return await bash(client, session, {"type": "command", "command": command}, wait)


async def execution(client: Client, session: dict[str, Any], action: dict[str, Any],
                    expect_error: bool = False) -> dict[str, Any]:
    args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action": action}
    if expect_error:
        return await call_error(client, "Execution", args)
    return await call(client, "Execution", args)


async def read_pages(client: Client, session: dict[str, Any], execution_id: str,
                     page_bytes: int = 16 * 1024) -> list[dict[str, Any]]:
    """Every page of an execution's retained output, following the cursors."""
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        action: dict[str, Any] = {"type": "read", "execution_id": execution_id,
                                  "page_bytes": page_bytes}
        if cursor:
            action["cursor"] = cursor
        page = (await execution(client, session, action))["data"]
        pages.append(page)
        if not page["has_more"]:
            return pages
        cursor = page["next_cursor"]


async def kill_front_end(client: Client, config: Config) -> None:
    """SIGKILL the one ``tether serve`` process behind a stdio ``client`` and close it."""
    serve = poll(lambda: tether_processes(config.runtime_dir, "serve"),
                 what="tether serve process")
    assert len(serve) == 1
    os.kill(serve[0].pid, signal.SIGKILL)

    def gone() -> bool:
        try:  # it may vanish between the two questions
            return not serve[0].is_running() or serve[0].status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    poll(gone, what="front-end to die")
    with contextlib.suppress(BaseException):  # the transport is gone: closing may raise
        await client.__aexit__(None, None, None)


def http_client(url: str, token: str | None, statuses: list[int] | None = None) -> Client:
    """The SDK's streamable HTTP client, sending ``Authorization: Bearer <token>``; the HTTP
    status of every response is appended to ``statuses`` when given."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300),
                              event_hooks={"response": [record]})
    return Client(streamable_http_client(url, http_client=http))


def write_principals(path: Path, principals: list[dict[str, Any]], mode: int = 0o600) -> Path:
    """A principals file (TOML) with one [[principal]] table per dict."""
    lines = []
    for principal in principals:
        lines.append("[[principal]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in principal.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    path.chmod(mode)
    return path


@contextlib.contextmanager
def http_server(principals: Path, *extra: str, log: Path | None = None) -> Iterator[str]:
    """A real ``tether serve --http`` on a free loopback port; yields its /mcp URL.

    Its stderr goes to ``log`` (so tests can search it); it is stopped (SIGTERM, then
    SIGKILL) on exit. Guardians it started are left to the ``tether_env`` teardown.
    """
    log = log or principals.with_suffix(".log")
    tether = Path(sys.executable).with_name("tether")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [str(tether), "serve", "--http", "--port", "0", "--principals", str(principals),
             "--log-level", "INFO", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        found = poll(lambda: re.search(r"at (http://\S+/mcp)", log.read_text())
                     or proc.poll() is not None, what="tether serve --http to listen")
        assert isinstance(found, re.Match), log.read_text()
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

class Lines:
    """JSON-RPC messages read from a stream (``read(n)`` gives bytes), one per line."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._buffer = b""

    def next(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            chunk = self._read(65536)
            assert chunk, "tether serve closed its stdout"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


# -- raw JSON-RPC lines to a real ``tether serve`` -------------------------------------------

INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "transport-test", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def json_line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def spawn_serve(stdin: Any, stdout: Any, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """``tether serve`` on the given stdin and stdout, logging at DEBUG into ``log``."""
    params = stdio_params()
    return subprocess.Popen([params.command, *params.args, "--log-level", "DEBUG"],
                            stdin=stdin, stdout=stdout, stderr=log)


def serve_on_pipes(
    log: IO[bytes],
) -> tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes], Lines]:
    """``tether serve`` on two pipes, past the handshake (its first reply read): the process,
    its stdin and stdout, and its replies."""
    proc = spawn_serve(subprocess.PIPE, subprocess.PIPE, log)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json_line(INITIALIZE) + json_line(INITIALIZED))
    proc.stdin.flush()
    replies = Lines(cast(io.BufferedReader, proc.stdout).read1)  # typed IO[bytes], buffered
    assert "result" in replies.next()
    return proc, proc.stdin, proc.stdout, replies


def stop_serve(proc: subprocess.Popen[bytes]) -> int:
    """Wait up to 10 s for ``tether serve`` to end (its stdin closed), then kill it; its
    exit status."""
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
