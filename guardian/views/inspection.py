"""Looking at executions without touching them: screens, listings, records, detection.

``exec.screen``, ``exec.list`` and ``exec.get``, plus the detection snapshot that the history
side (read) needs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.recognize import pick_recognizer
from tether.guardian.agents.turns import recognize_record
from tether.guardian.history.records import list_page
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ExecGetParams, ExecListParams, ExecScreenParams, ThreadOpenParams
from tether.protocol.results import GetResult, ListResult, ScreenResult, ThreadOpenResult

if TYPE_CHECKING:
    from tether.guardian.history.retention import Retention
    from tether.guardian.runtime.live import LiveExecution, LiveTable
    from tether.guardian.runtime.scope import Scope
    from tether.guardian.runtime.threads import Threads
    from tether.shared.store.catalog import Catalog


class Inspector:
    """Read-only views over this guardian's threads and executions."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, threads: Threads,
        retention: Retention,
    ) -> None:
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._threads = threads
        self._retention = retention

    def handlers(self) -> dict[str, Any]:
        return {"exec.screen": self.screen, "exec.list": self.list_records,
                "exec.get": self.get_record}

    async def screen(self, request: Request, params: ExecScreenParams) -> ScreenResult:
        """The current screen of an execution, or of the thread's main shell."""
        if params.execution_id is None:
            thread = self._scope.thread_for(params)
            shell = self._threads.shell(thread["thread_id"])
            if shell is None or not shell.alive:
                # Looking must not start a shell (a new generation): report that none runs.
                return ScreenResult.model_validate({
                    "execution_id": None, "live": False, "shell_running": False, "text": "",
                    "lines": [], "cursor": None})
            snap = await shell.screen.snapshot_async()
            execution_id = shell.current.execution_id if shell.current else None
        else:
            record = self._scope.record_for(params, params.execution_id)
            execution_id = params.execution_id
            live = self._live.get(params.execution_id)
            if live is None:
                text = record.get("screen_text") or ""
                lines = text.split("\n")
                if params.lines:
                    lines = lines[-params.lines :]
                return ScreenResult.model_validate({
                    "execution_id": execution_id, "live": False, "text": "\n".join(lines),
                    "lines": lines, "cursor": None})
            snap = await live.screen.snapshot_async()
        lines = list(snap.lines)
        if params.lines:
            lines = _tail_lines(lines, params.lines)
        return ScreenResult.model_validate({
            "execution_id": execution_id,
            "live": True,
            "text": "\n".join(lines).rstrip("\n") if params.lines else snap.text,
            "lines": lines,
            "cursor": {"row": snap.cursor_row, "col": snap.cursor_col},
            "rows": snap.rows,
            "cols": snap.cols,
            "alternate": snap.alternate,
            "title": snap.title,
        })

    def thread_status(self, params: ThreadOpenParams) -> ThreadOpenResult:
        """A thread as it is, for ``Initialize {type: status}``: nothing is started."""
        thread = self._catalog.get_thread(params.thread_id) if params.thread_id else None
        if params.thread_id is not None and (
            thread is None or thread["workspace_root"] != self._scope.workspace_root
            or thread["principal"] != params.principal
        ):
            raise TetherError(  # an unknown thread, as every other call names it
                ErrorCode.SESSION_MISMATCH,
                f"no thread {params.thread_id!r} in this workspace; call Initialize without "
                "thread_id to start a new one",
                {"input_sent": False},
            )
        shell = self._threads.shell(params.thread_id) if params.thread_id else None
        running = shell is not None and shell.alive
        return ThreadOpenResult.model_validate({
            "thread_id": params.thread_id,
            "workspace_root": self._scope.workspace_root,
            "reattached": False,
            "shell_running": running,
            "generation": shell.generation if shell is not None and running else (
                thread["generation"] if thread else None),
            "cwd": shell.cwd if shell is not None and running else (thread["cwd"] if thread else None),
            **({"temporary_dir": str(self._threads.temporary_path(params.thread_id))}
               if params.thread_id and self._threads.files else {}),
        })

    async def list_records(self, request: Request, params: ExecListParams) -> ListResult:
        self._scope.thread_for(params)
        self._retention.prune_stale(params.thread_id, protect=self._live.protected())
        records = self._catalog.list_executions(
            params.thread_id, params.limit + 1, kind=params.kind,
            runs_agent=_runs_agent_cli if params.agents_only else None, before=params.before)
        views, next_before = list_page(records, params.limit, self._live.listed)
        listed: dict[str, Any] = {"executions": views,
                                  "catalog_cursor": self._catalog.change_seq()}
        if next_before is not None:
            listed["next_before"] = next_before
        # Sent as built (the front-end checks every reply): see Result.built.
        return ListResult.built(listed)

    async def get_record(self, request: Request, params: ExecGetParams) -> GetResult:
        self._scope.thread_for(params)
        record = self._scope.record_for(params, params.execution_id)
        # Events: what was observed and changed nothing (a marker the kernel did not confirm).
        return GetResult.built({
            "execution": self._live.view(record),
            "events": self._catalog.execution_events(params.execution_id)})

    def detection_for(self, record: dict[str, Any], live: LiveExecution | None) -> str:
        """The detection snapshot: the recognition decision and the screen it looked at."""
        screen = live.screen.snapshot_now().text if live else str(record.get("screen_text") or "")
        decision, observation = recognize_record(record, live)
        return json.dumps({"recognition": decision.to_dict(), "observation": observation,
                           "screen": screen}, ensure_ascii=False)


def _runs_agent_cli(command: str) -> bool:
    """Whether a command line launches a known agent CLI (what ``Agent.list`` observes)."""
    return pick_recognizer(command) != "shell"


def _tail_lines(lines: list[str], count: int) -> list[str]:
    """The last ``count`` lines up to the last non-empty one."""
    end = len(lines)
    while end > 0 and not lines[end - 1]:
        end -= 1
    return lines[max(0, end - count) : end]
