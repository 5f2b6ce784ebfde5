"""What every table family of the catalog stands on: the connection, its transactions, and
the catalog-wide change counter.

The guardian is the catalog's one writer: opening a ``CatalogCore`` creates the file (0600),
brings an older schema up to this one and starts writing. Whoever has no live guardian
reads through ``view`` instead, which writes nothing.

Every persisted change to an execution bumps the catalog-wide ``change_seq`` and stamps the
record's ``observed_at_unix_ms``; an update that changes nothing writes nothing, so
``observed_at_unix_ms`` is never a heartbeat (docs/tools.md#records). ``change_seq`` doubles as the catalog
cursor that ``Execution.wait`` watches.
"""

from __future__ import annotations

import contextlib
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tether.shared.clock import Clock
from tether.shared.store.checkpointer import CHECKPOINT_EVERY_S, Checkpointer
from tether.shared.store.rows import (
    RETURNING,
    ExecutionRow,
    StoredResult,
    decode_fields,
    decode_row,
    sql_literal,
)
from tether.shared.store.schema import (
    AGENT_COLUMNS,
    INDEX_CHANGES,
    NOTIFICATION_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    THREAD_COLUMNS,
)


class CatalogCore(ABC):
    """One guardian's catalog file, opened for writing; the families (``catalog.Catalog``)
    add their tables' reads and writes."""

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or Clock()
        # Execution updates the disk refused, shown by reads until written (write_kept).
        self._kept: dict[str, dict[str, Any]] = {}
        self.storage_error: BaseException | None = None
        self._checkpointer: Checkpointer | None = None
        # Idempotency outcomes that ride along with the next commit (remember_result_soon).
        self._soon: dict[tuple[str, str], StoredResult] = {}
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
        self._db.executescript(SCHEMA)
        self._migrate()
        self._db.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?), ('change_seq', 0)",
            (SCHEMA_VERSION,),
        )
        # Every column of an execution row with its default, in column order, as read.
        self._defaults = decode_fields({
            str(column[1]): sql_literal(column[4])
            for column in self._db.execute("PRAGMA table_info(executions)")
        })

    def _migrate(self) -> None:
        """Bring a catalog of an older schema up to this one, keeping every row.

        Schema 1 -> 2: the managed-agent columns (the new tables come from ``_SCHEMA``);
        then the thread columns added since. Schema 2 -> 3: the turn log, a new table only
        (``SCHEMA`` creates it). Schema 3 -> 4: approvals and notices (new tables) and the
        notifications' approval column.
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
            have = {row[1] for row in self._db.execute("PRAGMA table_info(notifications)")}
            for name, decl in NOTIFICATION_COLUMNS:
                if name not in have:
                    self._db.execute(f"ALTER TABLE notifications ADD COLUMN {name} {decl}")
            for statement in INDEX_CHANGES:
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
            self._checkpointer = Checkpointer(self._db, self.path, every_s)

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection, for the agents family (``agents.AgentStore``) that shares it."""
        return self._db

    @staticmethod
    def decode(row: sqlite3.Row) -> ExecutionRow:
        """A raw ``executions`` row as a record (JSON and boolean columns decoded)."""
        return decode_row(row)

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
        if not RETURNING:
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
    def write_waiting(self) -> None:
        """Write what waits for a commit (outcomes, staged updates), in one (raises as a
        commit does)."""
        if self._soon or self._staged:
            with self.transaction():
                pass  # the commit writes them

    # -- what the families write with each commit (see transaction) -------------------------

    @abstractmethod
    def _insert_result(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        """Write an idempotency outcome (``idempotency_table.IdempotencyTable``)."""

    @abstractmethod
    def _write_execution(
        self, execution_id: str, fields: dict[str, Any], *, whole: bool = False,
        last_read: ExecutionRow | None = None,
    ) -> ExecutionRow | None:
        """Write an execution's fields (``execution_table.ExecutionsTable``)."""
