"""``tether serve``'s stdio transport: every request line gets an answer, with no thread hops.

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
A good line is handed to the SDK as the message the screen already validated (parsed once).

The transport itself replaces the SDK's ``stdio_server``, whose every line read and every
write and flush is a hop to a worker thread and back (about six per tool call): pipes and
sockets are read and written from the event loop (:mod:`tether.frontend.transport.wire`), and the
SDK's serving loop reads this stream directly (:func:`serve`).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, cast

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.frontend.tools import replies
from tether.frontend.transport import wire
from tether.frontend.transport.direct import DirectCalls
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.text import first_surrogate, unsafe_text_message

log = logging.getLogger(__name__)

#: The id of a request whose JSON does not parse, if it can still be read from the text.
_ID_IN_TEXT = re.compile(r'"id"\s*:\s*(-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,256}")')
#: Text that may decode to a lone surrogate: one already in it (invalid UTF-8 decoded with
#: ``surrogateescape``) or a ``\uD800``-``\uDFFF`` escape. Without either, the walk over the
#: decoded message is skipped (an escaped backslash before ``ud8..`` only costs the walk).
_MAY_HOLD_SURROGATE = re.compile("[\ud800-\udfff]|\\\\u[dD][89a-fA-F]")

#: How long the end of a session waits for replies still queued for a slow client.
DRAIN_S = 5.0

Reply = types.JSONRPCError | types.JSONRPCResponse


def screen_line(raw: bytes) -> SessionMessage | Reply | None:
    """One stdin line: the validated message to hand to the SDK, a reply to send instead, or
    None (drop)."""
    text = raw.decode("utf-8", "surrogateescape")
    if not text.strip():
        return None
    try:
        obj = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        return _error(_sniff_id(text), types.PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(obj, dict):
        return _error(None, types.INVALID_REQUEST,
                      "Invalid Request: a message must be a JSON object (batches are not supported)")
    rid = obj.get("id")
    rid = rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None
    is_request = rid is not None and isinstance(obj.get("method"), str)
    found = first_surrogate(obj) if _MAY_HOLD_SURROGATE.search(text) else None
    if found is not None:
        path, offset = found
        if not is_request:
            log.warning("dropped a notification or response holding invalid UTF-8 or a lone "
                        "surrogate at %s", _dotted(path))
            return None
        assert rid is not None
        return _refuse_text(rid, obj, path, offset)
    try:
        message = types.jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except ValidationError as exc:
        if not is_request and rid is None:
            log.warning("dropped an invalid JSON-RPC message without an id: %s", exc.errors()[:1])
            return None
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'message'}: {e['msg']}"
                             for e in exc.errors()[:3])
        return _error(rid, types.INVALID_REQUEST, f"Invalid Request: {problems}")
    return SessionMessage(message)


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
        result = replies.error(err).model_dump(by_alias=True, exclude_none=True, mode="json")
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


#: One decoder for every line (``json.loads`` with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _dotted(path: tuple[str | int, ...]) -> str:
    """A field path for a message; a surrogate in a key is escaped (echoing it raw would
    make the reply itself unencodable)."""
    text = ".".join(str(p) for p in path) or "message"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _screen(raw: bytes) -> SessionMessage | Reply | Exception | None:
    try:
        return screen_line(raw)
    except Exception:  # a bug here must not end the session: let the SDK's parser judge
        log.exception("could not screen a stdin line; passing it on unchanged")
        try:
            message = types.jsonrpc_message_adapter.validate_json(
                raw.decode("utf-8", "replace"), by_name=False)
        except Exception as exc:
            return exc  # the dispatcher logs it, as it does for the SDK's own reader
        return SessionMessage(message)


# -- the SDK's two streams -------------------------------------------------------------------


class Outbound:
    """The SDK's write stream: each message is one JSON line, written as it is sent."""

    def __init__(self, writer: wire.Writer) -> None:
        self._writer = writer
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        line = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        await self._writer.write(line.encode() + b"\n")

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> Outbound:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


class Inbound:
    """The SDK's read stream: stdin is read when the SDK asks for the next message, and
    every line is screened; what the screen answers is written here and never reaches it."""

    def __init__(self, reader: wire.Reader, outbound: Outbound) -> None:
        self._reader = reader
        self._outbound = outbound
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._eof = False
        self._closed = False
        self._replay: collections.deque[SessionMessage | Exception] = collections.deque()
        #: Takes the plain ``tools/call`` requests read from here on (see :mod:`.direct`).
        self.direct: DirectCalls | None = None

    async def opening_request(self, keep: int) -> types.JSONRPCRequest | None:
        """Read up to the client's first request (None: the input ended before one) and
        receive it again next, after up to ``keep`` frames that came before it (more are
        dropped): what the SDK's serving loop peeks at to choose the protocol era."""
        lead: list[SessionMessage | Exception] = []
        opening = None
        with contextlib.suppress(anyio.EndOfStream):
            while opening is None:
                item = await self.receive()
                if isinstance(item, SessionMessage) and isinstance(item.message,
                                                                   types.JSONRPCRequest):
                    opening = item.message
                elif len(lead) >= keep:
                    log.debug("dropped a frame received before the first request: %r", item)
                    continue
                lead.append(item)
        self._replay.extend(lead)
        return opening

    async def receive(self) -> SessionMessage | Exception:
        if self._replay and not self._closed:
            return self._replay.popleft()
        read = False
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            raw = self._next_line()
            if raw is None:
                if self._eof:
                    if self.direct is not None:
                        # Answered now, while the SDK (which closes the write stream when
                        # its loop ends) still answers its own calls the same way.
                        await self.direct.close()
                    raise anyio.EndOfStream
                chunk = await self._reader.read()
                read = True
                if chunk:
                    self._buffer += chunk
                else:
                    self._eof = True
                continue
            item = _screen(raw)
            if item is None:
                continue
            if isinstance(item, SessionMessage | Exception):
                if not read:  # a burst already buffered: let the handlers run in between
                    await anyio.lowlevel.checkpoint()
                if (self.direct is not None and isinstance(item, SessionMessage)
                        and self.direct.take(item.message)):
                    continue
                return item
            try:
                await self._outbound.send(SessionMessage(item))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                raise anyio.EndOfStream from None

    def _next_line(self) -> bytes | None:
        end = self._buffer.find(b"\n", self._scanned)
        if end < 0:
            if self._eof and self._buffer:  # a last line without its newline
                raw = bytes(self._buffer)
                self._buffer.clear()
                self._scanned = 0
                return raw
            self._scanned = len(self._buffer)
            return None
        raw = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        self._scanned = 0
        return raw

    async def aclose(self) -> None:
        self._closed = True

    def __aiter__(self) -> Inbound:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Inbound:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def stdio_transport() -> AsyncIterator[tuple[Inbound, Outbound]]:
    """The read and write streams ``Server.run`` takes, over this process's stdin/stdout."""
    with (wire.claim(0, lambda: os.open(os.devnull, os.O_RDONLY)) as read_fd,
          wire.claim(1, wire.divert_stdout) as write_fd,
          contextlib.ExitStack() as stack):
        ends = wire.loop_ends(read_fd, write_fd, stack)
        if ends is None:
            stack.close()
            log.debug("stdio in worker threads (stdin and stdout are not both pipes or sockets)")
            reader: wire.Reader = wire.ThreadReader(read_fd)
            writer: wire.Writer = wire.ThreadWriter(write_fd)
        else:
            log.debug("stdio on the event loop")
            reader, writer = ends
        outbound = Outbound(writer)
        try:
            yield Inbound(reader, outbound), outbound
        finally:
            with anyio.move_on_after(DRAIN_S, shield=True):
                await writer.drain()
            reader.close()
            writer.close()


async def serve(server: Server[Any], inbound: Inbound, outbound: Outbound,
                options: InitializationOptions, *, direct: bool = True) -> None:
    """``server.run(inbound, outbound, options)``, without its relay task.

    ``Server.run`` peeks at the client's first request to choose the protocol era (the
    ``initialize`` handshake, or 2026-07-28 envelopes), then relays every later message
    through a task and a memory stream of its own: two more task switches per request.
    Here :meth:`Inbound.opening_request` peeks and the chosen serving loop reads the
    stream directly. The loops are the SDK's (private names, checked when serving starts); an SDK
    without them gets ``Server.run``.

    With ``direct``, plain ``tools/call`` requests after the opening one skip the SDK's
    per-request machinery (:mod:`tether.frontend.transport.direct`).
    """
    loops = _sdk_serving_loops()
    if loops is None:
        await server.run(inbound, outbound, options)
        return
    legacy, modern, enveloped, keep = loops
    async with server.lifespan(server) as state:
        try:
            opening = await inbound.opening_request(keep)
            is_modern = (opening is not None and opening.method != "initialize"
                         and enveloped(opening.params))
            calls = DirectCalls.for_server(server, outbound.send, modern=is_modern,
                                           enveloped=enveloped,
                                           opening=opening) if direct else None
            inbound.direct = calls
            try:
                if is_modern:
                    await modern(server, inbound, outbound, lifespan_state=state,
                                 raise_exceptions=False)
                else:
                    await legacy(server, inbound, outbound, lifespan_state=state,
                                 session_id=None, init_options=options, raise_exceptions=False)
            finally:
                if calls is not None:
                    await calls.close()
        finally:
            await inbound.aclose()
            await outbound.aclose()


def _sdk_serving_loops() -> tuple[Any, Any, Callable[[Any], bool], int] | None:
    """The SDK's two serving loops, its envelope test and its replay limit, or None when
    this SDK does not have them with the parameters :func:`serve` passes."""
    try:
        from mcp.server import runner
    except ImportError:
        return None
    legacy = getattr(runner, "_serve_legacy_stream", None)
    modern = getattr(runner, "_serve_modern_stream", None)
    enveloped = getattr(runner, "_has_modern_envelope", None)
    keep = getattr(runner, "_PRE_REQUEST_REPLAY_LIMIT", None)
    if legacy is None or modern is None or enveloped is None or not isinstance(keep, int):
        return None
    try:
        legacy_params = set(inspect.signature(legacy).parameters)
        modern_params = set(inspect.signature(modern).parameters)
    except (TypeError, ValueError):
        return None
    if not ({"lifespan_state", "session_id", "init_options", "raise_exceptions"} <= legacy_params
            and {"lifespan_state", "raise_exceptions"} <= modern_params):
        return None
    return legacy, modern, enveloped, keep
