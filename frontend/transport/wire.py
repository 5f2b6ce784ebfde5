"""The two ends of ``tether serve``'s stdio wire, as byte readers and writers.

A pipe or a socket (how MCP clients start servers) is driven from the event loop: a pipe is
reopened through ``/proc/self/fd`` as an open file description of our own with ``O_NONBLOCK``
(so the flags of a description shared with the client or a parent never change), a socket is
read and written with ``MSG_DONTWAIT``. Anything else (a TTY, a regular file, no ``/proc``) is
read and written in worker threads. :func:`claim` moves fd 0 or 1 to a private descriptor and
points the standard one elsewhere while serving, so nothing else in the process or its
children can eat or corrupt protocol bytes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import os
import select
import socket
import stat
from collections.abc import Callable, Iterator
from typing import Protocol

import anyio
import anyio.to_thread

log = logging.getLogger(__name__)

#: Bytes asked of the kernel per read.
READ_CHUNK = 1 << 16


class Reader(Protocol):
    async def read(self) -> bytes:
        """The next bytes from the client; ``b""`` at end of input."""

    def close(self) -> None: ...


class Writer(Protocol):
    async def write(self, data: bytes) -> None:
        """Write all of ``data`` (once this returns, or even when the caller is cancelled
        after part of it went out: a frame is never torn)."""

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class LoopReader:
    """A non-blocking pipe or socket read from the event loop.

    The descriptor stays registered with the loop between reads (not added and removed
    around each one: two ``epoll_ctl`` calls per message). Readiness is level-triggered, so
    when it fires while nobody is reading (a burst being worked through) the registration
    is dropped until the next read, instead of firing on every loop turn.
    """

    def __init__(self, fd: int, recv: Callable[[], bytes], close: Callable[[], None]) -> None:
        self._fd = fd
        self._recv = recv
        self._close = close
        self._loop: asyncio.AbstractEventLoop | None = None  # watching fd, when set
        self._waiter: asyncio.Future[None] | None = None

    async def read(self) -> bytes:
        while True:
            try:
                return self._recv()
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:  # a reset connection is the end of the input
                log.info("stdin read failed (%s): treating it as the end of input", exc)
                return b""
            loop = asyncio.get_running_loop()
            if self._loop is not loop:
                self._unwatch()
                loop.add_reader(self._fd, self._readable)
                self._loop = loop
            self._waiter = loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _readable(self) -> None:
        if self._waiter is None:
            self._unwatch()  # nobody is reading: stop until someone does
        elif not self._waiter.done():
            self._waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._loop is not None:
            if not self._loop.is_closed():
                self._loop.remove_reader(self._fd)
            self._loop = None

    def close(self) -> None:
        self._unwatch()
        self._close()


class LoopWriter:
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


class ThreadReader:
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


class ThreadWriter:
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


def loop_ends(read_fd: int, write_fd: int,
               stack: contextlib.ExitStack) -> tuple[Reader, Writer] | None:
    """Event-loop ends for a pipe or socket on both sides, or None (use threads)."""
    reader = _loop_end(read_fd, True, stack)
    writer = _loop_end(write_fd, False, stack)
    if reader is None or writer is None:
        return None
    assert isinstance(reader, LoopReader) and isinstance(writer, LoopWriter)
    return reader, writer


def _loop_end(fd: int, reading: bool,
              stack: contextlib.ExitStack) -> LoopReader | LoopWriter | None:
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
            return LoopReader(sock.fileno(), lambda: sock.recv(READ_CHUNK, socket.MSG_DONTWAIT),
                               sock.close)
        return LoopWriter(sock.fileno(), lambda view: sock.send(view, socket.MSG_DONTWAIT),
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
        return LoopReader(own, lambda: os.read(own, READ_CHUNK), close)
    return LoopWriter(own, lambda view: os.write(own, view), close)


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
def claim(fd: int, diversion: Callable[[], int]) -> Iterator[int]:
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


def divert_stdout() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)
