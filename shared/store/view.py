"""The catalog read without its guardian: what a person's commands, ``Initialize {type:
status}``, ``doctor`` and a front-end deciding whether to start a guardian read, writing
nothing.

Opening a catalog through ``catalog.Catalog`` would create it, migrate it, chmod it and
start writing: that is the guardian's alone. Everything here opens the file read-only, and
the catalog of a guardian that is gone without changing a byte of it or of its log
(:func:`open_left_behind`); an unreadable catalog raises ``errors.StoreError``.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

from tether.shared.store.rows import (
    AgentEventRow,
    ExecutionRow,
    PeekedThread,
    PersonEventRow,
    Receipt,
    ThreadRow,
    decode_row,
)


class PeekedWorkspace(TypedDict):
    """A workspace's catalog as it is on disk (what ``workspace.list`` answers)."""

    threads: list[ThreadRow]
    executions: list[ExecutionRow]
    counts: dict[str, int]
    catalog_cursor: int


class PeekedExecution(TypedDict):
    """One record with its thread, receipts and events (what ``tether show`` tells)."""

    execution: ExecutionRow
    thread: ThreadRow | None
    receipts: list[Receipt]
    person_events: list[PersonEventRow]
    agent_events: list[AgentEventRow]


@dataclass(frozen=True, slots=True)
class CatalogFigures:
    """What ``tether doctor`` weighs against the retention limits."""

    execution_ids: set[str]
    threads: int
    #: Threads holding more records than the limit asked about.
    crowded_threads: list[str]


def peek_thread(path: Path, thread_id: str, *, left_behind: bool = False) -> PeekedThread | None:
    """A thread's row read straight from a catalog file, read-only, without a guardian.

    For checks that must not start anything (a thread id that no catalog knows cannot be
    served). ``None`` when there is no catalog or no such thread; an unreadable catalog
    raises ``StoreError`` so that callers can leave the decision to the guardian.

    ``left_behind``: the catalog's guardian is gone and nothing is to be changed, not even
    the log's index (:func:`open_left_behind`); otherwise ``mode=ro``, which follows a live
    writer but rebuilds a crashed guardian's index (a guardian started next would anyway).
    """
    if not path.exists():
        return None
    if left_behind:
        db = open_left_behind(path)
    else:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
    try:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        if row is None:
            return None
        thread = cast(PeekedThread, dict(row))
        try:
            mode = db.execute("SELECT mode FROM thread_modes WHERE thread_id = ?",
                              (thread_id,)).fetchone()
        except sqlite3.OperationalError:  # a catalog written before thread modes existed
            mode = None
        thread["mode"] = None if mode is None else json.loads(mode[0])
        return thread
    finally:
        db.close()


def open_left_behind(path: Path) -> sqlite3.Connection:
    """A read-only connection to the catalog of a guardian that is gone, that writes nothing.

    ``mode=ro`` alone is not enough: after a crash, opening a catalog in WAL mode rebuilds
    the log's index in its ``-shm`` file, and an empty ``-wal`` file is made where there was
    none. So a log is read through its index opened read-only (``readonly_shm``: as no live
    writer vouches for the index, SQLite reads the log into its own memory), and a catalog
    without a log (closed cleanly, or checkpointed to the end: everything is in the main
    file) is read as the immutable file it is. A log without its index, or a rollback
    journal, cannot be read without writing: that is ``sqlite3.OperationalError``, as is a
    catalog locked for longer than two seconds.

    For catalogs no guardian is writing: with a live writer, a read-only index may give an
    older snapshot (``peek_thread`` without ``left_behind`` reads a live catalog).
    """
    wal, shm, journal = (path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))
    log_bytes = 0
    with contextlib.suppress(FileNotFoundError):
        log_bytes = wal.stat().st_size
    if journal.exists() or (log_bytes and not shm.exists()):
        raise sqlite3.OperationalError(
            "it has a log left to recover, which only a guardian does: reading it here "
            "would write")
    options = "readonly_shm=1" if log_bytes else "immutable=1"
    db = sqlite3.connect(f"file:{path}?mode=ro&{options}", uri=True, timeout=2.0)
    db.row_factory = sqlite3.Row
    return db


def peek_workspace(path: Path, limit: int) -> PeekedWorkspace | None:
    """Every thread, the newest ``limit`` records of the workspace and the count of records
    per status, read from the catalog of a guardian that is gone as they are on disk (what
    ``workspace.list`` answers, in the same order: threads oldest first, records newest
    first), with ``catalog_cursor``. ``None`` when there is no catalog; an unreadable one
    raises ``StoreError``."""
    if not path.exists():
        return None
    db = open_left_behind(path)
    try:
        db.execute("BEGIN")  # one snapshot for all three reads
        threads = [cast(ThreadRow, dict(row)) for row in db.execute(
            "SELECT * FROM threads ORDER BY created_unix_ms")]
        records = [decode_row(row) for row in db.execute(
            "SELECT * FROM executions ORDER BY seq DESC LIMIT ?", (limit,))]
        counts = {str(row[0]): int(row[1]) for row in db.execute(
            "SELECT status, count(*) FROM executions GROUP BY status")}
        cursor = db.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()
        return {"threads": threads, "executions": records, "counts": counts,
                "catalog_cursor": int(cursor[0]) if cursor else 0}
    finally:
        db.close()


def peek_execution(path: Path, execution_id: str) -> PeekedExecution | None:
    """An execution's record with its thread, prompt receipts, and agent and person events,
    read straight from a catalog file, read-only, without a guardian: what ``tether show``
    tells about a record whose guardian is gone. ``None`` when there is no catalog or no
    such record; an unreadable catalog raises ``StoreError``."""
    if not path.exists():
        return None
    db = open_left_behind(path)
    try:
        row = db.execute("SELECT * FROM executions WHERE execution_id = ?",
                         (execution_id,)).fetchone()
        if row is None:
            return None
        thread = db.execute("SELECT * FROM threads WHERE thread_id = ?",
                            (row["thread_id"],)).fetchone()
        found: PeekedExecution = {
            "execution": decode_row(row),
            "thread": None if thread is None else cast(ThreadRow, dict(thread)),
            "receipts": [json.loads(r[0]) for r in db.execute(
                "SELECT receipt FROM receipts WHERE execution_id = ? ORDER BY created_unix_ms",
                (execution_id,))],
            "person_events": [cast(PersonEventRow, dict(r)) for r in db.execute(
                "SELECT seq, kind, attach_id, at_unix_ms FROM person_events"
                " WHERE execution_id = ? ORDER BY seq", (execution_id,))],
            "agent_events": [],
        }
        try:
            found["agent_events"] = [cast(AgentEventRow, dict(r)) for r in db.execute(
                "SELECT * FROM agent_events WHERE execution_id = ? ORDER BY rowid",
                (execution_id,))]
        except sqlite3.OperationalError:  # a catalog written before managed agents
            found["agent_events"] = []
        return found
    finally:
        db.close()


def peek_agents(
    path: Path, principal: str, workspace_root: str, *, include_archived: bool, limit: int,
) -> list[ExecutionRow]:
    """The workspace's managed agents in the catalog of a guardian that is gone, newest first
    (what ``agent.list`` answers: ``agents.AgentStore.list_agents``); none without a
    catalog."""
    if not path.exists():
        return []
    db = open_left_behind(path)
    try:
        query = ("SELECT * FROM executions WHERE kind = 'agent' AND principal = ?"
                 " AND workspace_root = ?")
        if not include_archived:
            query += " AND archived_at IS NULL"
        rows = db.execute(query + " ORDER BY seq DESC LIMIT ?",
                          (principal, workspace_root, limit)).fetchall()
        return [decode_row(row) for row in rows]
    finally:
        db.close()


def left_running(path: Path, owner: str) -> int:
    """How many records the guardian ``owner`` (an instance id) left ``running`` in the
    catalog it left: what its successor will record as ``unknown`` (``guardian_lost``).
    0 without a catalog."""
    if not path.exists():
        return 0
    db = open_left_behind(path)
    try:
        row = db.execute("SELECT count(*) FROM executions WHERE status = 'running'"
                         " AND guardian_instance_id = ?", (owner,)).fetchone()
        return int(row[0])
    finally:
        db.close()


def running_by_kind(path: Path, owner: str) -> dict[str, int]:
    """How many records the guardian ``owner`` (an instance id) runs now, by kind
    (``command``, ``background``, ``agent``), read-only: what stopping it would end."""
    if not path.exists():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT kind, count(*) FROM executions WHERE status = 'running'"
                          " AND guardian_instance_id = ? GROUP BY kind", (owner,)).fetchall()
    finally:
        db.close()
    return {str(kind): int(count) for kind, count in rows}


def catalog_figures(path: Path, thread_max_records: int) -> CatalogFigures:
    """The records and threads of a live guardian's catalog, read-only (``mode=ro`` follows
    its writer), with the threads holding more than ``thread_max_records`` records."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        known = {str(row[0]) for row in db.execute("SELECT execution_id FROM executions")}
        threads = int(db.execute("SELECT count(*) FROM threads").fetchone()[0])
        crowded = [str(row[0]) for row in db.execute(
            "SELECT thread_id FROM executions GROUP BY thread_id HAVING count(*) > ?",
            (thread_max_records,))]
    finally:
        db.close()
    return CatalogFigures(known, threads, crowded)
