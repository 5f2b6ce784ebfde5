"""Evaluating rule sets against a screen (docs/tools.md#recognizers).

Every rule of the chosen recognizer is evaluated, so ``explain`` can show the whole
decision, then the first matching rule in priority order wins (ties: file order). A winning
``unknown`` rule is final — no lower-priority match can override it — which is how a rule
file says "this screen looks idle but is not safe to type into". No match means ``unknown``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from tether.guardian.agents.recognize.loader import (
    Leaf,
    Node,
    Rule,
    RuleSet,
    default_rules_dir,
    load_rule_dir,
)
from tether.guardian.agents.recognize.model import Recognition, ScreenView, UnknownRecognizerError
from tether.guardian.agents.recognize.programs import identify_program, is_known_shell
from tether.guardian.agents.recognize.regions import Region, extract

AUTO = "auto"
SHELL = "shell"
EVIDENCE_LIMIT = 160  # characters of a matching line kept for explain


@cache
def default_rule_sets() -> Mapping[str, RuleSet]:
    """The shipped rule sets, loaded and validated once per process (read-only)."""
    return MappingProxyType(load_rule_dir(default_rules_dir()))


def available_recognizers() -> tuple[str, ...]:
    """Names accepted by ``recognize`` besides ``auto``, sorted."""
    return tuple(sorted(default_rule_sets()))


def pick_recognizer(command: str | None) -> str:
    """The recognizer ``auto`` uses for ``command``: the program it names, else ``shell``."""
    return identify_program(command) or SHELL


def recognize(
    view: ScreenView,
    recognizer: str = AUTO,
    command: str | None = None,
    *,
    rule_sets: Mapping[str, RuleSet] | None = None,
) -> Recognition:
    """Classify ``view`` with ``recognizer`` (a name, or ``auto`` to pick one from ``command``).

    ``rule_sets`` replaces the shipped rules (tests, or a deployment with its own files).
    Raises ``UnknownRecognizerError`` for a name that no rule file defines.
    """
    sets = default_rule_sets() if rule_sets is None else rule_sets
    fallback_reason: str | None = None
    if recognizer == AUTO:
        name = identify_program(command)
        if name is None:
            name = SHELL
            if not command or not command.strip():
                fallback_reason = "no_command"
            elif not is_known_shell(command):
                fallback_reason = "program_not_recognized"
    else:
        name = recognizer
    rule_set = sets.get(name)
    if rule_set is None:
        raise UnknownRecognizerError(name, tuple(sorted(sets)))
    return evaluate(rule_set, view, fallback_reason=fallback_reason)


def evaluate(rule_set: RuleSet, view: ScreenView, *, fallback_reason: str | None = None) -> Recognition:
    """Run every rule of ``rule_set`` on ``view`` and pick the winner.

    ``fallback_reason`` marks a verdict reached with generic rules because the program was
    not recognised; it becomes ``source = "fallback"`` and the ``reason`` when a rule wins.
    """
    view = _right_stripped(view)
    regions: dict[Region, tuple[str, ...]] = {}
    evaluated: list[dict[str, object]] = []
    winner: Rule | None = None
    for rule in rule_set.rules:
        evidence = _holds(rule.test, view, regions)
        entry: dict[str, object] = {
            "rule": rule.id,
            "priority": rule.priority,
            "state": rule.state,
            "matched": evidence is not None,
        }
        if evidence is not None:
            entry["evidence"] = evidence[:EVIDENCE_LIMIT]
            if winner is None:
                winner = rule
        evaluated.append(entry)
    if winner is None:
        blank = not any(line.strip() for line in view.lines) and not view.title
        return Recognition(
            state="unknown",
            recognizer=rule_set.name,
            rule=None,
            priority=None,
            source="none",
            reason="blank_screen" if blank else rule_set.no_match_reason,
            evaluated=tuple(evaluated),
        )
    if winner.state == "unknown":
        reason: str | None = "rule_declared_unknown"
    else:
        reason = fallback_reason
    return Recognition(
        state=winner.state,
        recognizer=rule_set.name,
        rule=winner.id,
        priority=winner.priority,
        source="fallback" if fallback_reason is not None else "rule",
        reason=reason,
        evaluated=tuple(evaluated),
        attention=winner.attention,
    )


def find_draft(view: ScreenView, recognizer: str, *,
               rule_sets: Mapping[str, RuleSet] | None = None) -> str | None:
    """The line showing a draft in the input box (per the rule file's ``[draft]``), else
    ``None``. Meaningful on a screen that waits for input; a file without ``[draft]`` finds
    none. Raises ``UnknownRecognizerError`` like :func:`recognize`."""
    sets = default_rule_sets() if rule_sets is None else rule_sets
    rule_set = sets.get(recognizer)
    if rule_set is None:
        raise UnknownRecognizerError(recognizer, tuple(sorted(sets)))
    if rule_set.draft is None:
        return None
    evidence = _holds(rule_set.draft.test, _right_stripped(view), {})
    return None if evidence is None else evidence.strip() or "(text)"


def _right_stripped(view: ScreenView) -> ScreenView:
    """``view`` with rows right-stripped, as promised to rules: callers that pass raw emulator
    rows (padded with spaces) must not break every rule anchored with ``$``."""
    lines = tuple(line.rstrip() for line in view.lines)
    return view if lines == view.lines else ScreenView(lines=lines, title=view.title)


def _holds(node: Node, view: ScreenView, regions: dict[Region, tuple[str, ...]]) -> str | None:
    """``None`` when ``node`` fails; otherwise the evidence (``""`` if none is positive)."""
    evidence: str | None = ""
    if node.leaf is not None:
        evidence = _leaf_match(node.leaf, view, regions)
        if evidence is None:
            return None
    for child in node.all_of:
        found = _holds(child, view, regions)
        if found is None:
            return None
        evidence = evidence or found
    if node.any_of is not None:
        for child in node.any_of:
            found = _holds(child, view, regions)
            if found is not None:
                evidence = evidence or found
                break
        else:
            return None
    if node.not_ is not None and _holds(node.not_, view, regions) is not None:
        return None
    return evidence


def _leaf_match(leaf: Leaf, view: ScreenView, regions: dict[Region, tuple[str, ...]]) -> str | None:
    """The first line of the leaf's region that makes it hold, else ``None``."""
    lines = regions.get(leaf.region)
    if lines is None:
        lines = regions[leaf.region] = extract(leaf.region, view)
    if leaf.kind == "line_regex":
        return next((line for line in lines if leaf.compiled.search(line)), None)
    text = "\n".join(lines)
    found = leaf.compiled.search(text)
    if found is None:
        return None
    at = found.start()
    # Report the whole line the match starts on: more useful in explain than a fragment.
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)]
