"""Threads, their main shells, and executions: starting, finishing, waiting, input.

The execution manager owns every runtime of this guardian. Records go to the catalog at
each lifecycle step (start, exit); output goes to journals; waits sleep on the change
notifier and wake on the exit marker or exit event, never on a polling interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from tether.guardian.agents.recovery import recovery_advice
from tether.guardian.history.journal import Journal
from tether.guardian.history.records import output_tail, record_view
from tether.guardian.history.retention import Retention
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.notify import ChangeNotifier
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.runtime.shell import MainShell
from tether.guardian.terminal.keys import keys_bytes
from tether.guardian.terminal.screen import TerminalScreen
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import (
    DEFAULT_COLS,
    DEFAULT_ROWS,
    MAX_COMMAND_BYTES,
    MAX_TEXT_BYTES,
    ExecInputParams,
    ExecStartParams,
    ExecStatusParams,
    ResetShellParams,
    Scoped,
    ThreadOpenParams,
)
from tether.shared.catalog import Catalog
from tether.shared.clock import Clock
from tether.shared.paths import GuardianPaths

log = logging.getLogger(__name__)

#: Screen text kept on a record when its runtime ends (R17).
SCREEN_TEXT_LIMIT = 64 * 1024
#: After input, a result waits for output to go quiet this long (or for the exit).
SETTLE_QUIET_S = 0.3
#: How long a new shell may take to show its first prompt before a command is refused.
SHELL_READY_TIMEOUT_S = 10.0


class ExecutionManager:
    """Everything this guardian runs, for one (principal, workspace)."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        paths: GuardianPaths,
        principal: str,
        workspace_root: str,
        instance_id: str,
        clock: Clock,
        base_env: dict[str, str],
    ) -> None:
        self.catalog = catalog
        self.paths = paths
        self.principal = principal
        self.workspace_root = workspace_root
        self.instance_id = instance_id
        self.clock = clock
        self._base_env = base_env
        self.notifier = ChangeNotifier()
        self.shells: dict[str, MainShell] = {}
        self.live: dict[str, LiveExecution] = {}
        self.retention = Retention(catalog, paths, clock)

    # -- scope -----------------------------------------------------------------------------

    def thread_for(self, params: Scoped) -> dict[str, Any]:
        """The thread named by a scoped request, checked against principal and workspace."""
        thread = self.catalog.get_thread(params.thread_id)
        if (
            thread is None
            or thread["principal"] != params.principal
            or thread["workspace_root"] != params.workspace_root
            or params.principal != self.principal
        ):
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                "thread_id and workspace_root do not match a thread of this workspace; "
                "call Initialize and use the values it returns",
                {"input_sent": False},
            )
        return thread

    def record_for(self, params: Scoped, execution_id: str) -> dict[str, Any]:
        """A record of the request's thread; anything else is ``not_found`` (never data)."""
        record = self.catalog.get_execution(execution_id)
        if record is None or (record["thread_id"], record["principal"]) != (
            params.thread_id, params.principal
        ):
            raise TetherError(
                ErrorCode.NOT_FOUND,
                f"no execution {execution_id!r} in this thread (it may have been pruned)",
                {"input_sent": False},
            )
        return record

    def view(self, record: dict[str, Any]) -> dict[str, Any]:
        return record_view(record, self.live.get(record["execution_id"]))

    # -- threads and shells ----------------------------------------------------------------

    async def open_thread(self, params: ThreadOpenParams) -> dict[str, Any]:
        """Create a thread, or reattach to one; either way its main shell is running."""
        if params.principal != self.principal or params.workspace_root != self.workspace_root:
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                f"this guardian serves {self.workspace_root!r}, not {params.workspace_root!r}",
            )
        reattached = params.thread_id is not None
        if params.thread_id is None:
            thread = self.catalog.create_thread(
                self.clock.new_id("th"), self.principal, self.workspace_root
            )
        else:
            found = self.catalog.get_thread(params.thread_id)
            if found is None or found["workspace_root"] != self.workspace_root:
                raise TetherError(
                    ErrorCode.NOT_FOUND,
                    f"no thread {params.thread_id!r} in this workspace; call Initialize "
                    "without thread_id to start a new one",
                )
            thread = found
        shell = self.ensure_shell(thread)
        return {
            "thread_id": thread["thread_id"],
            "workspace_root": self.workspace_root,
            "reattached": reattached,
            "generation": shell.generation,
            "cwd": shell.cwd,
        }

    def ensure_shell(self, thread: dict[str, Any]) -> MainShell:
        """The thread's live main shell, starting a new generation when there is none."""
        shell = self.shells.get(thread["thread_id"])
        if shell is not None and shell.alive:
            return shell
        generation = int(thread["generation"]) + (1 if thread["shell_execution_id"] else 0)
        env = self.env_for(thread["thread_id"], None)
        shell = MainShell(
            thread_id=thread["thread_id"],
            generation=generation,
            cwd=thread["cwd"],
            env=env,
            scratch=self.paths.scratch,
            rows=DEFAULT_ROWS,
            cols=DEFAULT_COLS,
            listener=self,
        )
        shell.start()
        self.shells[thread["thread_id"]] = shell
        # shell_execution_id marks "a shell has run": the next start is a new generation.
        self.catalog.update_thread(
            thread["thread_id"], generation=generation, shell_execution_id=f"shell-{generation}"
        )
        return shell

    def env_for(self, thread_id: str, execution_id: str | None) -> dict[str, str]:
        """Environment of every process Tether starts (R24)."""
        env = dict(self._base_env)
        env.update(
            TERM="xterm-256color",
            TETHER_THREAD_ID=thread_id,
            TETHER_WORKSPACE=self.workspace_root,
        )
        if execution_id is not None:
            env["TETHER_EXECUTION_ID"] = execution_id
        return env

    async def reset_shell(self, params: ResetShellParams) -> dict[str, Any]:
        """Replace the main shell: the old one is hung up, the new one is generation + 1."""
        thread = self.thread_for(params)
        old = self.shells.pop(params.thread_id, None)
        if old is not None:
            old.runtime.hangup()
            if old.current is not None:
                self._finish(old.current, None, reason="shell_reset", status="unknown")
            old.close()
        shell = self.ensure_shell(thread)
        return {"thread_id": params.thread_id, "generation": shell.generation, "cwd": shell.cwd}

    # -- ShellListener ---------------------------------------------------------------------

    def command_finished(self, live: LiveExecution, exit_code: int | None) -> None:
        self._finish(live, exit_code)

    def command_discarded(self, live: LiveExecution) -> None:
        self._finish(live, None, reason="discarded_before_start", status="unknown")

    def shell_exited(self, shell: MainShell, status: ExitStatus) -> None:
        if self.shells.get(shell.thread_id) is shell:
            del self.shells[shell.thread_id]
            self.catalog.update_thread(shell.thread_id, cwd=shell.cwd)
        if shell.current is not None:
            # `exit 3` typed as a command: the shell's exit is that command's exit.
            self._finish(shell.current, status.shell_style_code, reason="shell_exited")
            shell.current = None
        shell.close()
        self.notifier.notify()

    def output_arrived(self) -> None:
        self.notifier.notify_output()

    # -- starting --------------------------------------------------------------------------

    async def start(self, params: ExecStartParams, *, write_timeout_s: float) -> dict[str, Any]:
        """Accept a command: create its record, then deliver it exactly once."""
        if len(params.command.encode()) > MAX_COMMAND_BYTES:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"command is {len(params.command.encode())} bytes; the limit is "
                f"{MAX_COMMAND_BYTES}. Put long scripts in a file and run the file.",
                {"input_sent": False},
            )
        thread = self.thread_for(params)
        if params.background:
            return await self._start_background(thread, params)
        shell = self.ensure_shell(thread)
        if params.generation is not None and params.generation != shell.generation:
            raise _stale(params.generation, shell.generation)
        if not shell.ready.is_set():
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
            running = shell.current.execution_id if shell.current else None
            raise TetherError(
                ErrorCode.SHELL_BUSY,
                "the main shell is still running "
                + (f"execution {running}" if running else "a command typed into it")
                + "; wait for it (status_check), interrupt it (send_keys Ctrl-c), "
                "or run this one with is_background: true",
                {"input_sent": False, "running_execution_id": running},
            )
        if (shell.runtime.rows, shell.runtime.cols) != (params.rows, params.cols):
            shell.runtime.resize(params.rows, params.cols)
            shell.screen.resize(params.cols, params.rows)
        live = self._new_execution(thread, params, kind="command", cwd=shell.cwd,
                                   runtime=shell.runtime, screen=shell.screen,
                                   generation=shell.generation)
        shell.attach(live)
        line = shell.command_file(live.execution_id, params.command)
        await self._deliver(live, line.encode(), write_timeout_s)
        return {"execution_id": live.execution_id, "input_sent": True}

    async def _start_background(
        self, thread: dict[str, Any], params: ExecStartParams
    ) -> dict[str, Any]:
        shell = self.shells.get(thread["thread_id"])
        cwd = shell.cwd if shell is not None else thread["cwd"]
        execution_id = self.clock.new_id("ex")
        # The runtime's callbacks need the LiveExecution, which needs the runtime.
        holder: list[LiveExecution] = []

        def on_output(data: bytes) -> None:
            live = holder[0]
            live.screen.feed(data)
            live.append_output(data)
            self.notifier.notify_output()

        runtime = PtyRuntime(
            ["bash", "-c", params.command],
            env=self.env_for(thread["thread_id"], execution_id),
            cwd=cwd,
            rows=params.rows,
            cols=params.cols,
            on_output=on_output,
            on_exit=lambda status: self._finish(holder[0], status.shell_style_code),
        )
        screen = TerminalScreen(cols=params.cols, rows=params.rows, respond=runtime.answer_query)
        live = self._new_execution(thread, params, kind="background", cwd=cwd, runtime=runtime,
                                   screen=screen, generation=1, execution_id=execution_id)
        holder.append(live)
        try:
            identity = runtime.start()
        except OSError as exc:
            self._finish(live, None, reason=f"spawn_failed: {exc}", status="unknown")
            raise TetherError(
                ErrorCode.INTERNAL, f"could not start the command: {exc}", {"input_sent": False}
            ) from None
        self.catalog.update_execution(
            execution_id, runtime={**identity.to_dict(), "guardian_instance_id": self.instance_id}
        )
        return {"execution_id": execution_id, "input_sent": True}

    def _new_execution(
        self,
        thread: dict[str, Any],
        params: ExecStartParams,
        *,
        kind: str,
        cwd: str,
        runtime: PtyRuntime,
        screen: TerminalScreen,
        generation: int,
        execution_id: str | None = None,
    ) -> LiveExecution:
        execution_id = execution_id or self.clock.new_id("ex")
        identity = runtime.identity.to_dict() if runtime.identity else None
        self.catalog.insert_execution(
            {
                "execution_id": execution_id,
                "principal": self.principal,
                "workspace_root": self.workspace_root,
                "thread_id": thread["thread_id"],
                "kind": kind,
                "command": params.command,
                "cwd": cwd,
                "status": "running",
                "started_unix_ms": self.clock.now_ms(),
                "guardian_instance_id": self.instance_id,
                "runtime": (
                    {**identity, "guardian_instance_id": self.instance_id} if identity else None
                ),
                "generation": generation,
                "parent_execution_id": params.parent_execution_id,
                "rows": params.rows,
                "cols": params.cols,
                # R14: only a foreground launch can be advice for resuming a conversation.
                "recovery": recovery_advice(params.command) if kind == "command" else None,
            }
        )
        live = LiveExecution(
            execution_id=execution_id,
            thread_id=thread["thread_id"],
            kind=kind,
            generation=generation,
            journal=Journal(self.paths.journals, execution_id),
            runtime=runtime,
            screen=screen,
        )
        self.live[execution_id] = live
        self.retention.prune_thread(thread["thread_id"], protect=set(self.live))
        return live

    async def _deliver(self, live: LiveExecution, data: bytes, timeout_s: float) -> None:
        try:
            await live.runtime.write(data, timeout_s=max(timeout_s, 0.1))
        except TimeoutError as exc:
            written = getattr(exc, "written", 0)
            raise TetherError(
                ErrorCode.GUARDIAN_UNAVAILABLE,
                f"the terminal took only {written} of {len(data)} bytes before the deadline",
                {"input_sent": "partial" if written else False},
            ) from None
        except OSError as exc:
            raise TetherError(
                ErrorCode.NOT_RUNNING, f"the terminal is gone: {exc}", {"input_sent": False}
            ) from None

    # -- finishing -------------------------------------------------------------------------

    def _finish(
        self,
        live: LiveExecution,
        exit_code: int | None,
        *,
        reason: str | None = None,
        status: str = "exited",
    ) -> None:
        """Persist the end of an execution and wake its waiters."""
        if live.done.is_set():
            return
        now = self.clock.now_ms()
        screen_text = live.screen.snapshot().text.encode()[-SCREEN_TEXT_LIMIT:]
        self.catalog.update_execution(
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
        self.live.pop(live.execution_id, None)
        self.notifier.notify()

    # -- results and waiting ---------------------------------------------------------------

    def result(self, execution_id: str) -> dict[str, Any]:
        """Record, rendered output tail, and the thread's current cwd."""
        record = self.catalog.get_execution(execution_id)
        assert record is not None
        live = self.live.get(execution_id)
        journal = live.journal if live is not None else Journal(self.paths.journals, execution_id)
        shell = self.shells.get(record["thread_id"])
        thread = self.catalog.get_thread(record["thread_id"])
        cwd = shell.cwd if shell is not None else (thread["cwd"] if thread else record["cwd"])
        return {"execution": record_view(record, live), "output": output_tail(journal), "cwd": cwd}

    async def wait_result(self, execution_id: str, timeout_s: float) -> dict[str, Any]:
        """Wait until the execution ends or ``timeout_s`` passes, then report it."""
        live = self.live.get(execution_id)
        if live is not None and timeout_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(live.done.wait(), timeout_s)
        return self.result(execution_id)

    async def settle_result(self, execution_id: str, timeout_s: float) -> dict[str, Any]:
        """After input: wait for the exit, or for output to stay quiet for a moment."""
        live = self.live.get(execution_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        quiet_at = min(deadline, loop.time() + SETTLE_QUIET_S)
        seen = live.activity_seq if live is not None else 0
        while live is not None and not live.done.is_set() and loop.time() < quiet_at:
            await self.notifier.wait(quiet_at - loop.time())
            if live.activity_seq != seen:
                seen = live.activity_seq
                quiet_at = min(deadline, loop.time() + SETTLE_QUIET_S)
        return self.result(execution_id)

    def resolve_status_target(self, params: ExecStatusParams) -> str:
        if params.execution_id is not None:
            return str(self.record_for(params, params.execution_id)["execution_id"])
        self.thread_for(params)
        records = self.catalog.list_executions(params.thread_id, 1, kind="command")
        if not records:
            raise TetherError(ErrorCode.NOT_FOUND, "this thread has run no command yet")
        return str(records[0]["execution_id"])

    # -- input -----------------------------------------------------------------------------

    async def send_input(self, params: ExecInputParams, *, write_timeout_s: float) -> dict[str, Any]:
        """Type text or keys into an execution's terminal (or the main shell's)."""
        if (params.text is None) == (params.keys is None):
            raise TetherError(
                ErrorCode.INVALID_REQUEST, "give exactly one of text or keys", {"input_sent": False}
            )
        if params.text is not None:
            data = params.text.encode()
            if len(data) > MAX_TEXT_BYTES:
                raise TetherError(
                    ErrorCode.LIMIT_EXCEEDED,
                    f"text is {len(data)} bytes; the limit is {MAX_TEXT_BYTES}",
                    {"input_sent": False},
                )
            if params.submit:
                data += b"\r"
        else:
            data = keys_bytes(params.keys or [])
        live, generation = self._input_target(params)
        if params.generation is not None and params.generation != generation:
            raise _stale(params.generation, generation)
        await self._deliver(live, data, write_timeout_s)
        return {"execution_id": live.execution_id, "input_sent": True, "bytes": len(data)}

    def _input_target(self, params: ExecInputParams) -> tuple[LiveExecution, int]:
        if params.execution_id is not None:
            record = self.record_for(params, params.execution_id)
            live = self.live.get(params.execution_id)
            if live is None:
                raise TetherError(
                    ErrorCode.NOT_RUNNING,
                    f"execution {params.execution_id} is {record['status']}; nothing was typed",
                    {"input_sent": False, "status": record["status"]},
                )
            return live, live.generation
        thread = self.thread_for(params)
        shell = self.shells.get(thread["thread_id"])
        if shell is None or shell.current is None:
            raise TetherError(
                ErrorCode.NOT_RUNNING,
                "no command is running in the main shell; name an execution_id, or start a "
                "command first",
                {"input_sent": False},
            )
        return shell.current, shell.generation

    def running_ids(self) -> list[str]:
        return sorted(self.live)

    def has_running_work(self) -> bool:
        """True while any command or program runs (a shell idle at its prompt does not)."""
        return bool(self.live) or any(shell.busy for shell in self.shells.values())

    # -- shutdown --------------------------------------------------------------------------

    async def shutdown(self, grace_s: float = 2.0) -> None:
        """Hang up every runtime, record what ended, mark the rest unknown (R4)."""
        for shell in self.shells.values():
            shell.runtime.hangup()
        for live in list(self.live.values()):
            live.runtime.hangup()
        waits = [live.done.wait() for live in self.live.values()]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), grace_s)
        for live in list(self.live.values()):
            self._finish(live, None, reason="guardian_stopped", status="unknown")
        for shell in list(self.shells.values()):
            self.catalog.update_thread(shell.thread_id, cwd=shell.cwd)
            shell.close()
        self.shells.clear()


def _stale(asked: int, current: int) -> TetherError:
    return TetherError(
        ErrorCode.STALE_GENERATION,
        f"input names generation {asked} but the runtime is at generation {current}; "
        "nothing was delivered. Look at the execution again before sending.",
        {"input_sent": False, "generation": current},
    )


def process_env() -> dict[str, str]:
    """The guardian's environment, minus what must not leak into user shells."""
    env = dict(os.environ)
    for name in ("TETHER_EXECUTION_ID",):
        env.pop(name, None)
    return env
