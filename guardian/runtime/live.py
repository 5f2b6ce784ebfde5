"""What the guardian holds in memory for an execution that has a runtime in this process."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from tether.guardian.history.journal import Journal
from tether.guardian.runtime.pty import PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen


@dataclass(eq=False)
class LiveExecution:
    """An execution whose output this guardian is receiving.

    ``runtime`` and ``screen`` are the execution's own for a background command and the
    thread's main shell's for a command typed into that shell.
    """

    execution_id: str
    thread_id: str
    kind: str
    generation: int
    journal: Journal
    runtime: PtyRuntime
    screen: TerminalScreen
    done: asyncio.Event = field(default_factory=asyncio.Event)
    exit_code: int | None = None
    activity_seq: int = 0

    def append_output(self, data: bytes) -> None:
        """The hot path: journal the bytes and count the activity. Nothing else."""
        self.journal.append(data)
        self.activity_seq += 1
