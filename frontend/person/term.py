"""Tables and progress for a person's terminal.

Tables measure display width with ``wcwidth`` (already installed as pyte's dependency): a
command with CJK text or emoji must not break the columns, and that table is the one thing
here a library does better than ``len``. Progress is one status line on stderr, drawn only
when stderr is a terminal, so scripts and pipes see nothing. A full TUI library (rich) was
considered and left out: it would add ~80 ms of imports to every ``tether ls`` and its live
display would fight ``attach``, which owns the terminal; these two helpers are all we need.
The guardian never imports this module.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TextIO

from wcwidth import wcswidth, wcwidth

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
#: A wait shorter than this shows nothing at all (no flicker for fast answers).
PROGRESS_DELAY_S = 0.3


#: What a terminal acts on instead of drawing: C0 controls, DEL and C1 controls (ESC, BEL,
#: CR, CSI 0x9b, ...); and the bidirectional marks, embeddings, overrides and isolates, which
#: reorder the text around them (a path could show its end first). Newline and tab are not
#: here: ``visible`` draws them its own way.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                       "\u2066-\u2069]")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` safe to print on a person's terminal: every control character drawn as
    ``\\xNN`` (ESC is ``\\x1b``), every bidirectional control as ``\\uNNNN``, a newline as
    `` ⏎ `` and a tab as a space.

    Commands, titles, prompt ids and paths come from agents and the programs they run. Printed
    raw, an escape sequence in one could recolour, retitle, hide or rewrite what a person
    reads, so everything a person's command prints that it did not write itself goes through
    here. ``\\xNN`` rather than ``^[``: one notation for C0, DEL and C1 alike (caret notation
    has none for C1), the one Python and bash's ``$'...'`` use.
    """
    text = text.replace("\n", " ⏎ ").replace("\t", " ")
    return _CONTROLS.sub(lambda m: _escaped(m.group()), text)


def width(text: str) -> int:
    """Display width in terminal cells (control characters count as one)."""
    w = wcswidth(text)
    if w >= 0:
        return w
    return sum(max(wcwidth(ch), 1) for ch in text)


def fit(text: str, cells: int) -> str:
    """``text`` (made ``visible``) cut to at most ``cells`` display cells, with an ellipsis
    when cut."""
    text = visible(text)
    if width(text) <= cells:
        return text
    out, used = [], 0
    for ch in text:
        w = max(wcwidth(ch), 0)
        if used + w > cells - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
          max_width: int | None = None) -> str:
    """Columns aligned by display width; the last column is cut to ``max_width``. Every cell
    is made ``visible``: table cells are what agents name (commands, titles)."""
    rows = [[visible(cell) for cell in row] for row in rows]
    cols = len(headers)
    widths = [width(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:cols]):
            widths[i] = max(widths[i], width(cell))
    if max_width is not None and cols > 1:
        fixed = sum(widths[:-1]) + 2 * (cols - 1)
        widths[-1] = max(width(headers[-1]), min(widths[-1], max_width - fixed))
    lines = []
    for row in [list(headers), *[list(r) for r in rows]]:
        cells = []
        for i, cell in enumerate(row[:cols]):
            cell = fit(cell, widths[i]) if i == cols - 1 else cell
            pad = "" if i == cols - 1 else " " * (widths[i] - width(cell))
            cells.append(cell + pad)
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


class Progress:
    """A spinner with a message and elapsed time on stderr, only on a terminal.

    Usable around blocking code (it draws from a thread) and around ``asyncio.run``.
    """

    def __init__(self, message: str, stream: TextIO | None = None) -> None:
        self.message = message
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False

    def update(self, message: str) -> None:
        self.message = message

    def __enter__(self) -> Progress:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def _run(self) -> None:
        start = time.monotonic()
        if self._stop.wait(PROGRESS_DELAY_S):
            return
        frame = 0
        while not self._stop.is_set():
            elapsed = time.monotonic() - start
            self.stream.write(f"\r\x1b[K{SPINNER[frame % len(SPINNER)]} {self.message} "
                              f"({elapsed:.1f}s)")
            self.stream.flush()
            self._drawn = True
            frame += 1
            self._stop.wait(0.1)
