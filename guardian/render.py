"""Placeholder renderer (being replaced)."""

from __future__ import annotations

import re

_ESC = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def render_output(data: bytes, *, max_chars: int | None = None) -> str:
    text = _ESC.sub(b"", data).decode("utf-8", "replace").replace("\r\n", "\n")
    lines = [line.split("\r")[-1] if "\r" in line else line for line in text.split("\n")]
    out = "\n".join(lines)
    return out[-max_chars:] if max_chars else out
