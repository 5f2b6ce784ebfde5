"""What happened to an execution besides its record: events a person caused
(``person_events``), things observed that changed nothing (``execution_events``), and the
reading of a managed agent's transitions (``agent_events``, written by ``agents``)."""

from __future__ import annotations

from typing import cast

from tether.shared.store.core import CatalogCore
from tether.shared.store.rows import AgentEventRow, ExecutionEventRow, PersonEventRow


class EventsTable(CatalogCore):
    """An execution's person, observed and agent events."""

    def add_person_event(self, execution_id: str, kind: str, attach_id: str) -> bool:
        """Record once per attach session that a person did ``kind``; True when new."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO person_events (execution_id, kind, attach_id, at_unix_ms)"
            " VALUES (?, ?, ?, ?)",
            (execution_id, kind, attach_id, self.clock.now_ms()),
        )
        return cursor.rowcount > 0

    def person_events(self, execution_id: str) -> list[PersonEventRow]:
        rows = self._db.execute(
            "SELECT seq, kind, attach_id, at_unix_ms FROM person_events WHERE execution_id = ?"
            " ORDER BY seq",
            (execution_id,),
        ).fetchall()
        return [cast(PersonEventRow, dict(row)) for row in rows]

    def add_execution_event(self, execution_id: str, kind: str, detail: str) -> None:
        """Something observed about an execution that changed nothing (an ignored marker)."""
        self._db.execute(
            "INSERT INTO execution_events (execution_id, kind, detail, at_unix_ms)"
            " VALUES (?, ?, ?, ?)",
            (execution_id, kind, detail, self.clock.now_ms()),
        )

    def execution_events(self, execution_id: str) -> list[ExecutionEventRow]:
        rows = self._db.execute(
            "SELECT kind, detail, at_unix_ms FROM execution_events WHERE execution_id = ?"
            " ORDER BY seq",
            (execution_id,),
        ).fetchall()
        return [cast(ExecutionEventRow, dict(row)) for row in rows]

    def agent_events(self, execution_id: str) -> list[AgentEventRow]:
        """Rows of the managed-agent event table (docs/tools.md#agent-states) for one execution, whatever its
        columns; empty when this catalog has no such table yet."""
        exists = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agent_events'"
        ).fetchone()
        if exists is None:
            return []
        rows = self._db.execute(
            "SELECT * FROM agent_events WHERE execution_id = ? ORDER BY rowid", (execution_id,)
        ).fetchall()
        return [cast(AgentEventRow, dict(row)) for row in rows]
