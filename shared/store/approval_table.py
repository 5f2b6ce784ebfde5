"""Approvals and the operator hook's notices (docs/tools.md#approvals): the ``approvals`` and
``notices`` tables.

An approval row keeps the whole record as JSON (what ``Agent.approvals`` returns) next to the
columns it is looked up by; ``pending`` is 1 until the record is resolved. Each execution
keeps its newest :data:`MAX_APPROVALS_PER_EXECUTION` (the oldest resolved ones go first);
rows go with their execution record.

A ``notices`` row is one notice for the operator hook (``TETHER_NOTIFY_COMMAND``), written in
the same transaction as the approval or agent transition it tells of; its ``hook`` column says
where the hook's run of it stands: ``pending``, ``started`` (a guardian that dies then leaves
it, and the next one says ``unknown``: the hook is never run twice for a notice), ``ok``,
``failed``, ``timed_out``.
"""

from __future__ import annotations

import json
from typing import Any

from tether.protocol.limits import MAX_APPROVALS_PER_EXECUTION
from tether.shared.store.core import CatalogCore

#: Notices kept once the hook is done with them (the newest first).
MAX_DONE_NOTICES = 256


class ApprovalsTable(CatalogCore):
    """Approval records and hook notices over a guardian's catalog."""

    # -- approvals -------------------------------------------------------------------------

    def put_approval(self, record: dict[str, Any], owner: str) -> None:
        """Insert or rewrite one approval (``owner``: the guardian instance watching it)."""
        pending = 1 if record["status"] == "pending" else 0
        with self.transaction():
            updated = self._db.execute(
                "UPDATE approvals SET pending = ?, record = ?, guardian_instance_id = ?"
                " WHERE approval_id = ?",
                (pending, json.dumps(record), owner, record["approval_id"])).rowcount
            if updated:
                return
            self._db.execute(
                "INSERT INTO approvals (approval_id, execution_id, generation, principal,"
                " workspace_root, parent_execution_id, guardian_instance_id, pending, record,"
                " created_unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record["approval_id"], record["execution_id"], record["generation"],
                 record["principal"], record["workspace_root"], record.get("parent_execution_id"),
                 owner, pending, json.dumps(record), record["created_at_unix_ms"]))
            # Bounded per execution: the oldest resolved records make room.
            self._db.execute(
                "DELETE FROM approvals WHERE execution_id = ? AND pending = 0 AND seq <= (SELECT"
                " seq FROM approvals WHERE execution_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (record["execution_id"], record["execution_id"], MAX_APPROVALS_PER_EXECUTION))

    def get_approval(self, approval_id: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT record FROM approvals WHERE approval_id = ?",
                               (approval_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def list_approvals(
        self, principal: str, workspace_root: str, *, parent: str | None = None,
        execution_id: str | None = None, pending_only: bool = True, limit: int = 50,
    ) -> list[dict[str, Any]]:
        """The workspace's approvals, newest first."""
        query = "SELECT record FROM approvals WHERE principal = ? AND workspace_root = ?"
        args: list[Any] = [principal, workspace_root]
        if parent is not None:
            query += " AND parent_execution_id = ?"
            args.append(parent)
        if execution_id is not None:
            query += " AND execution_id = ?"
            args.append(execution_id)
        if pending_only:
            query += " AND pending = 1"
        rows = self._db.execute(query + " ORDER BY seq DESC LIMIT ?", [*args, limit]).fetchall()
        return [dict(json.loads(row[0])) for row in rows]

    def pending_approvals(self, *, except_owner: str | None = None) -> list[dict[str, Any]]:
        """Every pending approval (of guardians other than ``except_owner``), oldest first."""
        query, args = "SELECT record FROM approvals WHERE pending = 1", []
        if except_owner is not None:
            query += " AND guardian_instance_id != ?"
            args.append(except_owner)
        rows = self._db.execute(query + " ORDER BY seq", args).fetchall()
        return [dict(json.loads(row[0])) for row in rows]

    def latest_pending_approval(self, execution_id: str) -> str | None:
        """The id of the newest pending approval of an execution."""
        row = self._db.execute(
            "SELECT approval_id FROM approvals WHERE execution_id = ? AND pending = 1"
            " ORDER BY seq DESC LIMIT 1", (execution_id,)).fetchone()
        return None if row is None else str(row[0])

    # -- the operator hook's notices -------------------------------------------------------

    def add_notice(self, kind: str, payload: dict[str, Any]) -> int:
        cursor = self._db.execute(
            "INSERT INTO notices (kind, payload, hook, created_unix_ms) VALUES (?, ?, 'pending', ?)",
            (kind, json.dumps(payload), self.clock.now_ms()))
        return int(cursor.lastrowid or 0)

    def pending_notices(self, limit: int = 16) -> list[tuple[int, dict[str, Any]]]:
        rows = self._db.execute(
            "SELECT id, payload FROM notices WHERE hook = 'pending' ORDER BY id LIMIT ?",
            (limit,)).fetchall()
        return [(int(row[0]), dict(json.loads(row[1]))) for row in rows]

    def set_notice_hook(self, notice_id: int, state: str, detail: str | None = None) -> None:
        with self.transaction():
            self._db.execute("UPDATE notices SET hook = ?, detail = ? WHERE id = ?",
                             (state, detail, notice_id))
            if state not in ("pending", "started"):
                self._db.execute(
                    "DELETE FROM notices WHERE hook NOT IN ('pending', 'started') AND id <= (SELECT"
                    " id FROM notices WHERE hook NOT IN ('pending', 'started') ORDER BY id DESC"
                    " LIMIT 1 OFFSET ?)", (MAX_DONE_NOTICES,))

    def notice_hooks(self) -> list[tuple[int, str, str, str | None]]:
        """``(id, kind, hook state, detail)`` of every notice kept, oldest first."""
        rows = self._db.execute("SELECT id, kind, hook, detail FROM notices ORDER BY id").fetchall()
        return [(int(row[0]), str(row[1]), str(row[2]), row[3]) for row in rows]

    def notices_lost(self) -> int:
        """A hook run that a dead guardian had started is ``unknown`` (never run again)."""
        with self.transaction():
            return int(self._db.execute(
                "UPDATE notices SET hook = 'unknown', detail = 'guardian_lost' WHERE hook = 'started'"
            ).rowcount)
