"""Finishing an execution: the one place a running record becomes terminal.

Whatever ends an execution (its D marker, its process exiting, a shell reset, a discarded
line, guardian shutdown) comes here, so the record is persisted once, its waiters wake once,
and it leaves the live table in the same step.

The record keeps the final screen's text. A main shell's screen lives on after a command, so
its text is drawn just after the end is answered (nobody waits for it; the shell runs the
draw before its screen takes another byte), and the end is written with it, in one commit.
Until that commit, a loop turn after the reply, every read sees the end as staged
(Catalog.stage_execution). The execution's own waiters reply from that staged record before
the draw; the request that would read it next, and waiters on the change notifier, run after
it. A guardian that dies in between leaves the record running, and the next one says its end
is unknown. Otherwise the screen must be caught up before the end is persisted. That is
quick unless the program ended right after a flood of output (up to the screen's 8 MiB
pending buffer, seconds of emulation when no skip rule applies): then the end is persisted
once a catch-up off the loop has drawn it (the execution looks running until then).

An end is never lost to a failing disk: a transition the catalog cannot write is kept in
memory (reads show it), journal bytes the disk refused stay held, and both are retried every
:data:`RETRY_S` until written; then waiters are woken again, so the records become true
without anyone asking.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tether.guardian.history.journal import Journal, SpareFile
from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.notify import ChangeNotifier
from tether.shared.clock import Clock
from tether.shared.store.catalog import Catalog
from tether.shared.store.store_errors import StoreError

log = logging.getLogger(__name__)

#: Screen text kept on a record when its runtime ends (docs/tools.md#retention).
SCREEN_TEXT_LIMIT = 64 * 1024
#: How often writes the disk refused are tried again.
RETRY_S = 0.5


def _screen_text(text: str) -> str:
    """The screen text kept on a record: its last :data:`SCREEN_TEXT_LIMIT` bytes."""
    return text.encode()[-SCREEN_TEXT_LIMIT:].decode("utf-8", "ignore")


class Finisher:
    """Persists the end of executions and wakes whoever waits on them."""

    def __init__(
        self, *, catalog: Catalog, clock: Clock, live: LiveTable, notifier: ChangeNotifier,
        spare: SpareFile,
    ) -> None:
        self._catalog = catalog
        self._clock = clock
        self._live = live
        self._notifier = notifier
        self._spare = spare
        self._drawing: dict[str, asyncio.Task[None]] = {}
        self._unflushed: list[Journal] = []  # journals of ended executions with held bytes
        self._retry: asyncio.TimerHandle | None = None

    def finish(
        self,
        live: LiveExecution,
        exit_code: int | None,
        *,
        reason: str | None = None,
        status: str = "exited",
        now: bool = False,
        defer_screen: Callable[[Callable[[], Callable[[], None]]], None] | None = None,
    ) -> None:
        """Persist the end of an execution and wake its waiters (a second call is a no-op).

        ``now``: do not wait for a screen catch-up (guardian shutdown).
        ``defer_screen``: the screen goes on living after this end (a main shell's): the end
        is answered at once, and the screen text is drawn and written with it right after,
        through the draw handed to ``defer_screen``, which must run it before the screen
        takes another byte (:meth:`MainShell.defer_draw`).
        """
        if live.done.is_set() or (live.execution_id in self._drawing and not now):
            return
        ended = self._clock.now_ms()
        if not now and not live.screen.settled:
            self._drawing[live.execution_id] = asyncio.get_running_loop().create_task(
                self._finish_drawn(live, exit_code, reason, status, ended))
            return
        if defer_screen is not None and not now:
            # Catching the screen up and rendering it is about a quarter of a short
            # command's time in the guardian, and nobody waits for it: the reply carries
            # the output, not the screen.
            self._persist(live, exit_code, reason, status, ended, None,
                          after_done=lambda: defer_screen(lambda: self._draw_final(live)))
            return
        self._persist(live, exit_code, reason, status, ended, live.screen.snapshot().text)

    def _draw_final(self, live: LiveExecution) -> Callable[[], None]:
        """The screen text of an execution whose end is already answered; returns its write,
        in one commit with that end (and the close of its journal, kept open for the reply to
        read the output's tail through)."""
        fields: dict[str, Any] = {}
        try:
            fields["screen_text"] = _screen_text(live.screen.snapshot().text)
        except Exception:  # a broken emulator must not break the shell's output path
            log.exception("screen of %s could not be drawn", live.execution_id)

        def write() -> None:
            live.journal.close()
            self.keep(live.execution_id, **fields)  # the staged end is written with it
            self._notifier.notify()
            self._spare.refill()  # the next command's journal file, off its path

        return write

    async def _finish_drawn(
        self, live: LiveExecution, exit_code: int | None, reason: str | None, status: str,
        ended: int,
    ) -> None:
        try:
            text = (await live.screen.snapshot_async()).text
        except Exception:  # a broken emulator must not leave the record running forever
            log.exception("screen of %s could not be drawn", live.execution_id)
            text = ""
        finally:
            self._drawing.pop(live.execution_id, None)
        if not live.done.is_set():
            self._persist(live, exit_code, reason, status, ended, text)

    def _persist(
        self, live: LiveExecution, exit_code: int | None, reason: str | None, status: str,
        now: int, text: str | None, *, after_done: Callable[[], None] | None = None,
    ) -> None:
        """Write the end (with the screen text, unless ``text`` is None: drawn later), wake
        the execution's waiters, then run ``after_done``, then wake everyone else."""
        live.journal.flush()
        fields: dict[str, Any] = {
            "status": status,
            "exit_code": exit_code if status == "exited" else None,
            "reason": reason,
            "ended_unix_ms": now,
            "terminal_unix_ms": now,
            "output_start": live.journal.start,
            "output_end": live.journal.end,
            "output_activity_seq": live.activity_seq,
        }
        if text is not None:
            fields["screen_text"] = _screen_text(text)
        if after_done is None:
            written, live.ended_record = self._catalog.write_execution_or_keep(
                live.execution_id, last_read=live.inserted_record, **fields)
        else:  # written by the draw after_done schedules, off the reply's path
            try:
                written, live.ended_record = True, self._catalog.stage_execution(
                    live.execution_id, last_read=live.inserted_record, **fields)
            except (StoreError, OSError):  # the catalog cannot even be read: keep it
                written, live.ended_record = self._catalog.write_execution_or_keep(
                    live.execution_id, last_read=live.inserted_record, **fields)
        live.exit_code = exit_code
        if after_done is None:
            live.journal.close()  # else after the reply, which reads its tail through it
        if live.journal.unwritten:
            self._unflushed.append(live.journal)
        if not written or live.journal.unwritten:
            log.warning("execution %s ended (%s) but the disk refused it: %s; retrying",
                        live.execution_id, status,
                        self._catalog.storage_error or live.journal.write_error)
            self._schedule_retry()
        live.done.set()
        if live.kind != "command":
            live.runtime.close()
        self._live.remove(live.execution_id)
        if after_done is not None:
            after_done()
        self._notifier.notify()

    def keep(self, execution_id: str, **fields: Any) -> None:
        """Persist other fields of a record (orphans found at a reset), or keep and retry."""
        if not self._catalog.update_execution_or_keep(execution_id, **fields):
            self._schedule_retry()

    def settled(self) -> bool:
        """Nothing waits to be written again (every end and journal byte is on disk)."""
        return self._retry is None

    def _schedule_retry(self) -> None:
        if self._retry is None:
            self._retry = asyncio.get_running_loop().call_later(RETRY_S, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self._unflushed = [journal for journal in self._unflushed if not journal.flush()]
        for live in self._live:
            live.journal.flush()
        if self._catalog.write_kept() and not self._unflushed:
            log.info("the disk accepts writes again: every kept transition is written")
            self._notifier.notify()
        else:
            self._schedule_retry()
