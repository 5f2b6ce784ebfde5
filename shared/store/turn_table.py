"""The turn log: every recognized state change of a watched execution, one row each.

A row is ``(seq, execution_id, generation, from_state, to_state, rule, recognizer,
at_unix_ms)``. ``seq`` is taken from the catalog's own change counter (``meta.change_seq``),
so it rises across the whole catalog and a catalog cursor (``Execution.list``/``observe``/
``wait``) is also a position in this log: "every transition after cursor N" is
``seq > N``. Each execution keeps its newest :data:`MAX_TURNS_PER_EXECUTION` rows; older
ones are pruned as new ones come. Rows live as long as their execution record does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.shared.store.catalog import Catalog

#: Rows kept per execution; the oldest go first.
MAX_TURNS_PER_EXECUTION = 256


@dataclass(frozen=True, slots=True)
class Turn:
    """One recognized state change."""

    seq: int
    execution_id: str
    generation: int
    from_state: str | None
    to_state: str
    rule: str | None
    recognizer: str | None
    at_unix_ms: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_COLUMNS = "seq, execution_id, generation, from_state, to_state, rule, recognizer, at_unix_ms"


class TurnLog:
    """Reads and writes of the ``turns`` table over a guardian's catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._db = catalog.connection

    def record(
        self, execution_id: str, generation: int, from_state: str | None, to_state: str, *,
        rule: str | None, recognizer: str | None,
    ) -> Turn:
        """Append one row (in the caller's transaction if one is open) and prune the oldest."""
        with self.catalog.transaction():
            # The catalog's change counter: one sequence for records and turns alike.
            self._db.execute("UPDATE meta SET value = value + 1 WHERE key = 'change_seq'")
            seq = self.catalog.change_seq()
            now = self.catalog.clock.now_ms()
            self._db.execute(
                f"INSERT INTO turns ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (seq, execution_id, generation, from_state, to_state, rule, recognizer, now))
            self._db.execute(
                "DELETE FROM turns WHERE execution_id = ? AND seq <= (SELECT seq FROM turns"
                " WHERE execution_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (execution_id, execution_id, MAX_TURNS_PER_EXECUTION))
        return Turn(seq, execution_id, generation, from_state, to_state, rule, recognizer, now)

    def since(self, execution_ids: Sequence[str], after: int) -> dict[str, list[Turn]]:
        """Each execution's rows with ``seq > after``, oldest first (executions without any
        are left out)."""
        out: dict[str, list[Turn]] = {}
        if not execution_ids:
            return out
        marks = ", ".join("?" for _ in execution_ids)
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE execution_id IN ({marks}) AND seq > ?"
            " ORDER BY seq", [*execution_ids, after]).fetchall()
        for row in rows:
            turn = Turn(*row)
            out.setdefault(turn.execution_id, []).append(turn)
        return out

    def latest(self, execution_id: str) -> Turn | None:
        """The newest row of an execution, or None."""
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM turns WHERE execution_id = ? ORDER BY seq DESC LIMIT 1",
            (execution_id,)).fetchone()
        return Turn(*row) if row is not None else None

    def position(self) -> int:
        """Where the log stands now: a later row has a greater ``seq``."""
        return self.catalog.change_seq()
