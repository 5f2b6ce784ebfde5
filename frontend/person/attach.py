"""``tether attach ID [--write]``: a live mirror of an execution's terminal, like tmux attach.

It paints the execution's current screen (cursor included) from ``exec.stream`` with
``screen``, then writes the raw output that follows that screen as it arrives, in large
long-polled chunks fetched up to AHEAD_BYTES ahead of the terminal (so it keeps up with a
program printing 10 MB/s, and with ``cat`` when the machine is busy). It repaints when either
side changes size or when retention dropped bytes it had not shown yet (a mirror cannot draw
what it never saw), and says so when the sizes differ. With more rows than the execution, the
last row is a status line, kept out of the mirror's way with a scroll region.

Read-only by default: keystrokes go nowhere. ``--write`` forwards them raw
(``person.input``), and the guardian records on the execution that a person typed. The detach
key (Ctrl-\\ by default) leaves the program running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import select
import signal
import sys
import termios
import tty
from collections import deque
from dataclasses import dataclass
from typing import Any

from tether.frontend.person.connect import (
    FOLLOW_WAIT_MS,
    Found,
    find_execution,
    guardians,
    run_cli,
    workspace_arg,
)
from tether.frontend.person.offline import OnDisk
from tether.frontend.person.term import Progress, visible, width
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_STREAM_BYTES, MAX_TEXT_BYTES, RPC_SLACK_S
from tether.protocol.method_table import EXEC_STREAM, PERSON_INPUT
from tether.protocol.results import StreamResult, StreamScreen
from tether.shared.config import Config

#: Batching of live output: once output has started, a reply waits a moment for more (up to
#: 256 KiB), so a program at full speed costs tens of replies a second instead of one per PTY
#: read. The wait is 2 ms while output trickles (a keystroke's echo stays immediate) and
#: 20 ms while it pours (the last reply was big). Bigger batches cost a little less per byte
#: (768 KiB: about 7% less guardian CPU in bench rounds) but the guardian keeps only 1 MiB and
#: its PTY reader appends bursts of up to 1 MiB at once: every byte of batch is margin lost.
BATCH_BYTES = 256 * 1024
LINGER_TRICKLE_MS, LINGER_POUR_MS = 2, 20
POURING_BYTES = 64 * 1024
#: Output fetched but not yet written to the person's terminal. The guardian keeps only 1 MiB
#: (15 ms of ``cat`` at full speed), so the mirror fetches ahead of a terminal that is
#: momentarily slower (a busy machine, a scheduling hiccup) instead of falling behind
#: retention and repainting; past this much it stops fetching and may fall behind after all.
#: On the busy 2-core machine 8 MiB still dropped 4-27 MB of a 100 MB ``cat`` in some rounds
#: of ``scripts/bench --only attach``; 32 MiB (about a second of lag at most) dropped none.
AHEAD_BYTES = 32 * 1024 * 1024
DEFAULT_DETACH = "ctrl-\\"
#: Exit status of ``tether attach`` when it was not the program's own: the person detached
#: (nothing went wrong and the program keeps running, as ``tmux attach`` does)...
EXIT_DETACHED = 0
#: ...or the program ended without an exit code that Tether saw (its record is ``unknown``,
#: e.g. its guardian was lost), or it is not running in a guardian any more. 255, as ssh does
#: for "no remote status": shells report 128+N for a program killed by signal N, so a
#: program's own status is 255 only when it said so itself.
EXIT_UNKNOWN = 255


def parse_detach_key(text: str) -> int:
    """``ctrl-\\``, ``ctrl-]``, ``ctrl-q``, ... -> the byte the terminal sends."""
    name = text.lower().removeprefix("ctrl-").removeprefix("c-").removeprefix("^")
    if len(name) == 1 and ("a" <= name <= "z" or name in "[\\]^_"):
        return ord(name.upper()) - 64
    raise ValueError(f"detach key must look like ctrl-\\ or ctrl-q, got {text!r}")


def key_name(byte: int) -> str:
    return f"Ctrl-{chr(byte + 64)}"


@dataclass
class Size:
    rows: int
    cols: int

    def __str__(self) -> str:
        return f"{self.rows}x{self.cols}"


def terminal_size(fd: int) -> Size:
    try:
        size = os.get_terminal_size(fd)
        return Size(size.lines, size.columns)
    except OSError:
        return Size(24, 80)


def _cut(line: str, cols: int) -> str:
    """``line`` cut to ``cols`` display cells (no ellipsis: this is a picture of a screen)."""
    if width(line) <= cols:
        return line
    out, used = [], 0
    for ch in line:
        w = max(width(ch), 0)
        if used + w > cols:
            break
        out.append(ch)
        used += w
    return "".join(out)


def paint(screen: StreamScreen, person: Size, status: str) -> bytes:
    """Clear the person's terminal and draw the execution's screen, cursor last.

    With more rows than the execution, the last row shows ``status`` and a scroll region keeps
    the mirror's scrolling above it; otherwise the bottom of the screen is drawn and the
    status goes to the window title only.
    """
    rows = screen.rows
    lines = list(screen.lines)[:rows]
    parts = ["\x1b[0m\x1b[r\x1b[H\x1b[2J", f"\x1b]2;{status}\x07"]
    if person.rows > rows:
        # DECSTBM homes the cursor: set it before anything is drawn.
        parts.append(f"\x1b[1;{rows}r")
        parts.append(f"\x1b[{person.rows};1H\x1b[7m{_cut(status, person.cols)}\x1b[0m")
    row, col = screen.cursor_row, screen.cursor_col
    # A smaller terminal shows the rows down to the cursor (or to the last text).
    bottom = row if isinstance(row, int) else max(
        (i for i, line in enumerate(lines) if line.strip()), default=0)
    shift = max(0, bottom - person.rows + 1)
    for i, line in enumerate(lines[shift:shift + person.rows]):
        parts.append(f"\x1b[{i + 1};1H{_cut(line, person.cols)}")
    if isinstance(row, int) and isinstance(col, int) and 0 <= row - shift < person.rows:
        parts.append(f"\x1b[{row - shift + 1};{min(col, person.cols - 1) + 1}H")
    else:
        parts.append(f"\x1b[{max(1, min(bottom - shift + 2, person.rows))};1H")
    return "".join(parts).encode()


class Attach:
    """One attach session: paint, mirror, forward keys (``--write``), detach."""

    def __init__(self, entry: Found | OnDisk, execution_id: str, *, write: bool, detach_key: int,
                 in_fd: int, out_fd: int) -> None:
        self.entry = entry
        self.execution_id = execution_id
        self.write = write
        self.detach_key = detach_key
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.attach_id = secrets.token_hex(8)
        self.offset = 0
        self.epoch = 0  # bumped by every repaint: output fetched before it is stale
        self.exec_size = Size(0, 0)
        self.detached = asyncio.Event()
        self.typed: asyncio.Queue[bytes] = asyncio.Queue()
        self.final: StreamResult | None = None
        self.behind = False  # bytes were dropped unseen: repaint once caught up
        # Bytes for the person's terminal, in order, written by one task (see _writer).
        self._ahead: deque[bytes] = deque()
        self._ahead_bytes = 0  # queued plus being written
        self._queued = asyncio.Event()  # something is in _ahead
        self._room = asyncio.Event()  # _ahead_bytes < AHEAD_BYTES
        self._room.set()
        self._idle = asyncio.Event()  # nothing queued nor being written
        self._idle.set()
        self._writing: asyncio.Future[None] | None = None
        self._repaints: set[asyncio.Task[Any]] = set()
        self.failure: BaseException | None = None

    # -- output ----------------------------------------------------------------------------

    def _out(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.out_fd, view):]
            except BlockingIOError:  # a non-blocking terminal fd: wait for room, do not spin
                select.select([], [self.out_fd], [])

    def _queue(self, data: bytes) -> None:
        """Hand ``data`` to the writer (after everything queued before it)."""
        if not data:
            return
        self._ahead.append(data)
        self._ahead_bytes += len(data)
        self._queued.set()
        self._idle.clear()
        if self._ahead_bytes >= AHEAD_BYTES:
            self._room.clear()

    def _discard_queued(self) -> None:
        """Drop output not handed to the terminal yet: a repaint draws what it would have."""
        self._ahead_bytes -= sum(len(chunk) for chunk in self._ahead)
        self._ahead.clear()
        self._queued.clear()
        self._after_write()

    def _after_write(self) -> None:
        if self._ahead_bytes < AHEAD_BYTES:
            self._room.set()
        if self._ahead_bytes == 0:
            self._idle.set()

    async def _writer(self) -> None:
        """Write queued output from a worker thread, a chunk at a time, in order: a slow
        terminal then never stalls the detach key or the next fetch."""
        while True:
            await self._queued.wait()
            data = self._ahead.popleft()
            if not self._ahead:
                self._queued.clear()
            # A thread cannot be cancelled: shutdown waits for this write (see run).
            self._writing = asyncio.ensure_future(asyncio.to_thread(self._out, data))
            try:
                await asyncio.shield(self._writing)
            finally:
                self._ahead_bytes -= len(data)
                self._after_write()

    def _status(self) -> str:
        mode = "writing: keys go to it" if self.write else "read-only"
        person = terminal_size(self.out_fd)
        text = (f"tether: attached to {self.execution_id} ({mode}), "
                f"{key_name(self.detach_key)} detaches")
        if (person.rows, person.cols) != (self.exec_size.rows, self.exec_size.cols):
            text += f"; sizes differ: execution {self.exec_size}, terminal {person}"
        return text

    async def repaint(self) -> StreamResult:
        got = await self.entry.call(EXEC_STREAM, {"execution_id": self.execution_id,
                                                  "screen": True})
        self.epoch += 1
        self.behind = False
        screen = got.screen
        if screen is None:  # asked for: a guardian that leaves it out breaks the protocol
            raise TetherError(ErrorCode.PROTOCOL_MISMATCH,
                              f"the guardian's reply to {EXEC_STREAM.name} with screen has no "
                              "screen; restart the guardian with this version of Tether")
        self.exec_size = Size(screen.rows, screen.cols)
        self._discard_queued()  # all before got.end: the paint draws its effect
        self.offset = got.end
        self._queue(paint(screen, terminal_size(self.out_fd), self._status()))
        return got

    def _fetch(self, last_size: int = 0) -> tuple[int, asyncio.Task[StreamResult]]:
        """Ask for the output after ``self.offset``; tagged with the epoch it was asked in."""
        linger = LINGER_POUR_MS if last_size >= POURING_BYTES else LINGER_TRICKLE_MS
        return self.epoch, asyncio.get_running_loop().create_task(self.entry.call(
            EXEC_STREAM, {"execution_id": self.execution_id, "offset": self.offset,
                            "max_bytes": MAX_STREAM_BYTES, "timeout_ms": FOLLOW_WAIT_MS,
                            "min_bytes": BATCH_BYTES, "linger_ms": linger},
            timeout_s=FOLLOW_WAIT_MS / 1000 + RPC_SLACK_S))

    async def mirror(self) -> None:
        """Fetch output as fast as the guardian hands it out and queue it for the writer, up
        to AHEAD_BYTES ahead of the person's terminal (a pipeline: the next fetch is always
        under way while earlier output is being written).

        When retention dropped bytes before we fetched them (the program outruns the person's
        terminal), the mirror skips ahead and repaints from the screen once it has caught up,
        instead of repainting at every chunk: a repaint asks the guardian to emulate the
        screen, which would slow the program itself.
        """
        first = await self.repaint()
        if first.status != "running" or not first.live:
            self.final = first
            return
        epoch, pending = self._fetch()
        try:
            while not self.detached.is_set():
                got = await pending
                if epoch != self.epoch:  # asked before a repaint, which drew all that
                    epoch, pending = self._fetch()
                    continue
                if (got.rows, got.cols) != (self.exec_size.rows, self.exec_size.cols):
                    await self.repaint()
                    epoch, pending = self._fetch()
                    continue
                self.behind = self.behind or bool(got.gap)
                self.offset = got.end
                caught_up = self.offset >= got.journal_end
                ended = caught_up and got.status != "running"
                if not ended:
                    epoch, pending = self._fetch(len(got.data))
                self._queue(got.data)
                await self._room.wait()  # a terminal far behind: stop fetching ahead
                # Repaint once the output calms down (or ends), not at every momentary catch-up
                # while it still pours: each repaint makes the guardian emulate the screen.
                calm = len(got.data) < POURING_BYTES or ended
                if caught_up and calm and self.behind and epoch == self.epoch:
                    if not ended:
                        pending.cancel()
                    await self.repaint()  # the screen as it is, now that we are level
                    if not ended:
                        epoch, pending = self._fetch()
                if ended:
                    await self._idle.wait()  # everything shown before the farewell
                    self.final = got
                    return
        finally:
            pending.cancel()

    # -- input -----------------------------------------------------------------------------

    def _on_input(self) -> None:
        try:
            data = os.read(self.in_fd, 4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # stdin closed: keep watching, stop listening
            asyncio.get_running_loop().remove_reader(self.in_fd)
            return
        cut = data.find(bytes([self.detach_key]))
        if cut >= 0:
            data = data[:cut]
        if data and self.write:
            self.typed.put_nowait(data)
        if cut >= 0:
            self.detached.set()

    async def send_typed(self) -> None:
        while True:
            data = await self.typed.get()
            while not self.typed.empty() and len(data) < MAX_TEXT_BYTES // 2:
                data += self.typed.get_nowait()
            for start in range(0, len(data), MAX_TEXT_BYTES):
                try:
                    await self.entry.call(PERSON_INPUT, {
                        "execution_id": self.execution_id,
                        "data": data[start:start + MAX_TEXT_BYTES],
                        "attach_id": self.attach_id, "idempotency_key": secrets.token_hex(16)})
                except TetherError as err:
                    if err.code not in (ErrorCode.TARGET_BUSY, ErrorCode.NOT_RUNNING):
                        raise
                    # An agent's prompt is being typed (or the program just ended): these keys
                    # were not typed. Say so with the bell rather than end the session.
                    self._queue(b"\x07")
                    break

    # -- the session -----------------------------------------------------------------------

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.in_fd, self._on_input)
        loop.add_signal_handler(signal.SIGWINCH, self._on_winch)
        tasks = [loop.create_task(self.mirror()), loop.create_task(self.send_typed()),
                 loop.create_task(self.detached.wait()), loop.create_task(self.entry.watch()),
                 loop.create_task(self._writer())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                failure = task.exception()
                if failure is not None:
                    self.failure = failure
                    if not self.guardian_lost():
                        raise failure
                    return EXIT_UNKNOWN  # the program's end, if any, was not seen
            if tasks[0] in done and not self.typed.empty():
                # The program ended: what the person typed just before can still be sent.
                with contextlib.suppress(TetherError):
                    await asyncio.wait_for(self._drain_typed(), 2)
        finally:
            for task in [*tasks, *self._repaints]:
                task.cancel()
            await asyncio.gather(*tasks, *self._repaints, return_exceptions=True)
            if self._writing is not None:  # the farewell must not interleave with a write
                await asyncio.wait([self._writing])
            loop.remove_signal_handler(signal.SIGWINCH)
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(self.in_fd)
        return self.exit_status()

    def guardian_lost(self) -> bool:
        """Whether watching stopped because the guardian holding the program has ended (and
        the program's terminal with it), rather than because something failed."""
        return (isinstance(self.failure, TetherError)
                and self.failure.code == ErrorCode.GUARDIAN_UNAVAILABLE
                and isinstance(self.entry, Found) and self.entry.gone())

    def exit_status(self) -> int:
        """The program's exit code once it has ended; EXIT_DETACHED when the person
        detached, EXIT_UNKNOWN when it ended without one (the farewell line says which)."""
        if self.detached.is_set():
            return EXIT_DETACHED
        code = None if self.final is None else self.final.exit_code
        return code if isinstance(code, int) and 0 <= code <= 255 else EXIT_UNKNOWN

    async def _drain_typed(self) -> None:
        while not self.typed.empty():
            await self.entry.call(PERSON_INPUT, {
                "execution_id": self.execution_id, "data": self.typed.get_nowait(),
                "attach_id": self.attach_id, "idempotency_key": secrets.token_hex(16)})

    def _on_winch(self) -> None:
        task = asyncio.get_running_loop().create_task(self.repaint())
        self._repaints.add(task)  # keep a reference until it is done
        task.add_done_callback(self._repaints.discard)

    def farewell(self) -> bytes:
        if self.failure is not None:
            what = f"stopped watching {self.execution_id}: {self.failure}"
        elif self.detached.is_set() or self.final is None:
            what = f"detached from {self.execution_id}; it keeps running"
        else:
            code = self.final.exit_code
            what = f"{self.execution_id} {self.final.status}" + (
                f" with exit code {code}" if code is not None else "") + (
                f" ({self.final.reason})" if self.final.reason else "")
        # ``what`` may quote a guardian's error (paths an agent chose): made visible.
        return (f"\x1b[0m\x1b[r\x1b[{terminal_size(self.out_fd).rows};1H\r\n"
                f"[tether: {visible(what)}]\r\n").encode()


@contextlib.contextmanager
def raw_mode(fd: int) -> Any:
    """The person's terminal in raw mode (so the detach key is a byte, not SIGQUIT)."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


def require_terminals(in_fd: int, out_fd: int, execution_id: str) -> None:
    """Refuse, before anything is asked of a guardian, to attach without a terminal on both
    sides: the mirror draws with escape sequences and reads keys in raw mode, and a file or
    /dev/null cannot even be watched for input."""
    not_terminals = [name for name, fd in (("stdin", in_fd), ("stdout", out_fd))
                     if not os.isatty(fd)]
    if not_terminals:
        which = (f"{not_terminals[0]} is not one" if len(not_terminals) == 1
                 else "neither stdin nor stdout is one")
        raise TetherError(
            ErrorCode.INVALID_REQUEST,
            f"attach needs a terminal, and {which}: run it in an interactive terminal, or use "
            f"`tether tail -f {execution_id}` to follow the output into a pipe or file",
            {"not_terminals": not_terminals})


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("attach", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether attach",
        description="Watch an execution's terminal live in yours, like tmux attach: its "
        "current screen, then its output as it comes. Read-only unless --write; the detach "
        "key leaves the program running.")
    parser.add_argument("--host", help="run this on that host over SSH ([user@]host[:port], "
                        "as your ssh configuration knows it)")
    parser.add_argument("execution_id", metavar="ID")
    parser.add_argument("--write", action="store_true",
                        help="forward keystrokes to the program (recorded as a person event)")
    parser.add_argument("--detach-key", default=DEFAULT_DETACH,
                        help="key that detaches (default ctrl-\\)")
    parser.add_argument("--workspace", type=workspace_arg, help="look only in this workspace's guardian")
    args = parser.parse_args(argv)
    try:
        detach = parse_detach_key(args.detach_key)
    except ValueError as exc:
        parser.error(str(exc))
    in_fd, out_fd = sys.stdin.fileno(), sys.stdout.fileno()

    async def body() -> int:
        require_terminals(in_fd, out_fd, args.execution_id)
        config = Config.from_env()
        async with guardians(config, args.workspace) as found:
            with Progress(f"looking for {args.execution_id}"):
                entry, described = await find_execution(
                    found, args.execution_id, config=config, workspace=args.workspace)
            args.execution_id = described.execution.execution_id  # a prefix, whole
            if args.write and not described.live:
                raise TetherError(ErrorCode.NOT_RUNNING,
                                  f"{args.execution_id} is {described.execution.status}; "
                                  "there is nothing to type into", {"input_sent": False})
            session = Attach(entry, args.execution_id, write=args.write, detach_key=detach,
                             in_fd=in_fd, out_fd=out_fd)
            sys.stdout.flush()
            with raw_mode(in_fd):
                try:
                    return await session.run()
                finally:
                    session._out(session.farewell())

    return run_cli("tether attach", body)
