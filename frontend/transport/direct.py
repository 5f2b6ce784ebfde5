"""``tools/call`` over stdio without the SDK's per-request machinery around it.

For each request the SDK's serving loop spawns a task through anyio's task group, builds a
``Connection``, a ``ServerRunner``, a request context and a middleware chain, and closes the
connection's exit stack under a shielded cancel scope: about 0.3 ms of ``tether serve``'s
time per call on the development machine, around a handler that takes about as long. An
agent sends ``tools/call`` thousands of times, so :class:`DirectCalls` runs that one request
itself, through the same steps and the SDK's own code for each of them:

    envelope ladder (2026-07-28 era) → surface validation → params model → Tether's
    handler → the SDK's result shaping (``ServerRunner._serialize``) → one response,
    written by the same :class:`~tether.frontend.transport.stdio.Outbound` as every other.

It takes only the plain case and leaves everything else to the SDK, untouched:

- any method but ``tools/call``, and any request the ladder or a validator refuses (the SDK
  words the error, as it always did);
- a request with a progress token (progress notifications go through the SDK's session);
- a handshake-era connection before its ``initialize`` (the version is negotiated from it
  the way the SDK does);
- a server with middleware (it must see every request), or an SDK without the pieces used
  here (checked once, at start).

A handler that raises is answered as the SDK answers it in the session's era (the
2026-07-28 era hides the exception behind ``Internal server error``). Cancellation follows
the SDK: ``notifications/cancelled`` for a call running here cancels it and nothing is
answered for it; when the input ends, calls still running are cancelled and answered
``Connection closed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

log = logging.getLogger(__name__)

METHOD = "tools/call"
#: How long the answers to calls cut short by the end of input may take to write.
CLOSE_WRITE_S = 2.0

RequestId = str | int
Send = Callable[[SessionMessage], Awaitable[None]]


@dataclass(frozen=True)
class _Sdk:
    """The SDK functions a direct call runs (private names: checked by :func:`_load`)."""

    classify: Callable[..., Any]
    rejected: type
    negotiate: Callable[[Mapping[str, Any] | None], tuple[Any, str]]
    validate_request: Callable[[str, str, Mapping[str, Any] | None], Any]
    progress_token: Callable[[Mapping[str, Any] | None], Any]
    cancelled_id: Callable[[Mapping[str, Any] | None], RequestId | None]
    error_data: Callable[[BaseException], types.ErrorData | None]
    modern_error: Callable[[Exception], types.ErrorData]
    coerce_id: Callable[[RequestId], RequestId]
    runner: type
    mcp_error: Any  # MCPError


def _load() -> _Sdk | None:
    try:
        from mcp.server.runner import ServerRunner, modern_error_data
        from mcp.shared.dispatcher import coerce_request_id
        from mcp.shared.exceptions import MCPError
        from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
        from mcp.shared.jsonrpc_dispatcher import (
            cancelled_request_id_from_params,
            handler_exception_to_error_data,
            progress_token_from_params,
        )
        from mcp_types import methods
    except ImportError:
        return None
    validate = getattr(methods, "validate_client_request", None)
    negotiate = getattr(ServerRunner, "_negotiate_initialize", None)
    if (not callable(validate) or not callable(negotiate)
            or not callable(getattr(ServerRunner, "_serialize", None))):
        return None
    return _Sdk(classify_inbound_request, InboundLadderRejection, negotiate, validate,
                progress_token_from_params, cancelled_request_id_from_params,
                handler_exception_to_error_data, modern_error_data, coerce_request_id,
                ServerRunner, MCPError)


class _NoProgress:
    """The request context a direct call's handler gets: it asked for no progress (a
    request with a progress token goes to the SDK), so there is none to report. Nothing
    else in it is read: over stdio every call is the one local caller, whom
    ``build_server`` resolves without looking at the context."""

    @property
    def session(self) -> _NoProgress:
        return self

    async def report_progress(self, progress: float, total: float | None = None,
                              message: str | None = None) -> None:
        return None


_NO_PROGRESS = _NoProgress()


class DirectCalls:
    """Runs plain ``tools/call`` requests of one stdio session (see the module's text)."""

    def __init__(self, sdk: _Sdk, server: Server[Any], send: Send, *, modern: bool,
                 enveloped: Callable[[Mapping[str, Any] | None], bool]) -> None:
        entry = server.get_request_handler(METHOD)
        assert entry is not None
        self._sdk = sdk
        # Tether's handler takes any context (see _NoProgress).
        self._handler: Callable[[Any, Any], Awaitable[Any]] = entry.handler
        self._params_type = entry.params_type
        # ``_serialize`` reads the server alone (cache hints, server info): one runner serves.
        self._shape = sdk.runner(server, None, None)._serialize
        self._send = send
        self._modern = modern
        self._enveloped = enveloped
        self._version: str | None = None  # handshake era: the version ``initialize`` chose
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[RequestId, asyncio.Task[None]] = {}  # by id, for cancellation
        self._cancelled: set[asyncio.Task[None]] = set()  # by the peer: answered by nobody

    @classmethod
    def for_server(cls, server: Server[Any], send: Send, *, modern: bool,
                   enveloped: Callable[[Mapping[str, Any] | None], bool],
                   opening: types.JSONRPCRequest | None) -> DirectCalls | None:
        """Direct calls for ``server`` once the SDK has the ``opening`` request (the
        session's first; ``enveloped`` tells the eras apart, as for the SDK's loops), or
        None when the SDK must see every request."""
        sdk = _load()
        if sdk is None or server.middleware or server.get_request_handler(METHOD) is None:
            return None
        calls = cls(sdk, server, send, modern=modern, enveloped=enveloped)
        if opening is not None:
            calls._note_initialize(opening)
        return calls

    # -- what the transport shows it ---------------------------------------------------------

    def take(self, message: types.JSONRPCMessage) -> bool:
        """Run ``message`` here (True), or leave it to the SDK (False)."""
        if isinstance(message, types.JSONRPCRequest):
            if message.method == METHOD:
                return self._start(message)
            self._note_initialize(message)
            return False
        if (isinstance(message, types.JSONRPCNotification)
                and message.method == "notifications/cancelled"):
            self._cancel(self._sdk.cancelled_id(message.params))
        return False  # the SDK sees every notification too

    def _note_initialize(self, request: types.JSONRPCRequest) -> None:
        """A handshake-era ``initialize``: the version the SDK chooses for it, the same way
        (it runs ``initialize`` before it reads the next line, so no call is read between)."""
        if self._modern or request.method != "initialize":
            return
        with contextlib.suppress(ValidationError):  # refused by the SDK too: nothing changes
            self._version = self._sdk.negotiate(request.params)[1]

    # -- one call ------------------------------------------------------------------------

    def _start(self, request: types.JSONRPCRequest) -> bool:
        params = request.params
        version = self._version_of(params)
        if version is None or self._sdk.progress_token(params) is not None:
            return False
        try:
            self._sdk.validate_request(METHOD, version, params)
            typed = self._params_type.model_validate({} if params is None else params,
                                                     by_name=False)
        except Exception:  # the SDK validates it again and answers with its own error
            return False
        key = self._sdk.coerce_id(request.id)
        task = asyncio.get_running_loop().create_task(self._run(request.id, version, typed))
        self._tasks.add(task)
        self._running[key] = task  # a reused id: the newer call is the one cancelled by id
        task.add_done_callback(lambda done: self._finished(key, done))
        return True

    def _version_of(self, params: Mapping[str, Any] | None) -> str | None:
        if not self._modern:
            return None if self._enveloped(params) else self._version
        route = self._sdk.classify({"method": METHOD, "params": params})
        return None if isinstance(route, self._sdk.rejected) else route.protocol_version

    async def _run(self, rid: RequestId, version: str, params: Any) -> None:
        try:
            result = await self._handler(_NO_PROGRESS, params)
            if isinstance(result, types.ErrorData):
                raise self._sdk.mcp_error.from_error_data(result)
            answer: types.JSONRPCMessage = types.JSONRPCResponse(
                jsonrpc="2.0", id=rid, result=self._shape(METHOD, version, result))
        except asyncio.CancelledError:
            if asyncio.current_task() not in self._cancelled:
                await self._answer_closed(rid)
            raise
        except Exception as exc:
            answer = types.JSONRPCError(jsonrpc="2.0", id=rid, error=self._error_data(exc))
        if asyncio.current_task() in self._cancelled:
            return  # cancelled by the peer, though the handler finished: never answered
        await self._write(answer)

    def _error_data(self, exc: Exception) -> types.ErrorData:
        """What the SDK answers for a handler's exception, in this session's era."""
        if self._modern:
            return self._sdk.modern_error(exc)
        error = self._sdk.error_data(exc)
        if error is None:
            log.exception("handler for %r raised", METHOD)
            error = types.ErrorData(code=0, message=str(exc))  # the SDK's code, kept
        return error

    async def _write(self, message: types.JSONRPCMessage) -> None:
        try:
            await self._send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            log.debug("dropped the answer to a call: the client is gone (%r)", exc)

    async def _answer_closed(self, rid: RequestId) -> None:
        error = types.ErrorData(code=types.CONNECTION_CLOSED, message="Connection closed")
        try:
            async with asyncio.timeout(CLOSE_WRITE_S):
                await asyncio.shield(self._write(
                    types.JSONRPCError(jsonrpc="2.0", id=rid, error=error)))
        except (TimeoutError, asyncio.CancelledError):
            log.warning("gave up answering call %r: the write blocked", rid)

    def _cancel(self, rid: RequestId | None) -> None:
        if rid is None:
            return
        task = self._running.get(self._sdk.coerce_id(rid))
        if task is not None and not task.done():
            self._cancelled.add(task)
            task.cancel()

    def _finished(self, key: RequestId, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._running.get(key) is task:
            del self._running[key]
        self._cancelled.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a direct call failed", exc_info=task.exception())

    async def close(self) -> None:
        """End of input: cancel the calls still running (each answers ``Connection closed``)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
