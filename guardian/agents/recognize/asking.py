"""What an approval screen asks, read with the rule file's ``[approval]`` table
(docs/tools.md#approvals).

A rule file's ``[approval]`` table says how its program draws a question::

    [approval]
    region = { bottom = 30 }      # the rows the dialog takes (default: the bottom 30)
    question = '(?i)do you want'  # a line regex: the question (the first line it matches)
    style = "lines"               # "lines": one option per line; "row": every option on one
                                  # line, selected with arrows; "letters": (Y)es/(N)o
    option = '...'                # lines: a line regex with groups ``key`` and ``label`` (and
                                  # ``cursor``, set on the selected one); row: a line regex
                                  # whose group ``options`` holds the labels, 2+ spaces apart;
                                  # letters: a regex found as often as it matches, groups
                                  # ``key`` and ``label``
    shortcut = '\\((?P<key>[a-z]|esc)\\)$'  # optional: a key shown in a label, typed instead
    keys = ["{key}"]              # what is typed for an option ({key}: its key); row: the
                                  # arrows from the first option, then Enter
    approve = '(?i)^yes'          # the option ``approve`` picks: the first label matching
    deny = '(?i)^no'              # the option ``deny`` picks: the first label matching
    escape = "deny"               # optional: what a bare Escape typed meanwhile answers
    settle_ms = 600               # optional (default 300): how long the question must have
                                  # been on screen before respond types (keys typed sooner
                                  # can be lost: the program draws before it reads)
    denied = '(?i)declined'       # optional: on the screen after, a sign the answer was no
    [[approval.request]]          # what is asked, tried in order: the first that matches
    what = "command"              # command | file | url | tool | other
    tool = "Bash command"         # optional: the tool's name, if no group ``tool`` says it
    regex = '...'                 # over the region's lines (side bars and blanks stripped,
                                  # joined by newlines); groups ``tool``, ``detail``

Reading never fails: a screen the table does not describe gives a request with what it could
read (``what: other``, no options), and ``respond`` then refuses to guess a key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.guardian.agents.recognize.model import RuleFileError, ScreenView
from tether.guardian.agents.recognize.regions import Region, extract
from tether.guardian.terminal.keys import key_bytes
from tether.protocol.errors import TetherError

Style = Literal["lines", "row", "letters"]
WHATS = ("command", "file", "url", "tool", "other")
APPROVAL_KEYS = frozenset({"description", "region", "question", "style", "option", "shortcut",
                           "keys", "approve", "deny", "escape", "denied", "settle_ms", "request"})
#: How long a question must have been on screen before ``respond`` types (``settle_ms``): a
#: program may draw it before it reads keys (Claude Code: keys typed within ~0.3 s of the
#: dialog are lost).
DEFAULT_SETTLE_MS = 300
MAX_SETTLE_MS = 5000
REQUEST_KEYS = frozenset({"what", "tool", "regex"})
DEFAULT_REGION = Region("bottom", 30)
#: What a record keeps of a screen and of a detail (characters).
MAX_SCREEN_CHARS = 8192
MAX_DETAIL_CHARS = 4096
MAX_LABEL_CHARS = 300
_SHORTCUT_NAMES = {"esc": "Escape", "enter": "Enter", "tab": "Tab"}
_SIDES = "│┃║ \t"


@dataclass(frozen=True, slots=True)
class RequestForm:
    what: str
    tool: str | None
    regex: re.Pattern[str]


@dataclass(frozen=True, slots=True)
class ApprovalForm:
    """A program's way of drawing a question and of being answered."""

    region: Region
    question: re.Pattern[str] | None
    style: Style
    option: re.Pattern[str]
    shortcut: re.Pattern[str] | None
    keys: tuple[str, ...]
    approve: re.Pattern[str]
    deny: re.Pattern[str]
    escape: str | None
    denied: re.Pattern[str] | None
    requests: tuple[RequestForm, ...]
    settle_ms: int = DEFAULT_SETTLE_MS


@dataclass(frozen=True, slots=True)
class Asked:
    """One reading of a question on screen: the request (a JSON-ready map), the region's
    text, each option's keys, and a fingerprint that stays the same while the same question
    is shown (the selection moving does not change it)."""

    request: dict[str, Any]
    screen: str
    keys: dict[str, tuple[str, ...]]
    fingerprint: str


def parse_approval(filename: str, raw: object) -> ApprovalForm | None:
    """The ``[approval]`` table of a rule file, checked (``RuleFileError`` naming the file)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RuleFileError(filename, "[approval] must be a table")
    unknown = sorted(set(raw) - APPROVAL_KEYS)
    if unknown:
        raise RuleFileError(filename, f"approval: unknown key(s) {', '.join(unknown)}")
    style = raw.get("style", "lines")
    if style not in ("lines", "row", "letters"):
        raise RuleFileError(filename, f"approval: style {style!r} is not lines, row or letters")
    keys = raw.get("keys", ["{key}"])
    if not isinstance(keys, list) or not 1 <= len(keys) <= 4 or not all(
            isinstance(k, str) for k in keys):
        raise RuleFileError(filename, "approval: keys must be a list of 1 to 4 key names")
    for key in keys:
        if key != "{key}":
            try:
                key_bytes(key)
            except TetherError as exc:
                raise RuleFileError(filename, f"approval: keys: {exc.message}") from exc
    escape = raw.get("escape")
    if escape not in (None, "deny", "approve", "other"):
        raise RuleFileError(filename, "approval: escape must be deny, approve or other")
    requests = []
    for index, entry in enumerate(raw.get("request", [])):
        if not isinstance(entry, dict) or set(entry) - REQUEST_KEYS or "regex" not in entry:
            raise RuleFileError(filename, f"approval.request #{index + 1}: a table with regex, "
                                          "what and optionally tool")
        what = entry.get("what", "tool")
        if what not in WHATS:
            raise RuleFileError(filename, f"approval.request #{index + 1}: what {what!r} is not "
                                          f"one of {', '.join(WHATS)}")
        tool = entry.get("tool")
        requests.append(RequestForm(what, str(tool) if tool else None,
                                    _regex(filename, f"request #{index + 1}", entry["regex"])))
    settle = raw.get("settle_ms", DEFAULT_SETTLE_MS)
    if isinstance(settle, bool) or not isinstance(settle, int) or not 0 <= settle <= MAX_SETTLE_MS:
        raise RuleFileError(filename, f"approval: settle_ms must be 0 to {MAX_SETTLE_MS}")
    region = raw.get("region", {"bottom": DEFAULT_REGION.rows})
    if not (isinstance(region, dict) and set(region) == {"bottom"} and isinstance(
            region["bottom"], int) and 1 <= region["bottom"] <= 200):
        raise RuleFileError(filename, "approval: region must be {bottom = N}, 1 <= N <= 200")
    return ApprovalForm(
        region=Region("bottom", int(region["bottom"])),
        question=_regex(filename, "question", raw["question"]) if "question" in raw else None,
        style=style,
        option=_regex(filename, "option", raw.get("option")),
        shortcut=_regex(filename, "shortcut", raw["shortcut"]) if "shortcut" in raw else None,
        keys=tuple(keys),
        approve=_regex(filename, "approve", raw.get("approve")),
        deny=_regex(filename, "deny", raw.get("deny")),
        escape=escape,
        denied=_regex(filename, "denied", raw["denied"]) if "denied" in raw else None,
        requests=tuple(requests),
        settle_ms=settle,
    )


def _regex(filename: str, where: str, pattern: object) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise RuleFileError(filename, f"approval: {where} must be a non-empty regex")
    try:
        return re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise RuleFileError(filename, f"approval: bad {where} {pattern!r}: {exc}") from exc


def _clean(text: str, limit: int) -> str:
    return text.strip()[:limit]


def read_request(view: ScreenView, form: ApprovalForm | None, attention: str | None) -> Asked:
    """What the question on ``view`` asks, with the options it offers and their keys."""
    rows = extract(form.region if form is not None else DEFAULT_REGION, view)
    screen = "\n".join(rows)[-MAX_SCREEN_CHARS:]
    request: dict[str, Any] = {"attention": attention, "what": _default_what(attention),
                               "tool": None, "detail": None, "question": None, "options": []}
    keys: dict[str, tuple[str, ...]] = {}
    if form is not None:
        lines = [row.strip(_SIDES) for row in rows]
        text = "\n".join(lines)
        asks = -1  # the question's line: the last one that reads as one (older ones above
        if form.question is not None:  # belong to the transcript)
            asks = max((i for i, line in enumerate(lines) if form.question.search(line)),
                       default=-1)
            if asks >= 0:
                request["question"] = _clean(lines[asks], MAX_LABEL_CHARS)
        for entry in form.requests:
            match = entry.regex.search(text)
            if match is None:
                continue
            groups = match.groupdict()
            request["what"] = entry.what if attention in (None, "approval") else request["what"]
            request["tool"] = _clean(groups.get("tool") or entry.tool or "", MAX_LABEL_CHARS) or None
            detail = groups.get("detail")
            if detail:
                request["detail"] = _clean("\n".join(
                    part.strip(_SIDES) for part in detail.splitlines() if part.strip(_SIDES)),
                    MAX_DETAIL_CHARS) or None
            break
        options = _options(lines, asks, form)
        approve = next((o for o in options if form.approve.search(o["label"])), None)
        deny = next((o for o in options if form.deny.search(o["label"])), None)
        for index, option in enumerate(options):
            option["kind"] = ("approve" if option is approve else "deny" if option is deny
                              else "other")
            keys[option["key"]] = _keys_for(form, option, index)
            option.pop("typed", None)
        request["options"] = options
    blob = "\x00".join(str(request[k]) for k in ("what", "tool", "detail", "question")) + "\x00" + \
        "\x00".join(o["label"] for o in request["options"])
    return Asked(request, screen, keys, hashlib.sha256(blob.encode()).hexdigest()[:16])


def _default_what(attention: str | None) -> str:
    return attention if attention in ("trust", "login", "choice") else "other"


def _options(lines: list[str], asks: int, form: ApprovalForm) -> list[dict[str, Any]]:
    """The options offered: below the question (a numbered list in the transcript above it is
    not one), or on the question's own line (``letters``)."""
    options: list[dict[str, Any]] = []
    if form.style == "lines":
        for line in lines[asks + 1:]:
            match = form.option.search(line)
            if match is None:
                continue
            label = _clean(match.group("label"), MAX_LABEL_CHARS)
            key = match.group("key")
            typed = key
            if form.shortcut is not None and (short := form.shortcut.search(label)) is not None:
                typed = _SHORTCUT_NAMES.get(short.group("key").lower(), short.group("key"))
            groups = match.groupdict()
            options.append({"key": typed, "label": label, "kind": "other",
                            "selected": bool(groups.get("cursor"))})
    elif form.style == "row":
        match = next((m for line in lines if (m := form.option.search(line))), None)
        if match is not None:
            labels = [part.strip() for part in re.split(r"\s{2,}", match.group("options").strip())]
            options = [{"key": str(i + 1), "label": label[:MAX_LABEL_CHARS], "kind": "other",
                        "selected": False} for i, label in enumerate(labels) if label]
    elif asks >= 0:
        for match in form.option.finditer(lines[asks]):
            options.append({"key": match.group("key").lower(),  # "(Y)es": key y, label Yes
                            "label": _clean(match.group("key") + match.group("label"),
                                            MAX_LABEL_CHARS),
                            "kind": "other", "selected": False})
    seen: set[str] = set()
    unique = []
    for option in options:  # a key shown twice (a wrapped line) selects the first
        if option["key"] not in seen:
            seen.add(option["key"])
            unique.append(option)
    return unique


def _keys_for(form: ApprovalForm, option: Mapping[str, Any], index: int) -> tuple[str, ...]:
    if form.style == "row":
        return (*("Right",) * index, "Enter")
    return tuple(option["key"] if template == "{key}" else template for template in form.keys)


def keys_bytes(keys: tuple[str, ...]) -> bytes:
    """The bytes a key sequence types (its names checked when the rule file was loaded)."""
    return b"".join(key_bytes(key) for key in keys)
