"""Tool results: ``{ok, status, code?, message?, data}`` as structured content plus text."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from tether.protocol.errors import TetherError


def status_words(status: str, exit_code: int | None, reason: str | None) -> str:
    """A record's end for a text summary: ``exited 0``, ``unknown (guardian_lost)``,
    ``running``; a missing exit code is left out (never Python's ``None``), a reason kept."""
    words = status if exit_code is None else f"{status} {exit_code}"
    return f"{words} ({reason})" if reason else words


def ok(data: dict[str, Any], text: str, *, status: str = "ok") -> types.CallToolResult:
    """A successful result (``status`` may be ``completed_with_issues``)."""
    content: dict[str, Any] = {"ok": True, "status": status, "data": data}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=content,
        is_error=False,
    )


def issues(data: dict[str, Any], code: str, message: str) -> types.CallToolResult:
    """Completed, but some items failed: the good ones are in ``data``."""
    content = {"ok": True, "status": "completed_with_issues", "code": code, "message": message,
               "data": data}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"{message}\n{_brief(data)}")],
        structured_content=content,
        is_error=False,
    )


def error(err: TetherError) -> types.CallToolResult:
    """A tool error with its stable code and the rule that was hit."""
    content = {
        "ok": False,
        "status": "error",
        "code": err.code.value,
        "message": err.message,
        "data": err.data,
    }
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"error {err.code.value}: {err.message}")],
        structured_content=content,
        is_error=True,
    )


def _brief(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False)
    return text if len(text) <= 4000 else text[:4000] + "…"


def json_text(data: Any) -> str:
    """Compact JSON for a result's text content."""
    return _brief(data) if isinstance(data, dict) else json.dumps(data, ensure_ascii=False)
