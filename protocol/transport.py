"""ZeroMQ transports: the front-end's DEALER client and the guardian's ROUTER server (R5).

Request/response only. The client matches replies to requests by id, so several tool calls
can share one socket. Waiting is a request with a deadline that the guardian answers when
something changes; there is no PUB/SUB on the critical path.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio

from tether.protocol import codec
from tether.protocol.envelope import Request, parse_response
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.versions import Version

log = logging.getLogger(__name__)

#: The guardian refuses frames above this size at the socket (MAXMSGSIZE) and the client
#: refuses to send them, so a too-large request is an error, never a silent disconnect.
MAX_MESSAGE_BYTES = codec.DEFAULT_LIMITS.max_frame_bytes

#: Extra time the client waits past a request's deadline for the guardian's own
#: ``deadline_expired`` or late answer before giving up on the reply.
REPLY_GRACE_S = 2.0


class GuardianClient:
    """A DEALER connection to one guardian instance.

    Every request names ``instance_id`` (once known) and an absolute deadline so a guardian
    that restarted behind the same endpoint refuses queued requests instead of acting on
    them (R9).
    """

    def __init__(
        self,
        endpoint: str,
        auth: str,
        *,
        version: Version,
        instance_id: str | None = None,
        context: zmq.asyncio.Context | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.auth = auth
        self.version = version
        self.instance_id = instance_id
        self._ctx = context or zmq.asyncio.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.IMMEDIATE, 1)
        self._sock.connect(endpoint)
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._prefix = os.urandom(6).hex()
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def call(self, method: str, params: dict[str, Any], *, timeout_s: float) -> Any:
        """Send one request and return its result; raise :class:`TetherError` on error.

        ``timeout_s`` becomes the request's absolute deadline. When no reply comes by the
        deadline plus a grace period the call fails with ``guardian_unavailable``.
        """
        if self._closed:
            raise TetherError(ErrorCode.GUARDIAN_UNAVAILABLE, "guardian connection is closed")
        rid = f"{self._prefix}-{next(self._ids)}"
        deadline_ms = int((time.time() + timeout_s) * 1000)
        request = Request(
            version=self.version,
            id=rid,
            method=method,
            params=params,
            deadline_unix_ms=deadline_ms,
            guardian_instance_id=self.instance_id,
            auth=self.auth,
        )
        try:
            frame = codec.encode(request.to_wire())
        except (OverflowError, TypeError, ValueError) as exc:
            # A value the wire cannot carry (an integer beyond 64 bits, ...): the models bound
            # every field, so this is a last line of defence, reported instead of crashing.
            raise TetherError(
                ErrorCode.INVALID_REQUEST, f"request cannot be encoded: {exc}", {"input_sent": False}
            ) from None
        if len(frame) > MAX_MESSAGE_BYTES:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"request of {len(frame)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte message limit",
                {"input_sent": False},
            )
        self._ensure_reader()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            # IMMEDIATE=1: nothing is queued unless a guardian is connected. Try at once (the
            # common case); only when that fails wait briefly for the connection to complete,
            # instead of queueing for whoever binds later.
            try:
                await self._sock.send(frame, flags=zmq.NOBLOCK)
            except zmq.Again:
                poll_ms = int(min(timeout_s, 2.0) * 1000) + 1
                if not await self._sock.poll(poll_ms, zmq.POLLOUT):  # type: ignore[call-arg]
                    raise TetherError(
                        ErrorCode.GUARDIAN_UNAVAILABLE,
                        f"no guardian is listening on {self.endpoint}",
                        {"input_sent": False},
                    ) from None
                await self._sock.send(frame, flags=zmq.NOBLOCK)
            try:
                async with asyncio.timeout(timeout_s + REPLY_GRACE_S):  # no extra task
                    return await future
            except TimeoutError:
                raise TetherError(
                    ErrorCode.GUARDIAN_UNAVAILABLE,
                    f"guardian did not answer {method} within {timeout_s + REPLY_GRACE_S:.1f}s",
                    {"input_sent": "unknown"},
                ) from None
        except zmq.Again:
            raise TetherError(
                ErrorCode.GUARDIAN_UNAVAILABLE,
                f"no guardian is listening on {self.endpoint}",
                {"input_sent": False},
            ) from None
        finally:
            self._pending.pop(rid, None)

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _read_loop(self) -> None:
        while not self._closed:
            try:
                frame = await self._sock.recv()
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            try:
                response = parse_response(codec.decode(frame))
            except TetherError:
                log.warning("dropped a malformed reply from %s", self.endpoint)
                continue
            future = self._pending.get(response.id)
            if future is None or future.done():
                continue  # a reply to a request whose caller already gave up
            if response.ok:
                future.set_result(response.result)
            else:
                assert response.error is not None
                future.set_exception(response.error)

    def close(self) -> None:
        """Close the socket; pending calls fail with ``guardian_unavailable``."""
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    TetherError(ErrorCode.GUARDIAN_UNAVAILABLE, "guardian connection closed")
                )
        self._sock.close(linger=0)


Handler = Callable[[bytes], Awaitable[bytes | None]]


class RouterServer:
    """The guardian's ROUTER socket: receive frames, hand them to ``handler``, send replies.

    Each request is handled in its own task so a long wait never blocks other requests.
    A handler returning ``None`` means "drop, no reply". Replies to peers that went away
    are dropped (``ROUTER_MANDATORY`` turns a silent drop into an error we can log).
    """

    def __init__(self, endpoint: str, handler: Handler, context: zmq.asyncio.Context) -> None:
        self.endpoint = endpoint
        self._handler = handler
        self._sock = context.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._tasks: set[asyncio.Task[None]] = set()

    def bind(self) -> None:
        """Bind the endpoint. Call only while holding the guardian lock (R2)."""
        self._sock.bind(self.endpoint)

    def rebind(self) -> None:
        """Listen again at the endpoint (its ipc file was deleted or replaced). Peers already
        connected keep their connections; new ones can connect again. Only while holding
        the guardian lock, as for :meth:`bind`."""
        with contextlib.suppress(zmq.ZMQError):
            self._sock.unbind(self.endpoint)
        self._sock.bind(self.endpoint)

    async def serve(self) -> None:
        """Serve until cancelled."""
        while True:
            frames = await self._sock.recv_multipart()
            if len(frames) != 2:
                continue  # not a DEALER request: nothing sensible to answer
            identity, frame = frames
            task = asyncio.get_running_loop().create_task(self._handle(identity, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, identity: bytes, frame: bytes) -> None:
        try:
            reply = await self._handler(frame)
        except Exception:  # the handler reports its own errors; this is a last resort
            log.exception("request handler crashed")
            return
        if reply is None:
            return
        with contextlib.suppress(zmq.ZMQError):
            await self._sock.send_multipart([identity, reply], flags=zmq.NOBLOCK)

    def close(self) -> None:
        """Stop answering and close the socket."""
        for task in list(self._tasks):
            task.cancel()
        self._sock.close(linger=0)
