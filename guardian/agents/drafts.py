"""Drafts in an agent's input box: finding one, and clearing it with the program's own keys.

A prompt typed into a box that already holds text merges with it (Claude Code puts a
cancelled prompt back into its box: the next prompt would be sent as "<old><new>"). Each rule
file's ``[draft]`` says how its box shows a draft and which keys clear it. Clearing presses
those keys, waits for the screen to settle, and recognizes it again, for a few rounds within a
deadline; the box counts as empty only when the program is still waiting for input and no
draft shows. Nothing of the prompt is typed before that.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.recognize import Recognition, ScreenView, default_rule_sets, find_draft
from tether.guardian.agents.turns import recognize_record, refresh
from tether.guardian.terminal.keys import key_bytes
from tether.protocol.errors import ErrorCode, TetherError

if TYPE_CHECKING:
    from tether.guardian.runtime.live import LiveExecution
    from tether.guardian.runtime.notify import ChangeNotifier

#: How long clearing may take in all, and how many rounds of keys (a draft longer than the
#: box shows needs more than one).
CLEAR_DEADLINE_S = 5.0
MAX_CLEAR_ROUNDS = 6
#: Per round, the screen must change within this long and then stay quiet for SETTLE_S.
REACT_S = 0.5
SETTLE_S = 0.15
#: Per-character keys go this many more times than the draft line is long (the prompt glyph
#: is counted with it; a spare press in an empty box does nothing in the shipped programs).
SPARE_PRESSES = 2
DRAFT_SHOWN = 80  # characters of a draft quoted in a message


def draft_on(live: LiveExecution, recognizer: str) -> str | None:
    """The draft line on ``live``'s current screen per ``recognizer``'s rule file, if any."""
    snap = live.screen.snapshot_now()
    return find_draft(ScreenView(lines=snap.lines, title=snap.title), recognizer)


def abbreviated(draft: str) -> str:
    """The draft as a message quotes it: at most DRAFT_SHOWN characters."""
    text = draft if len(draft) <= DRAFT_SHOWN else draft[: DRAFT_SHOWN - 1] + "…"
    return repr(text)


async def clear_draft(
    live: LiveExecution, record: dict[str, Any], recognizer: str, found: Recognition, draft: str,
    claim: object, notifier: ChangeNotifier,
) -> Recognition:
    """Clear ``draft``, found on a screen recognized as ``found`` (asked for as ``recognizer``),
    then return the verdict on the emptied screen; refuses with
    ``input_not_empty`` (``draft_cleared: false``) when the box is not seen empty in time, and
    with ``input_not_ready`` when the program stopped waiting for input meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CLEAR_DEADLINE_S
    name = found.recognizer
    rules = default_rule_sets()[name].draft
    assert rules is not None  # a draft was found with these rules
    keys = b"".join(key_bytes(key) for key in rules.clear_keys)
    current: str | None = draft
    rounds = 0
    while current is not None:
        if rounds >= MAX_CLEAR_ROUNDS or loop.time() >= deadline:
            raise TetherError(
                ErrorCode.INPUT_NOT_EMPTY,
                f"the input box still holds text after {rounds} round(s) of "
                f"{'+'.join(rules.clear_keys)} ({abbreviated(current)}); the draft could not "
                "be cleared, so nothing of the prompt was typed. Look at the screen (Agent read "
                "source screen) and clear it by hand.",
                {"input_sent": False, "draft": abbreviated(current), "draft_cleared": False,
                 "keys_sent": rounds > 0},
            )
        presses = len(current) + SPARE_PRESSES if rules.clear_per_character else 1
        before = live.activity_seq
        try:
            await live.runtime.write(keys * presses, timeout_s=2.0, claim=claim)
        except (TimeoutError, OSError) as exc:
            raise TetherError(
                ErrorCode.INPUT_INCOMPLETE,
                f"the program stopped reading while its draft was being cleared ({exc}); "
                "nothing of the prompt was typed. Look at its screen before trying again.",
                {"input_sent": False, "draft_cleared": "unknown", "keys_sent": True},
            ) from None
        rounds += 1
        await _settle(live, before, notifier, deadline)
        await refresh(live)
        decision, _ = recognize_record(record, live, recognizer)
        if decision.state != "awaiting_input":
            raise TetherError(
                ErrorCode.INPUT_NOT_READY,
                f"after clearing the draft the program is not waiting for input (recognized "
                f"{decision.state}); nothing of the prompt was typed",
                {"input_sent": False, "state": decision.state, "draft_cleared": "unknown",
                 "recognition": decision.to_dict()},
            )
        current = draft_on(live, name)
    return decision


async def _settle(live: LiveExecution, before: int, notifier: ChangeNotifier,
                  deadline: float) -> None:
    """Until the program has redrawn after the keys and been quiet for SETTLE_S (bounded)."""
    loop = asyncio.get_running_loop()
    react_by = min(deadline, loop.time() + REACT_S)
    while live.activity_seq == before and loop.time() < react_by:
        await notifier.wait(react_by - loop.time())
    while loop.time() < deadline:
        seen = live.activity_seq
        quiet_until = min(deadline, loop.time() + SETTLE_S)
        while live.activity_seq == seen and loop.time() < quiet_until:
            await notifier.wait(quiet_until - loop.time())
        if live.activity_seq == seen:
            return
