"""The turn log's table (shared/store/turn_table): numbering, bounds, persistence, deletion."""

from __future__ import annotations

from pathlib import Path

from tether.shared.store.catalog import Catalog
from tether.shared.store.turn_table import MAX_TURNS_PER_EXECUTION, TurnLog


def _execution(catalog: Catalog, execution_id: str) -> None:
    catalog.insert_execution({
        "execution_id": execution_id, "principal": "local", "workspace_root": "/ws",
        "thread_id": "th_1", "kind": "background", "command": "agent", "status": "running",
        "started_unix_ms": 1, "guardian_instance_id": "g0"})


def test_rows_are_numbered_by_the_catalog_and_bounded(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    _execution(catalog, "ex_a")
    _execution(catalog, "ex_b")
    log = TurnLog(catalog)
    cursor = log.position()
    states = ["busy", "awaiting_input"]
    for i in range(MAX_TURNS_PER_EXECUTION + 10):
        log.record("ex_a", 1, states[(i + 1) % 2], states[i % 2], rule="r", recognizer="claude")
    other = log.record("ex_b", 1, None, "awaiting_input", rule="idle", recognizer="claude")
    assert other.seq == catalog.change_seq()  # one counter for records and turns
    rows = log.since(["ex_a", "ex_b"], cursor)
    assert len(rows["ex_a"]) == MAX_TURNS_PER_EXECUTION  # the oldest ten went
    seqs = [row.seq for row in rows["ex_a"]]
    assert seqs == sorted(seqs) and seqs[0] > cursor and seqs[-1] < other.seq
    assert rows["ex_b"] == [other]
    assert log.since(["ex_a", "ex_b"], other.seq) == {}
    catalog.close()

    reopened = Catalog(tmp_path / "catalog.sqlite3")
    log = TurnLog(reopened)
    assert log.latest("ex_b") == other  # kept across a restart
    reopened.delete_executions(["ex_b"])
    assert log.latest("ex_b") is None  # pruned with its record
    assert log.latest("ex_a") is not None
    reopened.close()
