"""What a command request answers with, and the waits before it answers.

``exec.start`` and ``exec.status`` wait for the exit (or their wait budget); ``exec.input``
waits for the exit or for output to go quiet. Waits sleep on the execution's ``done`` event or
on the change notifier, never on a polling interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from tether.guardian.history.records import output_tail, record_view
from tether.guardian.runtime import kernel
from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ExecStatusParams
from tether.protocol.results import ExecResult
from tether.shared.store.catalog import Catalog

#: After input, a result waits for output to go quiet this long (or for the exit).
SETTLE_QUIET_S = 0.3


class Results:
    """Waits on executions and reports them: record, output tail, cwd."""

    def __init__(
        self,
        *,
        scope: Scope,
        catalog: Catalog,
        live: LiveTable,
        threads: Threads,
        notifier: ChangeNotifier,
    ) -> None:
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._threads = threads
        self._notifier = notifier

    def result(
        self, execution_id: str, was_live: LiveExecution | None = None, *, sent: bool = False
    ) -> ExecResult:
        """Record, rendered output tail, and the thread's current cwd. ``was_live``: the
        execution's live entry from before a wait, whose journal stays readable after the
        end (opening the journal afresh would look its segments up again).

        ``sent``: the reply goes out as it is (Result.built: assembled from the guardian's
        own rows, checked by the front-end's Method.read), not checked here a first time.
        Otherwise it is a validated model the caller may read and change.
        """
        live = self._live.get(execution_id)
        # An end just written (the usual reply to exec.start) is reported as written,
        # without reading it back.
        record = (was_live.ended_record if live is None and was_live is not None else None) \
            or self._catalog.get_execution(execution_id)
        assert record is not None
        holder = live or was_live
        journal = holder.journal if holder is not None else self._live.journal(execution_id)
        wire = {"execution": record_view(record, live), "output": output_tail(journal),
                "cwd": self._cwd(record, live)}
        return ExecResult.built(wire) if sent else ExecResult.model_validate(wire)

    def _cwd(self, record: dict[str, Any], live: LiveExecution | None) -> str:
        """The directory the execution is in. A command typed into the main shell: the
        shell's (the command may have moved it). A background command or an agent runs in a
        terminal of its own, wherever the main shell has gone since (a status check of a
        server started in A, after ``cd B`` in the main shell, said B): while it runs, the
        directory of the process in front of its terminal, from the kernel; after, where
        it ran (its record's)."""
        if record["kind"] == "command":
            shell = self._threads.shell(record["thread_id"])
            if shell is not None:
                return shell.cwd
            thread = self._catalog.get_thread(record["thread_id"])  # no shell here: its last
            return str(thread["cwd"] if thread else record["cwd"])
        fd = live.runtime.fd if live is not None else None
        if fd is not None:
            with contextlib.suppress(OSError):
                found = kernel.cwd_of(os.tcgetpgrp(fd))  # the job's group: its leader's pid
                if found is not None:
                    return found
        return str(record["cwd"])

    async def wait(self, execution_id: str, timeout_s: float) -> ExecResult:
        """Wait until the execution ends or ``timeout_s`` passes, then report it (a reply
        to send as it is: see :meth:`result`)."""
        live = self._live.get(execution_id)
        if live is not None and timeout_s > 0 and not live.done.is_set():
            # A timeout scope, not wait_for: wait_for (Python 3.11) runs the wait in a task
            # of its own, two more loop turns between the end and the reply.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await live.done.wait()
        return self.result(execution_id, live, sent=True)

    async def settle(self, execution_id: str, timeout_s: float) -> ExecResult:
        """After input: wait for the exit, or for output to stay quiet for a moment."""
        live = self._live.get(execution_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet_at = min(deadline, loop.time() + SETTLE_QUIET_S)
        seen = live.activity_seq if live is not None else 0
        while live is not None and not live.done.is_set() and loop.time() < quiet_at:
            await self._notifier.wait(quiet_at - loop.time())
            if live.activity_seq != seen:
                seen = live.activity_seq
                quiet_at = min(deadline, loop.time() + SETTLE_QUIET_S)
        return self.result(execution_id, live)

    def status_target(self, params: ExecStatusParams) -> str:
        """The execution ``exec.status`` is about: the named one, or the thread's latest."""
        if params.execution_id is not None:
            return str(self._scope.record_for(params, params.execution_id)["execution_id"])
        self._scope.thread_for(params)
        records = self._catalog.list_executions(params.thread_id, 1, kind="command")
        if not records:
            raise TetherError(ErrorCode.NOT_FOUND, "this thread has run no command yet")
        return str(records[0]["execution_id"])
