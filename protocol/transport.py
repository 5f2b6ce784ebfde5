"""ZeroMQ transports: the front-end's DEALER client and the guardian's ROUTER server
(docs/protocol.md#transport).

Request/response only. The client matches replies to requests by id, so several tool calls
can share one socket. Waiting is a request with a deadline that the guardian answers when
something changes; there is no PUB/SUB on the critical path.

Both ends drive plain (non-``zmq.asyncio``) sockets from the event loop: the socket's
notification fd is registered with ``add_reader`` and drained with non-blocking calls. That
costs no future, task or poller per message, which is most of what separates a round trip
from a bare pyzmq echo. The fd is edge-triggered, so after every send the socket is checked
for input again (a send can consume the edge of a reply that is already queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Coroutine, Generator
from typing import Any, cast

import msgpack
import zmq
from zmq.utils.monitor import parse_monitor_message

from tether.protocol import codec
from tether.protocol.envelope import Request, parse_response
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.versions import Version

log = logging.getLogger(__name__)

#: The guardian refuses frames above this size at the socket (MAXMSGSIZE) and the client
#: refuses to send them, so a too-large request is an error, never a silent disconnect.
MAX_MESSAGE_BYTES = codec.DEFAULT_LIMITS.max_frame_bytes

#: How soon a client connects again after its guardian's side went away, doubling up to
#: the maximum while nobody is there.
RECONNECT_IVL_MS = 5
RECONNECT_IVL_MAX_MS = 1000

#: Extra time the client waits past a request's deadline for the guardian's own
#: ``deadline_expired`` or late answer before giving up on the reply.
REPLY_GRACE_S = 2.0

# Every message goes through these: plain ints (pyzmq's constants are enum flags, and each
# ``&``/``|`` on them builds a new enum member) and the backend's own methods (the sugar
# wrappers only add keyword handling). About 10 µs per round trip, of some 60 in Python.
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
_RCVMORE = int(zmq.RCVMORE)
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_MORE = int(zmq.NOBLOCK) | int(zmq.SNDMORE)
_get = zmq.backend.Socket.get
_recv = zmq.backend.Socket.recv
_send = zmq.backend.Socket.send


class GuardianClient:
    """A DEALER connection to one guardian instance.

    Every request names ``instance_id`` (once known) and an absolute deadline so a guardian
    that restarted behind the same endpoint refuses queued requests instead of acting on
    them (docs/protocol.md#deadlines-and-the-guardian-instance).
    """

    def __init__(
        self,
        endpoint: str,
        auth: str,
        *,
        version: Version,
        instance_id: str | None = None,
        context: zmq.Context[Any] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.auth = auth
        self.version = version
        self.instance_id = instance_id
        self._ctx = context or zmq.Context.instance()
        self._sock: zmq.Socket[Any] = zmq.Socket(self._ctx, zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.IMMEDIATE, 1)
        # Back at once when a guardian that re-executed itself binds again (a live upgrade,
        # docs/protocol.md#live-upgrade), backing off while nobody is there.
        self._sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        self._sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        self._sock.connect(endpoint)
        self._fd = cast(int, self._sock.getsockopt(zmq.FD))
        self._pending: dict[str, asyncio.Future[Any]] = {}
        #: Each pending request's frame and when it went out (see :meth:`_reconnected`).
        self._sent: dict[str, tuple[bytes, float]] = {}
        self._monitor: zmq.Socket[Any] | None = None
        self._monitor_fd = -1
        self._disconnected_at: float | None = None
        self._ids = itertools.count(1)
        self._prefix = os.urandom(6).hex()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        #: Called from the loop each time the connection drops (see :meth:`on_disconnect`).
        self._disconnect_callbacks: list[Callable[[], None]] = []

    async def call(self, method: str, params: dict[str, Any], *, timeout_s: float,
                   resendable: bool = False) -> Any:
        """Send one request and return its result; raise :class:`TetherError` on error.

        ``timeout_s`` becomes the request's absolute deadline. When no reply comes by the
        deadline plus a grace period the call fails with ``guardian_unavailable``.
        ``resendable``: sending it twice cannot deliver twice (a read, or a request whose
        idempotency key replays its outcome), so it may be sent again when the connection
        comes back unanswered (:meth:`_reconnected`).
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
        loop = self._attach()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[rid] = future
        # One timer instead of a timeout context: it fails the future, nothing is cancelled.
        timer = loop.call_later(timeout_s + REPLY_GRACE_S, _expire, future, method,
                                timeout_s + REPLY_GRACE_S)
        try:
            await self._send(frame, timeout_s)
            if resendable:
                self._sent[rid] = (frame, time.monotonic())
            return await future
        finally:
            timer.cancel()
            self._pending.pop(rid, None)
            self._sent.pop(rid, None)

    async def _send(self, frame: bytes, timeout_s: float) -> None:
        # IMMEDIATE=1: nothing is queued unless a guardian is connected. Try at once (the
        # common case); only when that fails wait briefly for the connection to complete,
        # instead of queueing for whoever binds later.
        loop = asyncio.get_running_loop()
        give_up = loop.time() + min(timeout_s, 2.0)
        while True:
            try:
                _send(self._sock, frame, _NOBLOCK)
                break
            except zmq.Again:
                if loop.time() >= give_up:
                    raise TetherError(
                        ErrorCode.GUARDIAN_UNAVAILABLE,
                        f"no guardian is listening on {self.endpoint}",
                        {"input_sent": False},
                    ) from None
                await asyncio.sleep(0.005)  # rare: the connection is still being set up
        self._drain()  # the send may have taken the edge of a reply already queued

    def _attach(self) -> asyncio.AbstractEventLoop:
        """Watch the socket from the running loop (again, when called from a new loop)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
                if self._monitor is not None:
                    self._loop.remove_reader(self._monitor_fd)
            loop.add_reader(self._fd, self._drain)
            if self._monitor is None:
                self._monitor = self._sock.get_monitor_socket(
                    zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
                self._monitor_fd = cast(int, self._monitor.getsockopt(zmq.FD))
            loop.add_reader(self._monitor_fd, self._watch_connection)
            self._loop = loop
            loop.call_soon(self._watch_connection)  # edge-triggered: events may be queued
        return loop

    def _watch_connection(self) -> None:
        """The connection's events: a disconnect noted, a connection after it handled."""
        monitor = self._monitor
        while monitor is not None and not self._closed:
            try:
                if not cast(int, _get(monitor, _EVENTS)) & _POLLIN:
                    return
                event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))["event"]
            except zmq.ZMQError:
                return
            if event == zmq.EVENT_DISCONNECTED:
                self._disconnected_at = time.monotonic()
                for callback in self._disconnect_callbacks:
                    callback()
            elif (event == zmq.EVENT_HANDSHAKE_SUCCEEDED
                  and self._disconnected_at is not None):
                self._reconnected(self._disconnected_at)
                self._disconnected_at = None

    def _reconnected(self, disconnected_at: float) -> None:
        """Connected again after the guardian's side went away (a live upgrade re-executes
        the guardian: the same process binds the same endpoint again).

        Every reply the guardian sent before it closed its side is read first (they come
        before the disconnect). A request sent before the disconnect and still unanswered
        was never read by the guardian: a guardian that hands itself over answers every
        request it took (docs/protocol.md#live-upgrade), and a guardian that died and was
        replaced is another instance, which refuses a request addressed to the old one
        (``wrong_guardian``). So it is sent again as it was, once, when it is ``resendable``
        (should the guardian have read it after all, a read answers again and a keyed
        request replays its outcome)."""
        self._drain()
        for rid, (frame, sent) in list(self._sent.items()):
            future = self._pending.get(rid)
            if sent < disconnected_at and future is not None and not future.done():
                self._sent[rid] = (frame, time.monotonic())
                with contextlib.suppress(zmq.ZMQError):
                    _send(self._sock, frame, _NOBLOCK)
        self._drain()

    def _drain(self) -> None:
        """Take every queued reply and resolve its caller's future."""
        sock = self._sock
        while not self._closed:
            try:
                if not cast(int, _get(sock, _EVENTS)) & _POLLIN:
                    return
                frame = _recv(sock, _NOBLOCK)
                if _discard_rest(sock):  # a DEALER reply is one part: never from a guardian
                    continue
            except zmq.ZMQError:
                return
            try:
                response = parse_response(codec.decode(frame))
            except TetherError as err:
                self._fail_unreadable(frame, err)
                continue
            future = self._pending.get(response.id)
            if future is None or future.done():
                continue  # a reply to a request whose caller already gave up
            if response.ok:
                future.set_result(response.result)
            else:
                assert response.error is not None
                future.set_exception(response.error)

    def _fail_unreadable(self, frame: bytes, err: TetherError) -> None:
        """A reply over this client's limits, or malformed: fail the call it answers at once
        when its id can still be read (an older guardian may send what a newer one would
        refuse to), rather than leave it waiting for its deadline and a wrong diagnosis."""
        rid = _reply_id(frame)
        future = self._pending.get(rid) if rid is not None else None
        if future is None or future.done():
            log.warning("dropped a malformed reply from %s: %s", self.endpoint, err.message)
            return
        # Over a limit stays limit_exceeded (ask for less); anything else is no fault of the
        # request (invalid_request would say so), so it is internal.
        code = err.code if err.code == ErrorCode.LIMIT_EXCEEDED else ErrorCode.INTERNAL
        future.set_exception(TetherError(
            code, f"the guardian's reply could not be read: {err.message}",
            {"input_sent": "unknown"},  # the request itself may have been carried out
        ))

    def fail_pending(self, error: Callable[[], TetherError]) -> None:
        """Fail every call still waiting for a reply with an ``error()`` of its own (the
        guardian is gone: no reply can come, and waiting for each deadline would only delay
        the retry)."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error())

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` from the running loop each time the connection to the peer
        drops (a socket forwarded over SSH whose link went away: the guardian behind it may
        be fine, but no reply to what was sent can come back on that connection).

        Told by the socket's monitor (:meth:`_watch_connection`), which is watched like the
        socket itself; nothing on the request path.
        """
        if self._closed:
            return
        self._disconnect_callbacks.append(callback)
        self._attach()  # watch from now on, not only from the first call

    def close(self) -> None:
        """Close the socket; pending calls fail with ``guardian_unavailable``."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
            if self._monitor is not None:
                self._loop.remove_reader(self._monitor_fd)
        if self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._monitor.close(linger=0)
            self._monitor = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(
                    TetherError(ErrorCode.GUARDIAN_UNAVAILABLE, "guardian connection closed")
                )
        self._sock.close(linger=0)


def _discard_rest(sock: zmq.Socket[Any]) -> bool:
    """Drop the remaining parts of a message; True when it had any (one part was expected)."""
    if not _get(sock, _RCVMORE):
        return False
    while _get(sock, _RCVMORE):
        _recv(sock, _NOBLOCK)
    return True


#: The largest reply read for its id alone when it cannot be decoded within the limits.
_READ_ID_MAX_BYTES = 64 * 1024 * 1024


def _reply_id(frame: bytes) -> str | None:
    """The id of a reply that failed the limits (it came from the guardian this client
    authenticated to, on a private socket: read once more, with msgpack's own bounds)."""
    if len(frame) > _READ_ID_MAX_BYTES:
        return None
    try:
        obj = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    except Exception:  # malformed: nothing to attribute it to
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, str) else None


def _expire(future: asyncio.Future[Any], method: str, waited_s: float) -> None:
    if not future.done():
        future.set_exception(TetherError(
            ErrorCode.GUARDIAN_UNAVAILABLE,
            f"guardian did not answer {method} within {waited_s:.1f}s",
            {"input_sent": "unknown"},
        ))


Handler = Callable[[bytes], Coroutine[Any, Any, bytes | None]]


class RouterServer:
    """The guardian's ROUTER socket: receive frames, hand them to ``handler``, send replies.

    A handler starts at once, inside the socket's reader callback, and runs until it first
    suspends: a quick method (``hello``, ``exec.get``) is answered there and then, with no
    task. Only a handler that actually waits (a command, a long poll) continues in a task of
    its own, so a long wait never blocks other requests. The first step therefore runs
    outside any task: handlers must not enter ``asyncio.timeout()`` before their first await.

    A handler returning ``None`` means "drop, no reply". Replies to peers that went away
    are dropped (``ROUTER_MANDATORY`` turns a silent drop into an error we can log).
    """

    def __init__(self, endpoint: str, handler: Handler, context: zmq.Context[Any]) -> None:
        self.endpoint = endpoint
        #: Answers each frame (may be set until :meth:`serve` begins).
        self.handler = handler
        self._sock: zmq.Socket[Any] = zmq.Socket(context, zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self._fd = cast(int, self._sock.getsockopt(zmq.FD))
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recheck_scheduled = False
        self._closed = False

    def bind(self) -> None:
        """Bind the endpoint. Call only while holding the guardian lock
        (docs/protocol.md#guardians-one-per-key)."""
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
        loop = asyncio.get_running_loop()
        self._loop = loop
        loop.add_reader(self._fd, self._drain)
        try:
            self._drain()  # edge-triggered: requests may be queued already
            await loop.create_future()  # until cancelled
        finally:
            if not self._closed:
                loop.remove_reader(self._fd)

    def _drain(self) -> None:
        sock = self._sock
        self._recheck_scheduled = False
        while not self._closed:
            try:
                if not cast(int, _get(sock, _EVENTS)) & _POLLIN:
                    return
                # The peer's routing id, then its message (a message has at least one part).
                identity = _recv(sock, _NOBLOCK)
                frame = _recv(sock, _NOBLOCK)
                if _discard_rest(sock):
                    continue  # not a DEALER request: nothing sensible to answer
            except zmq.ZMQError:
                return
            self._start(identity, frame)

    def _start(self, identity: bytes, frame: bytes) -> None:
        coro = self.handler(frame)
        try:
            first = coro.send(None)
        except StopIteration as done:
            self._reply(identity, done.value)
            return
        except Exception:  # the handler reports its own errors; this is a last resort
            log.exception("request handler crashed")
            return
        assert self._loop is not None
        task = self._loop.create_task(self._finish(identity, coro, first))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _finish(self, identity: bytes, coro: Coroutine[Any, Any, bytes | None],
                      first: Any) -> None:
        try:
            reply = await _Resumed(coro, first)
        except Exception:
            log.exception("request handler crashed")
            return
        self._reply(identity, reply)
        if not self._recheck_scheduled and self._loop is not None:
            # A send from outside the reader callback may have taken a request's edge.
            self._recheck_scheduled = True
            self._loop.call_soon(self._drain)

    def _reply(self, identity: bytes, reply: bytes | None) -> None:
        if reply is None or self._closed:
            return
        with contextlib.suppress(zmq.ZMQError):
            _send(self._sock, identity, _NOBLOCK_MORE)
            _send(self._sock, reply, _NOBLOCK)
        # The reply leaves through libzmq's I/O thread, which the send has just woken, and
        # the scheduler may queue that thread on this CPU behind this one, which goes on
        # with work nobody waits for (a command's final screen and its commit). Measured on
        # a two-core VM: the reply then reached the front-end ~180 µs later, once that work
        # was done. Yielding once lets the I/O thread go first; when nothing else is
        # runnable here it returns at once (about 1 µs).
        os.sched_yield()

    def stop_reading(self) -> None:
        """Read no more requests (the socket stays open for the answers already sent)."""
        if self._loop is not None and not self._loop.is_closed() and not self._closed:
            self._loop.remove_reader(self._fd)

    def close(self, linger_ms: int = 0) -> None:
        """Stop answering and close the socket. ``linger_ms``: how long replies already sent
        may still take to leave (the context's ``term`` waits for them), instead of being
        dropped."""
        for task in list(self._tasks):
            task.cancel()
        if self._loop is not None and not self._loop.is_closed() and not self._closed:
            with contextlib.suppress(ValueError, KeyError):
                self._loop.remove_reader(self._fd)
        self._closed = True
        self._sock.close(linger=linger_ms)


class _Resumed:
    """Await a coroutine that already ran its first step and yielded ``first``.

    What ``yield from`` would do: every value the coroutine yields goes up to the task that
    awaits this object, and whatever the task sends or throws goes back down.
    """

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, bytes | None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, bytes | None]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
