"""The execution catalog: threads, execution records and idempotency keys in SQLite.

The guardian owns the catalog; the front-end touches it only to reconcile records of a
guardian it found dead (R12). WAL mode lets both do so safely from different processes.

Every persisted change to an execution bumps the catalog-wide ``change_seq`` and stamps the
record's ``observed_at_unix_ms``; an update that changes nothing writes nothing, so
``observed_at_unix_ms`` is never a heartbeat (R16). ``change_seq`` doubles as the catalog
cursor that ``Execution.wait`` watches.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.shared.clock import Clock
from tether.shared.store.turns import TURNS_SCHEMA

log = logging.getLogger(__name__)

#: 3: the turn log (``turns``, shared/store/turns.py), created on open like every table.
SCHEMA_VERSION = 3

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    workspace_root TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    shell_execution_id TEXT,
    generation INTEGER NOT NULL DEFAULT 1,
    cwd TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    seq INTEGER PRIMARY KEY,
    execution_id TEXT UNIQUE NOT NULL,
    principal TEXT NOT NULL,
    workspace_root TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT,
    status TEXT NOT NULL,
    exit_code INTEGER,
    reason TEXT,
    started_unix_ms INTEGER NOT NULL,
    ended_unix_ms INTEGER,
    terminal_unix_ms INTEGER,
    observed_at_unix_ms INTEGER NOT NULL,
    guardian_instance_id TEXT NOT NULL,
    runtime TEXT,
    generation INTEGER NOT NULL DEFAULT 1,
    output_start INTEGER NOT NULL DEFAULT 0,
    output_end INTEGER NOT NULL DEFAULT 0,
    output_pending INTEGER NOT NULL DEFAULT 0,
    output_activity_seq INTEGER NOT NULL DEFAULT 0,
    screen_text TEXT,
    recognizer TEXT,
    parent_execution_id TEXT,
    labels TEXT NOT NULL DEFAULT '{}',
    archived_at INTEGER,
    recovery TEXT,
    rows INTEGER NOT NULL DEFAULT 40,
    cols INTEGER NOT NULL DEFAULT 120,
    change_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS executions_thread ON executions (thread_id, seq);
CREATE TABLE IF NOT EXISTS receipts (
    execution_id TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    payload_sha256 TEXT NOT NULL,
    receipt TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (execution_id, prompt_id)
);
CREATE TABLE IF NOT EXISTS person_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    attach_id TEXT NOT NULL,
    at_unix_ms INTEGER NOT NULL,
    UNIQUE (execution_id, kind, attach_id)
);
CREATE TABLE IF NOT EXISTS execution_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at_unix_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS thread_modes (
    thread_id TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    changed_unix_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    attention TEXT,
    reason TEXT NOT NULL,
    generation INTEGER NOT NULL,
    turn_seq INTEGER NOT NULL,
    at_unix_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_events_execution ON agent_events (execution_id, seq);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_execution_id TEXT NOT NULL,
    child_execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    event_seq INTEGER NOT NULL UNIQUE,
    created_at_unix_ms INTEGER NOT NULL,
    delivered_prompt_id TEXT,
    delivered_at_unix_ms INTEGER
);
CREATE INDEX IF NOT EXISTS notifications_parent ON notifications (parent_execution_id, id);
CREATE TABLE IF NOT EXISTS idempotency (
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    method TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
) WITHOUT ROWID;
""" + TURNS_SCHEMA

#: Indexes a command's writes no longer pay for (each index is a page more per commit on a
#: command's path): no query needs change_seq indexed (changed_since looks rows up by id), and
#: only managed agents are looked up by parent or listed newest first, so those indexes hold
#: agent rows only. (Catalogs made before keep AUTOINCREMENT, one more page per insert, and a
#: rowid idempotency table, one more page.)
_INDEX_CHANGES = (
    "DROP INDEX IF EXISTS executions_change",
    "DROP INDEX IF EXISTS executions_agents",
    "CREATE INDEX IF NOT EXISTS executions_agent_parents"
    " ON executions (parent_execution_id, seq) WHERE kind = 'agent'",
    "CREATE INDEX IF NOT EXISTS executions_agents_newest ON executions (seq) WHERE kind = 'agent'",
)

#: Columns that schema 2 added to ``executions`` for managed agents (SPEC §8). A catalog
#: written by an older Tether gets them with ALTER TABLE on open; old rows read as non-agents.
AGENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("provider", "TEXT"),
    ("agent_state", "TEXT"),
    ("attention", "TEXT"),
    ("title", "TEXT"),
    ("conversation_id", "TEXT"),
    ("auto_archive", "INTEGER NOT NULL DEFAULT 0"),
    ("notify_on_finish", "INTEGER NOT NULL DEFAULT 0"),
    ("parent_workspace", "TEXT"),
    ("argv", "TEXT"),
    ("agent_recognizer", "TEXT"),
    ("turn_seq", "INTEGER NOT NULL DEFAULT 0"),
)

#: Columns added to ``threads`` after schema 2, the same way: how the thread's main shell
#: ended when no reset replaced it (``{generation, reason}`` as JSON), so that the shell
#: started after it can say why the thread has a new one.
THREAD_COLUMNS: tuple[tuple[str, str], ...] = (("shell_ended", "TEXT"),)

#: Columns stored as JSON text and decoded into Python values on read.
_JSON_COLUMNS = ("runtime", "recognizer", "labels", "recovery", "argv")
_BOOL_COLUMNS = ("output_pending", "auto_archive", "notify_on_finish")
TERMINAL_STATUSES = ("exited", "unknown")

#: How often the background checkpointer looks at the log, and after how many
#: transactions it is woken early (about 20 pages each for a command: ~1000 pages, SQLite's
#: own threshold).
CHECKPOINT_EVERY_S = 1.0
CHECKPOINT_COMMITS = 48
#: Log pages at which a commit checkpoints by itself all the same (SQLite's default: 1000).
CHECKPOINT_VALVE_PAGES = 4000


def _decode_row(row: sqlite3.Row) -> dict[str, Any]:
    return _decode_fields(dict(row))


def _sql_literal(text: str | None) -> Any:
    """A column's declared default (``PRAGMA table_info``) as the value SQLite stores."""
    if text is None or text.upper() == "NULL":
        return None
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("''", "'")
    try:
        return int(text)
    except ValueError:
        return float(text)


def _decode_fields(record: dict[str, Any]) -> dict[str, Any]:
    for column in _JSON_COLUMNS:
        if column in record and record[column] is not None:
            record[column] = json.loads(record[column])
    for column in _BOOL_COLUMNS:
        if column in record:
            record[column] = bool(record[column])
    return record


#: UPDATE ... RETURNING (SQLite 3.35): one statement instead of two where it exists.
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)

# json.dumps with options builds an encoder per call; these are built once (same output).
COMPACT_SORTED_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_PLAIN = json.JSONEncoder()


def _encode_value(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS and value is not None:
        return COMPACT_SORTED_JSON.encode(value)
    if column in _BOOL_COLUMNS:
        return int(bool(value))
    return value


class Catalog:
    """Access to one guardian's catalog file."""

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or Clock()
        # Execution updates the disk refused, shown by reads until written (write_kept).
        self._kept: dict[str, dict[str, Any]] = {}
        self.storage_error: BaseException | None = None
        self._checkpointer: _Checkpointer | None = None
        # Idempotency outcomes that ride along with the next commit (remember_result_soon).
        self._soon: dict[tuple[str, str], tuple[str, str, Any]] = {}
        # Execution updates that ride along with the next commit (stage_execution), shown by
        # reads at once; and who to tell once a commit has written some.
        self._staged: dict[str, dict[str, Any]] = {}
        self.on_staged_written: Callable[[], None] | None = None
        self._runs_agent: Callable[[str], bool] | None = None  # see list_executions
        self._db = sqlite3.connect(path, isolation_level=None, timeout=10.0)
        self._db.row_factory = sqlite3.Row
        path.chmod(0o600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._migrate()
        self._db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?), ('change_seq', 0)",
            (SCHEMA_VERSION,),
        )
        # Every column of an execution row with its default, in column order, as read.
        self._defaults = _decode_fields({
            str(column[1]): _sql_literal(column[4])
            for column in self._db.execute("PRAGMA table_info(executions)")
        })

    def _migrate(self) -> None:
        """Bring a catalog of an older schema up to this one, keeping every row.

        Schema 1 -> 2: the managed-agent columns (the new tables come from ``_SCHEMA``);
        then the thread columns added since. Schema 2 -> 3: the turn log, a new table only
        (``_SCHEMA`` creates it).
        Idempotent and safe when two processes open the same catalog at once.
        """
        with self.transaction():
            have = {row[1] for row in self._db.execute("PRAGMA table_info(executions)")}
            for name, decl in AGENT_COLUMNS:
                if name not in have:
                    self._db.execute(f"ALTER TABLE executions ADD COLUMN {name} {decl}")
            have = {row[1] for row in self._db.execute("PRAGMA table_info(threads)")}
            for name, decl in THREAD_COLUMNS:
                if name not in have:
                    self._db.execute(f"ALTER TABLE threads ADD COLUMN {name} {decl}")
            for statement in _INDEX_CHANGES:
                self._db.execute(statement)
            self._db.execute("UPDATE meta SET value = ? WHERE key = 'schema' AND value < ?",
                             (SCHEMA_VERSION, SCHEMA_VERSION))

    def checkpoint_in_background(self, every_s: float = CHECKPOINT_EVERY_S) -> None:
        """Copy the write-ahead log into the database from a thread of its own, instead of
        inside whichever commit crosses SQLite's threshold (a checkpoint syncs the disk
        twice: milliseconds, tens of them on a busy disk, once every few dozen commands).

        For the guardian, the catalog's one writer. Once it has committed
        :data:`CHECKPOINT_COMMITS` transactions, commits no longer checkpoint (unless the log
        outgrows :data:`CHECKPOINT_VALVE_PAGES`); the thread does, every ``every_s`` and
        after every :data:`CHECKPOINT_COMMITS` transactions, in PASSIVE mode (it never waits
        for, nor blocks, this connection's writes).
        """
        if self._checkpointer is None:
            self._checkpointer = _Checkpointer(self._db, self.path, every_s)

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection, for the agent store (``agent_store``) that shares it."""
        return self._db

    @staticmethod
    def decode(row: sqlite3.Row) -> dict[str, Any]:
        """A raw ``executions`` row as a record (JSON and boolean columns decoded)."""
        return _decode_row(row)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.write_waiting()
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        self._db.close()  # the last connection to close checkpoints what is left

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction (BEGIN IMMEDIATE: writers queue instead of failing).

        A failed COMMIT (a full disk) rolls back too, so the connection is never left inside
        a transaction that would make every later write fail. Re-entrant: inside an open
        transaction it joins it, so a lifecycle step (state, event row, notification,
        cascade) commits or rolls back as one. What waits for a commit (outcomes of
        :meth:`remember_result_soon`, updates of :meth:`stage_execution`) rides along.
        """
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN IMMEDIATE")
        staged: dict[str, dict[str, Any]] = {}
        try:
            yield
            riding = dict(self._soon)
            for (principal, key), row in riding.items():
                self._insert_result(principal, key, *row)
            staged, self._staged = self._staged, {}
            for execution_id, fields in staged.items():
                self._write_execution(execution_id, fields)
            self._db.execute("COMMIT")
            for ident, row in riding.items():  # written: unless replaced meanwhile
                if self._soon.get(ident) is row:
                    del self._soon[ident]
            if self._checkpointer is not None:
                self._checkpointer.committed()
        except BaseException:
            for execution_id, fields in staged.items():  # not written: they wait again
                self._staged[execution_id] = {**fields, **self._staged.get(execution_id, {})}
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise
        if staged and self.on_staged_written is not None:
            self.on_staged_written()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction: every read inside sees the same catalog state."""
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def _bump(self) -> int:
        if not _RETURNING:
            self._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'change_seq'")
            return self.change_seq()
        row = self._db.execute(
            "UPDATE meta SET value = value + 1 WHERE key = 'change_seq' RETURNING value"
        ).fetchone()
        return int(row[0])

    def change_seq(self) -> int:
        """The catalog-wide change counter (the ``catalog_cursor`` of Execution)."""
        row = self._db.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()
        return int(row[0])

    # -- threads -------------------------------------------------------------------------

    def create_thread(self, thread_id: str, principal: str, workspace_root: str) -> dict[str, Any]:
        self._db.execute(
            "INSERT INTO threads (thread_id, principal, workspace_root, created_unix_ms, cwd)"
            " VALUES (?, ?, ?, ?, ?)",
            (thread_id, principal, workspace_root, self.clock.now_ms(), workspace_root),
        )
        thread = self.get_thread(thread_id)
        assert thread is not None
        return thread

    def get_thread(self, thread_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT * FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        return None if row is None else dict(row)

    def update_thread(self, thread_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{name} = ?" for name in fields)
        self._db.execute(
            f"UPDATE threads SET {sets} WHERE thread_id = ?", (*fields.values(), thread_id)
        )

    def get_thread_mode(self, thread_id: str) -> dict[str, Any] | None:
        """The mode stored for a thread (R27), or None when it never changed from wcgw."""
        row = self._db.execute(
            "SELECT mode FROM thread_modes WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def set_thread_mode(self, thread_id: str, mode: dict[str, Any]) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO thread_modes VALUES (?, ?, ?)",
            (thread_id, json.dumps(mode, sort_keys=True), self.clock.now_ms()),
        )

    # -- executions ----------------------------------------------------------------------

    def insert_execution(self, record: dict[str, Any]) -> dict[str, Any]:
        """Insert a new record; stamps ``observed_at_unix_ms`` and ``change_seq``.

        Returns the record as a read would return it, built from the fields and the columns'
        defaults instead of read back (a query and a decode less on a command's way to its
        terminal); pass it as ``last_read`` to :meth:`write_execution_or_keep`.
        """
        with self.transaction():
            fields = dict(record)
            fields["observed_at_unix_ms"] = self.clock.now_ms()
            fields["change_seq"] = self._bump()
            columns = ", ".join(fields)
            marks = ", ".join("?" for _ in fields)
            stored = {k: _encode_value(k, v) for k, v in fields.items()}
            cursor = self._db.execute(
                f"INSERT INTO executions ({columns}) VALUES ({marks})", list(stored.values()))
        # As a read returns it: what was stored, decoded (JSON round-tripped, booleans).
        return {**self._defaults, **_decode_fields(stored), "seq": cursor.lastrowid}

    def update_execution_or_keep(self, execution_id: str, **fields: Any) -> bool:
        """:meth:`update_execution` that survives a failing disk: when the write fails, the
        fields are kept in memory, every read of this catalog object shows them, and
        :meth:`write_kept` writes them later. Returns whether they are on disk now."""
        return self._write_or_keep(execution_id, fields, whole=False, last_read=None)[0]

    def write_execution_or_keep(
        self, execution_id: str, *, last_read: dict[str, Any] | None = None, **fields: Any
    ) -> tuple[bool, dict[str, Any] | None]:
        """:meth:`update_execution_or_keep`, also returning the whole record as written
        (None when the write was kept for later, or there is no such record): an end
        reported right after it is written needs no read of its own.

        ``last_read``: the whole record as this process last wrote or read it (what
        :meth:`insert_execution` returned). While the stored ``change_seq`` still equals its
        own, nothing else has written the row since, and only the columns being written are
        read; otherwise the whole row is.
        """
        return self._write_or_keep(execution_id, fields, whole=True, last_read=last_read)

    def stage_execution(
        self, execution_id: str, *, last_read: dict[str, Any] | None, **fields: Any
    ) -> dict[str, Any] | None:
        """Update a record with this catalog's next commit instead of a commit of its own;
        returns the whole record as every read of this catalog object shows it from now on
        (None: no such record). ``last_read`` as for :meth:`write_execution_or_keep`.

        For an end answered before it is written: the commit that writes it comes later
        (with the final screen), off the reply's path. Until then the stored row
        is the one before, and so is ``change_seq`` (catalog cursors count persisted changes
        only); a guardian that dies meanwhile leaves it running, and the next guardian says
        its end is unknown, as for any execution it did not see end.
        """
        current = self._record_since(execution_id, last_read)
        if current is None:
            return None
        fields["observed_at_unix_ms"] = self.clock.now_ms()  # as the reply says, not later
        # A kept update (the disk refused it) is older: it goes out with this one, under it.
        self._staged[execution_id] = {**self._kept.pop(execution_id, {}),
                                      **self._staged.get(execution_id, {}), **fields}
        return self._overlay(current)

    def _record_since(
        self, execution_id: str, last_read: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The stored record: ``last_read`` itself while the stored ``change_seq`` still
        equals its own (nothing wrote the row since), else read whole; None: no such record."""
        if last_read is None:
            return self._stored_execution(execution_id)
        row = self._db.execute(
            "SELECT change_seq FROM executions WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        if row is None:
            return None
        return last_read if row[0] == last_read.get("change_seq") else self._stored_execution(
            execution_id)

    def _write_or_keep(
        self, execution_id: str, fields: dict[str, Any], *, whole: bool,
        last_read: dict[str, Any] | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        merged = {**self._kept.pop(execution_id, {}), **self._staged.pop(execution_id, {}),
                  **fields}
        try:
            current = self._write_execution(execution_id, merged, whole=whole,
                                            last_read=last_read)
        except (sqlite3.Error, OSError) as exc:
            self._kept[execution_id] = merged
            self.storage_error = exc
            return False, None
        return True, None if current is None or not whole else self._overlay(current)

    def write_kept(self) -> bool:
        """Try to write every kept and staged update; True when none is left."""
        for execution_id in list(self._kept):
            if not self.update_execution_or_keep(execution_id):
                return False
        try:
            self.write_waiting()
        except (sqlite3.Error, OSError) as exc:  # staged updates stay staged (reads show them)
            self.storage_error = exc
            return False
        self.storage_error = None
        return True

    @property
    def kept(self) -> int:
        """Updates waiting in memory for the disk."""
        return len(self._kept)

    def _overlay(self, record: dict[str, Any]) -> dict[str, Any]:
        kept = self._kept.get(record["execution_id"])
        staged = self._staged.get(record["execution_id"])
        if kept is None and staged is None:
            return record
        return {**record, **(kept or {}), **(staged or {})}

    def update_execution(self, execution_id: str, **fields: Any) -> dict[str, Any] | None:
        """Persist changed fields only; returns the record, or None when it does not exist.

        When no field differs from what is stored, nothing is written and neither
        ``observed_at_unix_ms`` nor ``change_seq`` moves.
        """
        current = self._write_execution(execution_id, fields)
        if current is None:
            return None
        return self.get_execution(execution_id)

    def _write_execution(
        self, execution_id: str, fields: dict[str, Any], *, whole: bool = False,
        last_read: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """The write of :meth:`update_execution`, without reading the record back; returns
        the stored fields it compared against (None: no such record), or with ``whole``
        the whole record as it is stored now (see :meth:`write_execution_or_keep`)."""
        with self.transaction():
            current = (self._record_since(execution_id, last_read) if whole
                       else self._stored_fields(execution_id, fields))
            if current is None:
                return None
            # observed_at moves only with another field (R16); a staged end brings its own.
            changed = {k: v for k, v in fields.items()
                       if k != "observed_at_unix_ms" and current.get(k) != v}
            if not changed:
                return current
            changed["observed_at_unix_ms"] = fields.get("observed_at_unix_ms") or self.clock.now_ms()
            changed["change_seq"] = self._bump()
            sets = ", ".join(f"{name} = ?" for name in changed)
            stored = {k: _encode_value(k, v) for k, v in changed.items()}
            self._db.execute(
                f"UPDATE executions SET {sets} WHERE execution_id = ?",
                [*stored.values(), execution_id],
            )
        return {**current, **_decode_fields(stored)} if whole else current

    def _stored_fields(self, execution_id: str, fields: dict[str, Any]) -> dict[str, Any] | None:
        """The stored values of ``fields`` only (an end writes ten columns; reading and
        decoding all forty of them was most of its cost)."""
        names = list(fields)  # an unknown column: SQLite says so
        row = self._db.execute(
            f"SELECT execution_id, {', '.join(names)} FROM executions WHERE execution_id = ?"
            if names else "SELECT execution_id FROM executions WHERE execution_id = ?",
            (execution_id,),
        ).fetchone()
        return None if row is None else _decode_row(row)

    def get_execution(self, execution_id: str) -> dict[str, Any] | None:
        record = self._stored_execution(execution_id)
        return None if record is None else self._overlay(record)

    def _stored_execution(self, execution_id: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT * FROM executions WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        return None if row is None else _decode_row(row)

    def output_figures(self, execution_id: str) -> tuple[int, int] | None:
        """``(output_start, output_end)`` of a record as reads show it (None: no record):
        where its journal's segments are (``shared/segments``)."""
        row = self._db.execute(
            "SELECT execution_id, output_start, output_end FROM executions"
            " WHERE execution_id = ?", (execution_id,)).fetchone()
        if row is None:
            return None
        record = self._overlay(dict(row))
        return int(record["output_start"]), int(record["output_end"])

    def get_executions(self, execution_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        marks = ", ".join("?" for _ in execution_ids)
        rows = self._db.execute(
            f"SELECT * FROM executions WHERE execution_id IN ({marks})", list(execution_ids)
        ).fetchall()
        return {row["execution_id"]: self._overlay(_decode_row(row)) for row in rows}

    def list_executions(
        self, thread_id: str, limit: int, kind: str | None = None, *,
        runs_agent: Callable[[str], bool] | None = None, before: int | None = None,
    ) -> list[dict[str, Any]]:
        """This thread's records, newest first.

        ``runs_agent``: only managed agents (kind ``agent``) and records whose command it
        accepts (an agent CLI typed as a command). The query filters before its LIMIT: kept
        after it, an agent behind ``limit`` newer commands was never listed. ``before``: only
        records older than that ``seq`` (the next page of a listing).
        """
        query = "SELECT * FROM executions WHERE thread_id = ?"
        args: list[Any] = [thread_id]
        if before is not None:
            query += " AND seq < ?"
            args.append(before)
        if kind is not None:
            query += " AND kind = ?"
            args.append(kind)
        if runs_agent is not None:
            if self._runs_agent is not runs_agent:
                self._db.create_function("tether_runs_agent", 1, runs_agent, deterministic=True)
                self._runs_agent = runs_agent
            query += " AND (kind = 'agent' OR tether_runs_agent(command))"
        rows = self._db.execute(query + " ORDER BY seq DESC LIMIT ?", [*args, limit]).fetchall()
        return [self._overlay(_decode_row(row)) for row in rows]

    def list_threads(self) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM threads ORDER BY created_unix_ms").fetchall()
        return [dict(row) for row in rows]

    def list_workspace_executions(self, limit: int) -> list[dict[str, Any]]:
        """Every thread's records, newest first (a person's ``tether ls``)."""
        rows = self._db.execute(
            "SELECT * FROM executions ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return [_decode_row(row) for row in rows]

    def count_executions(self) -> dict[str, int]:
        rows = self._db.execute("SELECT status, count(*) FROM executions GROUP BY status").fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def running_executions(self) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT * FROM executions WHERE status = 'running'").fetchall()
        return [_decode_row(row) for row in rows]

    def mark_lost(self, *, owner: str | None = None, except_owner: str | None = None) -> list[str]:
        """Every running record owned by ``owner`` (or by anyone but ``except_owner``) becomes
        ``unknown`` with reason ``guardian_lost`` and no exit code (R12, R13)."""
        with self.transaction():
            if owner is not None:
                rows = self._db.execute(
                    "SELECT execution_id FROM executions WHERE status = 'running'"
                    " AND guardian_instance_id = ?",
                    (owner,),
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT execution_id FROM executions WHERE status = 'running'"
                    " AND guardian_instance_id != ?",
                    (except_owner or "",),
                ).fetchall()
            ids = [row[0] for row in rows]
            now = self.clock.now_ms()
            for execution_id in ids:
                self._db.execute(
                    "UPDATE executions SET status = 'unknown', exit_code = NULL,"
                    " reason = 'guardian_lost', terminal_unix_ms = ?, observed_at_unix_ms = ?,"
                    " change_seq = ? WHERE execution_id = ?",
                    (now, now, self._bump(), execution_id),
                )
        return ids

    def changed_since(self, execution_ids: Sequence[str], after: int) -> list[dict[str, Any]]:
        marks = ", ".join("?" for _ in execution_ids)
        rows = self._db.execute(
            f"SELECT * FROM executions WHERE execution_id IN ({marks}) AND change_seq > ?"
            " ORDER BY change_seq",
            [*execution_ids, after],
        ).fetchall()
        return [_decode_row(row) for row in rows]

    def delete_executions(self, execution_ids: Sequence[str]) -> None:
        if not execution_ids:
            return
        marks = ", ".join("?" for _ in execution_ids)
        with self.transaction():
            self._db.execute(
                f"DELETE FROM executions WHERE execution_id IN ({marks})", list(execution_ids)
            )
            for table in ("receipts", "person_events", "execution_events",
                          "agent_events", "turns"):
                self._db.execute(
                    f"DELETE FROM {table} WHERE execution_id IN ({marks})", list(execution_ids)
                )
            self._bump()

    def thread_records_for_pruning(self, thread_id: str) -> list[dict[str, Any]]:
        """Oldest first: what retention looks at (``screen_bytes`` in UTF-8 bytes: length()
        of text counts characters, a third of the bytes of a screen of box drawing)."""
        rows = self._db.execute(
            "SELECT execution_id, status, kind, archived_at, terminal_unix_ms, output_start, output_end,"
            " length(CAST(coalesce(screen_text, '') AS BLOB)) AS screen_bytes FROM executions"
            " WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        return [dict(row) for row in rows]

    def records_for_expiry(self, after_seq: int, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` records of any thread after ``after_seq``, oldest first, with what
        the expiry sweep looks at (``seq`` to go on from)."""
        rows = self._db.execute(
            # archived_at lies past the long columns (command, screen): read for agents only.
            "SELECT seq, execution_id, status, kind, terminal_unix_ms, output_start, output_end,"
            " CASE WHEN kind = 'agent' THEN archived_at END AS archived_at FROM executions"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (after_seq, count),
        ).fetchall()
        return [dict(row) for row in rows]

    # -- prompt receipts (R21, R22) ------------------------------------------------------

    def get_receipt(self, execution_id: str, prompt_id: str) -> tuple[str, dict[str, Any]] | None:
        """``(payload_sha256, receipt)`` stored for a prompt id on an execution, or None."""
        row = self._db.execute(
            "SELECT payload_sha256, receipt FROM receipts WHERE execution_id = ? AND prompt_id = ?",
            (execution_id, prompt_id),
        ).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def count_receipts(self, execution_id: str, generation: int) -> int:
        row = self._db.execute(
            "SELECT count(*) FROM receipts WHERE execution_id = ? AND generation = ?",
            (execution_id, generation),
        ).fetchone()
        return int(row[0])

    def put_receipt(
        self, execution_id: str, prompt_id: str, generation: int, payload_sha256: str,
        receipt: dict[str, Any],
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO receipts VALUES (?, ?, ?, ?, ?, ?)",
            (execution_id, prompt_id, generation, payload_sha256, json.dumps(receipt),
             self.clock.now_ms()),
        )

    def receipts_containing(self, text: str) -> list[tuple[str, str, dict[str, Any]]]:
        """``(execution_id, prompt_id, receipt)`` of each receipt whose stored JSON contains
        ``text``: a cheap first cut over the whole table, which the caller refines."""
        rows = self._db.execute(
            "SELECT execution_id, prompt_id, receipt FROM receipts WHERE instr(receipt, ?) > 0",
            (text,),
        ).fetchall()
        return [(row[0], row[1], json.loads(row[2])) for row in rows]

    def replace_receipt(self, execution_id: str, prompt_id: str, receipt: dict[str, Any]) -> None:
        """Rewrite a stored receipt, keeping its payload digest, generation and creation time."""
        self._db.execute(
            "UPDATE receipts SET receipt = ? WHERE execution_id = ? AND prompt_id = ?",
            (json.dumps(receipt), execution_id, prompt_id),
        )

    def list_receipts(self, execution_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT receipt FROM receipts WHERE execution_id = ? ORDER BY created_unix_ms",
            (execution_id,),
        ).fetchall()
        return [json.loads(row[0]) for row in rows]

    # -- events a person caused, and the agents' own events ------------------------------

    def add_person_event(self, execution_id: str, kind: str, attach_id: str) -> bool:
        """Record once per attach session that a person did ``kind``; True when new."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO person_events (execution_id, kind, attach_id, at_unix_ms)"
            " VALUES (?, ?, ?, ?)",
            (execution_id, kind, attach_id, self.clock.now_ms()),
        )
        return cursor.rowcount > 0

    def person_events(self, execution_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT seq, kind, attach_id, at_unix_ms FROM person_events WHERE execution_id = ?"
            " ORDER BY seq",
            (execution_id,),
        ).fetchall()
        return [dict(row) for row in rows]

    def add_execution_event(self, execution_id: str, kind: str, detail: str) -> None:
        """Something observed about an execution that changed nothing (an ignored marker)."""
        self._db.execute(
            "INSERT INTO execution_events (execution_id, kind, detail, at_unix_ms)"
            " VALUES (?, ?, ?, ?)",
            (execution_id, kind, detail, self.clock.now_ms()),
        )

    def execution_events(self, execution_id: str) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT kind, detail, at_unix_ms FROM execution_events WHERE execution_id = ?"
            " ORDER BY seq",
            (execution_id,),
        ).fetchall()
        return [dict(row) for row in rows]

    def agent_events(self, execution_id: str) -> list[dict[str, Any]]:
        """Rows of the managed-agent event table (R23) for one execution, whatever its
        columns; empty when this catalog has no such table yet."""
        exists = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agent_events'"
        ).fetchone()
        if exists is None:
            return []
        rows = self._db.execute(
            "SELECT * FROM agent_events WHERE execution_id = ? ORDER BY rowid", (execution_id,)
        ).fetchall()
        return [dict(row) for row in rows]

    # -- idempotency ---------------------------------------------------------------------

    def idempotent_result(self, principal: str, key: str) -> tuple[str, str, Any] | None:
        """``(method, fingerprint, result)`` stored for a key (or waiting for the next commit),
        or None."""
        soon = self._soon.get((principal, key))
        if soon is not None:
            return soon
        row = self._db.execute(
            "SELECT method, fingerprint, result FROM idempotency WHERE principal = ? AND key = ?",
            (principal, key),
        ).fetchone()
        if row is None:
            return None
        return row[0], row[1], json.loads(row[2])

    def remember_result(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        """Write a key's row now (in the open transaction, if any)."""
        self._soon.pop((principal, key), None)
        self._insert_result(principal, key, method, fingerprint, result)

    def remember_result_soon(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        """Write a key's row with the next commit of this catalog instead of a commit of its
        own (an ended command's record is written a moment later: the same commit).

        Reads of this catalog object see it at once. Until it is written the stored row is
        the one before (``delivering``): a guardian that dies meanwhile leaves a key whose
        repeat is ``delivery_unknown``. :meth:`write_waiting` writes it without waiting.
        """
        self._soon[(principal, key)] = (method, fingerprint, result)

    def write_waiting(self) -> None:
        """Write what waits for a commit (outcomes, staged updates), in one (raises as a
        commit does)."""
        if self._soon or self._staged:
            with self.transaction():
                pass  # the commit writes them

    def _insert_result(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?)",
            (principal, key, method, fingerprint, _PLAIN.encode(result), self.clock.now_ms()),
        )

    def forget_results_before(self, unix_ms: int) -> None:
        self._db.execute("DELETE FROM idempotency WHERE created_unix_ms < ?", (unix_ms,))


class _Checkpointer:
    """A thread with a connection of its own that runs PASSIVE checkpoints.

    SQLite's calls release the GIL, so the syncs happen beside the event loop. Failures (a
    full disk) are logged and tried again at the next turn; the log keeps every commit
    meanwhile, so nothing is lost, it only grows.
    """

    def __init__(self, writer: sqlite3.Connection, path: Path, every_s: float) -> None:
        self._writer = writer
        self._path = path
        self._every_s = every_s
        self._wake = threading.Event()
        self._stopping = False
        self._commits = 0
        # Started at the first CHECKPOINT_COMMITS transactions: an idle guardian (SPEC §11
        # resident memory) keeps SQLite's own checkpoints and no thread.
        self._thread: threading.Thread | None = None

    def committed(self) -> None:
        """A transaction was committed (called by the writer)."""
        self._commits += 1
        if self._commits < CHECKPOINT_COMMITS:
            return
        self._commits = 0
        if self._thread is None:
            # From now on commits do not checkpoint, except as a safety valve: should the
            # thread never catch up with a flood of writes (the log restarts only once it is
            # wholly copied when a write begins), a commit checkpoints once the log is this
            # long.
            self._writer.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_VALVE_PAGES}")
            self._thread = threading.Thread(target=self._run, name="catalog-checkpoint",
                                            daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            db = sqlite3.connect(self._path, isolation_level=None, timeout=10.0)
        except sqlite3.Error as exc:
            log.warning("catalog checkpointer could not open %s: %s", self._path, exc)
            return
        try:
            db.execute("PRAGMA cache_size=-256")  # it only copies pages: little cache
            failing = False
            while not self._stopping:
                self._wake.wait(self._every_s)
                self._wake.clear()
                if self._stopping:
                    break
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error as exc:
                    if not failing:  # once per failing spell, not once a second
                        log.warning("catalog checkpoint failed (tried again every %gs): %s",
                                    self._every_s, exc)
                    failing = True
                else:
                    if failing:
                        log.info("catalog checkpoints work again")
                    failing = False
        finally:
            db.close()


def peek_thread(path: Path, thread_id: str, *, left_behind: bool = False) -> dict[str, Any] | None:
    """A thread's row read straight from a catalog file, read-only, without a guardian.

    For checks that must not start anything (a thread id that no catalog knows cannot be
    served). ``None`` when there is no catalog or no such thread; an unreadable catalog
    raises ``sqlite3.Error`` so that callers can leave the decision to the guardian.

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
        thread = dict(row)
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


def peek_workspace(path: Path, limit: int) -> dict[str, Any] | None:
    """Every thread, the newest ``limit`` records of the workspace and the count of records
    per status, read from the catalog of a guardian that is gone as they are on disk (what
    ``workspace.list`` answers, in the same order: threads oldest first, records newest
    first), with ``catalog_cursor``. ``None`` when there is no catalog; an unreadable one
    raises ``sqlite3.Error``."""
    if not path.exists():
        return None
    db = open_left_behind(path)
    try:
        db.execute("BEGIN")  # one snapshot for all three reads
        threads = [dict(row) for row in db.execute(
            "SELECT * FROM threads ORDER BY created_unix_ms")]
        records = [_decode_row(row) for row in db.execute(
            "SELECT * FROM executions ORDER BY seq DESC LIMIT ?", (limit,))]
        counts = {str(row[0]): int(row[1]) for row in db.execute(
            "SELECT status, count(*) FROM executions GROUP BY status")}
        cursor = db.execute("SELECT value FROM meta WHERE key = 'change_seq'").fetchone()
        return {"threads": threads, "executions": records, "counts": counts,
                "catalog_cursor": int(cursor[0]) if cursor else 0}
    finally:
        db.close()


def peek_execution(path: Path, execution_id: str) -> dict[str, Any] | None:
    """An execution's record with its thread, prompt receipts, and agent and person events,
    read straight from a catalog file, read-only, without a guardian: what ``tether show``
    tells about a record whose guardian is gone. ``None`` when there is no catalog or no
    such record; an unreadable catalog raises ``sqlite3.Error``."""
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
        found: dict[str, Any] = {
            "execution": _decode_row(row), "thread": None if thread is None else dict(thread),
            "receipts": [json.loads(r[0]) for r in db.execute(
                "SELECT receipt FROM receipts WHERE execution_id = ? ORDER BY created_unix_ms",
                (execution_id,))],
            "person_events": [dict(r) for r in db.execute(
                "SELECT seq, kind, attach_id, at_unix_ms FROM person_events"
                " WHERE execution_id = ? ORDER BY seq", (execution_id,))],
        }
        try:
            found["agent_events"] = [dict(r) for r in db.execute(
                "SELECT * FROM agent_events WHERE execution_id = ? ORDER BY rowid",
                (execution_id,))]
        except sqlite3.OperationalError:  # a catalog written before managed agents
            found["agent_events"] = []
        return found
    finally:
        db.close()
