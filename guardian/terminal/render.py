"""Raw PTY output → plain text for a model (the ``output`` of BashCommand and Execution.read).

Unlike the screen, this keeps every line that was printed. Each line is rendered the way a
terminal would leave it: carriage returns and backspaces overwrite (a progress bar
``\\r10%\\r50%\\r100%`` leaves ``100%``; ``abc\\rX`` leaves ``Xbc``), erase-in-line and column
moves are honoured (``\\r\\x1b[K`` clears, ``\\x1b[12G`` pads to column 12), and every other
escape sequence and control character is dropped. Cursor moves between lines (redrawn
spinners) cannot be replayed on a log and are dropped too.

Time is linear in the input and most of the work is done by C code: one regular-expression
pass drops what cannot matter, lines with nothing to resolve are kept as they are, lines with
only carriage returns are overlaid from the last segment backwards, and only lines with
backspaces or line-editing sequences go through a small per-token loop.
"""

from __future__ import annotations

import re

# A column jump never pads a line beyond this: real terminals are narrower, and the bound keeps
# rendering linear however a hostile stream moves the cursor.
_MAX_COLUMN = 512

# Sequences that change what one line shows: EL, CHA, HPA, CUF, CUB (plain numeric params).
_KEPT_CSI = r"[0-9;]*+[KG`CD]"
_DROP = re.compile(
    rf"""
    \x1b\[(?!{_KEPT_CSI})[\x30-\x3f]*+[\x20-\x2f]*+[\x40-\x7e]?   # other CSI, even unfinished
    | \x1b[\]PX^_][^\x07\x1b]*+(?:\x07|\x1b\\)?                     # OSC, DCS, SOS, PM, APC
    | \x1b(?!\[)[\x20-\x2f]*+[\x30-\x7e]?                           # other escapes, a lone ESC
    | [\x00-\x07\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]                # controls that draw nothing
    """,
    re.VERBOSE,
)
_LINE_TOKEN = re.compile(
    r"""
    ([^\r\x08\x1b]+)                      # 1: text
    | (\r+)                                # 2: carriage returns
    | (\x08+)                              # 3: backspaces
    | ((?:\x1b\[[0-9;]*+C)+)                # 4: a run of cursor-forward moves
    | ((?:\x1b\[[0-9;]*+D)+)                # 5: a run of cursor-back moves
    | \x1b\[([0-9;]*+[KG`])                 # 6: erase in line, go to column
    """,
    re.VERBOSE,
)
_AMOUNTS = re.compile(r"\[([0-9]*)")
# "A BS B" leaves what "B" alone leaves (overstrike, man-page bold): collapse it in C.
_OVERSTRIKE = re.compile(r"[^\r\x08\x1b]\x08(?=[^\r\x08\x1b])")
# Erasing or jumping to a column twice in a row is the same as doing it once.
_REPEATED = re.compile(r"(\x1b\[[0-9;]*[KG`])\1+")
# After these the row is empty and the cursor at column 0, whatever came before.
_FRESH_STARTS = ("\r\x1b[K", "\r\x1b[0K", "\r\x1b[2K", "\x1b[2K\r", "\x1b[2K\x1b[G", "\x1b[2K\x1b[1G")


def render_output(data: bytes, *, max_chars: int | None = None) -> str:
    """Render raw terminal output as text, keeping only the last ``max_chars`` characters."""
    if max_chars is not None and max_chars < 0:
        raise ValueError(f"max_chars must be >= 0, got {max_chars}")
    text = _DROP.sub("", data.decode("utf-8", "replace"))
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.endswith("\r"):
            line = lines[i] = line.rstrip("\r")  # CR before LF moves the cursor, draws nothing
        if "\b" in line or "\x1b" in line:
            lines[i] = _edit_line(line)
        elif "\r" in line:
            lines[i] = _overlay(line.split("\r"))
    text = "\n".join(lines)
    if max_chars is not None and len(text) > max_chars:
        return text[len(text) - max_chars :]
    return text


def _overlay(segments: list[str]) -> str:
    """What a row shows after each segment was written from column 0 over the previous ones."""
    pieces: list[str] = []
    covered = 0
    for segment in reversed(segments):
        if len(segment) > covered:
            pieces.append(segment[covered:])
            covered = len(segment)
    return "".join(pieces)  # pieces[k] starts where pieces[k - 1] ends


def _edit_line(line: str) -> str:
    """Replay one line with backspaces and line-editing sequences on an array of cells."""
    fresh = max(line.rfind(start) + len(start) if start in line else 0 for start in _FRESH_STARTS)
    line = _REPEATED.sub(r"\1", _OVERSTRIKE.sub("", line[fresh:]))
    cells: list[str] = []
    col = 0
    blank = 0  # cells[:blank] are known to be spaces, so repeated "erase to cursor" is free
    for match in _LINE_TOKEN.finditer(line):
        kind = match.lastindex
        token = match.group()
        if kind == 1:
            if col > len(cells):
                cells += [" "] * (col - len(cells))
            cells[col : col + len(token)] = token
            blank = min(blank, col)
            col += len(token)
        elif kind == 2:
            col = 0
        elif kind == 3:
            col = max(0, col - len(token))
        elif kind in (4, 5):
            moved = sum(max(int(amount or 0), 1) for amount in _AMOUNTS.findall(token))
            col = min(col + moved, _MAX_COLUMN) if kind == 4 else max(col - moved, 0)
        else:
            final = token[-1]
            amount = int(token[2:-1].split(";", 1)[0] or 0)
            if final != "K":
                col = min(max(amount, 1), _MAX_COLUMN) - 1
            elif amount == 0:
                del cells[col:]
                blank = min(blank, len(cells))
            elif amount == 1 and min(col + 1, len(cells)) > blank:
                end = min(col + 1, len(cells))
                cells[blank:end] = [" "] * (end - blank)
                blank = end
            elif amount == 2:
                cells.clear()
                blank = 0
    return "".join(cells)
