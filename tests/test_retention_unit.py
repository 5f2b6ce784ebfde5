"""Retention limits on a real catalog and journals, with a driven clock (docs/tools.md#retention)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.helpers import apoll, listings
from tether.guardian.history.journal import Journal
from tether.guardian.history.retention import PRUNE_DELAY_S, Retention, RetentionLimits
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.store.catalog import Catalog


class FakeClock(Clock):
    def __init__(self) -> None:
        self.now = 1_000_000
        self.mono = 100.0

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.mono


def _record(i: int, status: str, output: int = 0, terminal: int | None = None) -> dict[str, object]:
    return {"execution_id": f"ex_{i}", "principal": "local", "workspace_root": "/w",
            "thread_id": "th", "kind": "command", "command": "true", "status": status,
            "started_unix_ms": 0, "guardian_instance_id": "g", "output_end": output,
            "terminal_unix_ms": terminal}


def _setup(tmp_path: Path) -> tuple[Catalog, Retention, FakeClock, GuardianPaths]:
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    clock = FakeClock()
    catalog = Catalog(tmp_path / "catalog.sqlite3", clock)
    return catalog, Retention(catalog, paths, clock, RetentionLimits()), clock, paths


def test_terminal_records_expire_after_24h(tmp_path: Path) -> None:
    catalog, retention, clock, paths = _setup(tmp_path)
    catalog.insert_execution(_record(1, "exited", terminal=clock.now))
    catalog.insert_execution(_record(2, "running"))
    Journal(paths.journals, "ex_1").append(b"x" * 10)
    clock.now += 24 * 3600 * 1000 - 1
    assert retention.prune_thread("th", protect=set()) == []
    clock.now += 2
    assert retention.prune_thread("th", protect=set()) == ["ex_1"]
    assert catalog.get_execution("ex_2") is not None  # running: never evicted
    assert not list(paths.journals.glob("ex_1.*"))


def test_output_budget_evicts_oldest_terminal_first(tmp_path: Path) -> None:
    catalog, retention, clock, _ = _setup(tmp_path)
    mib = 1024 * 1024
    catalog.insert_execution(_record(1, "running", output=mib))
    for i in range(2, 19):  # 17 terminal records of 1 MiB each: 18 MiB with the running one
        catalog.insert_execution(_record(i, "unknown", output=mib, terminal=clock.now))
    pruned = retention.prune_thread("th", protect=set())
    assert pruned == ["ex_2", "ex_3"]  # back to 16 MiB, oldest terminal ones first
    assert catalog.get_execution("ex_1") is not None


def test_a_listing_prunes_unless_its_thread_was_pruned_a_moment_ago(
        tmp_path: Path) -> None:
    catalog, retention, clock, _ = _setup(tmp_path)
    catalog.insert_execution(_record(1, "exited", terminal=clock.now))
    retention.prune_stale("th", protect=set())  # never pruned: prunes (nothing to drop yet)
    clock.now += 24 * 3600 * 1000 + 1  # ex_1 has expired
    clock.mono += PRUNE_DELAY_S / 2
    retention.prune_stale("th", protect=set())  # pruned a moment ago, nothing new: no scan
    assert catalog.get_execution("ex_1") is not None
    clock.mono += PRUNE_DELAY_S / 2
    retention.prune_stale("th", protect=set())  # a while ago: prunes
    assert catalog.get_execution("ex_1") is None
    catalog.insert_execution(_record(2, "exited", terminal=clock.now - 24 * 3600 * 1000 - 1))

    async def new_command_then_list() -> None:
        retention.prune_soon("th", set)  # a new command asked for a prune: a listing won't wait
        retention.prune_stale("th", protect=set())
        retention.cancel()

    asyncio.run(new_command_then_list())
    assert catalog.get_execution("ex_2") is None


def test_the_byte_budget_counts_screen_text_in_utf8_bytes(tmp_path: Path) -> None:
    """16 MiB is bytes: a screen of box drawing ("─" is 3 bytes) counts three times its
    characters (SQLite's length() of text counts characters)."""
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    clock = FakeClock()
    catalog = Catalog(tmp_path / "catalog.sqlite3", clock)
    retention = Retention(catalog, paths, clock, RetentionLimits(max_bytes=5000))
    for i in (1, 2):
        catalog.insert_execution(_record(i, "exited", terminal=clock.now))
        catalog.update_execution(f"ex_{i}", screen_text="─" * 1000)  # 1000 chars, 3000 bytes
    assert retention.prune_thread("th", protect=set()) == ["ex_1"]


def _sweep(retention: Retention, protect: set[str]) -> bool:
    """Start a sweep on a loop of its own and run it to its end; whether one started."""

    async def run() -> bool:
        retention.sweep_soon(lambda: protect)
        started = retention.sweeping
        await apoll(lambda: not retention.sweeping, what="the sweep to end")
        return started

    return asyncio.run(run())


def test_a_sweep_drops_expired_records_of_every_thread(tmp_path: Path) -> None:
    """Expiry reaches threads that see no command and no listing (an abandoned thread kept
    its records for ever): a sweep reads the whole catalog, a batch per loop turn, and keeps
    what docs/tools.md#retention keeps."""
    paths = GuardianPaths("k", tmp_path / "run", tmp_path / "state")
    paths.journals.mkdir(parents=True)
    clock = FakeClock()
    catalog = Catalog(tmp_path / "catalog.sqlite3", clock)
    retention = Retention(catalog, paths, clock, RetentionLimits(sweep_batch=2))
    old = clock.now - 24 * 3600 * 1000 - 1

    def add(i: int, thread: str, status: str, terminal: int | None, **fields: object) -> None:
        catalog.insert_execution({**_record(i, status, terminal=terminal), "thread_id": thread,
                                  **fields})
        Journal(paths.journals, f"ex_{i}").append(b"x" * 10)

    add(1, "idle", "exited", old)
    add(2, "idle", "running", None)
    add(3, "busy", "exited", clock.now)  # not expired yet
    add(4, "idle", "exited", old, kind="agent")  # a managed agent: kept until archived
    add(5, "idle", "unknown", old, kind="agent", archived_at=old)
    add(6, "idle", "exited", old)  # live in this guardian (a runtime still holds it)
    add(7, "busy", "unknown", old)
    assert _sweep(retention, protect={"ex_6"})
    assert sorted(catalog.get_executions([f"ex_{i}" for i in range(1, 8)])) == [
        "ex_2", "ex_3", "ex_4", "ex_6"]
    assert sorted({p.name.split(".")[0] for p in paths.journals.iterdir()}) == [
        "ex_2", "ex_3", "ex_4", "ex_6"]
    # The next sweep waits a moment (a sweep per request would cost a busy loop dearly).
    add(8, "idle", "exited", old)
    assert not _sweep(retention, protect=set())
    clock.mono += PRUNE_DELAY_S
    assert _sweep(retention, protect=set())
    assert catalog.get_execution("ex_8") is None


def test_a_prune_deletes_journals_by_name(tmp_path: Path) -> None:
    """The records' output figures say where their segments are: no listing of the journals
    directory (which holds every retained execution's files) unless they are not there."""
    catalog, retention, clock, paths = _setup(tmp_path)
    for i in (1, 2):
        Journal(paths.journals, f"ex_{i}", new=True).append(b"x" * 10)
        catalog.insert_execution(_record(i, "exited", output=10, terminal=clock.now))
    Journal(paths.journals, "ex_3", new=True).append(b"x" * 10)  # figures say 0 bytes
    catalog.insert_execution(_record(3, "exited", terminal=clock.now))
    clock.now += 24 * 3600 * 1000 + 1
    with listings() as listed:
        assert retention.prune_thread("th", protect={"ex_3"}) == ["ex_1", "ex_2"]
    assert listed == []
    assert sorted(p.name.split(".")[0] for p in paths.journals.iterdir()) == ["ex_3"]
    with listings() as listed:
        assert retention.prune_thread("th", protect=set()) == ["ex_3"]
    assert listed == [str(paths.journals)]
    assert list(paths.journals.iterdir()) == []
