"""Tool results: ``{ok, status, code?, message?, data}`` as structured content plus text.

A guardian's reply stays its typed model up to here: :func:`as_data` and :func:`ok` are the
one place a reply becomes a tool result's ``data`` (its wire map, as the guardian sent it,
not serialised again).
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from tether.protocol.errors import TetherError
from tether.protocol.results import Result


def status_words(status: str, exit_code: int | None, reason: str | None) -> str:
    """A record's end for a text summary: ``exited 0``, ``unknown (guardian_lost)``,
    ``running``; a missing exit code is left out (never Python's ``None``), a reason kept."""
    words = status if exit_code is None else f"{status} {exit_code}"
    return f"{words} ({reason})" if reason else words


def as_data(reply: Result, **extra: Any) -> dict[str, Any]:
    """``reply`` as a tool result's ``data``: the fields the guardian sent (a newer
    guardian's unknown ones included), with ``extra`` added or replaced. The map is a new
    one at the top; nested maps are the reply's own (the tool may add to them as its
    output).
    """
    return {**reply.wire(), **extra}


def ok(result: Result | dict[str, Any], text: str, *, status: str = "ok"
       ) -> types.CallToolResult:
    """A successful result (``status`` may be ``completed_with_issues``): ``result`` is a
    reply passed on as it is, or the ``data`` a tool made of its replies."""
    content: dict[str, Any] = {"ok": True, "status": status,
                               "data": result.wire() if isinstance(result, Result) else result}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=content,
        is_error=False,
    )


def issues(data: dict[str, Any], code: str, message: str, *, text: str | None = None
           ) -> types.CallToolResult:
    """Completed, but some items failed: the good ones are in ``data`` (``text``: what a
    person reads of it, else the data in short)."""
    content = {"ok": True, "status": "completed_with_issues", "code": code, "message": message,
               "data": data}
    return types.CallToolResult(
        content=[types.TextContent(type="text",
                                   text=f"{message}\n{_brief(data) if text is None else text}")],
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
