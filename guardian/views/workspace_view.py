"""A person's view of the whole workspace (capability ``person_view``).

``workspace.list`` and ``exec.describe`` see every thread of the workspace (a person at the
terminal owns them all, unlike an agent's thread-scoped ``Execution`` tool). ``exec.stream``
hands out raw journal bytes by absolute offset and, when asked, the current screen with the
offset it corresponds to: that is all ``tether tail -f`` and ``tether attach`` need, over
plain request/response (docs/protocol.md#transport). ``person.input`` types what a person typed in ``tether
attach
--write`` and records *that* a person typed, once per attach session, never *what*.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.turns import recognize_record, refresh
from tether.guardian.history.journal import Journal
from tether.guardian.runtime.inputs import incomplete
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import (
    ExecDescribeParams,
    ExecStreamParams,
    PersonInputParams,
    WorkspaceListParams,
    WorkspaceScoped,
)
from tether.protocol.results import DescribeResult, PersonInputResult, StreamResult, WorkspaceListResult

if TYPE_CHECKING:
    from tether.guardian.history.idempotency import IdempotencyLedger
    from tether.guardian.history.retention import Retention
    from tether.guardian.runtime.live import LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.guardian.runtime.scope import Scope
    from tether.guardian.runtime.threads import Threads
    from tether.shared.store.catalog import Catalog

#: How long typing a person's bytes may wait for the program to read its input.
INPUT_WRITE_TIMEOUT_S = 5.0

class PersonDesk:
    """Handlers for a person's commands over this guardian's whole workspace."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, threads: Threads,
        retention: Retention, notifier: ChangeNotifier, ledger: IdempotencyLedger,
    ) -> None:
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._threads = threads
        self._retention = retention
        self._notifier = notifier
        self._ledger = ledger

    def handlers(self) -> dict[str, Any]:
        return {"workspace.list": self.list_workspace, "exec.describe": self.describe,
                "exec.stream": self.stream, "person.input": self.person_input}

    # -- scope -----------------------------------------------------------------------------

    def _check(self, params: WorkspaceScoped) -> None:
        if (params.principal, params.workspace_root) != (self._scope.principal, self._scope.workspace_root):
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                f"this guardian serves {self._scope.workspace_root!r} for principal "
                f"{self._scope.principal!r}, not {params.workspace_root!r} for {params.principal!r}",
                {"input_sent": False},
            )

    def _record(self, params: WorkspaceScoped, execution_id: str) -> dict[str, Any]:
        self._check(params)
        record = self._catalog.get_execution(execution_id)
        if record is None:
            raise TetherError(
                ErrorCode.NOT_FOUND,
                f"no execution {execution_id!r} in this workspace (it may have been pruned)",
                {"input_sent": False},
            )
        return record

    # -- listing and describing ------------------------------------------------------------

    async def list_workspace(self, request: Request, params: WorkspaceListParams) -> WorkspaceListResult:
        """Threads (with their main shells) and the newest records of every thread."""
        self._check(params)
        threads = []
        for thread in self._catalog.list_threads():
            self._retention.prune_stale(thread["thread_id"], protect=self._live.protected())
            shell = self._threads.shell(thread["thread_id"])
            threads.append({**thread, "shell_alive": bool(shell and shell.alive),
                            "shell_busy": bool(shell and shell.busy)})
        records = self._catalog.list_workspace_executions(params.limit)
        return WorkspaceListResult.model_validate({
            "principal": self._scope.principal,
            "workspace_root": self._scope.workspace_root,
            "threads": threads,
            "executions": [self._live.view(r) for r in records],
            "counts": self._catalog.count_executions(),
            "catalog_cursor": self._catalog.change_seq(),
        })

    async def describe(self, request: Request, params: ExecDescribeParams) -> DescribeResult:
        """The whole record, its recognition, receipts, and agent and person events."""
        record = self._record(params, params.execution_id)
        live = self._live.get(params.execution_id)
        await refresh(live)  # recognition below reads the screen without stalling
        result: dict[str, Any] = {
            "execution": self._live.view(record),
            "thread": self._catalog.get_thread(record["thread_id"]),
            "live": live is not None,
            "receipts": self._catalog.list_receipts(params.execution_id),
            "agent_events": self._catalog.agent_events(params.execution_id),
            "person_events": self._catalog.person_events(params.execution_id),
        }
        try:
            decision, observation = recognize_record(record, live)
            result["recognition"] = decision.to_dict()
            result["observation"] = observation
        except TetherError as err:  # a record naming a recognizer this build does not know
            result["recognition"] = None
            result["recognition_error"] = err.to_wire()
        return DescribeResult.model_validate(result)

    # -- streaming -------------------------------------------------------------------------

    async def stream(self, request: Request, params: ExecStreamParams) -> StreamResult:
        record = self._record(params, params.execution_id)
        live = self._live.get(params.execution_id)
        journal = self._live.journal(params.execution_id)
        if params.screen:
            if live is not None:
                # Emulate the backlog off the loop; _screen then takes the few bytes since.
                await live.screen.snapshot_async()
            return StreamResult.model_validate(self._screen(record, live, journal))
        offset = journal.start if params.offset is None else params.offset
        if offset > journal.end:
            raise TetherError(
                ErrorCode.INVALID_REQUEST,
                f"offset {offset} is past the end of the output ({journal.end})",
                {"journal_end": journal.end},
            )
        if live is not None and params.timeout_ms > 0:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + params.timeout_ms / 1000
            while journal.end <= offset and not live.done.is_set() and loop.time() < deadline:
                seen = self._notifier.seq  # checked above with no await since: nothing lost
                await self._notifier.wait(deadline - loop.time(), output=True, since=seen)
            # Each reply costs the guardian about a millisecond: batch a fast stream, but
            # return as soon as min_bytes are there: retention keeps only 1 MiB and the PTY
            # reader appends bursts of up to 1 MiB, so lag is what loses bytes. (While the
            # reader handed on every 4 KiB read this cost 25,000 wake-ups per 100 MB, about
            # 0.5 guardian CPU s; a 2 ms tick was cheaper then, but it let replies lag.)
            linger = min(deadline, loop.time() + params.linger_ms / 1000)
            while (journal.end - offset < params.min_bytes and not live.done.is_set()
                   and loop.time() < linger):
                seen = self._notifier.seq
                await self._notifier.wait(linger - loop.time(), output=True, since=seen)
        offset, gap = journal.resume(offset)  # past the bytes retention dropped, if in them
        data = journal.read(offset, params.max_bytes)
        still_live = self._live.get(params.execution_id)
        if still_live is None:  # it may have ended while we waited: the status changed
            record = self._catalog.get_execution(params.execution_id) or record
        return StreamResult.model_validate({
            **self._figures(record, still_live is not None, journal),
            "data": data,
            "start": offset,
            "end": offset + len(data),
            "gap": gap,
            "rows": still_live.runtime.rows if still_live else record["rows"],
            "cols": still_live.runtime.cols if still_live else record["cols"],
        })

    def _figures(self, record: dict[str, Any], live: bool, journal: Journal) -> dict[str, Any]:
        return {
            "execution_id": record["execution_id"],
            "status": record["status"],
            "exit_code": record["exit_code"],
            "reason": record.get("reason"),
            "live": live,
            "journal_start": journal.start,
            "journal_end": journal.end,
        }

    def _screen(self, record: dict[str, Any], live: Any, journal: Journal) -> dict[str, Any]:
        """The screen now and the journal offset it shows (both read without yielding, so
        the bytes after that offset are exactly what the screen has not drawn yet)."""
        if live is None:
            lines = str(record.get("screen_text") or "").split("\n")
            screen = {"lines": lines, "cursor_row": None, "cursor_col": None,
                      "rows": record["rows"], "cols": record["cols"], "alternate": False,
                      "title": ""}
        else:
            snap = live.screen.snapshot()
            screen = {"lines": list(snap.lines), "cursor_row": snap.cursor_row,
                      "cursor_col": snap.cursor_col, "rows": snap.rows, "cols": snap.cols,
                      "alternate": snap.alternate, "title": snap.title}
        end = journal.end
        return {**self._figures(record, live is not None, journal), "screen": screen,
                "data": b"", "start": end, "end": end, "gap": 0,
                "rows": screen["rows"], "cols": screen["cols"]}

    # -- typing ----------------------------------------------------------------------------

    async def person_input(self, request: Request, params: PersonInputParams) -> PersonInputResult:
        self._record(params, params.execution_id)
        outcome = await self._ledger.once(params.principal, params.idempotency_key,
                                          request.method, params, lambda: self._type(params))
        return PersonInputResult.model_validate(outcome)

    async def _type(self, params: PersonInputParams) -> dict[str, Any]:
        live = self._live.get(params.execution_id)
        if live is None:
            record = self._catalog.get_execution(params.execution_id) or {}
            raise TetherError(
                ErrorCode.NOT_RUNNING,
                f"execution {params.execution_id} is {record.get('status')}; nothing was typed",
                {"input_sent": False},
            )
        written = 0
        try:
            written = await live.runtime.write(params.data, timeout_s=INPUT_WRITE_TIMEOUT_S)
        except TimeoutError as exc:
            written = getattr(exc, "written", 0)
            raise incomplete(written, len(params.data)) from None
        except OSError as exc:
            raise TetherError(ErrorCode.NOT_RUNNING, f"the terminal is gone: {exc}",
                              {"input_sent": False}) from None
        finally:
            if written:
                # That a person typed, once per attach session: never what they typed.
                self._catalog.add_person_event(params.execution_id, "person_typed",
                                                params.attach_id)
        return {"execution_id": params.execution_id, "input_sent": True, "bytes": written}
