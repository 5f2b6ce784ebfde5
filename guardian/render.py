"""Placeholder renderer (being replaced)."""

from __future__ import annotations

import re

_ESC = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def _overdraw(line: str) -> str:
    if "\r" not in line:
        return line
    cells: list[str] = []
    for part in line.split("\r"):
        cells[: len(part)] = part
    return "".join(cells)


def render_output(data: bytes, *, max_chars: int | None = None) -> str:
    text = _ESC.sub(b"", data).decode("utf-8", "replace").replace("\r\n", "\n")
    out = "\n".join(_overdraw(line) for line in text.split("\n"))
    return out[-max_chars:] if max_chars else out
