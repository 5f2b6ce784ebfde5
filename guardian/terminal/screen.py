"""The terminal screen of one PTY: hardened pyte, emulated lazily (docs/tools.md#screens).

The PTY reader calls :meth:`TerminalScreen.feed` for every chunk. Feeding only appends to a
pending buffer and runs a C-speed search for terminal queries, so ``cat`` of a huge file never
waits on emulation. :meth:`TerminalScreen.snapshot` brings the emulator up to date, skipping
what cannot change the result (see :mod:`guardian.screen_skip`).

Three things force emulation earlier:

- a query the program waits on (``ESC[6n``, ``ESC[c``, ``ESC[>c``, ``ESC[5n``): the reply must
  come out with the cursor as it is at the query;
- the pending buffer growing past :attr:`TerminalScreen.compact_at` bytes: it is emulated
  (with the skip rules) so memory stays bounded. Once a job has found output that is not
  plain text (a full-screen program), the mark is :attr:`TerminalScreen.busy_at` instead, far
  lower: such output costs full emulation anyway, and a small backlog keeps a screen request
  after a flood quick (an 8 MiB backlog is seconds of emulation) and appends cheap;
- output going quiet for ``BACKLOG_QUIET_S`` with more than ``SYNC_MAX`` bytes pending: the
  backlog is caught up in the background, so the next screen request finds it drawn.

The guardian's event loop must never stall on emulation, which runs at only a few MB/s for
output that no skip rule applies to (a full-screen program redrawing with cursor moves).
So, on a running loop, large catch-ups are *jobs* run in slices of a few milliseconds by a
driver task (:meth:`TerminalScreen.snapshot_async` waits for one). While a job runs and the
pending buffer is full again, the owner is asked to stop reading the PTY (``flow(False)``),
which slows the program to the emulator's pace instead of letting memory grow; reading
resumes as soon as the job takes the pending bytes. Without a running loop (unit tests, a
small catch-up) emulation is synchronous, exactly as before.

The emulator itself is :class:`~guardian.screen_vt.HardenedScreen` driven by
:class:`~guardian.screen_parser.VTParser`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from tether.guardian.terminal import skip
from tether.guardian.terminal.parser import VTParser
from tether.guardian.terminal.vt import HardenedScreen

# Deleting parameter bytes turns every query the emulator answers into "ESC[n" or "ESC[c".
_QUERY_PARAMS = b"0123456789;:>"
# An unfinished query at a chunk's end; longer ones are malformed for the parser anyway.
_QUERY_PREFIX = re.compile(rb"\x1b(?:\[[>0-9;:]{0,64})?")
_QUERY_PREFIX_MAX = 2 + 64

#: Bytes handed to the parser between two chances to yield: about 1-3 ms of emulation.
_PIECE = 4096
#: Time one slice of a job may hold the event loop before it yields.
SLICE_S = 0.002
#: Pending bytes that are still emulated synchronously (a query's reply, a snapshot).
SYNC_MAX = 64 * 1024
#: Once output has been quiet this long, a backlog over :data:`SYNC_MAX` is caught up in the
#: background (a job in slices), so a screen request that follows finds it drawn (up to
#: 8 MiB of plain text would otherwise cost that request ~10 ms).
BACKLOG_QUIET_S = 0.05


@dataclass(frozen=True, slots=True)
class ScreenSnapshot:
    """What the terminal shows at one moment."""

    lines: tuple[str, ...]  # every row, right-stripped of whitespace; len == rows
    cursor_row: int  # 0-based
    cursor_col: int  # 0-based
    cols: int
    rows: int
    alternate: bool  # alternate screen active
    title: str  # window title (OSC 0/2), "" if none

    @property
    def text(self) -> str:
        """The rows joined by newlines, without trailing empty rows."""
        lines = list(self.lines)
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


class TerminalScreen:
    """A lazily emulated terminal screen fed with raw PTY output."""

    #: Pending bytes beyond which emulation starts (with skipping) to bound memory.
    compact_at = 8 << 20
    #: The same mark while the output is not plain text (the last job was not): about 50 ms
    #: of full-screen emulation.
    busy_at = 256 << 10
    #: Granularity of the search for long line runs (see :mod:`guardian.screen_skip`).
    skip_block = 8192
    #: Most bytes one job takes: bounds each job's skip searches (C-speed scans, but over
    #: megabytes they would hold the loop for tens of milliseconds). After a job that was
    #: plain text throughout, the next may take twice as much (up to ``compact_at``): plain
    #: text is checked in one cheap pass, and each job costs a screenful of emulation.
    job_bytes = 1 << 20

    def __init__(
        self,
        cols: int = 120,
        rows: int = 40,
        respond: Callable[[bytes], None] | None = None,
        flow: Callable[[bool], None] | None = None,
    ) -> None:
        _check_size(cols, rows)
        self._respond = respond
        #: ``flow(False)``: stop reading the PTY for now; ``flow(True)``: read again.
        self.flow = flow
        # Replies are collected during emulation and sent once a job is done, so a failing
        # write to the PTY cannot leave the emulator half way through its bytes.
        self._replies: list[bytes] = []
        self._screen = HardenedScreen(cols, rows, self._replies.append)
        self._parser = VTParser(self._screen)
        self._pending = bytearray()
        self._protect: int | None = None  # no cut may drop pending bytes from here on
        self._carry = b""  # the end of the last chunk if it may begin a query
        self._fed = 0
        self._job: Iterator[None] | None = None  # a catch-up in progress, one slice at a time
        self._job_end = 0  # bytes fed when the job took its bytes
        self._emulated = 0  # every byte fed before this offset is emulated
        self._driver: asyncio.Task[None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[ScreenSnapshot]]] = []
        self._paused = False
        self._last: ScreenSnapshot | None = None
        self._job_size = self.job_bytes  # grows while jobs are plain text (see job_bytes)
        self._plain = False  # the current job was one plain-text run
        self._busy = False  # the last job was not plain text: the pending mark is busy_at
        self._quiet: asyncio.TimerHandle | None = None  # looks for output going quiet
        self._last_feed = 0.0  # time.monotonic() of the last feed
        self._idle = False  # output went quiet with a backlog: catch it up now
        #: Answers to queries in the first bytes fed are dropped (:meth:`replay`).
        self._mute_until = 0

    @property
    def bytes_fed(self) -> int:
        """Total bytes ever passed to :meth:`feed`."""
        return self._fed

    @property
    def settled(self) -> bool:
        """Would :meth:`snapshot` be quick (no job running, little pending)?"""
        return self._job is None and len(self._pending) <= SYNC_MAX

    @property
    def backlog(self) -> int:
        """Bytes fed but not emulated yet."""
        return self._fed - self._emulated

    def feed(self, data: bytes) -> None:
        """Take a chunk of PTY output. Cheap unless it holds a query or memory runs high."""
        if not data:
            return
        self._fed += len(data)
        carried = len(self._carry)
        chunk_start = len(self._pending)
        self._pending += data
        if self._has_query(data):
            # Nothing before the chunk (or the carried query start) may be cut away unseen.
            at = max(0, chunk_start - carried)
            self._protect = at if self._protect is None else min(self._protect, at)
            if not self._defer():
                self._catch_up()
        elif len(self._pending) > self._high_mark():
            if not self._defer():
                self._catch_up()
            elif not self._paused and self.flow is not None:
                self._paused = True  # full: no more until the driver takes these bytes
                self.flow(False)
        self._idle = False
        self._last_feed = time.monotonic()
        if self._quiet is None and len(self._pending) > SYNC_MAX:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop (unit tests): snapshots catch up synchronously
            self._quiet = loop.call_later(BACKLOG_QUIET_S, self._on_quiet)

    def _on_quiet(self) -> None:
        """Output may have gone quiet: catch a backlog up in the background if so."""
        self._quiet = None
        if len(self._pending) <= SYNC_MAX:
            return
        quiet_for = time.monotonic() - self._last_feed
        if quiet_for < BACKLOG_QUIET_S:
            self._quiet = asyncio.get_running_loop().call_later(BACKLOG_QUIET_S - quiet_for,
                                                                self._on_quiet)
            return
        self._idle = True
        self._start_driver()

    def replay(self, data: bytes) -> None:
        """Feed output the program wrote before this screen existed (a live upgrade rebuilds
        a screen from its journal's tail): emulated like any output, but the queries in it
        were answered when they were new, so they are not answered again."""
        self._mute_until = self._fed + len(data)
        self.feed(data)

    def snapshot(self) -> ScreenSnapshot:
        """Bring emulation up to date and return the screen.

        Synchronous: with a large backlog this emulates it all at once. On the guardian's
        loop use :meth:`snapshot_async`, or :meth:`snapshot_now` after it.
        """
        self._catch_up()
        self._last = snapshot_of(self._screen)
        return self._last

    async def snapshot_async(self) -> ScreenSnapshot:
        """The screen once every byte fed so far is emulated, without stalling the loop."""
        if self.settled:
            return self.snapshot()
        future: asyncio.Future[ScreenSnapshot] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._fed, future))
        self._start_driver()
        return await future

    def snapshot_now(self) -> ScreenSnapshot:
        """The screen as of now when that is cheap; otherwise (a large backlog) the last
        snapshot taken. Never stalls: call :meth:`snapshot_async` first for an up-to-date
        one, then this from synchronous code in the same step."""
        if self.settled:
            return self.snapshot()
        return self._last if self._last is not None else snapshot_of(self._screen)

    def resize(self, cols: int, rows: int) -> None:
        """Change the emulator's size (the caller resizes the PTY and signals the program)."""
        _check_size(cols, rows)
        self._catch_up()
        self._screen.resize(lines=rows, columns=cols)

    # -- queries ----------------------------------------------------------------------------

    def _has_query(self, data: bytes) -> bool:
        found = False
        carry = self._carry
        if carry:
            probe = (carry + data[:_QUERY_PREFIX_MAX]).translate(None, _QUERY_PARAMS)
            found = b"\x1b[n" in probe or b"\x1b[c" in probe
        if not found and b"\x1b" in data:
            squeezed = data.translate(None, _QUERY_PARAMS)
            found = b"\x1b[n" in squeezed or b"\x1b[c" in squeezed
        end = (carry + data)[-_QUERY_PREFIX_MAX:] if len(data) < _QUERY_PREFIX_MAX else data
        at = end.rfind(b"\x1b", max(0, len(end) - _QUERY_PREFIX_MAX))
        self._carry = end[at:] if at >= 0 and _QUERY_PREFIX.fullmatch(end, at) else b""
        return found

    # -- catching up ------------------------------------------------------------------------

    def _defer(self) -> bool:
        """Leave this catch-up to the driver? Only on a running loop, and only when it is
        big or another job is under way (bytes must be emulated in order)."""
        if self._job is None and len(self._pending) <= SYNC_MAX:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._start_driver()
        return True

    def _catch_up(self) -> None:
        """Emulate everything pending now, synchronously."""
        while self._job is not None or self._pending:
            if self._job is None:
                self._job = self._take_job()
            for _ in self._job:
                pass
            self._job_done()

    def _take_job(self) -> Iterator[None]:
        """The next job: the first :attr:`job_bytes` pending bytes (up to a line end when
        there is one nearby). Any split is exact: each job ends with the screen the bytes
        up to its end draw, which is all the skip rules promise."""
        pending = self._pending
        size = len(pending)
        most = self._job_size
        if size > most:
            size = pending.find(b"\n", most, most + 4096) + 1 or most
        self._plain = False
        taken = pending[:size]
        del pending[:size]  # O(1): a bytearray drops its head by moving its start
        protect = self._protect
        if protect is None or protect >= size:
            # Every byte of this job comes before the first protected one (or none is).
            self._protect = None if protect is None else protect - size
            job_protect = None
        else:
            job_protect = protect
            self._protect = 0 if self._pending else None  # the rest lies after it: all protected
        self._job_end = self._fed - len(self._pending)
        job = self._emulate_pending(taken, job_protect)
        if self._paused and self.flow is not None:
            self._paused = False  # the pending buffer is empty again
            self.flow(True)
        return job

    def _job_done(self) -> None:
        self._job = None
        self._job_size = (min(self._job_size * 2, max(self.compact_at, self.job_bytes))
                          if self._plain else self.job_bytes)
        self._busy = not self._plain
        self._emulated = self._job_end
        replies, self._replies[:] = self._replies[:], []
        if self._respond is not None and self._job_end > self._mute_until:
            for reply in replies:
                self._respond(reply)
        if self._waiters:
            ready = [w for w in self._waiters if w[0] <= self._emulated]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > self._emulated]
                snap = self._last = snapshot_of(self._screen)
                for _, future in ready:
                    if not future.done():
                        future.set_result(snap)

    def _start_driver(self) -> None:
        if self._driver is None or self._driver.done():
            self._driver = asyncio.get_running_loop().create_task(self._drive())

    def _wanted(self) -> bool:
        """Is there a reason to emulate now (rather than lazily, at the next snapshot)?"""
        return bool(
            self._job is not None
            or (self._pending and (self._waiters or self._protect is not None or self._idle
                                   or len(self._pending) > self._high_mark()))
        )

    def _high_mark(self) -> int:
        """Pending bytes beyond which emulation starts: see :attr:`compact_at`, :attr:`busy_at`."""
        return min(self.busy_at, self.compact_at) if self._busy else self.compact_at

    async def _drive(self) -> None:
        """Run catch-up jobs in slices of about :data:`SLICE_S`, yielding in between."""
        clock = time.perf_counter
        try:
            while self._wanted():
                if self._job is None:
                    self._job = self._take_job()
                until = clock() + SLICE_S
                for _ in self._job:
                    if clock() >= until:
                        break
                else:
                    self._job_done()
                await asyncio.sleep(0)
        except Exception as exc:  # a broken emulator must not leave snapshot waiters hanging
            self._job = None
            waiters, self._waiters = self._waiters, []
            for _, future in waiters:
                if not future.done():
                    future.set_exception(exc)
            raise

    def _emulate_pending(self, taken: bytearray, protect_from: int | None) -> Iterator[None]:
        """Emulate ``taken`` (pending bytes) as a job; no cut may drop bytes at or after
        ``protect_from``. Yields between pieces of a few kilobytes."""
        parser = self._parser
        held = len(parser.tail)
        data = bytes(parser.tail + taken)
        parser.tail = b""
        limit = len(data) if protect_from is None else max(0, held + protect_from)

        pos = 0
        if b"\x1b" in data:
            at = skip.reset_cut(data, limit)
            if at >= 0:
                self._screen.reset()
                pos = at + 2
            at = skip.clear_cut(data, pos, limit)
            if at > pos:
                trigger_end = skip.last_trigger_end(data, pos, at)
                yield from self._emulate(data, pos, trigger_end)
                pos = trigger_end
                # Inside an unfinished token (SO/SI can sit in a string) nothing is skipped.
                if not parser.tail:
                    skip.replay_state(parser, data, trigger_end, at)
                    pos = at
        yield from self._emulate(data, pos, len(data))

    def _emulate(self, data: bytes, start: int, end: int) -> Iterator[None]:
        """Feed ``data[start:end]`` to the parser, jumping over the middle of long line runs.

        Plain text (the common bulk: logs, ``cat``) is one run, recognised in one cheap
        pass. Anything else is searched for runs one window of 8 blocks at a time (ending
        after a line feed where one is near), with a chance to yield after each: the search
        costs about 10 ms per megabyte of full-screen output, so a window of 8 blocks holds
        the loop under a millisecond.
        """
        window = 8 * self.skip_block
        if end - start <= 2 * window:
            yield from self._emulate_runs(data, start, end,
                                          skip.line_runs(data, start, end, self.skip_block))
            return
        if skip.line_local(data[start : start + window // 16]) and skip.line_local(data[start:end]):
            self._plain = True
            yield from self._emulate_runs(data, start, end, [(start, end)])
            return
        while end - start > 2 * window:
            stop = data.find(b"\n", start + window, start + window + 4096) + 1 or start + window
            yield from self._emulate_runs(data, start, stop,
                                          skip.line_runs(data, start, stop, self.skip_block))
            yield
            start = stop
        yield from self._emulate_runs(data, start, end,
                                      skip.line_runs(data, start, end, self.skip_block))

    def _emulate_runs(
        self, data: bytes, start: int, end: int, runs: Iterable[tuple[int, int]]
    ) -> Iterator[None]:
        parser = self._parser
        pos = start
        for run_start, run_end in runs:
            head = data.find(b"\n", max(run_start, pos), run_end) + 1
            if head <= 0:
                continue
            yield from self._feed(data, pos, head)
            pos = head
            target = skip.run_jump(parser, data, head, run_end)
            if target > head:
                skip.jump_to(parser, data, head, target)
                pos = target
        yield from self._feed(data, pos, end)

    def _feed(self, data: bytes, start: int, end: int) -> Iterator[None]:
        """Feed ``data[start:end]`` in pieces (the parser keeps a split token for later)."""
        feed = self._parser.feed
        while end - start > _PIECE:
            feed(data[start : start + _PIECE])
            start += _PIECE
            yield
        feed(data[start:end])


def snapshot_of(screen: HardenedScreen) -> ScreenSnapshot:
    """The snapshot of an emulator as it stands (no pending bytes involved)."""
    columns = screen.columns
    return ScreenSnapshot(
        lines=tuple(screen.row_texts()),
        cursor_row=screen.cursor.y,
        cursor_col=min(screen.cursor.x, columns - 1),
        cols=columns,
        rows=screen.lines,
        alternate=screen.alternate,
        title=screen.title,
    )


def _check_size(cols: int, rows: int) -> None:
    if cols < 1 or rows < 1:
        raise ValueError(f"terminal size must be at least 1x1, got {cols}x{rows}")
