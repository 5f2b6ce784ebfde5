"""Reconciliation after a guardian loss (SPEC R12, R13): records whose end was not observed
become ``unknown`` (reason ``guardian_lost``, no exit code), prompt receipts whose typing
had not finished say their delivery is ``unknown`` (R21, R22), and processes that outlived
their guardian are reported, never adopted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.protocol.results import DELIVERY_GUARDIAN_LOST, DELIVERY_IN_PROGRESS
from tether.shared.agent_store import AgentStore
from tether.shared.catalog import Catalog
from tether.shared.identity import ProcessIdentity
from tether.shared.segments import journal_figures


def reconcile_lost(
    catalog: Catalog, journals: Path, *, owner: str | None = None,
    except_owner: str | None = None,
) -> list[dict[str, Any]]:
    """Mark the lost records and receipts; returns ``{execution_id, orphan?,
    receipts_unknown?}`` for each execution concerned (``receipts_unknown``: the prompt ids
    whose delivery became unknown).

    A running record's output figures lived in the dead guardian's memory: they are taken
    from the execution's journal files in ``journals`` instead.

    An orphan is a runtime process (same pid, create time and boot) still alive although the
    guardian that owned its PTY is gone. It is recorded on the record's ``runtime`` so a
    person can decide what to do with it; Tether does not take it over.
    """
    ids = catalog.mark_lost(owner=owner, except_owner=except_owner)
    unfinished = _receipts_lost(catalog, owner=owner, except_owner=except_owner)
    agents = AgentStore(catalog)
    report = []
    for execution_id in dict.fromkeys([*ids, *unfinished]):
        if execution_id not in ids:  # its record was reconciled before (a crash in between)
            report.append({"execution_id": execution_id,
                           "receipts_unknown": unfinished[execution_id]})
            continue
        # A managed agent whose runtime went with its guardian is in error, with an event
        # (and its parent's notification), never silently idle (R25).
        agents.runtime_lost(execution_id, "guardian_lost")
        entry: dict[str, Any] = {"execution_id": execution_id}
        figures = journal_figures(journals, execution_id)
        if figures is not None:
            catalog.update_execution(execution_id, output_start=figures[0],
                                     output_end=figures[1])
        record = catalog.get_execution(execution_id)
        runtime = record.get("runtime") if record else None
        identity = ProcessIdentity.from_dict(runtime)
        if isinstance(runtime, dict) and identity is not None and identity.alive():
            orphan = {"pid": identity.pid,
                      "reason": "outlived_guardian: still running but not adopted"}
            catalog.update_execution(execution_id, runtime={**runtime, "orphan": orphan})
            entry["orphan"] = orphan
        if execution_id in unfinished:
            entry["receipts_unknown"] = unfinished[execution_id]
        report.append(entry)
    return report


def _receipts_lost(
    catalog: Catalog, *, owner: str | None, except_owner: str | None,
) -> dict[str, list[str]]:
    """Receipts a lost guardian was still typing (``owner``'s, or anyone's but
    ``except_owner``'s) say ``delivered: "unknown"``, reason ``guardian_lost``: the prompt
    may have reached the program, wholly or in part, or not at all. Never ``false``, which
    would invite typing it again. Returns their prompt ids by execution."""
    found: dict[str, list[str]] = {}
    with catalog.transaction():
        for execution_id, prompt_id, receipt in catalog.receipts_containing(DELIVERY_IN_PROGRESS):
            if receipt.get("reason") != DELIVERY_IN_PROGRESS:
                continue
            typist = (receipt.get("runtime") or {}).get("guardian_instance_id")
            if typist == except_owner or (owner is not None and typist != owner):
                continue
            receipt.update(delivered="unknown", reason=DELIVERY_GUARDIAN_LOST,
                           observed_at_unix_ms=catalog.clock.now_ms())
            catalog.replace_receipt(execution_id, prompt_id, receipt)
            found.setdefault(execution_id, []).append(prompt_id)
    return found
