"""The managed-agent state machine (docs/tools.md#agent-states, docs/tools.md#deaths-cancel-and-notices), as
pure rules.

::

    initializing -> idle <-> running        any -> error        closed: kept, resumable,
                                                                 holds no process

``archived_at`` is separate from the state. These rules decide, for one transition, whether a
new turn starts, which notification (if any) the parent gets, and whether ``auto_archive``
fires. They live in ``shared`` because the store's agents family (``shared/store/agents``)
persists them, and tools beside the guardian (``scripts/interop``) read recognitions so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AgentState = Literal["initializing", "idle", "running", "error", "closed"]
AGENT_STATES: tuple[AgentState, ...] = ("initializing", "idle", "running", "error", "closed")
#: States in which the agent holds a live runtime.
LIVE_STATES = frozenset({"initializing", "idle", "running"})
#: What ``cancel`` must see the recognizer leave before it counts as acknowledged.
BUSY_RECOGNITIONS = frozenset({"busy"})

NotificationKind = Literal["finished", "error", "approval", "closed"]


@dataclass(frozen=True, slots=True)
class Step:
    """What one transition means beyond the new state."""

    turn_started: bool
    notification: NotificationKind | None
    terminal_turn: bool  # the end of a turn: what ``auto_archive`` waits for


def from_recognition(
    recognized: str, attention: str | None = None
) -> tuple[AgentState | None, str | None]:
    """The state (and attention) a recognizer verdict implies; ``None``: no evidence.

    A question on screen (``awaiting_approval``) keeps the turn running and names what it
    asks (``approval``, ``trust``, ``login``, ``choice``; ``approval`` when the rule does not
    say). ``unknown`` never moves an agent: a half-drawn frame is not a transition.
    """
    if recognized == "awaiting_input":
        return "idle", None
    if recognized == "busy":
        return "running", None
    if recognized == "awaiting_approval":
        return "running", attention or "approval"
    return None, None


def step(
    before: AgentState | None, after: AgentState, attention_before: str | None,
    attention_after: str | None,
) -> Step:
    """Classify a transition ``before -> after`` (``before`` is None at launch)."""
    turn_started = after == "running" and before != "running"
    notification: NotificationKind | None = None
    if after == "error" and before != "error":
        notification = "error"
    elif after == "idle" and before == "running":
        notification = "finished"
    elif after == "closed" and before in ("running", "initializing"):
        notification = "closed"  # delegated work must not vanish silently
    elif after == "running" and attention_after is not None and attention_after != attention_before:
        notification = "approval"  # a question for a person: a checkpoint, not the end
    terminal_turn = (before == "running" and after in ("idle", "error", "closed")) or (
        after == "error" and before != "error"
    )
    return Step(turn_started=turn_started, notification=notification, terminal_turn=terminal_turn)


def archived_state(state: AgentState) -> AgentState:
    """The state an archived agent keeps: its runtime is closed, an error stays an error."""
    return "error" if state == "error" else "closed"
