"""The terminal screen of one PTY: hardened pyte, emulated lazily (SPEC R18, R19).

The PTY reader calls :meth:`TerminalScreen.feed` for every chunk. Feeding only appends to a
pending buffer and runs a C-speed search for terminal queries, so ``cat`` of a huge file never
waits on emulation. :meth:`TerminalScreen.snapshot` brings the emulator up to date, skipping
what cannot change the result (see :mod:`guardian.screen_skip`).

Two things force emulation earlier:

- a query the program waits on (``ESC[6n``, ``ESC[c``, ``ESC[>c``, ``ESC[5n``): the reply must
  come out of ``feed`` itself, with the cursor as it is at the query;
- the pending buffer growing past :attr:`TerminalScreen.compact_at` bytes: it is emulated
  (with the skip rules) so memory stays bounded.

The emulator itself is :class:`~guardian.screen_vt.HardenedScreen` driven by
:class:`~guardian.screen_parser.VTParser`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tether.guardian.terminal import skip
from tether.guardian.terminal.parser import VTParser
from tether.guardian.terminal.vt import HardenedScreen

# Deleting parameter bytes turns every query the emulator answers into "ESC[n" or "ESC[c".
_QUERY_PARAMS = b"0123456789;:>"
# An unfinished query at a chunk's end; longer ones are malformed for the parser anyway.
_QUERY_PREFIX = re.compile(rb"\x1b(?:\[[>0-9;:]{0,64})?")
_QUERY_PREFIX_MAX = 2 + 64


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

    #: Pending bytes beyond which :meth:`feed` emulates (with skipping) to bound memory.
    compact_at = 8 << 20
    #: Granularity of the search for long line runs (see :mod:`guardian.screen_skip`).
    skip_block = 8192

    def __init__(
        self, cols: int = 120, rows: int = 40, respond: Callable[[bytes], None] | None = None
    ) -> None:
        _check_size(cols, rows)
        self._respond = respond
        # Replies are collected during emulation and sent once it is done, so a failing write
        # to the PTY cannot leave the emulator half way through the pending bytes.
        self._replies: list[bytes] = []
        self._screen = HardenedScreen(cols, rows, self._replies.append)
        self._parser = VTParser(self._screen)
        self._pending = bytearray()
        self._carry = b""  # the end of the last chunk if it may begin a query
        self._fed = 0

    @property
    def bytes_fed(self) -> int:
        """Total bytes ever passed to :meth:`feed`."""
        return self._fed

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
            self._catch_up(protect_from=chunk_start - carried)
        elif len(self._pending) > self.compact_at:
            self._catch_up()

    def snapshot(self) -> ScreenSnapshot:
        """Bring emulation up to date and return the screen."""
        self._catch_up()
        return snapshot_of(self._screen)

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

    def _catch_up(self, protect_from: int | None = None) -> None:
        """Emulate the pending bytes; no cut may drop bytes at or after ``protect_from``."""
        if not self._pending:
            return
        parser = self._parser
        held = len(parser.tail)
        data = bytes(parser.tail + self._pending)
        parser.tail = b""
        self._pending = bytearray()
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
                self._emulate(data, pos, trigger_end)
                pos = trigger_end
                # Inside an unfinished token (SO/SI can sit in a string) nothing is skipped.
                if not parser.tail:
                    skip.replay_state(parser, data, trigger_end, at)
                    pos = at
        self._emulate(data, pos, len(data))
        replies, self._replies[:] = self._replies[:], []
        if self._respond is not None:
            for reply in replies:
                self._respond(reply)

    def _emulate(self, data: bytes, start: int, end: int) -> None:
        """Feed ``data[start:end]`` to the parser, jumping over the middle of long line runs."""
        parser = self._parser
        pos = start
        for run_start, run_end in skip.line_runs(data, start, end, self.skip_block):
            head = data.find(b"\n", max(run_start, pos), run_end) + 1
            if head <= 0:
                continue
            parser.feed(data[pos:head])
            pos = head
            target = skip.run_jump(parser, data, head, run_end)
            if target > head:
                skip.jump_to(parser, data, head, target)
                pos = target
        parser.feed(data[pos:end])


def snapshot_of(screen: HardenedScreen) -> ScreenSnapshot:
    """The snapshot of an emulator as it stands (no pending bytes involved)."""
    columns = screen.columns
    lines = []
    for y in range(screen.lines):
        row = screen.buffer.get(y)
        # Wide characters' right halves are empty strings, so they add nothing here.
        lines.append("".join([row[x].data for x in range(columns)]).rstrip() if row else "")
    return ScreenSnapshot(
        lines=tuple(lines),
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
