"""Shaping execution records for the wire, and the output tail returned with a command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import msgpack

from tether.guardian.history.journal import Journal
from tether.guardian.terminal.render import render_output
from tether.protocol.limits import LIST_COMMAND_CHARS, LIST_REPLY_BYTES
from tether.protocol.results import CompactRecord
from tether.shared.store.schema import AGENT_COLUMNS


class Running(Protocol):
    """What a view reads of a running execution: its journal and its activity count.
    ``runtime.live.LiveExecution`` is one; it is named here by its shape because the runtime
    sits above the history it writes (runtime imports this module, never the reverse)."""

    @property
    def journal(self) -> Journal: ...

    @property
    def activity_seq(self) -> int: ...


#: Raw bytes of the journal tail rendered into a BashCommand result, and the text kept.
RESULT_TAIL_BYTES = 64 * 1024
RESULT_TAIL_CHARS = 16 * 1024

#: Internal catalog columns that are not part of the record contract.
_HIDDEN = ("seq", "change_seq")
#: The managed-agent fields (docs/tools.md#managed-agents) belong on agent records only.
_HIDDEN_UNLESS_AGENT = (*_HIDDEN, *(name for name, _ in AGENT_COLUMNS), "parent_workspace")


def record_view(record: dict[str, Any], live: Running | None) -> dict[str, Any]:
    """The record as clients see it, with live output figures merged in.

    Output figures of a running execution move with every byte; they are read from the
    journal instead of being persisted per chunk, so ``observed_at_unix_ms`` is not touched.
    """
    hidden = _HIDDEN if record.get("kind") == "agent" else _HIDDEN_UNLESS_AGENT
    return _with_live_figures({k: v for k, v in record.items() if k not in hidden}, live)


def list_view(record: dict[str, Any], live: Running | None) -> dict[str, Any]:
    """The record as a listing carries it: without ``screen_text`` and with the first
    :data:`LIST_COMMAND_CHARS` characters of its command (``command_truncated`` says so).
    Whole, 128 records of long commands and screens made a reply no frame could hold; the
    whole record is one ``get`` away."""
    view = record_view(record, live)
    view.pop("screen_text", None)
    command = view.get("command")
    if isinstance(command, str) and len(command) > LIST_COMMAND_CHARS:
        view["command"] = command[:LIST_COMMAND_CHARS]
        view["command_truncated"] = True
    return view


def list_page(
    records: list[dict[str, Any]], limit: int, view: Callable[[dict[str, Any]], dict[str, Any]],
    budget: int = LIST_REPLY_BYTES,
) -> tuple[list[dict[str, Any]], int | None]:
    """The listed views of up to ``limit`` of ``records`` (newest first, read with one more
    than ``limit`` to see whether older ones remain), and ``next_before``: the position to
    go on from when older ones remain, None when none does.

    The page also ends before its views pass ``budget`` bytes (a managed agent's labels and
    argv are not cut): it holds at least one record, and a legal request never fails on the
    reply's size.
    """
    views: list[dict[str, Any]] = []
    room = budget
    more = len(records) > limit
    last: int | None = None
    for record in records[:limit]:
        shown = view(record)
        size = len(msgpack.packb(shown))
        if views and size > room:
            more = True
            break
        room -= size
        views.append(shown)
        last = int(record["seq"])
    return views, last if more else None


#: The figures of a record that ``exec.observe`` repeats per item.
COMPACT_FIELDS = tuple(CompactRecord.__annotations__)


def compact_view(record: dict[str, Any], live: Running | None) -> dict[str, Any]:
    """:data:`COMPACT_FIELDS` of :func:`record_view`, read straight from the row: observe of
    32 items would otherwise copy every column of every record only to keep 13 of them."""
    return _with_live_figures({k: record.get(k) for k in COMPACT_FIELDS}, live)


def _with_live_figures(view: dict[str, Any], live: Running | None) -> dict[str, Any]:
    if live is not None:
        view["output_start"] = live.journal.start
        view["output_end"] = live.journal.end
        view["output_activity_seq"] = live.activity_seq
    return view


def output_tail(journal: Journal) -> dict[str, Any]:
    """The rendered tail of an execution's output, with the offsets to page the rest.

    A cut tail starts where ``start`` says, so paging Execution.read up to ``start`` and
    reading the tail sees every byte (a cut tail said where its window began, and the bytes
    between there and the text kept were in neither). It starts at a line's first byte,
    except for a few very long lines: then it is the last :data:`RESULT_TAIL_CHARS`
    characters, and ``start`` may fall a little after their first byte, so a few bytes are
    read twice but none is missed (see :func:`_tail`).
    """
    end = journal.end
    start = max(journal.start, end - RESULT_TAIL_BYTES)
    raw = journal.read(start, end - start)
    text = render_output(raw)
    whole = start == journal.start  # else the window's first line may be part of one
    truncated = not whole or len(text) > RESULT_TAIL_CHARS
    if truncated:
        skipped, text = _tail(raw, text, RESULT_TAIL_CHARS,
                              first_line_whole=whole or _redrawn_first_line(raw))
        start += skipped
    return {
        "text": text,
        "start": start,
        "end": end,
        "truncated": truncated,
        "retained_start": journal.start,
    }


def _redrawn_first_line(raw: bytes) -> bool:
    """Was the window's first line redrawn from its start inside the window (a carriage
    return before its end: a progress bar)? Then what it shows is drawn by bytes in the
    window, although the line began before it."""
    end = raw.find(b"\n")
    first = raw[: end if end >= 0 else len(raw)].rstrip(b"\r")  # a line ends CR LF
    return b"\r" in first


def _tail(raw: bytes, text: str, limit: int, *, first_line_whole: bool) -> tuple[int, str]:
    """The tail of ``text`` (rendered from ``raw``) to show, and how many bytes of ``raw``
    come before it.

    Rendering keeps each line of ``raw`` as one line of ``text``, so dropping whole lines maps
    to dropping raw lines exactly: whole lines are shown when they fill at least half of
    ``limit``, or when the rest of the window fits (a window that renders short: progress
    bars redrawn with CR, colours). Where lines cannot be mapped (a string sequence spanned
    lines) or are too long, the last ``limit`` characters are kept, and the bytes before them
    are counted as the raw bytes minus the most the text can stand for: rendering only drops
    and overwrites bytes, so the offset is at or just after the true one (unless a cursor move
    padded a line with spaces, which can put it up to a few hundred bytes before).
    """
    if first_line_whole and len(text) <= limit:
        return 0, text
    newlines = text.count("\n")
    if newlines == raw.count(b"\n"):
        # The first line start from which the rest fits (never the window's first line when
        # that may be part of one).
        at = max(text.find("\n", max(0, len(text) - limit - 1)),
                 -1 if first_line_whole else text.find("\n")) + 1
        if at > 0 and (len(text) - at >= limit // 2 or len(text) <= limit):
            kept = raw.split(b"\n", text.count("\n", 0, at))[-1]  # after as many raw lines
            return len(raw) - len(kept), text[at:]
    if len(text) <= limit:
        return 0, text  # the whole window (one line, or lines that cannot be mapped)
    tail = text[-limit:]
    # A replacement character stands for as little as one undecodable byte.
    stands_for = len(tail.encode()) - 2 * tail.count("\ufffd")
    return max(0, len(raw) - stands_for), tail
