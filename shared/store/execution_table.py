"""Execution records: the ``executions`` table, and what waits to be written to it.

A command's path writes its record in particular ways (see ``guardian/runtime/finish.py``):
an end answered before it is written is *staged* and rides along with the next commit; an
update the disk refused is *kept* in memory and shown by every read until written. Reads of
this catalog object overlay both on what is stored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, cast

from tether.shared.store.core import CatalogCore
from tether.shared.store.rows import (
    ExecutionRow,
    ExpiryRow,
    OutputFigures,
    PruningRow,
    decode_fields,
    decode_row,
    encode_value,
)


class ExecutionsTable(CatalogCore):
    """An execution's record: inserted, updated (changed fields only), staged, kept, listed,
    reconciled and pruned."""

    def insert_execution(self, record: dict[str, Any]) -> ExecutionRow:
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
            stored = {k: encode_value(k, v) for k, v in fields.items()}
            cursor = self._db.execute(
                f"INSERT INTO executions ({columns}) VALUES ({marks})", list(stored.values()))
        # As a read returns it: what was stored, decoded (JSON round-tripped, booleans).
        return {**self._defaults, **decode_fields(stored), "seq": cursor.lastrowid}

    def update_execution_or_keep(self, execution_id: str, **fields: Any) -> bool:
        """:meth:`update_execution` that survives a failing disk: when the write fails, the
        fields are kept in memory, every read of this catalog object shows them, and
        :meth:`write_kept` writes them later. Returns whether they are on disk now."""
        return self._write_or_keep(execution_id, fields, whole=False, last_read=None)[0]

    def write_execution_or_keep(
        self, execution_id: str, *, last_read: ExecutionRow | None = None, **fields: Any
    ) -> tuple[bool, ExecutionRow | None]:
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
        self, execution_id: str, *, last_read: ExecutionRow | None, **fields: Any
    ) -> ExecutionRow | None:
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
        self, execution_id: str, last_read: ExecutionRow | None
    ) -> ExecutionRow | None:
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
        last_read: ExecutionRow | None,
    ) -> tuple[bool, ExecutionRow | None]:
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

    def _overlay(self, record: ExecutionRow) -> ExecutionRow:
        kept = self._kept.get(record["execution_id"])
        staged = self._staged.get(record["execution_id"])
        if kept is None and staged is None:
            return record
        return {**record, **(kept or {}), **(staged or {})}

    def update_execution(self, execution_id: str, **fields: Any) -> ExecutionRow | None:
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
        last_read: ExecutionRow | None = None,
    ) -> ExecutionRow | None:
        """The write of :meth:`update_execution`, without reading the record back; returns
        the stored fields it compared against (None: no such record), or with ``whole``
        the whole record as it is stored now (see :meth:`write_execution_or_keep`)."""
        with self.transaction():
            current = (self._record_since(execution_id, last_read) if whole
                       else self._stored_fields(execution_id, fields))
            if current is None:
                return None
            # observed_at moves only with another field (docs/tools.md#records); a staged end brings its own.
            changed = {k: v for k, v in fields.items()
                       if k != "observed_at_unix_ms" and current.get(k) != v}
            if not changed:
                return current
            changed["observed_at_unix_ms"] = fields.get("observed_at_unix_ms") or self.clock.now_ms()
            changed["change_seq"] = self._bump()
            sets = ", ".join(f"{name} = ?" for name in changed)
            stored = {k: encode_value(k, v) for k, v in changed.items()}
            self._db.execute(
                f"UPDATE executions SET {sets} WHERE execution_id = ?",
                [*stored.values(), execution_id],
            )
        return {**current, **decode_fields(stored)} if whole else current

    def _stored_fields(self, execution_id: str, fields: dict[str, Any]) -> ExecutionRow | None:
        """The stored values of ``fields`` only (an end writes ten columns; reading and
        decoding all forty of them was most of its cost)."""
        names = list(fields)  # an unknown column: SQLite says so
        row = self._db.execute(
            f"SELECT execution_id, {', '.join(names)} FROM executions WHERE execution_id = ?"
            if names else "SELECT execution_id FROM executions WHERE execution_id = ?",
            (execution_id,),
        ).fetchone()
        return None if row is None else decode_row(row)

    def get_execution(self, execution_id: str) -> ExecutionRow | None:
        record = self._stored_execution(execution_id)
        return None if record is None else self._overlay(record)

    def _stored_execution(self, execution_id: str) -> ExecutionRow | None:
        row = self._db.execute(
            "SELECT * FROM executions WHERE execution_id = ?", (execution_id,)
        ).fetchone()
        return None if row is None else decode_row(row)

    def output_figures(self, execution_id: str) -> OutputFigures | None:
        """``(output_start, output_end)`` of a record as reads show it (None: no record):
        where its journal's segments are (``shared/segments``)."""
        row = self._db.execute(
            "SELECT execution_id, output_start, output_end FROM executions"
            " WHERE execution_id = ?", (execution_id,)).fetchone()
        if row is None:
            return None
        record = self._overlay(dict(row))
        return int(record["output_start"]), int(record["output_end"])

    def get_executions(self, execution_ids: Sequence[str]) -> dict[str, ExecutionRow]:
        marks = ", ".join("?" for _ in execution_ids)
        rows = self._db.execute(
            f"SELECT * FROM executions WHERE execution_id IN ({marks})", list(execution_ids)
        ).fetchall()
        return {row["execution_id"]: self._overlay(decode_row(row)) for row in rows}

    def list_executions(
        self, thread_id: str, limit: int, kind: str | None = None, *,
        runs_agent: Callable[[str], bool] | None = None, before: int | None = None,
    ) -> list[ExecutionRow]:
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
        return [self._overlay(decode_row(row)) for row in rows]

    def list_workspace_executions(self, limit: int) -> list[ExecutionRow]:
        """Every thread's records, newest first (a person's ``tether ls``)."""
        rows = self._db.execute(
            "SELECT * FROM executions ORDER BY seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return [decode_row(row) for row in rows]

    def count_executions(self) -> dict[str, int]:
        rows = self._db.execute("SELECT status, count(*) FROM executions GROUP BY status").fetchall()
        return {str(row[0]): int(row[1]) for row in rows}

    def running_executions(self) -> list[ExecutionRow]:
        rows = self._db.execute("SELECT * FROM executions WHERE status = 'running'").fetchall()
        return [decode_row(row) for row in rows]

    def mark_lost(self, *, owner: str | None = None, except_owner: str | None = None) -> list[str]:
        """Every running record owned by ``owner`` (or by anyone but ``except_owner``) becomes
        ``unknown`` with reason ``guardian_lost`` and no exit code
        (docs/protocol.md#finding-a-guardian-and-recovery, docs/tools.md#unknown-is-not-success)."""
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

    def changed_since(self, execution_ids: Sequence[str], after: int) -> list[ExecutionRow]:
        marks = ", ".join("?" for _ in execution_ids)
        rows = self._db.execute(
            f"SELECT * FROM executions WHERE execution_id IN ({marks}) AND change_seq > ?"
            " ORDER BY change_seq",
            [*execution_ids, after],
        ).fetchall()
        return [decode_row(row) for row in rows]

    def delete_executions(self, execution_ids: Sequence[str]) -> None:
        if not execution_ids:
            return
        marks = ", ".join("?" for _ in execution_ids)
        with self.transaction():
            self._db.execute(
                f"DELETE FROM executions WHERE execution_id IN ({marks})", list(execution_ids)
            )
            for table in ("receipts", "person_events", "execution_events",
                          "agent_events", "turns", "approvals"):
                self._db.execute(
                    f"DELETE FROM {table} WHERE execution_id IN ({marks})", list(execution_ids)
                )
            self._bump()

    def thread_records_for_pruning(self, thread_id: str) -> list[PruningRow]:
        """Oldest first: what retention looks at (``screen_bytes`` in UTF-8 bytes: length()
        of text counts characters, a third of the bytes of a screen of box drawing)."""
        rows = self._db.execute(
            "SELECT execution_id, status, kind, archived_at, terminal_unix_ms, output_start, output_end,"
            " length(CAST(coalesce(screen_text, '') AS BLOB)) AS screen_bytes FROM executions"
            " WHERE thread_id = ? ORDER BY seq",
            (thread_id,),
        ).fetchall()
        return [cast(PruningRow, dict(row)) for row in rows]

    def records_for_expiry(self, after_seq: int, count: int) -> list[ExpiryRow]:
        """Up to ``count`` records of any thread after ``after_seq``, oldest first, with what
        the expiry sweep looks at (``seq`` to go on from)."""
        rows = self._db.execute(
            # archived_at lies past the long columns (command, screen): read for agents only.
            "SELECT seq, execution_id, status, kind, terminal_unix_ms, output_start, output_end,"
            " CASE WHEN kind = 'agent' THEN archived_at END AS archived_at FROM executions"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (after_seq, count),
        ).fetchall()
        return [cast(ExpiryRow, dict(row)) for row in rows]
