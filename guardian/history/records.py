"""Shaping execution records for the wire, and the output tail returned with a command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.guardian.history.journal import Journal
from tether.guardian.terminal.render import render_output
from tether.protocol.results import CompactRecord
from tether.shared.catalog import AGENT_COLUMNS

if TYPE_CHECKING:
    from tether.guardian.runtime.live import LiveExecution

#: Raw bytes of the journal tail rendered into a BashCommand result, and the text kept.
RESULT_TAIL_BYTES = 64 * 1024
RESULT_TAIL_CHARS = 16 * 1024

#: Internal catalog columns that are not part of the record contract.
_HIDDEN = ("seq", "change_seq")
#: The managed-agent fields (SPEC §8) belong on agent records only.
_HIDDEN_UNLESS_AGENT = (*_HIDDEN, *(name for name, _ in AGENT_COLUMNS), "parent_workspace")


def record_view(record: dict[str, Any], live: LiveExecution | None) -> dict[str, Any]:
    """The record as clients see it, with live output figures merged in.

    Output figures of a running execution move with every byte; they are read from the
    journal instead of being persisted per chunk, so ``observed_at_unix_ms`` is not touched.
    """
    hidden = _HIDDEN if record.get("kind") == "agent" else _HIDDEN_UNLESS_AGENT
    return _with_live_figures({k: v for k, v in record.items() if k not in hidden}, live)


#: The figures of a record that ``exec.observe`` repeats per item.
COMPACT_FIELDS = tuple(CompactRecord.__annotations__)


def compact_view(record: dict[str, Any], live: LiveExecution | None) -> dict[str, Any]:
    """:data:`COMPACT_FIELDS` of :func:`record_view`, read straight from the row: observe of
    32 items would otherwise copy every column of every record only to keep 13 of them."""
    return _with_live_figures({k: record.get(k) for k in COMPACT_FIELDS}, live)


def _with_live_figures(view: dict[str, Any], live: LiveExecution | None) -> dict[str, Any]:
    if live is not None:
        view["output_start"] = live.journal.start
        view["output_end"] = live.journal.end
        view["output_activity_seq"] = live.activity_seq
    return view


def output_tail(journal: Journal) -> dict[str, Any]:
    """The rendered tail of an execution's output, with the offsets to page the rest."""
    end = journal.end
    start = max(journal.start, end - RESULT_TAIL_BYTES)
    raw = journal.read(start, end - start)
    text = render_output(raw, max_chars=RESULT_TAIL_CHARS)
    truncated = start > journal.start or len(text) >= RESULT_TAIL_CHARS
    return {
        "text": text,
        "start": start,
        "end": end,
        "truncated": truncated,
        "retained_start": journal.start,
    }
