"""Placeholder lazy screen (being replaced by the hardened emulator)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyte


@dataclass(frozen=True, slots=True)
class ScreenSnapshot:
    lines: tuple[str, ...]
    cursor_row: int
    cursor_col: int
    cols: int
    rows: int
    alternate: bool
    title: str

    @property
    def text(self) -> str:
        lines = list(self.lines)
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


class TerminalScreen:
    def __init__(self, cols: int = 120, rows: int = 40,
                 respond: Callable[[bytes], None] | None = None) -> None:
        self._screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self._screen)
        self._pending: list[bytes] = []
        self._fed = 0

    def feed(self, data: bytes) -> None:
        self._pending.append(data)
        self._fed += len(data)

    @property
    def bytes_fed(self) -> int:
        return self._fed

    def snapshot(self) -> ScreenSnapshot:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._stream.feed(data)
        s = self._screen
        return ScreenSnapshot(tuple(line.rstrip() for line in s.display), s.cursor.y, s.cursor.x,
                              s.columns, s.lines, False, s.title or "")

    def resize(self, cols: int, rows: int) -> None:
        self.snapshot()
        self._screen.resize(rows, cols)
