"""The screen state of Tether's terminal emulator: pyte's ``Screen``, hardened.

pyte 0.8.2 gets several things wrong that matter for screens of real programs; this subclass
fixes them, following xterm where terminals disagree:

- alternate screen (private modes 47, 1047, 1049; 1048 saves/restores the cursor);
- zero-width code points (ZWJ, variation selectors, combining marks) attach to the previous cell
  instead of stopping the draw, wide characters wrap as a whole and take two cells;
- one saved-cursor slot per buffer (pyte pops a stack, so a second DECRC homed the cursor);
- a cursor below the scroll region moves down without scrolling (pyte jumped up to the margin);
- the pending-wrap state (``cursor.x == columns``) is cleared by every cursor movement;
- ``ED 3`` clears scrollback only, so it leaves the screen alone; DECCOLM is ignored;
- SU/SD, REP, CHT/CBT, DECSTR and terminal replies that programs wait on (DSR, DA1, DA2).

Parsing bytes into these calls is :mod:`guardian.screen_parser`'s job.
"""

from __future__ import annotations

import copy
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from itertools import repeat
from typing import Any, cast

from pyte import modes as mo
from pyte.charsets import LAT1_MAP
from pyte.screens import Char, Margins, Savepoint, Screen, StaticDefaultDict, wcwidth

Line = StaticDefaultDict[int, Char]
Buffer = dict[int, Line]

# Private modes that switch buffers or save the cursor: handled here, never stored in ``mode``.
ALT_MODES = frozenset({47, 1047, 1049})
_CURSOR_MODE = 1048
# xterm ignores DECCOLM (132 columns) unless told otherwise; the size comes from the caller only.
_IGNORED_PRIVATE_MODES = frozenset({3})
_MAX_CELL_CACHE = 4096
_MAX_CACHED_ATTRS = 256
#: Rows changed since the last render, remembered across scrolls; beyond this many (a long
#: flood without a render) every row is rendered afresh instead.
_MAX_STALE_ROWS = 1024


def _passes_to_pyte(mode: int, private: bool) -> bool:
    """Whether pyte may see this mode: DECCOLM is ignored, and pyte stores private modes
    shifted left by 5 bits, so a public mode that is a multiple of 32 would alias one
    (``CSI 96 h`` would switch to 132 columns)."""
    return mode not in _IGNORED_PRIVATE_MODES if private else mode % 32 != 0


def _narrow_run_pattern() -> str:
    """A regex for runs of characters that take exactly one cell (per pyte's wcwidth).

    Below U+3000 only: that covers Latin, Greek, Cyrillic, box drawing and most symbols; what
    it leaves out is drawn one character at a time.
    """
    spans = ["\x20-\x7e"]
    start = -1
    for code in range(0xA0, 0x3001):
        narrow = code < 0x3000 and wcwidth(chr(code)) == 1
        if narrow and start < 0:
            start = code
        elif not narrow and start >= 0:
            spans.append(f"{re.escape(chr(start))}-{re.escape(chr(code - 1))}")
            start = -1
    return f"[{''.join(spans)}]+"


_NARROW_RUN = re.compile(_narrow_run_pattern())


class _CellCache(dict[str, Char]):
    """Interned ``Char`` cells for one set of attributes: drawing ASCII becomes dict lookups."""

    __slots__ = ("attrs",)

    def __init__(self, attrs: Char) -> None:
        super().__init__()
        self.attrs = attrs

    def __missing__(self, data: str) -> Char:
        if len(self) >= _MAX_CELL_CACHE:
            self.clear()
        cell = self[data] = self.attrs._replace(data=data)
        return cell


class HardenedScreen(Screen):
    """A pyte ``Screen`` with an alternate buffer, safe drawing and terminal replies."""

    def __init__(
        self, columns: int, lines: int, respond: Callable[[bytes], None] | None = None
    ) -> None:
        self._respond = respond
        self._cells: dict[Char, _CellCache] = {}
        self._sgr: dict[tuple[Char, bool, tuple[int, ...]], Char] = {}
        # The text of each row as last rendered, by row object (rows move when the screen
        # scrolls; the object is kept so that its id cannot be reused while it is here).
        self._texts: dict[int, tuple[Line, str]] = {}
        # Rows changed since the last render whose row number is no longer theirs (ids, or
        # None: too many to track, render every row).
        self._stale: set[int] | None = set()
        super().__init__(columns, lines)

    # -- state -----------------------------------------------------------------------------

    def reset(self) -> None:
        """RIS: everything back to power-on state, including buffers and saved cursors."""
        super().reset()
        # pyte starts G1 as DEC graphics; xterm starts it as ASCII, so a stray SO is harmless.
        self.g1_charset = LAT1_MAP
        self.alternate = False
        self._normal_buffer: Buffer | None = None
        self._saved: Savepoint | None = None
        self._normal_saved: Savepoint | None = None
        # The last graphic character drawn, for REP (the parser forgets it after other tokens).
        self.last_char: str | None = None

    def _new_buffer(self) -> Buffer:
        return defaultdict(lambda: StaticDefaultDict[int, Char](self.default_char))

    def respond(self, data: bytes) -> None:
        """Send a reply (cursor report, device attributes) back to the program."""
        if self._respond is not None:
            self._respond(data)

    def write_process_input(self, data: str) -> None:
        """pyte's reply hook, routed to :meth:`respond`."""
        self.respond(data.encode())

    def _clear_wrap(self) -> None:
        # pyte keeps "just wrote the last column" as x == columns; any movement ends it.
        if self.cursor.x >= self.columns:
            self.cursor.x = self.columns - 1

    # -- drawing ---------------------------------------------------------------------------

    def draw(self, data: str) -> None:
        """Draw text at the cursor: wide characters take two cells, zero-width ones attach."""
        table = self.g1_charset if self.charset else self.g0_charset
        if table is not LAT1_MAP:
            data = data.translate(table)
        if not data:
            return
        attrs = self.cursor.attrs
        cells = self._cells.get(attrs)
        if cells is None:
            if len(self._cells) >= _MAX_CACHED_ATTRS:
                self._cells.clear()
            cells = self._cells[attrs] = _CellCache(attrs)
        if data.isascii():
            self._draw_narrow(data, cells)
            return
        pos, end = 0, len(data)
        narrow_run = _NARROW_RUN.match
        while pos < end:
            match = narrow_run(data, pos)
            if match is None:
                self._draw_char(data[pos], cells)
                pos += 1
            else:
                self._draw_narrow(match.group(), cells)
                pos = match.end()

    def _wrap_if_pending(self) -> None:
        if mo.DECAWM in self.mode:
            self.carriage_return()
            self.linefeed()
        else:
            self.cursor.x = self.columns - 1

    def _draw_narrow(self, data: str, cells: _CellCache) -> None:
        """Draw characters that take one cell each, a row segment at a time."""
        cursor, columns = self.cursor, self.columns
        n, i = len(data), 0
        while i < n:
            if cursor.x >= columns:
                if mo.DECAWM not in self.mode:
                    # Without autowrap every further character lands in the last column.
                    self._put_run(columns - 1, data[-1], cells)
                    cursor.x = columns
                    break
                self._wrap_if_pending()
            x = cursor.x
            k = min(n - i, columns - x)
            if mo.IRM in self.mode:
                self.insert_characters(k)  # one shift for the whole segment, same result
            self._put_run(x, data[i : i + k], cells)
            cursor.x = x + k
            i += k
        self.last_char = data[-1]

    def _split_neighbours(self, line: Line, x: int, end: int, cells: _CellCache) -> None:
        # Writing over half of a wide character blanks its other half, as terminals do.
        if x and line[x].data == "":
            line[x - 1] = cells[" "]
        if end < self.columns and line[end].data == "":
            line[end] = cells[" "]

    def _put_run(self, x: int, run: str, cells: _CellCache) -> None:
        """Write single-width characters at ``x``."""
        self.dirty.add(self.cursor.y)
        line = self.buffer[self.cursor.y]
        end = x + len(run)
        self._split_neighbours(line, x, end, cells)
        line.update(zip(range(x, end), map(cells.__getitem__, run), strict=True))

    def _draw_char(self, char: str, cells: _CellCache) -> None:
        """Draw one character that is wide, zero-width or unprintable."""
        cursor, columns = self.cursor, self.columns
        width = wcwidth(char)
        if width == 0:
            self._attach(char)
            return
        if width < 0:
            return  # unprintable: skip it, keep drawing the rest
        if width == 1:
            self._draw_narrow(char, cells)
            return
        if cursor.x >= columns - 1:
            # A wide character never straddles the edge: it wraps whole (xterm).
            if mo.DECAWM in self.mode:
                self._wrap_if_pending()
            else:
                cursor.x = max(0, columns - 2)
        if mo.IRM in self.mode:
            self.insert_characters(2)
        x = cursor.x
        self.dirty.add(cursor.y)
        line = self.buffer[cursor.y]
        end = min(x + 2, columns)
        self._split_neighbours(line, x, end, cells)
        line[x] = cells[char]
        if end > x + 1:
            line[x + 1] = cells[""]  # the right half: an empty stub, as in pyte
        cursor.x = min(x + 2, columns)
        self.last_char = char

    def _attach(self, char: str) -> None:
        """Join a zero-width code point (ZWJ, VS16, combining mark) to the previous cell."""
        x = min(self.cursor.x, self.columns) - 1
        self.dirty.add(self.cursor.y)
        line = self.buffer[self.cursor.y]
        if x > 0 and line[x].data == "":
            x -= 1  # the previous cell is the right half of a wide character
        if x < 0 or line[x].data in ("", " "):
            return  # nothing to attach to on this row: drop it, as most terminals do
        cell = line[x]
        line[x] = cell._replace(data=unicodedata.normalize("NFC", cell.data + char))

    def select_graphic_rendition(self, *attrs: int) -> None:
        """SGR, memoised: coloured output repeats the same few changes over and over."""
        key = (self.cursor.attrs, mo.DECSCNM in self.mode, attrs)
        result = self._sgr.get(key)
        if result is None:
            super().select_graphic_rendition(*attrs)
            if len(self._sgr) >= _MAX_CACHED_ATTRS:
                self._sgr.clear()
            result = self._sgr[key] = self.cursor.attrs
        self.cursor.attrs = result

    def repeat_char(self, char: str, count: int) -> None:
        """REP: draw the preceding graphic character ``count`` more times (0 means once)."""
        self.draw(char * max(1, min(count, self.columns * self.lines)))

    # -- cursor movement and scrolling ------------------------------------------------------

    def _region(self) -> tuple[int, int]:
        return self.margins or Margins(0, self.lines - 1)

    def scroll_up(self, count: int = 1) -> None:
        """SU / index at the bottom margin: rows move up, blank rows enter at the bottom."""
        top, bottom = self._region()
        count = max(1, min(count, bottom - top + 1))
        self._move_rows(range(top, bottom + 1 - count), range(top + count, bottom + 1))
        for y in range(bottom + 1 - count, bottom + 1):
            self.buffer.pop(y, None)

    def scroll_down(self, count: int = 1) -> None:
        """SD / reverse index at the top margin: rows move down, blank rows enter at the top."""
        top, bottom = self._region()
        count = max(1, min(count, bottom - top + 1))
        self._move_rows(range(top + count, bottom + 1), range(top, bottom + 1 - count))
        for y in range(top, top + count):
            self.buffer.pop(y, None)

    def _move_rows(self, targets: range, sources: range) -> None:
        # Scrolling is the hot spot of plain output: move rows with C-level map/zip, not a loop.
        self._fold_dirty()
        buffer = self.buffer
        moved = list(map(buffer.pop, sources, repeat(None)))
        # Rows never written are absent, not empty: the Nones are put back to absent below.
        buffer.update(zip(targets, cast("list[Line]", moved), strict=True))
        if None in moved:
            for y, row in zip(targets, moved, strict=True):
                if row is None:
                    del buffer[y]

    def index(self) -> None:
        """IND: down one row, scrolling at the bottom margin (never from below it)."""
        self._clear_wrap()
        _top, bottom = self._region()
        if self.cursor.y == bottom:
            self.scroll_up(1)
        elif self.cursor.y < self.lines - 1:
            self.cursor.y += 1

    def reverse_index(self) -> None:
        """RI: up one row, scrolling at the top margin (never from above it)."""
        self._clear_wrap()
        top, _bottom = self._region()
        if self.cursor.y == top:
            self.scroll_down(1)
        elif self.cursor.y > 0:
            self.cursor.y -= 1

    def cursor_up(self, count: int | None = None) -> None:
        """CUU: stops at the top margin when starting inside the region, else at row 0."""
        self._clear_wrap()
        top, _bottom = self._region()
        limit = top if self.cursor.y >= top else 0
        self.cursor.y = max(self.cursor.y - (count or 1), limit)

    def cursor_down(self, count: int | None = None) -> None:
        """CUD: stops at the bottom margin when starting inside the region, else at the end."""
        self._clear_wrap()
        _top, bottom = self._region()
        limit = bottom if self.cursor.y <= bottom else self.lines - 1
        self.cursor.y = min(self.cursor.y + (count or 1), limit)

    def cursor_position(self, line: int | None = None, column: int | None = None) -> None:
        """CUP: origin mode makes rows relative to the region and clamps into it."""
        y = (line or 1) - 1
        x = (column or 1) - 1
        if self.margins is not None and mo.DECOM in self.mode:
            top, bottom = self.margins
            y = min(max(top + y, top), bottom)
        self.cursor.x = min(max(0, x), self.columns - 1)
        self.cursor.y = min(max(0, y), self.lines - 1)

    def cursor_to_line(self, line: int | None = None) -> None:
        """VPA: like CUP for the row only (pyte asserted when DECOM had no margins)."""
        self._clear_wrap()
        y = (line or 1) - 1
        if self.margins is not None and mo.DECOM in self.mode:
            top, bottom = self.margins
            y = min(max(top + y, top), bottom)
        self.cursor.y = min(max(0, y), self.lines - 1)

    def set_margins(self, top: int | None = None, bottom: int | None = None) -> None:
        """DECSTBM: 0 or nothing means the screen edge; a valid region homes the cursor."""
        top, bottom = top or 1, bottom or self.lines
        if top <= 1 and bottom >= self.lines:
            self.margins = None
            self.cursor_position()
        else:
            super().set_margins(top, bottom)

    def tab(self) -> None:
        """HT: next tab stop, or the last column."""
        self._clear_wrap()
        stops = [stop for stop in self.tabstops if self.cursor.x < stop < self.columns]
        self.cursor.x = min(stops) if stops else self.columns - 1

    def tab_forward(self, count: int) -> None:
        """CHT: ``count`` tab stops forward."""
        for _ in range(max(1, min(count, self.columns))):
            self.tab()

    def tab_back(self, count: int) -> None:
        """CBT: ``count`` tab stops back, stopping at column 0."""
        self._clear_wrap()
        for _ in range(max(1, min(count, self.columns))):
            stops = [stop for stop in self.tabstops if stop < self.cursor.x]
            self.cursor.x = max(stops) if stops else 0

    def erase_in_line(self, how: int = 0, private: bool = False) -> None:
        """EL, with the pending-wrap cursor treated as sitting on the last column."""
        if how not in (0, 1, 2):
            return
        self._clear_wrap()
        super().erase_in_line(how)

    def erase_in_display(self, how: int = 0, *args: Any, **kwargs: Any) -> None:
        """ED: 3 clears the scrollback only, which this screen does not keep."""
        if how not in (0, 1, 2):
            return
        self._clear_wrap()
        super().erase_in_display(how)

    def erase_characters(self, count: int | None = None) -> None:
        """ECH, clamped to the row."""
        self._clear_wrap()
        super().erase_characters(count)

    def insert_characters(self, count: int | None = None) -> None:
        """ICH: cells from the cursor on move right; those pushed past the edge are lost."""
        self._clear_wrap()
        count = count or 1
        x, columns = self.cursor.x, self.columns
        self.dirty.add(self.cursor.y)
        line = self.buffer[self.cursor.y]
        moving = [(k, cell) for k, cell in line.items() if k >= x]
        for k, _ in moving:
            del line[k]
        line.update((k + count, cell) for k, cell in moving if k + count < columns)

    def delete_characters(self, count: int | None = None) -> None:
        """DCH."""
        self._clear_wrap()
        super().delete_characters(count)

    def insert_lines(self, count: int | None = None) -> None:
        """IL."""
        self._clear_wrap()
        super().insert_lines(count)

    def delete_lines(self, count: int | None = None) -> None:
        """DL."""
        self._clear_wrap()
        super().delete_lines(count)

    # -- rendering ---------------------------------------------------------------------------

    def _fold_dirty(self) -> None:
        """Rows are about to move: remember the changed ones by object, not by row number.

        (``dirty`` holds row numbers, as pyte's own methods mark them; every change to a row
        marks it, and a move would otherwise make the mark point at another row.)"""
        if not self.dirty:
            return
        stale = self._stale
        if stale is not None:
            buffer = self.buffer
            stale.update(id(buffer[y]) for y in self.dirty if y in buffer)
            if len(stale) > _MAX_STALE_ROWS:
                self._stale = None
        self.dirty.clear()

    def row_texts(self) -> list[str]:
        """The text of every row (right-stripped), rendering only the rows that changed
        since the last call: a command's few lines, not the whole screen."""
        self._fold_dirty()
        stale, self._stale = self._stale, set()
        if stale is None:  # too many changes to have tracked: render every row
            cached: dict[int, tuple[Line, str]] = {}
            stale = set()
        else:
            cached = self._texts
        texts: dict[int, tuple[Line, str]] = {}
        columns = self.columns
        blank = [" "] * columns
        lines = []
        buffer = self.buffer
        for y in range(self.lines):
            row = buffer.get(y)
            if not row:
                lines.append("")
                continue
            key = id(row)
            hit = cached.get(key)
            if hit is not None and hit[0] is row and key not in stale:
                text = hit[1]
            else:
                # Rows are sparse: fill only the cells that exist (a missing cell is a space,
                # and wide characters' right halves are empty strings, so they add nothing).
                cells = blank[:]
                for x, char in row.items():
                    if x < columns:
                        cells[x] = char.data
                text = "".join(cells).rstrip()
            texts[key] = (row, text)
            lines.append(text)
        self._texts = texts
        return lines

    # -- saved cursor and alternate screen --------------------------------------------------

    def save_cursor(self) -> None:
        """DECSC: one slot per buffer, overwritten by each save (as in xterm)."""
        self._saved = Savepoint(
            copy.copy(self.cursor),
            self.g0_charset,
            self.g1_charset,
            self.charset,
            mo.DECOM in self.mode,
            mo.DECAWM in self.mode,
        )

    def restore_cursor(self) -> None:
        """DECRC: the slot stays, so restoring twice gives the same position."""
        saved = self._saved
        if saved is None:
            self.mode.discard(mo.DECOM)
            self.cursor.x = self.cursor.y = 0
            return
        self.g0_charset, self.g1_charset, self.charset = (
            saved.g0_charset,
            saved.g1_charset,
            saved.charset,
        )
        for flag, on in ((mo.DECOM, saved.origin), (mo.DECAWM, saved.wrap)):
            if on:
                self.mode.add(flag)
            else:
                self.mode.discard(flag)
        hidden = self.cursor.hidden
        self.cursor = copy.copy(saved.cursor)
        self.cursor.hidden = hidden
        self.ensure_hbounds()
        self.ensure_vbounds()

    def _enter_alternate(self, mode: int) -> None:
        if self.alternate:
            return
        if mode == 1049:
            self.save_cursor()
        self._normal_buffer, self.buffer = self.buffer, self._new_buffer()
        self._normal_saved, self._saved = self._saved, None
        self.alternate = True
        self.dirty.update(range(self.lines))

    def _leave_alternate(self, mode: int) -> None:
        if self.alternate and self._normal_buffer is not None:
            self.buffer, self._normal_buffer = self._normal_buffer, None
            self._saved, self._normal_saved = self._normal_saved, None
            self.alternate = False
            self.dirty.update(range(self.lines))
        if mode == 1049:
            self.restore_cursor()  # xterm restores even when the alternate screen was not on

    def set_mode(self, *modes: int, **kwargs: Any) -> None:
        """SM / DECSET, one mode at a time so buffer switches keep their order."""
        private = bool(kwargs.get("private"))
        for mode in modes:
            if private and mode in ALT_MODES:
                self._enter_alternate(mode)
            elif private and mode == _CURSOR_MODE:
                self.save_cursor()
            elif _passes_to_pyte(mode, private):
                super().set_mode(mode, private=private)

    def reset_mode(self, *modes: int, **kwargs: Any) -> None:
        """RM / DECRST, the mirror of :meth:`set_mode`."""
        private = bool(kwargs.get("private"))
        for mode in modes:
            if private and mode in ALT_MODES:
                self._leave_alternate(mode)
            elif private and mode == _CURSOR_MODE:
                self.restore_cursor()
            elif _passes_to_pyte(mode, private):
                super().reset_mode(mode, private=private)

    def soft_reset(self) -> None:
        """DECSTR: modes, margins, attributes, charsets and the saved cursor to defaults."""
        self.mode.difference_update({mo.IRM, mo.DECOM})
        self.mode.update({mo.DECAWM, mo.DECTCEM})
        self.cursor.hidden = False
        self.margins = None
        self.select_graphic_rendition(0)
        self.g0_charset = self.g1_charset = LAT1_MAP
        self.charset = 0
        self._saved = None

    # -- size -------------------------------------------------------------------------------

    def resize(self, lines: int | None = None, columns: int | None = None) -> None:
        """Change the size; rows leave at the top when the cursor would fall off the bottom."""
        lines = lines or self.lines
        columns = columns or self.columns
        if lines == self.lines and columns == self.columns:
            return
        self._clear_wrap()
        shift = max(0, self.cursor.y - (lines - 1))
        self.buffer = self._resized(self.buffer, shift, lines, columns)
        if self._normal_buffer is not None:
            self._normal_buffer = self._resized(self._normal_buffer, shift, lines, columns)
        old_columns = self.columns
        self.lines, self.columns = lines, columns
        self.cursor.y -= shift
        self.cursor.x = min(self.cursor.x, columns - 1)
        self.margins = None
        self.tabstops = {stop for stop in self.tabstops if stop < columns}
        self.tabstops.update(range(old_columns + (-old_columns % 8), columns, 8))
        self.dirty.update(range(lines))

    def _resized(self, buffer: Buffer, shift: int, lines: int, columns: int) -> Buffer:
        resized = self._new_buffer()
        for y, row in buffer.items():
            if shift <= y < shift + lines:
                for x in [x for x in row if x >= columns]:
                    del row[x]
                resized[y - shift] = row
        return resized

    # -- replies ----------------------------------------------------------------------------

    def report_device_status(self, mode: int) -> None:
        """DSR: 5 → "OK", 6 → cursor position (1-based, origin-relative under DECOM)."""
        if mode == 5:
            self.respond(b"\x1b[0n")
        elif mode == 6:
            x = min(self.cursor.x, self.columns - 1) + 1
            y = self.cursor.y + 1
            if self.margins is not None and mo.DECOM in self.mode:
                y -= self.margins.top
            self.respond(b"\x1b[%d;%dR" % (y, x))

    def report_device_attributes(self, mode: int = 0, **kwargs: bool) -> None:
        """DA1 ``CSI c`` → VT220 with ANSI colour; DA2 ``CSI > c`` → a VT220-class terminal."""
        if mode != 0:
            return
        if kwargs.get("secondary"):
            self.respond(b"\x1b[>1;10;0c")
        else:
            self.respond(b"\x1b[?62;22c")
