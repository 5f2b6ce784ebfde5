"""The protocol surface the MCP conformance suite checks: header values over HTTP read
without the spaces and tabs around them (RFC 9110 §5.5) for every header Tether reads
(Host,
Authorization, MCP-Protocol-Version, Mcp-Session-Id), sent over a raw socket since HTTP
clients refuse to send such values; an unknown tool as a protocol error; logging/setLevel;
prompts and resources declared, with none of either (docs/tools.md#mcp-surface)."""

from __future__ import annotations

import asyncio
import json
import secrets
import warnings
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError

from tests.mcp_helpers import http_client, http_server, write_principals
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

TOKEN = secrets.token_urlsafe(32)
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


async def _post(port: int, headers: list[tuple[str, str]], body: dict[str, object]
                ) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 POST /mcp with exactly these header lines; (status, headers, body)."""
    data = json.dumps(body).encode()
    lines = ["POST /mcp HTTP/1.1", *(f"{name}:{value}" for name, value in headers),
             "Content-Type: application/json", "Accept: application/json, text/event-stream",
             f"Content-Length: {len(data)}", "Connection: close"]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), timeout=20)
    finally:
        writer.close()
    head, _, rest = reply.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), found, rest


async def test_whitespace_around_header_values_is_not_part_of_them(
        tether_env: Config, tmp_path: Path) -> None:
    principals = write_principals(tmp_path / "principals.toml",
                                  [{"id": "alice", "token": TOKEN, "profile": "full"}])
    with http_server(principals) as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        padded = [("Host", f"  127.0.0.1:{port} \t "), ("Authorization", f" Bearer {TOKEN}\t  "),
                  ("MCP-Protocol-Version", " 2025-11-25  ")]
        status, headers, body = await _post(port, padded, INIT)
        assert status == 200, (status, body)
        session = headers["mcp-session-id"]
        padded_session = [*padded, ("Mcp-Session-Id", f"  {session}\t ")]
        status, _, body = await _post(port, padded_session, {
            "jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202, (status, body)
        status, _, body = await _post(port, padded_session, {
            "jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert status == 200 and b"BashCommand" in body, (status, body)
        # A wrong value stays wrong: trimming changes nothing else.
        status, _, _ = await _post(port, [("Host", f"127.0.0.1:{port} "),
                                          ("Authorization", f"Bearer {TOKEN}x ")], INIT)
        assert status == 401
        status, _, _ = await _post(port, [("Host", "evil.example:80 "),
                                          ("Authorization", f"Bearer {TOKEN} ")], INIT)
        assert status == 421


async def test_an_unknown_tool_is_a_protocol_error_over_http(
        tether_env: Config, tmp_path: Path) -> None:
    """The MCP specification lists an unknown tool among protocol errors (-32602), not tool
    results; stdio answers the same (tests/test_direct_calls.py)."""
    principals = write_principals(tmp_path / "principals.toml",
                                  [{"id": "alice", "token": TOKEN, "profile": "full"}])
    with http_server(principals) as url:
        async with http_client(url, TOKEN) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("NoSuchTool", {})
    assert raised.value.error.code == -32602
    assert "unknown tool 'NoSuchTool'" in raised.value.error.message


async def test_prompts_and_resources_are_declared_and_empty_over_http(
        tether_env: Config, tmp_path: Path) -> None:
    """Both are declared and listed empty, with the caching hints tools/list has; asking for
    one by name is -32602 naming it; a request without the token is refused, as for tools."""
    principals = write_principals(tmp_path / "principals.toml",
                                  [{"id": "alice", "token": TOKEN, "profile": "full"}])
    with http_server(principals) as url:
        async with http_client(url, TOKEN) as client:
            capabilities = client.server_capabilities
            assert capabilities.prompts is not None and capabilities.resources is not None
            assert capabilities.resources.subscribe is not True  # no subscriptions
            assert capabilities.completions is None
            prompts = await client.list_prompts()
            resources = await client.list_resources()
            templates = await client.list_resource_templates()
            assert (prompts.prompts, resources.resources, templates.resource_templates) == (
                [], [], [])
            tools = await client.list_tools()
            for listed in (prompts, resources, templates):
                assert (listed.ttl_ms, listed.cache_scope) == (tools.ttl_ms, tools.cache_scope)
            with pytest.raises(MCPError) as unread:
                await client.read_resource("test://nonexistent")
            assert unread.value.error.code == -32602
            assert unread.value.error.data == {"uri": "test://nonexistent"}
            with pytest.raises(MCPError) as unknown:
                await client.get_prompt("nonexistent")
            assert unknown.value.error.code == -32602
            assert unknown.value.error.data == {"name": "nonexistent"}
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        status, _, _ = await _post(port, [("Host", f"127.0.0.1:{port}")], {
            "jsonrpc": "2.0", "id": 1, "method": "prompts/list"})
        assert status == 401


async def test_a_logging_level_is_accepted_in_the_handshake_era(tether_env: Config) -> None:
    """``logging/setLevel`` is answered ``{}`` (Tether logs nothing at any level, so every
    level holds), not -32601: handshake-era clients and the conformance suite set one. From
    protocol 2026-07-28 on the method is gone, and the SDK says so."""
    async with Client(build_server(tether_env), mode="legacy") as client:
        assert client.server_capabilities is not None
        assert client.server_capabilities.logging is not None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # the client's own warning
            answered = await client.set_logging_level("info")
    assert answered.model_dump(exclude_none=True) == {}
