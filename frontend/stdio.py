"""``tether serve``'s stdio transport: every request line gets an answer.

The MCP SDK's stdio reader (``mcp.server.stdio``) decodes stdin with ``errors="replace"``, so
invalid UTF-8 silently becomes U+FFFD, and it hands any line it cannot parse or validate to
the dispatcher as an exception, which only logs it: a client that sent a lone surrogate
(``"\\ud800"``, which the SDK's JSON parser rejects) waits for an answer forever.

This module screens each raw line before the SDK sees it and answers what the SDK would drop:

- not JSON → ``-32700`` parse error (with the id when one can still be read from the text);
- JSON but not a JSON-RPC message → ``-32600`` invalid request, with its id;
- a lone surrogate or invalid UTF-8 anywhere in a request → for ``tools/call`` arguments, a
  tool error ``invalid_request`` naming the field and offset (as for a NUL byte); elsewhere
  ``-32602`` invalid params naming the field. Bytes are decoded with ``surrogateescape`` so
  invalid UTF-8 is kept, never replaced, and refused like a lone surrogate.

Notifications and responses cannot be answered (JSON-RPC forbids it): bad ones are logged.
Good lines go to the SDK's own reader unchanged; its writer and stream handling are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, BinaryIO, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.frontend import results
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.text import first_surrogate, unsafe_text_message

log = logging.getLogger(__name__)

#: The id of a request whose JSON does not parse, if it can still be read from the text.
_ID_IN_TEXT = re.compile(r'"id"\s*:\s*(-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,256}")')

Reply = types.JSONRPCError | types.JSONRPCResponse


def screen_line(raw: bytes) -> str | Reply | None:
    """One stdin line: the text to pass to the SDK, a reply to send instead, or None (drop)."""
    text = raw.decode("utf-8", "surrogateescape")
    if not text.strip():
        return None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return _error(_sniff_id(text), types.PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(obj, dict):
        return _error(None, types.INVALID_REQUEST,
                      "Invalid Request: a message must be a JSON object (batches are not supported)")
    rid = obj.get("id")
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    is_request = rid is not None and isinstance(obj.get("method"), str)
    found = first_surrogate(obj)
    if found is not None:
        path, offset = found
        if not is_request:
            log.warning("dropped a notification or response holding invalid UTF-8 or a lone "
                        "surrogate at %s", _dotted(path))
            return None
        assert rid is not None
        return _refuse_text(rid, obj, path, offset)
    try:
        types.jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except ValidationError as exc:
        if not is_request and rid is None:
            log.warning("dropped an invalid JSON-RPC message without an id: %s", exc.errors()[:1])
            return None
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}"
                             for e in exc.errors()[:3])
        return _error(rid, types.INVALID_REQUEST, f"Invalid Request: {problems}")
    return text


def _refuse_text(rid: str | int, obj: dict[str, Any], path: tuple[str | int, ...],
                 offset: int) -> Reply:
    what = "invalid UTF-8 or a lone surrogate"
    if obj.get("method") == "tools/call" and path[:2] == ("params", "arguments") and len(path) > 2:
        # A tool's argument: the same tool error as a NUL byte in it gets (refused, not altered).
        field = _dotted(path[2:])
        err = TetherError(
            ErrorCode.INVALID_REQUEST,
            f"invalid arguments: {field}: {unsafe_text_message(what, offset)}",
            {"input_sent": False, "field": field, "offset": offset},
        )
        result = results.error(err).model_dump(by_alias=True, exclude_none=True, mode="json")
        return types.JSONRPCResponse(jsonrpc="2.0", id=rid, result=result)
    return _error(rid, types.INVALID_PARAMS,
                  f"Invalid params: {_dotted(path)} holds {what} at character offset {offset}")


def _error(rid: str | int | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=rid,
                              error=types.ErrorData(code=code, message=message))


def _sniff_id(text: str) -> str | int | None:
    match = _ID_IN_TEXT.search(text)
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    if isinstance(value, str) and first_surrogate(value) is not None:
        return None  # an id we could not echo back as valid JSON
    return cast(str | int, value)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _dotted(path: tuple[str | int, ...]) -> str:
    """A field path for a message; a surrogate in a key is escaped (echoing it raw would
    make the reply itself unencodable)."""
    text = ".".join(str(p) for p in path) or "message"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@contextlib.contextmanager
def _claim_stdin() -> Iterator[BinaryIO]:
    """The wire's stdin on a private descriptor; fd 0 reads /dev/null meanwhile, so nothing
    else in this process (or a child) can eat protocol bytes. Restored on exit."""
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield sys.stdin.buffer
        return
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    try:
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, 0)
        # Left open on purpose: a worker thread may still be blocked reading it.


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Any, Any]]:
    """Like ``mcp.server.stdio.stdio_server()``, with every line screened by :func:`screen_line`."""
    write_ready = anyio.Event()
    holder: list[Any] = []

    with _claim_stdin() as wire:

        async def lines() -> AsyncIterator[str]:
            await write_ready.wait()
            write = holder[0]
            async for raw in anyio.wrap_file(wire):
                try:
                    checked = screen_line(raw)
                except Exception:  # a bug here must not end the session: let the SDK judge
                    log.exception("could not screen a stdin line; passing it on unchanged")
                    checked = raw.decode("utf-8", "replace")
                if isinstance(checked, str):
                    yield checked
                elif checked is not None:
                    try:
                        await write.send(SessionMessage(checked))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return

        async with stdio_server(stdin=cast(Any, lines())) as (read_stream, write_stream):
            holder.append(write_stream)
            write_ready.set()
            yield read_stream, write_stream
