"""Recognition of real screens of Claude Code, Codex and OpenCode (docs/tools.md#recognizers).

``scripts/interop`` recorded these: every byte each program wrote to its Tether terminal up
to a checkpoint (``.ansi``), the screen at that moment (``.txt``), and what the driver knew
the program was doing (``.json``: state, attention, and the rule that decided it). Replaying
the bytes through the guardian's own emulator must give the same screen, and the shipped rules
must give the expected verdict — so rules are checked against real screens without Node.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.guardian.agents.recognize import ATTENTIONS, ScreenView, recognize
from tether.guardian.terminal.screen import TerminalScreen

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"
SCREENS = sorted(FIXTURES.glob("*/*.json"))

#: Screens that are ``unknown`` without a rule deciding it, with the reason. A real screen
#: must not be in here unless nobody could tell its state from the screen alone.
AMBIGUOUS: dict[str, str] = {}


def _meta(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def _replay(path: Path, meta: dict[str, Any]) -> ScreenView:
    screen = TerminalScreen(meta["cols"], meta["rows"])
    screen.feed(path.with_suffix(".ansi").read_bytes())
    snap = screen.snapshot()
    return ScreenView(lines=snap.lines, title=snap.title)


def test_there_are_enough_real_screens_of_each_program() -> None:
    programs: dict[str, int] = {}
    for path in SCREENS:
        program = _meta(path)["program"]
        programs[program] = programs.get(program, 0) + 1
    assert set(programs) == {"claude", "codex", "opencode"}, programs
    assert all(count >= 8 for count in programs.values()), programs
    assert sum(programs.values()) >= 45, programs


@pytest.mark.parametrize("path", SCREENS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_real_screen_is_recognised(path: Path) -> None:
    meta = _meta(path)
    view = _replay(path, meta)
    # The recording replays to the screen the driver saw (same emulator as the guardian).
    assert "\n".join(view.lines).rstrip("\n") == path.with_suffix(".txt").read_text().rstrip("\n")
    got = recognize(view, meta["recognizer"])
    assert (got.state, got.attention) == (meta["state"], meta["attention"]), (
        f"{path.name}: {got.state}/{got.attention} by {got.rule}; expected "
        f"{meta['state']}/{meta['attention']}")
    if meta["state"] == "unknown" and got.rule is None:
        assert path.stem in AMBIGUOUS, f"{path.name} is unknown with no rule deciding it"
    else:
        assert got.rule is not None and got.rule == meta["rule"], (got.rule, meta["rule"])
    if got.state == "awaiting_approval":
        assert got.attention in ATTENTIONS
    else:
        assert got.attention is None


def test_every_kind_of_question_is_met_in_the_real_screens() -> None:
    met = {(m["state"], m["attention"]) for m in map(_meta, SCREENS)}
    for kind in ("trust", "login", "approval", "choice"):
        assert ("awaiting_approval", kind) in met
    assert {("busy", None), ("awaiting_input", None), ("unknown", None)} <= met
