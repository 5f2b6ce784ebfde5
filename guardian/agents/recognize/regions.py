"""Regions: the parts of a screen that a rule's tests look at.

Every region is a tuple of lines; tests never see the screen any other way.

- ``screen``: every row, after trailing empty rows are dropped.
- ``{bottom = N}``: the last ``N`` rows of ``screen`` (so counted from the last non-empty
  row, empty rows in between included). Counting rows rather than non-empty lines keeps a
  rule's reach the same whether or not the program leaves blank rows in its footer.
- ``input_box``: the content rows of the *last* box on the screen, where these TUIs draw
  their prompt. A *border row* is a row that, stripped, is at least three characters long,
  begins and ends with a box-drawing horizontal or corner character (``─━═╌╍┄┅┈┉``,
  ``╭╮╰╯┌┐└┘├┤┏┓┗┛╔╗╚╝``), has at least three horizontal characters, and is at least half
  box-drawing characters (so ``╭─ Title ─╮`` counts, prose does not). The box is the rows
  strictly between the last two border rows; that covers both a drawn box
  (``╭──╮`` / ``│ > text │`` / ``╰──╯``) and a pair of separator rules (``────`` /
  ``❯ text`` / ``────``). Each content row is stripped of surrounding blanks and side bars
  (``│┃║``), so ``│ > hi │`` reads ``> hi``. Fewer than two border rows: no lines.
- ``title``: the window title, as one line (no lines if it is empty).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.guardian.agents.recognize.model import ScreenView

HORIZONTALS = frozenset("─━═╌╍┄┅┈┉")
CORNERS = frozenset("╭╮╰╯┌┐└┘├┤┏┓┗┛╔╗╚╝┬┴┼")
SIDE_BARS = "│┃║"
_DRAWING = HORIZONTALS | CORNERS
_DROP_HORIZONTALS = str.maketrans(dict.fromkeys(HORIZONTALS))
_DROP_DRAWING = str.maketrans(dict.fromkeys(_DRAWING))

RegionKind = Literal["screen", "bottom", "input_box", "title"]


@dataclass(frozen=True, slots=True)
class Region:
    """A parsed region: its kind and, for ``bottom``, how many rows."""

    kind: RegionKind
    rows: int = 0

    def describe(self) -> str:
        """The region as written in a rule file, for messages."""
        return f"bottom {self.rows}" if self.kind == "bottom" else self.kind


SCREEN = Region("screen")


def trimmed_rows(view: ScreenView) -> tuple[str, ...]:
    """The screen rows with trailing empty rows dropped."""
    end = len(view.lines)
    while end > 0 and not view.lines[end - 1].strip():
        end -= 1
    return view.lines[:end]


def is_border_row(row: str) -> bool:
    """Whether ``row`` is a horizontal border or separator rule (see the module docstring)."""
    text = row.strip()
    if len(text) < 3 or text[0] not in _DRAWING or text[-1] not in _DRAWING:
        return False
    # str.translate counts in C: this runs on every row of every screen recognised.
    horizontal = len(text) - len(text.translate(_DROP_HORIZONTALS))
    boxy = len(text) - len(text.translate(_DROP_DRAWING))
    return horizontal >= 3 and boxy * 2 >= len(text)


def input_box_lines(rows: tuple[str, ...]) -> tuple[str, ...]:
    """The content rows of the last box among ``rows`` (see the module docstring)."""
    borders = [index for index, row in enumerate(rows) if is_border_row(row)]
    if len(borders) < 2:
        return ()
    top, bottom = borders[-2], borders[-1]
    return tuple(row.strip().strip(SIDE_BARS).strip() for row in rows[top + 1 : bottom])


def extract(region: Region, view: ScreenView) -> tuple[str, ...]:
    """The lines of ``view`` that ``region`` covers."""
    if region.kind == "title":
        return (view.title,) if view.title else ()
    rows = trimmed_rows(view)
    if region.kind == "bottom":
        return rows[-region.rows :]
    if region.kind == "input_box":
        return input_box_lines(rows)
    return rows
