"""Finishing an execution: the one place a running record becomes terminal.

Whatever ends an execution (its D marker, its process exiting, a shell reset, a discarded
line, guardian shutdown) comes here, so the record is persisted once, its waiters wake once,
and it leaves the live table in the same step.
"""

from __future__ import annotations

from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.notify import ChangeNotifier
from tether.shared.catalog import Catalog
from tether.shared.clock import Clock

#: Screen text kept on a record when its runtime ends (R17).
SCREEN_TEXT_LIMIT = 64 * 1024


class Finisher:
    """Persists the end of executions and wakes whoever waits on them."""

    def __init__(
        self, *, catalog: Catalog, clock: Clock, live: LiveTable, notifier: ChangeNotifier
    ) -> None:
        self._catalog = catalog
        self._clock = clock
        self._live = live
        self._notifier = notifier

    def finish(
        self,
        live: LiveExecution,
        exit_code: int | None,
        *,
        reason: str | None = None,
        status: str = "exited",
    ) -> None:
        """Persist the end of an execution and wake its waiters (a second call is a no-op)."""
        if live.done.is_set():
            return
        now = self._clock.now_ms()
        screen_text = live.screen.snapshot().text.encode()[-SCREEN_TEXT_LIMIT:]
        self._catalog.update_execution(
            live.execution_id,
            status=status,
            exit_code=exit_code if status == "exited" else None,
            reason=reason,
            ended_unix_ms=now,
            terminal_unix_ms=now,
            output_start=live.journal.start,
            output_end=live.journal.end,
            output_activity_seq=live.activity_seq,
            screen_text=screen_text.decode("utf-8", "ignore"),
        )
        live.exit_code = exit_code
        live.journal.close()
        live.done.set()
        if live.kind != "command":
            live.runtime.close()
        self._live.remove(live.execution_id)
        self._notifier.notify()
