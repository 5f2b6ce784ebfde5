"""Value types of turn recognition: what goes in (a screen) and what comes out (a verdict).

These are plain frozen dataclasses so that the guardian can build them from its screen
emulator, keep them in records and hand them to ``Execution.explain`` without copying.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["awaiting_input", "busy", "awaiting_approval", "unknown"]
"""The four answers a recognizer can give (docs/tools.md#recognizers)."""

STATES: tuple[State, ...] = ("awaiting_input", "busy", "awaiting_approval", "unknown")

Attention = Literal["trust", "login", "approval", "choice"]
"""What an ``awaiting_approval`` screen asks about: trusting a folder, signing in (or using
an API key), approving an action, or picking one of several options."""

ATTENTIONS: tuple[Attention, ...] = ("trust", "login", "approval", "choice")

Source = Literal["rule", "fallback", "none"]
"""Where a verdict came from.

``rule``: a rule of the program's own recognizer matched. ``fallback``: ``auto`` could not
name the program, so the generic ``shell`` rules were used and one of them matched.
``none``: no rule matched; the state is ``unknown``.
"""


@dataclass(frozen=True, slots=True)
class ScreenView:
    """The visible screen handed to a recognizer.

    ``lines`` are the screen rows top to bottom, right-stripped; ``title`` is the window
    title the program set (OSC 0/2), or ``""``.
    """

    lines: tuple[str, ...]
    title: str = ""

    @classmethod
    def from_text(cls, text: str, title: str = "") -> ScreenView:
        """Build a view from newline-separated screen text (right-strips every row)."""
        return cls(lines=tuple(row.rstrip() for row in text.split("\n")), title=title)


@dataclass(frozen=True, slots=True)
class Recognition:
    """One recognizer's verdict on one screen, with everything ``explain`` needs.

    ``evaluated`` lists every rule of the recognizer in evaluation order (priority, then
    file order), each as ``{rule, priority, state, matched}``; a matched rule also carries
    ``evidence``: the first screen line (or title) that satisfied one of its tests.
    """

    state: State
    recognizer: str
    rule: str | None
    priority: int | None
    source: str
    reason: str | None
    evaluated: tuple[dict[str, object], ...]
    attention: Attention | None = None  # set exactly when state is awaiting_approval

    def summary(self) -> dict[str, object]:
        """The short form carried by ``Agent.get``/``list``/``wait``: state, attention, rule."""
        return {"state": self.state, "attention": self.attention, "rule": self.rule,
                "recognizer": self.recognizer, "reason": self.reason}

    def to_dict(self) -> dict[str, object]:
        """A JSON-safe copy of this verdict, in the shape ``Execution.explain`` returns."""
        return {
            "state": self.state,
            "attention": self.attention,
            "recognizer": self.recognizer,
            "rule": self.rule,
            "priority": self.priority,
            "source": self.source,
            "reason": self.reason,
            "evaluated": [dict(entry) for entry in self.evaluated],
        }


class UnknownRecognizerError(ValueError):
    """A recognizer name was asked for that no rule file defines."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown recognizer {name!r}: use 'auto' or one of {', '.join(known)}")


class RuleFileError(ValueError):
    """A rule file is malformed; the message names the file and, where known, the rule."""

    def __init__(self, file: str, problem: str, rule: str | None = None) -> None:
        self.file = file
        self.rule = rule
        self.problem = problem
        where = f"{file}: rule {rule!r}" if rule is not None else file
        super().__init__(f"{where}: {problem}")
