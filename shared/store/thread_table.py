"""Threads and their modes: the ``threads`` and ``thread_modes`` tables."""

from __future__ import annotations

import json
from typing import Any, cast

from tether.shared.store.core import CatalogCore
from tether.shared.store.rows import StoredMode, ThreadRow


class ThreadsTable(CatalogCore):
    """A thread's row (its main shell, generation, cwd) and its mode (docs/security.md#profiles-and-modes)."""

    def create_thread(self, thread_id: str, principal: str, workspace_root: str) -> ThreadRow:
        self._db.execute(
            "INSERT INTO threads (thread_id, principal, workspace_root, created_unix_ms, cwd)"
            " VALUES (?, ?, ?, ?, ?)",
            (thread_id, principal, workspace_root, self.clock.now_ms(), workspace_root),
        )
        thread = self.get_thread(thread_id)
        assert thread is not None
        return thread

    def get_thread(self, thread_id: str) -> ThreadRow | None:
        row = self._db.execute("SELECT * FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        return None if row is None else cast(ThreadRow, dict(row))

    def update_thread(self, thread_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{name} = ?" for name in fields)
        self._db.execute(
            f"UPDATE threads SET {sets} WHERE thread_id = ?", (*fields.values(), thread_id)
        )

    def get_thread_mode(self, thread_id: str) -> StoredMode | None:
        """The mode stored for a thread (docs/security.md#profiles-and-modes), or None when it never changed
        from wcgw."""
        row = self._db.execute(
            "SELECT mode FROM thread_modes WHERE thread_id = ?", (thread_id,)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def set_thread_mode(self, thread_id: str, mode: StoredMode) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO thread_modes VALUES (?, ?, ?)",
            (thread_id, json.dumps(mode, sort_keys=True), self.clock.now_ms()),
        )

    def list_threads(self) -> list[ThreadRow]:
        rows = self._db.execute("SELECT * FROM threads ORDER BY created_unix_ms").fetchall()
        return [cast(ThreadRow, dict(row)) for row in rows]
