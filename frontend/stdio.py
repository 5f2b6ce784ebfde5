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
write and flush is a hop to a worker thread and back (about six per tool call). When stdin
and stdout are pipes or sockets (how MCP clients start servers) they are driven from the
event loop: a pipe is reopened through ``/proc/self/fd`` as a description of our own with
``O_NONBLOCK`` (so the flags of a description shared with the parent never change), a socket
is read and written with ``MSG_DONTWAIT``. Anything else (a TTY, a regular file, no
``/proc``) is read and written in worker threads, as before. Either way fd 0 reads
``/dev/null`` and fd 1 writes to stderr while serving, so nothing else in this process or
its children can eat or corrupt protocol bytes; both are restored on exit.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import inspect
import json
import logging
import os
import re
import select
import socket
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, Protocol, cast

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.models import InitializationOptions
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from tether.frontend import results
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.text import first_surrogate, unsafe_text_message

log = logging.getLogger(__name__)

#: The id of a request whose JSON does not parse, if it can still be read from the text.
_ID_IN_TEXT = re.compile(r'"id"\s*:\s*(-?\d{1,18}(?![\d.eE])|"(?:[^"\\]|\\.){0,256}")')
#: Text that may decode to a lone surrogate: one already in it (invalid UTF-8 decoded with
#: ``surrogateescape``) or a ``\uD800``-``\uDFFF`` escape. Without either, the walk over the
#: decoded message is skipped (an escaped backslash before ``ud8..`` only costs the walk).
_MAY_HOLD_SURROGATE = re.compile("[\ud800-\udfff]|\\\\u[dD][89a-fA-F]")

#: Bytes asked of the kernel per read.
READ_CHUNK = 1 << 16
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
        obj = json.loads(text, parse_constant=_reject_constant)
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


# -- the two ends of the wire ----------------------------------------------------------------


class _Reader(Protocol):
    async def read(self) -> bytes:
        """The next bytes from the client; ``b""`` at end of input."""

    def close(self) -> None: ...


class _Writer(Protocol):
    async def write(self, data: bytes) -> None:
        """Write all of ``data`` (once this returns, or even when the caller is cancelled
        after part of it went out: a frame is never torn)."""

    async def drain(self) -> None: ...

    def close(self) -> None: ...


async def _until(register: Callable[..., None], unregister: Callable[[int], object],
                 fd: int) -> None:
    """Wait until the loop reports ``fd`` ready (``add_reader``/``add_writer``)."""
    future = asyncio.get_running_loop().create_future()
    register(fd, _wake, future)
    try:
        await future
    finally:
        unregister(fd)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _LoopReader:
    """A non-blocking pipe or socket read from the event loop."""

    def __init__(self, fd: int, recv: Callable[[], bytes], close: Callable[[], None]) -> None:
        self._fd = fd
        self._recv = recv
        self._close = close

    async def read(self) -> bytes:
        loop = asyncio.get_running_loop()
        while True:
            try:
                return self._recv()
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:  # a reset connection is the end of the input
                log.info("stdin read failed (%s): treating it as the end of input", exc)
                return b""
            await _until(loop.add_reader, loop.remove_reader, self._fd)

    def close(self) -> None:
        self._close()


class _LoopWriter:
    """A non-blocking pipe or socket written from the event loop. A write goes straight to
    the kernel; only what does not fit waits in a queue, flushed as the client reads."""

    def __init__(self, fd: int, send: Callable[[memoryview], int],
                 close: Callable[[], None]) -> None:
        self._fd = fd
        self._send = send
        self._close = close
        self._queue: collections.deque[tuple[memoryview, asyncio.Future[None]]] = (
            collections.deque())
        self._broken: OSError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drained: asyncio.Future[None] | None = None

    async def write(self, data: bytes) -> None:
        if self._broken is not None:
            raise anyio.BrokenResourceError from self._broken
        view = memoryview(data)
        if not self._queue:
            try:
                sent = self._send(view)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._break(exc)
                raise anyio.BrokenResourceError from exc
            if sent == len(view):
                return
            view = view[sent:]
            self._loop = asyncio.get_running_loop()
            self._loop.add_writer(self._fd, self._flush)
        future = asyncio.get_running_loop().create_future()
        # Queued before waiting: a caller cancelled now still gets its frame written whole.
        self._queue.append((view, future))
        await future

    def _flush(self) -> None:
        while self._queue:
            view, future = self._queue[0]
            try:
                sent = self._send(view)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._break(exc)
                return
            if sent < len(view):
                self._queue[0] = (view[sent:], future)
                return
            self._queue.popleft()
            if not future.done():
                future.set_result(None)
        self._stop_watching()
        self._wake_drain()

    def _break(self, exc: OSError) -> None:
        log.info("stdout write failed (%s): the client is gone", exc)
        self._broken = exc
        self._stop_watching()
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(anyio.BrokenResourceError())
        self._wake_drain()

    def _stop_watching(self) -> None:
        if self._loop is not None:
            self._loop.remove_writer(self._fd)
            self._loop = None

    def _wake_drain(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        """Wait until everything queued is written (or the client is gone)."""
        while self._queue:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def close(self) -> None:
        self._stop_watching()
        self._close()


class _ThreadReader:
    """Blocking reads in a worker thread (a TTY, a regular file)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    async def read(self) -> bytes:
        try:
            return await anyio.to_thread.run_sync(_read_blocking, self._fd, abandon_on_cancel=True)
        except OSError as exc:
            log.info("stdin read failed (%s): treating it as the end of input", exc)
            return b""

    def close(self) -> None:
        pass  # a worker thread may still be blocked reading it: left open


class _ThreadWriter:
    """Blocking writes in a worker thread, one at a time."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock()

    async def write(self, data: bytes) -> None:
        async with self._lock:
            try:
                # Not abandoned on cancel: the frame is written whole or the client is gone.
                await anyio.to_thread.run_sync(_write_blocking, self._fd, data)
            except OSError as exc:
                raise anyio.BrokenResourceError from exc

    async def drain(self) -> None:
        async with self._lock:
            pass

    def close(self) -> None:
        pass


def _read_blocking(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, READ_CHUNK)
        except BlockingIOError:  # someone else set O_NONBLOCK on this description
            select.select([fd], [], [])


def _write_blocking(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [])


def _loop_ends(read_fd: int, write_fd: int,
               stack: contextlib.ExitStack) -> tuple[_Reader, _Writer] | None:
    """Event-loop ends for a pipe or socket on both sides, or None (use threads)."""
    reader = _loop_end(read_fd, True, stack)
    writer = _loop_end(write_fd, False, stack)
    if reader is None or writer is None:
        return None
    assert isinstance(reader, _LoopReader) and isinstance(writer, _LoopWriter)
    return reader, writer


def _loop_end(fd: int, reading: bool,
              stack: contextlib.ExitStack) -> _LoopReader | _LoopWriter | None:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        # MSG_DONTWAIT per call: the socket's own flags (shared with the client's end of a
        # socketpair handed down through a parent) are never changed.
        sock = socket.socket(fileno=os.dup(fd))
        stack.callback(sock.close)
        if reading:
            return _LoopReader(sock.fileno(), lambda: sock.recv(READ_CHUNK, socket.MSG_DONTWAIT),
                               sock.close)
        return _LoopWriter(sock.fileno(), lambda view: sock.send(view, socket.MSG_DONTWAIT),
                           sock.close)
    if not stat.S_ISFIFO(mode):
        return None
    # A new open file description of the same pipe: O_NONBLOCK set on it cannot change the
    # description the client (or a parent) shares with fd 0/1.
    flags = (os.O_RDONLY if reading else os.O_WRONLY) | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        own = os.open(f"/proc/self/fd/{fd}", flags)
    except OSError:
        return None
    close = _closer(own)
    stack.callback(close)
    if reading:
        return _LoopReader(own, lambda: os.read(own, READ_CHUNK), close)
    return _LoopWriter(own, lambda view: os.write(own, view), close)


def _closer(fd: int) -> Callable[[], None]:
    closed = False

    def close() -> None:
        nonlocal closed
        if not closed:
            closed = True
            with contextlib.suppress(OSError):
                os.close(fd)

    return close


@contextlib.contextmanager
def _claim(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
    """The wire at ``fd`` on a private descriptor; ``fd`` points at ``diversion()``
    meanwhile, so nothing else in this process (or a child) can use protocol bytes.
    Restored on exit."""
    try:
        private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield fd  # nothing to divert (a closed descriptor): serve it as it is
        return
    try:
        other = diversion()
    except OSError:
        yield private
        return
    try:
        os.dup2(other, fd)
    finally:
        os.close(other)
    try:
        yield private
    finally:
        with contextlib.suppress(OSError):
            os.dup2(private, fd)
        # Left open on purpose: a worker thread may still be blocked on it.


def _divert_stdout() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


# -- the SDK's two streams -------------------------------------------------------------------


class Outbound:
    """The SDK's write stream: each message is one JSON line, written as it is sent."""

    def __init__(self, writer: _Writer) -> None:
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

    def __init__(self, reader: _Reader, outbound: Outbound) -> None:
        self._reader = reader
        self._outbound = outbound
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._eof = False
        self._closed = False
        self._replay: collections.deque[SessionMessage | Exception] = collections.deque()

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
    with (_claim(0, lambda: os.open(os.devnull, os.O_RDONLY)) as read_fd,
          _claim(1, _divert_stdout) as write_fd,
          contextlib.ExitStack() as stack):
        ends = _loop_ends(read_fd, write_fd, stack)
        if ends is None:
            stack.close()
            log.debug("stdio in worker threads (stdin and stdout are not both pipes or sockets)")
            reader: _Reader = _ThreadReader(read_fd)
            writer: _Writer = _ThreadWriter(write_fd)
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
                options: InitializationOptions) -> None:
    """``server.run(inbound, outbound, options)``, without its relay task.

    ``Server.run`` peeks at the client's first request to choose the protocol era (the
    ``initialize`` handshake, or 2026-07-28 envelopes), then relays every later message
    through a task and a memory stream of its own: two more task switches per request.
    Here :meth:`Inbound.opening_request` peeks and the chosen serving loop reads the
    stream directly. The loops are the SDK's (private names, checked on import); an SDK
    without them gets ``Server.run``.
    """
    loops = _sdk_serving_loops()
    if loops is None:
        await server.run(inbound, outbound, options)
        return
    legacy, modern, enveloped, keep = loops
    async with server.lifespan(server) as state:
        try:
            opening = await inbound.opening_request(keep)
            if (opening is not None and opening.method != "initialize"
                    and enveloped(opening.params)):
                await modern(server, inbound, outbound, lifespan_state=state,
                             raise_exceptions=False)
            else:
                await legacy(server, inbound, outbound, lifespan_state=state, session_id=None,
                             init_options=options, raise_exceptions=False)
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
