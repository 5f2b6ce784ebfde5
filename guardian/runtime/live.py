"""What the guardian holds in memory for executions that have a runtime in this process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.guardian.history.journal import Journal
from tether.guardian.history.records import list_view, record_view
from tether.guardian.runtime.pty import PtyRuntime
from tether.guardian.terminal.frames import frame_pieces
from tether.guardian.terminal.screen import TerminalScreen
from tether.shared.segments import Figures, OutputSizes


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
    #: The whole record as this guardian inserted it (Catalog.insert_execution): its end is
    #: written against it without reading the row first, unless the row changed since.
    inserted_record: dict[str, Any] | None = None
    #: The whole record as its end was written (None until then, or when the disk refused
    #: it): what the reply to the request that waited for the end reports.
    ended_record: dict[str, Any] | None = None
    #: Called before each frame of output reaches the screen, when set (the turn watch's
    #: look at a frame it had no time to look at before the next one came).
    before_feed: Callable[[], None] | None = None

    def take_output(self, data: bytes) -> None:
        """A chunk read from a terminal of its own (a background command's, an agent's): the
        screen (lazy) and the journal. Under watch, the chunk reaches the screen frame by
        frame (``terminal/frames``), the watch's look before each when one is due: two frames
        read together are still two frames to it."""
        before = self.before_feed
        if before is None:
            self.screen.feed(data)
        else:
            for piece in frame_pieces(data):
                before()
                self.screen.feed(piece)
        self.append_output(data)

    def append_output(self, data: bytes) -> None:
        """The hot path: journal the bytes and count the activity. Nothing else."""
        self.journal.append(data)
        self.activity_seq += 1


#: Kinds of execution with a terminal and a process of their own: what the caps on running
#: executions count (a command typed into a main shell runs in the shell's terminal).
OWN_RUNTIME_KINDS = frozenset({"background", "agent"})


class LiveTable:
    """The executions running in this guardian, by id. Only starting and finishing change it."""

    def __init__(
        self, journals: Path, figures: Callable[[str], Figures | None] | None = None,
        sizes: OutputSizes | None = None,
    ) -> None:
        """``figures``: a record's output figures by execution id (the catalog's), which
        find an ended execution's journal without listing the journals directory.
        ``sizes``: how much of each execution's output its journal keeps."""
        self._journals = journals
        self._figures = figures
        self.sizes = sizes or OutputSizes()
        self._live: dict[str, LiveExecution] = {}
        # Executions of OWN_RUNTIME_KINDS per thread, and in all: counted as they come and
        # go, so a start's check of the caps costs no walk of the table.
        self._own: dict[str, int] = {}
        self._own_total = 0

    def add(self, live: LiveExecution) -> None:
        self.remove(live.execution_id)  # a resumed agent's new runtime replaces its old one
        self._live[live.execution_id] = live
        if live.kind in OWN_RUNTIME_KINDS:
            self._own[live.thread_id] = self._own.get(live.thread_id, 0) + 1
            self._own_total += 1

    def remove(self, execution_id: str) -> None:
        live = self._live.pop(execution_id, None)
        if live is not None and live.kind in OWN_RUNTIME_KINDS:
            left = self._own[live.thread_id] - 1
            if left:
                self._own[live.thread_id] = left
            else:
                del self._own[live.thread_id]
            self._own_total -= 1

    def running(self, thread_id: str) -> tuple[int, int]:
        """Background commands and managed agents running: ``(in this thread, in all)``."""
        return self._own.get(thread_id, 0), self._own_total

    def get(self, execution_id: str) -> LiveExecution | None:
        return self._live.get(execution_id)

    def __iter__(self) -> Iterator[LiveExecution]:
        """A copy: finishing while iterating is safe."""
        return iter(list(self._live.values()))

    def __bool__(self) -> bool:
        return bool(self._live)

    def ids(self) -> list[str]:
        return sorted(self._live)

    def protected(self) -> set[str]:
        """Ids retention must never evict."""
        return set(self._live)

    def journal(self, execution_id: str) -> Journal:
        """The execution's journal: the open one while it runs, else one opened to read."""
        live = self._live.get(execution_id)
        if live is not None:
            return live.journal
        figures = self._figures(execution_id) if self._figures is not None else None
        return Journal(self._journals, execution_id, self.sizes.tail, head=self.sizes.head,
                       figures=figures)

    def journal_to_write(self, execution_id: str, *, new: bool) -> Journal:
        """The journal a starting execution appends to: a new one, or (``new`` false: a
        resumed agent's next generation) the one it has, found on disk."""
        return Journal(self._journals, execution_id, self.sizes.tail, head=self.sizes.head,
                       new=new)

    def view(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as clients see it, with live output figures if it still runs."""
        return record_view(record, self._live.get(record["execution_id"]))

    def listed(self, record: dict[str, Any]) -> dict[str, Any]:
        """:meth:`view` in short, as listings carry records (``records.list_view``)."""
        return list_view(record, self._live.get(record["execution_id"]))

    def hangup_all(self) -> None:
        for live in self:
            live.runtime.hangup()

    async def wait_all_done(self, timeout_s: float) -> None:
        """Wait for every running execution to end, at most ``timeout_s``."""
        waits = [live.done.wait() for live in self._live.values()]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), timeout_s)
