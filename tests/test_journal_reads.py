"""Journal reads: the segment being written is read through the writer's descriptor, older
segments (and a closed or reopened journal) from their files; both give the same bytes. An
ended execution's journal is found by name, not by listing the journals directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import listings
from tether.guardian.history.journal import Journal
from tether.guardian.runtime.assembly import Runtime
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.segments import segment_path
from tether.shared.store.catalog import Catalog

KIB = 1024
MIB = 1024 * KIB

def _record(execution_id: str, figures: tuple[int, int]) -> dict[str, Any]:
    return {"execution_id": execution_id, "principal": "local", "workspace_root": "/w",
            "thread_id": "th", "kind": "command", "command": "true", "status": "exited",
            "started_unix_ms": 0, "guardian_instance_id": "g", "output_start": figures[0],
            "output_end": figures[1], "terminal_unix_ms": 0}


def _runtime(tmp_path: Path) -> tuple[Runtime, Catalog, Path]:
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    catalog = Catalog(tmp_path / "catalog.sqlite3")
    runtime = Runtime.build(catalog=catalog, paths=paths, principal="local",
                            workspace_root="/w", instance_id="g", clock=Clock(), base_env={})
    return runtime, catalog, paths.journals


def test_an_ended_execution_is_read_without_listing_the_journals_directory(
        tmp_path: Path) -> None:
    """Its record's output figures say where its segments are: a read of one ended execution
    used to list the whole directory (every retained execution's files), 32 times for an
    observe of 32 items."""
    runtime, catalog, journals = _runtime(tmp_path)
    written = Journal(journals, "ex_done", new=True)
    data = bytes(i % 251 for i in range(2 * MIB + 5))  # three segments, the first dropped
    for i in range(0, len(data), 64 * KIB):
        written.append(data[i : i + 64 * KIB])
    written.close()
    catalog.insert_execution(_record("ex_done", (written.start, written.end)))
    for i in range(100):  # other executions' journals
        segment_path(journals, f"ex_other{i}", 0).write_bytes(b"x")
    with listings() as listed:
        journal = runtime.live.journal("ex_done")
        assert (journal.start, journal.end) == (len(data) - MIB, len(data))
        assert journal.read(journal.start, MIB) == data[-MIB:]
    assert listed == []


def test_a_journal_that_is_not_where_its_figures_say_is_read_all_the_same(
        tmp_path: Path) -> None:
    """Segments at other offsets (a full disk held bytes, another version's retention size),
    and executions without figures, are found by listing the directory, as before."""
    runtime, catalog, journals = _runtime(tmp_path)
    segment_path(journals, "ex_odd", 100).write_bytes(b"held then written")
    segment_path(journals, "ex_odd", 117).write_bytes(b" later")
    catalog.insert_execution(_record("ex_odd", (100, 123)))
    with listings() as listed:
        journal = runtime.live.journal("ex_odd")
        assert journal.read(0, 100) == b"held then written later"
        nothing = runtime.live.journal("ex_unknown")
        assert (nothing.start, nothing.end) == (0, 0)
    assert len(listed) == 2
