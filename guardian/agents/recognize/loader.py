"""Reading and validating rule files (docs/tools.md#recognizers).

A rule file is TOML, one per program, named ``<name>.toml``::

    name = "claude"                      # must equal the file's stem
    description = "..."                  # optional
    no_match_reason = "no_prompt_seen"   # optional; default "no_rule_matched"
    interrupt = "Escape"                 # optional; the key that interrupts a turn (a
                                         # ``send_keys`` name), default "Ctrl-c"
    interrupt_presses = 2                # optional, 1..3 (default 1): presses it takes, as
                                         # OpenCode's "esc again to interrupt" wants two

    [draft]                              # required: how the input box shows typed text
    description = "..."                  # optional
    line_regex = '^❯ +[^ ]'                # a test, as a rule's (evidence: the draft's line)
    region = "input_box"
    clear_keys = ["Backspace"]           # ``send_keys`` names that clear the box, in order
    clear_per_character = true           # optional (default false): the keys once per
                                         # character of the draft shown, not once

    [[rule]]
    id = "busy_interrupt_hint"           # unique in the file
    state = "busy"                       # awaiting_input | busy | awaiting_approval | unknown
    attention = "approval"               # awaiting_approval only: trust | login | approval | choice
    priority = 80                        # higher wins; ties go to the earlier rule
    description = "..."                  # optional
    line_regex = '(?i)esc to interrupt'  # the test (see below)
    region = {bottom = 8}

A *test* is a table holding one or more of ``all = [test, ...]``, ``any = [test, ...]``,
``not = test`` and at most one leaf: ``contains = "text"``, ``regex = "..."`` (searched in
the region's lines joined by newlines, ``^``/``$`` anchoring at each line) or
``line_regex = "..."`` (matches when one single line matches). A leaf may add ``region``
(``"screen"`` — the default —, ``"input_box"``, ``"title"`` or ``{bottom = N}``, see
``regions``) and ``ignore_case = true``. When a table holds several of these they must all
hold. A rule is a test plus ``id``, ``state``, ``priority``, ``description`` and, for an
``awaiting_approval`` rule, ``attention``: what the program is asking about (``trust`` a folder,
``login`` / an API key, ``approval`` of an action, or a ``choice`` among options; default
``approval``). Other states take no ``attention``.

The ``[approval]`` table says how the program draws a question and which keys answer it
(``asking`` documents it).

The ``[draft]`` table says when a screen that waits for input already holds a draft (text
typed but not sent, or put back by the program after an interrupt) — whatever is typed next
would join it — and which of the program's own keys clear it. Its test must not take the
program's placeholder text (shown in an empty box) for a draft.

Everything is checked when the file is loaded — unknown keys, wrong types, regexes that do
not compile, unknown states or regions — and reported as ``RuleFileError`` naming the file
and the rule, so a broken rule file fails at start-up, not on the first screen it meets.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tether.guardian.agents.recognize.asking import ApprovalForm, parse_approval
from tether.guardian.agents.recognize.model import ATTENTIONS, STATES, Attention, RuleFileError, State
from tether.guardian.agents.recognize.regions import SCREEN, Region
from tether.guardian.terminal.keys import key_bytes
from tether.protocol.errors import TetherError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

# tomllib and importlib.resources (with tempfile, about 1 MB resident) are imported where a
# rule file is read: a guardian that never recognizes a program never loads them
# (docs/development.md#benchmarks).

LeafKind = Literal["contains", "regex", "line_regex"]
LEAF_KINDS: tuple[LeafKind, ...] = ("contains", "regex", "line_regex")
NODE_KEYS = frozenset({"all", "any", "not", *LEAF_KINDS, "region", "ignore_case"})
RULE_KEYS = NODE_KEYS | {"id", "state", "priority", "description", "attention"}
FILE_KEYS = frozenset({"name", "description", "no_match_reason", "interrupt",
                       "interrupt_presses", "draft", "approval", "rule"})
DRAFT_KEYS = NODE_KEYS | {"description", "clear_keys", "clear_per_character"}
MAX_CLEAR_KEYS = 8
MAX_INTERRUPT_PRESSES = 3
DEFAULT_INTERRUPT = "Ctrl-c"
MAX_BOTTOM_ROWS = 1000


@dataclass(frozen=True, slots=True)
class Leaf:
    """A single test over one region."""

    kind: LeafKind
    pattern: str
    region: Region
    ignore_case: bool
    compiled: re.Pattern[str]  # ``contains`` is compiled as an escaped literal


@dataclass(frozen=True, slots=True)
class Node:
    """A conjunction of optional parts; an absent part holds trivially."""

    leaf: Leaf | None = None
    all_of: tuple[Node, ...] = ()
    any_of: tuple[Node, ...] | None = None
    not_: Node | None = None


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: when ``test`` holds, the screen is in ``state``."""

    id: str
    state: State
    priority: int
    test: Node
    description: str = ""
    attention: Attention | None = None  # set exactly when state is awaiting_approval


@dataclass(frozen=True, slots=True)
class Draft:
    """How the input box shows a draft, and the program's own keys that clear it."""

    test: Node
    clear_keys: tuple[str, ...]
    clear_per_character: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The rules of one program, sorted for evaluation (priority desc, then file order)."""

    name: str
    description: str
    no_match_reason: str
    rules: tuple[Rule, ...]
    interrupt: str = DEFAULT_INTERRUPT  # what ``Agent.cancel`` presses (docs/tools.md#managed-agents)
    interrupt_presses: int = 1  # how many times, while the turn holds
    draft: Draft | None = None  # every shipped file has one (a test checks)
    #: How its questions are drawn and answered (``asking``; docs/tools.md#approvals).
    approval: ApprovalForm | None = None


def default_rules_dir() -> Traversable:
    """The rule files shipped with the package (``guardian/recognize/rules``)."""
    from importlib.resources import files

    return files("tether.guardian.agents.recognize") / "rules"


def load_rule_dir(directory: Traversable) -> dict[str, RuleSet]:
    """Load every ``*.toml`` in ``directory``, keyed by recognizer name."""
    sets: dict[str, RuleSet] = {}
    entries = sorted(
        (entry for entry in directory.iterdir() if entry.name.endswith(".toml")),
        key=lambda entry: entry.name,
    )
    for entry in entries:
        rule_set = parse_rule_file(entry.name, entry.read_bytes())
        sets[rule_set.name] = rule_set
    return sets


def parse_rule_file(filename: str, data: bytes) -> RuleSet:
    """Parse and validate one rule file's bytes; ``filename`` is used in messages."""
    import tomllib

    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleFileError(filename, f"not valid UTF-8 TOML: {exc}") from exc
    _check_keys(filename, None, "file", doc, FILE_KEYS)
    stem = filename.removesuffix(".toml")
    name = _string(filename, None, doc, "name", required=True)
    if name != stem:
        raise RuleFileError(filename, f"name {name!r} must equal the file name {stem!r}")
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list) or not raw_rules:
        raise RuleFileError(filename, "needs at least one [[rule]] table")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_rules):
        if not isinstance(raw, dict):
            raise RuleFileError(filename, f"[[rule]] #{index + 1} is not a table")
        rule = _parse_rule(filename, index, raw)
        if rule.id in seen:
            raise RuleFileError(filename, "duplicate rule id", rule.id)
        seen.add(rule.id)
        rules.append(rule)
    # sorted() is stable, so equal priorities keep their file order: ties go to the first.
    ordered = tuple(sorted(rules, key=lambda rule: -rule.priority))
    return RuleSet(
        name=name,
        description=_string(filename, None, doc, "description") or "",
        no_match_reason=_string(filename, None, doc, "no_match_reason") or "no_rule_matched",
        rules=ordered,
        interrupt=_interrupt(filename, doc),
        interrupt_presses=_interrupt_presses(filename, doc),
        draft=_draft(filename, doc.get("draft")),
        approval=parse_approval(filename, doc.get("approval")),
    )


def _draft(filename: str, raw: object) -> Draft | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RuleFileError(filename, "[draft] must be a table")
    _check_keys(filename, None, "draft", raw, DRAFT_KEYS)
    keys = raw.get("clear_keys")
    if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_CLEAR_KEYS \
            or not all(isinstance(key, str) for key in keys):
        raise RuleFileError(filename, f"draft: clear_keys must be a list of 1 to "
                                      f"{MAX_CLEAR_KEYS} key names, e.g. [\"Backspace\"]")
    for key in keys:
        try:
            key_bytes(key)
        except TetherError as exc:
            raise RuleFileError(filename, f"draft: clear_keys: {exc.message}") from exc
    per_character = raw.get("clear_per_character", False)
    if not isinstance(per_character, bool):
        raise RuleFileError(filename, "draft: clear_per_character must be true or false")
    test_part = {key: value for key, value in raw.items() if key in NODE_KEYS}
    return Draft(
        test=_parse_node(filename, "draft", test_part, "draft"),
        clear_keys=tuple(keys),
        clear_per_character=per_character,
        description=_string(filename, None, raw, "description") or "",
    )


def _interrupt(filename: str, doc: Mapping[str, object]) -> str:
    name = _string(filename, None, doc, "interrupt") or DEFAULT_INTERRUPT
    try:
        key_bytes(name)
    except TetherError as exc:
        raise RuleFileError(filename, f"interrupt: {exc.message}") from exc
    return name


def _interrupt_presses(filename: str, doc: Mapping[str, object]) -> int:
    presses = doc.get("interrupt_presses", 1)
    if isinstance(presses, bool) or not isinstance(presses, int) \
            or not 1 <= presses <= MAX_INTERRUPT_PRESSES:
        raise RuleFileError(filename, f"interrupt_presses must be an integer from 1 to "
                                      f"{MAX_INTERRUPT_PRESSES}, not {presses!r}")
    return presses


def _parse_rule(filename: str, index: int, raw: Mapping[str, object]) -> Rule:
    rule_id = raw.get("id")
    if not isinstance(rule_id, str) or not re.fullmatch(r"[a-z0-9_][a-z0-9_.-]*", rule_id):
        raise RuleFileError(
            filename,
            f"[[rule]] #{index + 1} needs an 'id' of lower-case letters, digits, '_', '.', '-'",
        )
    _check_keys(filename, rule_id, "rule", raw, RULE_KEYS)
    state = raw.get("state")
    if state not in STATES:
        raise RuleFileError(filename, f"state {state!r} is not one of {', '.join(STATES)}", rule_id)
    priority = raw.get("priority")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise RuleFileError(filename, "'priority' must be an integer", rule_id)
    attention: Attention | None = None
    raw_attention = raw.get("attention")
    if state != "awaiting_approval" and raw_attention is not None:
        raise RuleFileError(filename, "'attention' goes only with state awaiting_approval", rule_id)
    if state == "awaiting_approval":
        wanted = "approval" if raw_attention is None else raw_attention
        attention = next((kind for kind in ATTENTIONS if kind == wanted), None)
        if attention is None:
            raise RuleFileError(
                filename, f"attention {wanted!r} is not one of {', '.join(ATTENTIONS)}", rule_id
            )
    test_part = {key: value for key, value in raw.items() if key in NODE_KEYS}
    return Rule(
        id=rule_id,
        state=state,
        priority=priority,
        test=_parse_node(filename, rule_id, test_part, "rule"),
        description=_string(filename, rule_id, raw, "description") or "",
        attention=attention,
    )


def _parse_node(filename: str, rule_id: str, raw: object, where: str) -> Node:
    if not isinstance(raw, dict):
        raise RuleFileError(filename, f"{where}: a test must be a table", rule_id)
    _check_keys(filename, rule_id, where, raw, NODE_KEYS)
    leaf_kinds = [kind for kind in LEAF_KINDS if kind in raw]
    if len(leaf_kinds) > 1:
        raise RuleFileError(
            filename, f"{where}: one leaf per table, found {' and '.join(leaf_kinds)}", rule_id
        )
    if not leaf_kinds and not {"all", "any", "not"} & raw.keys():
        raise RuleFileError(
            filename, f"{where}: needs a test (all, any, not, contains, regex, line_regex)", rule_id
        )
    if not leaf_kinds and {"region", "ignore_case"} & raw.keys():
        raise RuleFileError(filename, f"{where}: 'region'/'ignore_case' only go with a leaf test", rule_id)
    leaf = _parse_leaf(filename, rule_id, raw, leaf_kinds[0], where) if leaf_kinds else None
    all_of: tuple[Node, ...] = ()
    any_of: tuple[Node, ...] | None = None
    if "all" in raw:
        all_of = _parse_list(filename, rule_id, raw["all"], f"{where}.all")
    if "any" in raw:
        any_of = _parse_list(filename, rule_id, raw["any"], f"{where}.any")
    not_ = _parse_node(filename, rule_id, raw["not"], f"{where}.not") if "not" in raw else None
    return Node(leaf=leaf, all_of=all_of, any_of=any_of, not_=not_)


def _parse_list(filename: str, rule_id: str, raw: object, where: str) -> tuple[Node, ...]:
    if not isinstance(raw, list) or not raw:
        raise RuleFileError(filename, f"{where} must be a non-empty list of tests", rule_id)
    return tuple(_parse_node(filename, rule_id, item, f"{where}[{i}]") for i, item in enumerate(raw))


def _parse_leaf(filename: str, rule_id: str, raw: Mapping[str, object], kind: LeafKind, where: str) -> Leaf:
    pattern = raw[kind]
    if not isinstance(pattern, str) or not pattern:
        raise RuleFileError(filename, f"{where}: {kind} must be a non-empty string", rule_id)
    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        raise RuleFileError(filename, f"{where}: 'ignore_case' must be true or false", rule_id)
    region = _parse_region(filename, rule_id, raw.get("region", "screen"), where)
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        compiled = re.compile(re.escape(pattern) if kind == "contains" else pattern, flags)
    except re.error as exc:
        raise RuleFileError(filename, f"{where}: bad {kind} {pattern!r}: {exc}", rule_id) from exc
    return Leaf(kind=kind, pattern=pattern, region=region, ignore_case=ignore_case, compiled=compiled)


def _parse_region(filename: str, rule_id: str, raw: object, where: str) -> Region:
    if raw == "screen":
        return SCREEN
    if raw in ("input_box", "title"):
        return Region(raw)
    if isinstance(raw, dict) and raw.keys() == {"bottom"}:
        rows = raw["bottom"]
        if isinstance(rows, int) and not isinstance(rows, bool) and 1 <= rows <= MAX_BOTTOM_ROWS:
            return Region("bottom", rows)
    raise RuleFileError(
        filename,
        f'{where}: region {raw!r} is not "screen", "input_box", "title" or '
        f"{{bottom = N}} with 1 <= N <= {MAX_BOTTOM_ROWS}",
        rule_id,
    )


def _check_keys(
    filename: str,
    rule_id: str | None,
    where: str,
    raw: Mapping[str, object],
    allowed: frozenset[str],
) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise RuleFileError(
            filename,
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}",
            rule_id,
        )


def _string(
    filename: str,
    rule_id: str | None,
    raw: Mapping[str, object],
    key: str,
    *,
    required: bool = False,
) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise RuleFileError(filename, f"'{key}' must be a non-empty string", rule_id)
    return value
