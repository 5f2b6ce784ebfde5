"""Calling Tether's tools through a real MCP client, with readable failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import Client


async def call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; returns the structured content."""
    result = await client.call_tool(tool, args)
    content = result.structured_content
    assert content is not None, result
    assert not result.is_error and content["ok"], content
    return content


async def call_error(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must fail; returns the structured content (with ``code``)."""
    result = await client.call_tool(tool, args)
    content = result.structured_content
    assert content is not None, result
    assert result.is_error and not content["ok"], content
    return content


async def initialize(client: Client, workspace: Path, thread_id: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"type": "first_call", "workspace_root": str(workspace)}
    if thread_id:
        args["thread_id"] = thread_id
    return (await call(client, "Initialize", args))["data"]


async def bash(client: Client, session: dict[str, Any], action: dict[str, Any],
               wait: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"thread_id": session["thread_id"],
                            "workspace_root": session["workspace_root"], "action_json": action}
    if wait is not None:
        args["wait_for_seconds"] = wait
    return (await call(client, "BashCommand", args))["data"]


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
