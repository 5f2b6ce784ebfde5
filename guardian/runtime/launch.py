"""Starting executions: a command typed into the main shell, or a background ``bash -c``.

A command is accepted in a fixed order: limits, scope, shell ready and idle, record inserted
(``running``), then its bytes delivered exactly once. A background command gets its own PTY,
once the caps on running executions allow it (``caps``); its exit goes straight to the
finisher. One whose program could not start leaves no record: nothing ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tether.guardian.history.journal import SpareFile
from tether.guardian.history.retention import Retention
from tether.guardian.runtime import sandbox
from tether.guardian.runtime.caps import RunningCaps, exhausted
from tether.guardian.runtime.eager import in_task
from tether.guardian.runtime.finish import Finisher
from tether.guardian.runtime.inputs import deliver, stale_generation
from tether.guardian.runtime.live import LiveExecution, LiveTable
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.pty import NotStarted, PtyRuntime, job_argv
from tether.guardian.runtime.recovery import recovery_advice
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.threads import Threads
from tether.guardian.terminal.screen import TerminalScreen
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_COMMAND_BYTES
from tether.protocol.methods import ExecStartParams
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import ThreadRow
from tether.shared.store.store_errors import StoreError

#: How long a new shell may take to show its first prompt before a command is refused.
SHELL_READY_TIMEOUT_S = 10.0


class Launcher:
    """``exec.start``: creates the record and the runtime of each new execution."""

    def __init__(
        self,
        *,
        scope: Scope,
        catalog: Catalog,
        paths: GuardianPaths,
        clock: Clock,
        instance_id: str,
        live: LiveTable,
        threads: Threads,
        finisher: Finisher,
        notifier: ChangeNotifier,
        retention: Retention,
        spare: SpareFile,
        caps: RunningCaps,
    ) -> None:
        self._scope = scope
        self._catalog = catalog
        self._journals = paths.journals  # a Path built per access: once here
        self._clock = clock
        self._instance_id = instance_id
        self._live = live
        self._threads = threads
        self._finisher = finisher
        self._notifier = notifier
        self._retention = retention
        self._spare = spare
        self._caps = caps

    async def start(
        self, params: ExecStartParams, *, write_timeout_s: float,
        claim: Callable[[], None],
    ) -> dict[str, Any]:
        """Accept a command: create its record, then deliver it exactly once.

        ``claim`` records the request's idempotency key (IdempotencyLedger.once_claiming):
        it runs in the transaction that inserts the record, before anything is typed or
        spawned.
        """
        if len(params.command.encode()) > MAX_COMMAND_BYTES:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"command is {len(params.command.encode())} bytes; the limit is "
                f"{MAX_COMMAND_BYTES}. Put long scripts in a file and run the file.",
                {"input_sent": False},
            )
        thread = self._scope.thread_for(params)
        if params.background:
            return await self._start_background(thread, params, claim)
        shell = self._threads.ensure_shell(thread)
        if params.generation is not None and params.generation != shell.generation:
            raise stale_generation(params.generation, shell.generation)
        if not shell.ready.is_set():
            await in_task()  # exec.start runs eagerly until it waits (guardian/rpc/service)
            try:
                await asyncio.wait_for(shell.ready.wait(), SHELL_READY_TIMEOUT_S)
            except TimeoutError:
                raise TetherError(
                    ErrorCode.NOT_RUNNING,
                    f"the shell showed no prompt within {SHELL_READY_TIMEOUT_S:g}s (a slow or "
                    "broken ~/.bashrc?); nothing was typed. Look at its screen.",
                    {"input_sent": False},
                ) from None
        if shell.busy:
            raise shell.busy_error("wait for it (status_check), interrupt it (send_keys "
                                   "Ctrl-c), or run this one with is_background: true; if it "
                                   "never ends (a shell or REPL waiting in front, exec bash), "
                                   "Initialize type=reset_shell gives the thread a fresh shell")
        if (shell.runtime.rows, shell.runtime.cols) != (params.rows, params.cols):
            shell.resize(params.rows, params.cols)
        live = self._new_execution(thread, params, kind="command", cwd=shell.cwd,
                                   runtime=shell.runtime, screen=shell.screen,
                                   generation=shell.generation, claim=claim)
        shell.attach(live)
        line = shell.command_line(live.execution_id, params.command)
        await deliver(live, line.encode(), write_timeout_s)
        # While the shell reads the line and runs it, give the journal its file (the first
        # output would otherwise wait for it): the spare one, renamed, else a new one.
        live.journal.open(self._spare)
        outcome: dict[str, Any] = {"execution_id": live.execution_id, "input_sent": True}
        replaced = self._threads.take_replaced(thread["thread_id"])
        if replaced is not None:  # the first command in a shell that replaced a lost one
            outcome["shell_replaced"] = replaced
        return outcome

    async def _start_background(
        self, thread: ThreadRow, params: ExecStartParams, claim: Callable[[], None],
    ) -> dict[str, Any]:
        self._caps.check(self._live.running(thread["thread_id"]))
        cwd = self._threads.cwd(thread["thread_id"], thread["cwd"])
        execution_id = self._clock.new_id("ex")
        # The runtime's callbacks need the LiveExecution, which needs the runtime.
        holder: list[LiveExecution] = []
        notifier = self._notifier

        def on_output(data: bytes) -> None:
            holder[0].take_output(data)
            notifier.notify_output()

        sandboxed = self._threads.sandboxed(thread["thread_id"])
        argv = job_argv(params.command)
        runtime = PtyRuntime(
            sandbox.wrap(argv) if sandboxed else argv,
            env=self._threads.env_for(thread["thread_id"], execution_id, sandboxed=sandboxed,
                                      architect=self._threads.architect(thread["thread_id"])),
            cwd=cwd,
            rows=params.rows,
            cols=params.cols,
            on_output=on_output,
            on_exit=lambda status: self._finisher.finish(holder[0], status.shell_style_code),
            job_leader=True,
        )
        # flow: while the screen catches up on a flood, reading waits (the program slows).
        screen = TerminalScreen(cols=params.cols, rows=params.rows, respond=runtime.answer_query,
                                flow=runtime.set_reading)
        live = self._new_execution(thread, params, kind="background", cwd=cwd, runtime=runtime,
                                   screen=screen, generation=1, execution_id=execution_id,
                                   claim=claim)
        holder.append(live)
        try:
            identity = runtime.start()
        except NotStarted as exc:
            self._discard(live, exc)
            raise exhausted(exc) or TetherError(
                ErrorCode.SPAWN_FAILED, f"could not start the command: {exc}; nothing was "
                "started", {"input_sent": False}) from None
        except OSError as exc:  # it ran a moment, and was killed: its end is unknown
            self._finisher.finish(live, None, reason=f"spawn_failed: {exc}", status="unknown")
            raise exhausted(exc, started=True) or TetherError(
                ErrorCode.SPAWN_FAILED, f"could not watch the command, so it was killed: {exc}",
                {"input_sent": "unknown", "execution_id": execution_id}) from None
        self._catalog.update_execution(
            execution_id, runtime={**identity.to_dict(), "guardian_instance_id": self._instance_id}
        )
        return {"execution_id": execution_id, "input_sent": True}

    def _discard(self, live: LiveExecution, exc: OSError) -> None:
        """Forget an execution whose program never started: its record goes, so it takes no
        retention slot and no listing shows a run that did not happen. Should the disk
        refuse that, it ends ``unknown`` with the reason, as an end nobody saw."""
        try:
            self._catalog.delete_executions([live.execution_id])
        except (StoreError, OSError):
            self._finisher.finish(live, None, reason=f"spawn_failed: {exc}", status="unknown")
            return
        self._live.remove(live.execution_id)
        live.journal.close()
        live.runtime.close()

    def _new_execution(
        self,
        thread: ThreadRow,
        params: ExecStartParams,
        *,
        kind: str,
        cwd: str,
        runtime: PtyRuntime,
        screen: TerminalScreen,
        generation: int,
        execution_id: str | None = None,
        claim: Callable[[], None],
    ) -> LiveExecution:
        execution_id = execution_id or self._clock.new_id("ex")
        identity = runtime.identity.to_dict() if runtime.identity else None
        with self._catalog.transaction():  # the key and the record: one commit
            claim()
            inserted = self._catalog.insert_execution({
                "execution_id": execution_id,
                "principal": self._scope.principal,
                "workspace_root": self._scope.workspace_root,
                "thread_id": thread["thread_id"],
                "kind": kind,
                "command": params.command,
                "cwd": cwd,
                "status": "running",
                "started_unix_ms": self._clock.now_ms(),
                "guardian_instance_id": self._instance_id,
                "runtime": (
                    {**identity, "guardian_instance_id": self._instance_id} if identity else None
                ),
                "generation": generation,
                "parent_execution_id": params.parent_execution_id,
                "rows": params.rows,
                "cols": params.cols,
                # docs/tools.md#recovery-advice: only a foreground launch can be advice for resuming a
                # conversation.
                "recovery": recovery_advice(params.command) if kind == "command" else None,
            })
        live = LiveExecution(
            execution_id=execution_id,
            thread_id=thread["thread_id"],
            kind=kind,
            generation=generation,
            journal=self._live.journal_to_write(execution_id, new=True),
            runtime=runtime,
            screen=screen,
            inserted_record=inserted,
        )
        self._live.add(live)
        self._retention.prune_soon(thread["thread_id"], self._live.protected)
        return live
