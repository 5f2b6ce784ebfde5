"""Reconciliation after a guardian loss (SPEC R12, R13): records whose end was not observed
become ``unknown`` (reason ``guardian_lost``, no exit code), and processes that outlived
their guardian are reported, never adopted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.shared.agent_store import AgentStore
from tether.shared.catalog import Catalog
from tether.shared.identity import ProcessIdentity
from tether.shared.segments import journal_figures


def reconcile_lost(
    catalog: Catalog, journals: Path, *, owner: str | None = None,
    except_owner: str | None = None,
) -> list[dict[str, Any]]:
    """Mark the lost records; returns ``{execution_id, orphan?}`` for each.

    A running record's output figures lived in the dead guardian's memory: they are taken
    from the execution's journal files in ``journals`` instead.

    An orphan is a runtime process (same pid, create time and boot) still alive although the
    guardian that owned its PTY is gone. It is recorded on the record's ``runtime`` so a
    person can decide what to do with it; Tether does not take it over.
    """
    ids = catalog.mark_lost(owner=owner, except_owner=except_owner)
    agents = AgentStore(catalog)
    report = []
    for execution_id in ids:
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
        report.append(entry)
    return report
