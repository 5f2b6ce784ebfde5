"""Reconciliation after a guardian loss (docs/protocol.md#finding-a-guardian-and-recovery,
docs/tools.md#unknown-is-not-success): records whose end was not observed
become ``unknown`` (reason ``guardian_lost``, no exit code), prompt receipts whose typing
had not finished say their delivery is ``unknown`` (docs/tools.md#prompts, docs/tools.md#once-only),
pending approvals are resolved ``unknown`` (docs/tools.md#approvals), and
processes that outlived
their guardian are reported, never adopted.

The guardian that replaces a dead one runs it before it answers anything (``rpc/daemon``):
the catalog's one writer. It says what it found in its ``hello`` (``lost_records``), which a
front-end that started it reports in ``Initialize``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.protocol.results import DELIVERY_GUARDIAN_LOST, DELIVERY_IN_PROGRESS
from tether.shared.identity import Marked, ProcessIdentity, process_marks
from tether.shared.segments import journal_figures
from tether.shared.store.agent_table import AgentStore
from tether.shared.store.catalog import Catalog

#: The environment marks of every process Tether starts (docs/tools.md#trees-and-parents).
THREAD_MARK = "TETHER_THREAD_ID"
EXECUTION_MARK = "TETHER_EXECUTION_ID"


def reconcile_lost(
    catalog: Catalog, journals: Path, *, owner: str | None = None,
    except_owner: str | None = None,
) -> list[dict[str, Any]]:
    """Mark the lost records and receipts; returns ``{execution_id, orphan?, orphans?,
    receipts_unknown?}`` for each execution concerned (``receipts_unknown``: the prompt ids
    whose delivery became unknown).

    A running record's output figures lived in the dead guardian's memory: they are taken
    from the execution's journal files in ``journals`` instead.

    An orphan is a process still alive although the guardian that owned its PTY is gone:
    the runtime process itself (same pid, create time and boot: ``orphan``), and any other
    process carrying the execution's mark (a background job that ignored the hangup, which
    outlives the leader it hung up) or, for a command typed into a main shell, its thread's
    shell mark (``nohup`` or ``setsid`` left the shell's session): ``orphans``. They are
    recorded on the record's ``runtime`` so a person can decide what to do with them;
    Tether does not take them over.
    """
    ids = catalog.mark_lost(owner=owner, except_owner=except_owner)
    unfinished = _receipts_lost(catalog, owner=owner, except_owner=except_owner)
    _approvals_lost(catalog, except_owner=except_owner)
    catalog.notices_lost()
    marks = process_marks((THREAD_MARK, EXECUTION_MARK)) if ids else {}
    agents = AgentStore(catalog)
    report = []
    for execution_id in dict.fromkeys([*ids, *unfinished]):
        if execution_id not in ids:  # its record was reconciled before (a crash in between)
            report.append({"execution_id": execution_id,
                           "receipts_unknown": unfinished[execution_id]})
            continue
        # A managed agent whose runtime went with its guardian is in error, with an event
        # (and its parent's notification), never silently idle (docs/tools.md#deaths-cancel-and-notices).
        agents.runtime_lost(execution_id, "guardian_lost")
        entry: dict[str, Any] = {"execution_id": execution_id}
        figures = journal_figures(journals, execution_id)
        if figures is not None:
            catalog.update_execution(execution_id, output_start=figures[0],
                                     output_end=figures[1])
        record = catalog.get_execution(execution_id) or {}
        runtime: dict[str, Any] = record.get("runtime") or {}
        identity = ProcessIdentity.from_dict(runtime)
        found: dict[str, Any] = {}
        if identity is not None and identity.alive():
            found["orphan"] = {"pid": identity.pid,
                               "reason": "outlived_guardian: still running but not adopted"}
        marked = [{"pid": pid, "reason": f"outlived_guardian: carries its {mark} mark; still "
                   "running but not adopted"}
                  for pid, mark in _marked(marks, record, identity.pid if identity else None)]
        if marked:
            found["orphans"] = marked
        if found:
            catalog.update_execution(execution_id, runtime={**runtime, **found})
            entry.update(found)
        if execution_id in unfinished:
            entry["receipts_unknown"] = unfinished[execution_id]
        report.append(entry)
    return report


def _marked(marks: dict[int, Marked], record: dict[str, Any],
            runtime_pid: int | None) -> list[tuple[int, str]]:
    """``(pid, mark)`` of the live processes marked as the record's: with its execution id
    (every process of its own terminal), or, for a command typed into a main shell, with its
    thread and no execution (the shell's processes: nothing else of that thread runs once
    its guardian is gone). Only the topmost: a survivor's children (a loop's ``sleep``)
    come and go with it. The record's own runtime (``runtime_pid``, reported as ``orphan``)
    is left out first: a shell still dying of its hangup must not hide the ``nohup`` loop
    it started beneath it."""
    found: dict[int, str] = {}
    for pid, process in marks.items():
        if process.marks.get(EXECUTION_MARK) == record.get("execution_id"):
            found[pid] = EXECUTION_MARK
        elif (record.get("kind") == "command" and EXECUTION_MARK not in process.marks
              and process.marks.get(THREAD_MARK) == record.get("thread_id")):
            found[pid] = THREAD_MARK
    if runtime_pid is not None:
        found.pop(runtime_pid, None)
    return sorted((pid, mark) for pid, mark in found.items() if marks[pid].ppid not in found)


def _approvals_lost(catalog: Catalog, *, except_owner: str | None) -> None:
    """Questions a lost guardian was watching are resolved ``unknown`` (docs/tools.md#approvals):
    nobody saw how they ended. An answer it was typing says its input is ``unknown``."""
    with catalog.transaction():
        for record in catalog.pending_approvals(except_owner=except_owner):
            record["status"] = "resolved"
            record["resolved"] = {"how": "unknown", "by": "guardian_lost",
                                  "at_unix_ms": catalog.clock.now_ms(), "reason": "guardian_lost",
                                  "option": None}
            response = record.get("response")
            if isinstance(response, dict) and response.get("input_sent") == "unknown":
                response["error"] = "guardian_lost"
            catalog.put_approval(record, except_owner or "reconciled")


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
