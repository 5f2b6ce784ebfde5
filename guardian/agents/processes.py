"""Managed agents' runtimes: their own PTYs, their exits, and the state watch (docs/tools.md#agent-states,
docs/tools.md#deaths-cancel-and-notices).

An agent runs its argv directly (no shell) in a PTY of its own, with Tether's environment
stamp (docs/tools.md#trees-and-parents). Its output goes to the execution's journal and lazy screen like a
background
command's. The guardian's turn watch (``watch``) looks at its screen as output settles; each
look moves the state (``awaiting_input`` -> idle, ``busy``/``awaiting_approval`` -> running)
in the same step as it writes the turn log, so the two never disagree; the
runtime's exit moves it to ``closed`` when Tether closed it on purpose, else to ``error`` —
also between turns, when nothing else is looking (docs/tools.md#deaths-cancel-and-notices).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.guardian.runtime import kernel
from tether.guardian.runtime.handover import adopt_own_terminal
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
from tether.shared.agent_states import AgentState, from_recognition

if TYPE_CHECKING:
    from tether.guardian.agents.recognize import Recognition
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.runtime.assembly import Runtime
    from tether.shared.store.turn_table import Turn

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
        watch: TurnWatch,
        *,
        on_recognized: Callable[[str, LiveExecution, AgentState, str | None], None],
        on_exit: Callable[[str, LiveExecution, Stopping], None],
    ) -> None:
        self._rt = runtime
        self._watch = watch
        self._on_recognized = on_recognized
        self._on_exit = on_exit
        self._stopping: dict[str, Stopping] = {}
        watch.subscribe(self._looked)

    def live(self, execution_id: str) -> LiveExecution | None:
        live = self._rt.live.get(execution_id)
        return live if live is not None and live.kind == "agent" else None

    # -- start -----------------------------------------------------------------------------

    def start(self, record: dict[str, Any], argv: list[str], generation: int, *,
              extra_env: Mapping[str, str] | None = None) -> LiveExecution:
        """Spawn ``argv`` for ``record`` at ``generation``, with the launch's own variables
        (``extra_env``) over the guardian's; raises OSError if it cannot start."""
        execution_id = record["execution_id"]
        holder: list[LiveExecution] = []
        notifier = self._rt.notifier

        def on_output(data: bytes) -> None:
            holder[0].take_output(data)
            notifier.notify_output()

        rows, cols = int(record["rows"]), int(record["cols"])
        if extra_env and "PATH" in extra_env and "/" not in argv[0]:
            # The launch's PATH chooses the program too (the PTY library would look on the
            # guardian's own); nothing found there leaves the name as it is, to fail as usual.
            found = shutil.which(argv[0], path=extra_env["PATH"])
            argv = [found, *argv[1:]] if found else argv
        runtime = PtyRuntime(
            argv,
            env={**self._rt.threads.env_for(record["thread_id"], execution_id),
                 **(extra_env or {})},
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
        self._watch.start(record, live)  # "auto": the recognizer chosen at launch
        return live

    def adopt(self, record: dict[str, Any], entry: dict[str, Any]) -> LiveExecution:
        """An agent's runtime the code before a live upgrade ran, taken over: its process
        adopted, its exit handled as ever, its turn watched from its last logged state."""
        live = adopt_own_terminal(self._rt, entry, self._exited)
        self._watch.start(record, live)
        return live

    def stopping(self) -> bool:
        """Some agent's runtime is being ended on purpose right now."""
        return bool(self._stopping)

    # -- watch -----------------------------------------------------------------------------

    def _looked(self, live: LiveExecution, verdict: Recognition, turn: Turn | None) -> None:
        """A look of the turn watch: an agent's verdict moves its state in the same step."""
        if live.kind != "agent" or self._rt.live.get(live.execution_id) is not live:
            return
        state, attention = from_recognition(verdict.state, verdict.attention)
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
        # when no turn is watching — that is an error, never a quiet idle
        # (docs/tools.md#deaths-cancel-and-notices).
        stopping = self._stopping.pop(live.execution_id, None) or Stopping(
            "error", f"runtime_exited: {_describe(status)}")
        self._rt.finisher.finish(live, status.shell_style_code, reason=stopping.reason)
        self._on_exit(live.execution_id, live, stopping)


def _describe(status: ExitStatus) -> str:
    if status.signal is not None:
        return f"killed by signal {status.signal}"
    return f"exit code {status.exit_code}"
