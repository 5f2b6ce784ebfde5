"""Managed agents' runtimes: their own PTYs, their exits, and the state watch (R23, R25).

An agent runs its argv directly (no shell) in a PTY of its own, with Tether's environment
stamp (R24). Its output goes to the execution's journal and lazy screen like a background
command's. A *watch* per live agent recognises the screen whenever output has settled and
moves the state (``awaiting_input`` -> idle, ``busy``/``awaiting_approval`` -> running); the
runtime's exit moves it to ``closed`` when Tether closed it on purpose, else to ``error`` —
also between turns, when nothing else is looking (R25).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.turns import recognize_record
from tether.guardian.runtime import kernel
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
from tether.shared.agent_states import AgentState, from_recognition

if TYPE_CHECKING:
    from tether.guardian.runtime.assembly import Runtime

#: Output must pause this long before the screen is recognised: a half-drawn frame is no
#: evidence. A program that never pauses is still looked at every WATCH_MAX_S.
WATCH_QUIET_S = 0.04
WATCH_MAX_S = 0.3
#: After a hang-up, how long a program may take to exit before it gets SIGKILL.
HANGUP_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class Stopping:
    """Why Tether is ending a runtime: the state the agent lands in, and the event reason."""

    state: AgentState  # "closed" (close, archive) or "error" (exit, guardian stopping)
    reason: str


class AgentRuntimes:
    """Starts, watches and stops this guardian's agent runtimes."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        on_recognized: Callable[[str, LiveExecution, AgentState, str | None], None],
        on_exit: Callable[[str, LiveExecution, Stopping], None],
    ) -> None:
        self._rt = runtime
        self._on_recognized = on_recognized
        self._on_exit = on_exit
        self._stopping: dict[str, Stopping] = {}
        self._watches: dict[str, asyncio.Task[None]] = {}

    def live(self, execution_id: str) -> LiveExecution | None:
        live = self._rt.live.get(execution_id)
        return live if live is not None and live.kind == "agent" else None

    # -- start -----------------------------------------------------------------------------

    def start(self, record: dict[str, Any], argv: list[str], generation: int) -> LiveExecution:
        """Spawn ``argv`` for ``record`` at ``generation``; raises OSError if it cannot start."""
        execution_id = record["execution_id"]
        holder: list[LiveExecution] = []
        notifier = self._rt.notifier

        def on_output(data: bytes) -> None:
            live = holder[0]
            live.screen.feed(data)
            live.append_output(data)
            notifier.notify_output()

        rows, cols = int(record["rows"]), int(record["cols"])
        runtime = PtyRuntime(
            argv,
            env=self._rt.threads.env_for(record["thread_id"], execution_id),
            cwd=record["cwd"],
            rows=rows,
            cols=cols,
            on_output=on_output,
            on_exit=lambda status: self._exited(holder[0], status),
        )
        screen = TerminalScreen(cols=cols, rows=rows, respond=runtime.answer_query)
        live = LiveExecution(
            execution_id=execution_id,
            thread_id=record["thread_id"],
            kind="agent",
            generation=generation,
            journal=self._rt.live.journal_to_write(execution_id, new=False),
            runtime=runtime,
            screen=screen,
        )
        holder.append(live)
        try:
            runtime.start()
        except BaseException:
            live.journal.close()
            runtime.close()
            raise
        self._rt.live.add(live)
        self._watches[execution_id] = asyncio.get_running_loop().create_task(
            self._watch(record, live), name=f"agent-watch-{execution_id}"
        )
        return live

    # -- watch -----------------------------------------------------------------------------

    async def _watch(self, record: dict[str, Any], live: LiveExecution) -> None:
        """Recognise the screen each time output settles, until the runtime ends."""
        loop = asyncio.get_running_loop()
        seen = -1
        while not live.done.is_set():
            if live.activity_seq == seen:
                await self._rt.notifier.wait(1.0)
                continue
            first = loop.time()
            mark = live.activity_seq
            quiet_until = first + WATCH_QUIET_S
            while loop.time() < min(quiet_until, first + WATCH_MAX_S) and not live.done.is_set():
                await self._rt.notifier.wait(min(quiet_until, first + WATCH_MAX_S) - loop.time())
                if live.activity_seq != mark:
                    mark = live.activity_seq
                    quiet_until = loop.time() + WATCH_QUIET_S
            seen = live.activity_seq
            await live.screen.snapshot_async()  # emulate what arrived, off the hot path
            if live.done.is_set() or self._rt.live.get(live.execution_id) is not live:
                return
            decision, _ = recognize_record(record, live)
            state, attention = from_recognition(decision.state, decision.attention)
            if state is not None:
                self._on_recognized(live.execution_id, live, state, attention)

    # -- stop ------------------------------------------------------------------------------

    async def stop(self, execution_ids: list[str], stopping: Stopping) -> None:
        """End these agents' runtimes — their whole sessions: SIGHUP, then SIGKILL after a
        grace period — and wait for their exits to be recorded."""
        lives = [live for eid in execution_ids if (live := self.live(eid)) is not None]
        for live in lives:
            self._stopping[live.execution_id] = stopping
        leaders = [pid for live in lives if (pid := live.runtime.pid) is not None]
        # One end for the whole set: ending 30 sessions one by one is 30 sets of /proc scans.
        await kernel.end_sessions(leaders, HANGUP_GRACE_S)
        for live in lives:
            live.runtime.session_ended()

    def _exited(self, live: LiveExecution, status: ExitStatus) -> None:
        # Not stopped by Tether: the program died or quit on its own, also between turns,
        # when no turn is watching — that is an error, never a quiet idle (R25).
        stopping = self._stopping.pop(live.execution_id, None) or Stopping(
            "error", f"runtime_exited: {_describe(status)}")
        self._rt.finisher.finish(live, status.shell_style_code, reason=stopping.reason)
        self._watches.pop(live.execution_id, None)
        self._on_exit(live.execution_id, live, stopping)


def _describe(status: ExitStatus) -> str:
    if status.signal is not None:
        return f"killed by signal {status.signal}"
    return f"exit code {status.exit_code}"
