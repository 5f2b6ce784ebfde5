"""Retention of execution records and their output (SPEC R17).

Per thread: at most 128 records and 16 MiB of output + screen text; terminal records expire
24 h after they became terminal. Pruning is lazy (it runs inside catalog operations),
removes the oldest terminal records first, and never evicts a running record. A new command
asks for it with :meth:`Retention.prune_soon`: it runs a moment later, once for a burst of
commands, instead of on the command's own path. A listing prunes first, unless its thread was
pruned less than :data:`PRUNE_DELAY_S` ago and no new command has asked for a prune since
(a list then costs no scan of the thread's records; what a prune would drop by age or by
bytes may show for at most that long, as after a new command).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import Any

from tether.protocol.limits import RECORD_TTL_MS, THREAD_MAX_BYTES, THREAD_MAX_RECORDS
from tether.shared.catalog import TERMINAL_STATUSES, Catalog
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.segments import delete_segments

#: How long after a new command its thread is pruned (bursts of commands share one prune).
PRUNE_DELAY_S = 1.0


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    max_records: int = THREAD_MAX_RECORDS
    max_bytes: int = THREAD_MAX_BYTES
    ttl_ms: int = RECORD_TTL_MS


class Retention:
    """Prunes one guardian's catalog and journals."""

    def __init__(
        self, catalog: Catalog, paths: GuardianPaths, clock: Clock,
        limits: RetentionLimits | None = None,
    ) -> None:
        self.catalog = catalog
        self.paths = paths
        self.clock = clock
        self.limits = limits or RetentionLimits()
        self._soon: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._pruned_at: dict[str, float] = {}  # thread id -> clock.monotonic() of its last prune

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
        """Forget a pending prune (the guardian is stopping)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def prune_thread(self, thread_id: str, protect: Set[str]) -> list[str]:
        """Apply the limits to one thread; returns the pruned execution ids."""
        self._pruned_at[thread_id] = self.clock.monotonic()
        rows = self.catalog.thread_records_for_pruning(thread_id)
        now = self.clock.now_ms()

        def evictable(row: dict[str, Any]) -> bool:
            # A managed agent stays until it is archived: closed agents are resumable (R26).
            if row["kind"] == "agent" and row["archived_at"] is None:
                return False
            return row["status"] in TERMINAL_STATUSES and row["execution_id"] not in protect

        def expired(row: dict[str, Any]) -> bool:
            terminal_at = row["terminal_unix_ms"]
            return isinstance(terminal_at, int) and now - terminal_at > self.limits.ttl_ms

        victims = [str(r["execution_id"]) for r in rows if evictable(r) and expired(r)]
        kept = [r for r in rows if not (evictable(r) and expired(r))]

        def size(row: dict[str, Any]) -> int:
            return int(row["output_end"]) - int(row["output_start"]) + int(row["screen_bytes"])

        total = sum(size(row) for row in kept)
        for row in list(kept):  # oldest first
            if len(kept) <= self.limits.max_records and total <= self.limits.max_bytes:
                break
            if evictable(row):
                kept.remove(row)
                total -= size(row)
                victims.append(str(row["execution_id"]))
        # Idempotency keys only guard against repeats in flight; a day is ample.
        self.catalog.forget_results_before(now - self.limits.ttl_ms)
        if victims:
            delete_segments(self.paths.journals, victims)
            self.catalog.delete_executions(victims)
        return victims
