"""Retention of execution records and their output (docs/tools.md#retention).

Per thread: at most 128 records and 16 MiB of output + screen text; terminal records expire
24 h after they became terminal. Pruning is lazy (it runs inside catalog operations),
removes the oldest terminal records first, and never evicts a running record. A new command
asks for it with :meth:`Retention.prune_soon`: it runs a moment later, once for a burst of
commands, instead of on the command's own path. A listing prunes first, unless its thread was
pruned less than :data:`PRUNE_DELAY_S` ago and no new command has asked for a prune since
(a list then costs no scan of the thread's records; what a prune would drop by age or by
bytes may show for at most that long, as after a new command).

Expiry is not a thread's business alone: a thread nobody uses any more sees no command and
no listing, and its records (up to 128 and 16 MiB each) would stay for ever. So every
request, and the guardian's start, may begin a *sweep* of the whole catalog
(:meth:`Retention.sweep_soon`) that drops expired records of every thread. It reads
:data:`SWEEP_BATCH` records per loop turn (never a stall of the loop), and the next sweep
waits at least :data:`PRUNE_DELAY_S`, and :data:`SWEEP_DUTY` times as long as the last one
took, so that a large catalog costs the loop a small share of its time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from tether.protocol.limits import RECORD_TTL_MS, THREAD_MAX_BYTES, THREAD_MAX_RECORDS
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.segments import OutputSizes, delete_segments, retained_bytes
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import TERMINAL_STATUSES
from tether.shared.store.store_errors import StoreError

log = logging.getLogger(__name__)

#: How long after a new command its thread is pruned (bursts of commands share one prune).
PRUNE_DELAY_S = 1.0
#: Records a sweep reads per loop turn.
SWEEP_BATCH = 256
#: The pause after a sweep, as a multiple of the time it took (at least PRUNE_DELAY_S).
SWEEP_DUTY = 20


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    max_records: int = THREAD_MAX_RECORDS
    max_bytes: int = THREAD_MAX_BYTES
    ttl_ms: int = RECORD_TTL_MS
    sweep_batch: int = SWEEP_BATCH


class Retention:
    """Prunes one guardian's catalog and journals."""

    def __init__(
        self, catalog: Catalog, paths: GuardianPaths, clock: Clock,
        limits: RetentionLimits | None = None, *, sizes: OutputSizes | None = None,
    ) -> None:
        """``sizes``: how much of each execution's output its journal keeps (where its
        segments are, and what a record's figures weigh)."""
        self.catalog = catalog
        self.paths = paths
        self.clock = clock
        self.limits = limits or RetentionLimits()
        self.sizes = sizes or OutputSizes()
        self._soon: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._pruned_at: dict[str, float] = {}  # thread id -> clock.monotonic() of its last prune
        # The sweep under way (its next step), where it goes on from, how long it has taken
        # so far, and when the next one may start (clock.monotonic()).
        self._sweep: asyncio.Handle | None = None
        self._sweep_from = 0
        self._sweep_busy = 0.0
        self._next_sweep = 0.0

    def prune_soon(self, thread_id: str, protect: Callable[[], Set[str]]) -> None:
        """Prune ``thread_id`` about :data:`PRUNE_DELAY_S` from now (on the running loop)."""
        self._soon.add(thread_id)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                PRUNE_DELAY_S, self._prune_soon, protect)

    def _prune_soon(self, protect: Callable[[], Set[str]]) -> None:
        self._timer = None
        threads, self._soon = self._soon, set()
        for thread_id in threads:
            self.prune_thread(thread_id, protect=protect())

    def prune_stale(self, thread_id: str, protect: Set[str]) -> None:
        """Prune before a listing: see the module's docstring for when this is skipped."""
        pruned_at = self._pruned_at.get(thread_id)
        if (thread_id in self._soon or pruned_at is None
                or self.clock.monotonic() - pruned_at >= PRUNE_DELAY_S):
            self.prune_thread(thread_id, protect)

    def cancel(self) -> None:
        """Forget a pending prune and stop a sweep (the guardian is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    @property
    def sweeping(self) -> bool:
        return self._sweep is not None

    def sweep_soon(self, protect: Callable[[], Set[str]]) -> None:
        """Start a sweep of every thread's expired records on the running loop, unless one
        is under way or the last one ended too recently (see the module's docstring)."""
        if self._sweep is not None or self.clock.monotonic() < self._next_sweep:
            return
        self._sweep_from = 0
        self._sweep_busy = 0.0
        self._sweep = asyncio.get_running_loop().call_soon(self._sweep_step, protect)

    def _sweep_step(self, protect: Callable[[], Set[str]]) -> None:
        """One batch of the sweep; schedules the next one, or ends the sweep."""
        started = self.clock.monotonic()
        try:
            rows = self.catalog.records_for_expiry(self._sweep_from, self.limits.sweep_batch)
            live, now = protect(), self.clock.now_ms()
            self._delete([row for row in rows
                          if self._evictable(row, live) and self._expired(row, now)])
        except (StoreError, OSError) as exc:  # a full disk: the next sweep tries again
            log.warning("sweeping expired records failed: %s", exc)
            rows = []
        self._sweep_busy += self.clock.monotonic() - started
        if len(rows) < self.limits.sweep_batch:
            self._sweep = None
            self._next_sweep = self.clock.monotonic() + max(
                PRUNE_DELAY_S, SWEEP_DUTY * self._sweep_busy)
            return
        self._sweep_from = int(rows[-1]["seq"])
        self._sweep = asyncio.get_running_loop().call_soon(self._sweep_step, protect)

    def prune_thread(self, thread_id: str, protect: Set[str]) -> list[str]:
        """Apply the limits to one thread; returns the pruned execution ids."""
        self._pruned_at[thread_id] = self.clock.monotonic()
        rows = self.catalog.thread_records_for_pruning(thread_id)
        now = self.clock.now_ms()

        def evictable(row: Mapping[str, Any]) -> bool:
            return self._evictable(row, protect)

        def expired(row: Mapping[str, Any]) -> bool:
            return self._expired(row, now)

        victims = [r for r in rows if evictable(r) and expired(r)]
        kept = [r for r in rows if not (evictable(r) and expired(r))]

        def size(row: Mapping[str, Any]) -> int:
            figures = int(row["output_start"]), int(row["output_end"])
            return retained_bytes(figures, self.sizes.head) + int(row["screen_bytes"])

        total = sum(size(row) for row in kept)
        for row in list(kept):  # oldest first
            if len(kept) <= self.limits.max_records and total <= self.limits.max_bytes:
                break
            if evictable(row):
                kept.remove(row)
                total -= size(row)
                victims.append(row)
        # Idempotency keys only guard against repeats in flight; a day is ample.
        self.catalog.forget_results_before(now - self.limits.ttl_ms)
        self._delete(victims)
        return [str(row["execution_id"]) for row in victims]

    @staticmethod
    def _evictable(row: Mapping[str, Any], protect: Set[str]) -> bool:
        # A managed agent stays until it is archived: closed agents are resumable
        # (docs/tools.md#close-resume-archive).
        if row["kind"] == "agent" and row["archived_at"] is None:
            return False
        return row["status"] in TERMINAL_STATUSES and row["execution_id"] not in protect

    def _expired(self, row: Mapping[str, Any], now: int) -> bool:
        terminal_at = row["terminal_unix_ms"]
        return isinstance(terminal_at, int) and now - terminal_at > self.limits.ttl_ms

    def _delete(self, victims: Sequence[Mapping[str, Any]]) -> None:
        """Delete these records (rows with their output figures) and their journals."""
        if victims:
            delete_segments(self.paths.journals, {
                str(row["execution_id"]): (int(row["output_start"]), int(row["output_end"]))
                for row in victims}, self.sizes.tail, self.sizes.head)
            self.catalog.delete_executions([str(row["execution_id"]) for row in victims])
