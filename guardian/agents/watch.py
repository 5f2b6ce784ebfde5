"""The guardian's own turn watch: every execution with a recognizer, looked at whether or not
anyone waits, each recognized state change written to the turn log (``shared/store/turn_table``).

Which executions are watched:

- a managed agent (kind ``agent``), from its launch or resume until its runtime ends;
- an observed execution (a ``command`` or ``background`` one running anything) from the
  first time a recognizer is asked about it — ``explain``, ``wait`` with a recognizer event,
  ``wait_for_turn``, ``prompt``, an ``Agent`` listing (which explains every agent CLI it
  lists) — until it ends. Looking is what makes it an agent worth watching: a build log
  nobody asks about costs nothing.

Recognition stays off the PTY read path (the reader only journals bytes and counts them). A
watch task wakes on output and looks at the screen twice per burst of output:

- a *quick look* once output has been quiet for :data:`QUICK_QUIET_S` (a frame is drawn in
  one write): only a definite verdict (``awaiting_input``, ``busy``, ``awaiting_approval``)
  counts, so a turn of a few milliseconds is still seen, while a half-drawn frame (which
  reads ``unknown``) moves nothing;
- a *settled look* once output has been quiet for :data:`LOOK_QUIET_S`: whatever it sees
  counts, ``unknown`` too. A program that never pauses is looked at every
  :data:`MAX_LOOK_S`.

A quick look can come late: the guardian's loop may be busy (or the machine loaded) for
longer than a short turn shows its busy frame, and then reads that frame and the next one
back to back, even in one read. So the reader feeds a watched execution's screen frame by
frame (``terminal/frames``), and when a frame comes while the one before it was never looked
at, the watch looks at the screen *before* the new frame reaches it
(``LiveExecution.before_feed``).
That look is taken only while the emulator has no backlog to speak of
(``TerminalScreen.settled``) and within a budget (:data:`READER_LOOKS_PER_S`), so a flood of
output never pays for it and a chatty program pays a bounded share. (A chunk may end in
the middle of a frame; such a look counts only a definite state, like a quick look.) (Commands typed into the
main shell share its reader and get the timer looks only.)

Each look is one synchronous step: the verdict, the turn row, and what listeners derive
from it (a managed agent's ``agent_state``, a receipt's ``activity_observed`` and
``wait_reached``) are written in one catalog transaction, so they never disagree.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.recognize import Recognition
from tether.guardian.agents.turns import recognize_record
from tether.shared.store.turn_table import Turn, TurnLog

if TYPE_CHECKING:
    from tether.guardian.runtime.live import LiveExecution, LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.shared.store.catalog import Catalog

log = logging.getLogger(__name__)

#: A pause this long ends a frame: at most 250 quick looks a second, for a program that
#: redraws that often (a spinner redraws a few times a second; a flood of output never pauses).
QUICK_QUIET_S = 0.004
#: The reader's looks at frames nobody looked at (a loaded machine reads a short turn's two
#: frames late and back to back): at most READER_LOOKS in a row and READER_LOOKS_PER_S on
#: average (a look costs about 2 ms on the development VM).
READER_LOOKS = 3
READER_LOOKS_PER_S = 50.0
LOOK_QUIET_S = 0.04
MAX_LOOK_S = 0.3
DEFINITE = frozenset({"awaiting_input", "busy", "awaiting_approval"})

#: ``(live, verdict, turn or None)``, called inside the look's transaction.
Listener = Callable[["LiveExecution", Recognition, "Turn | None"], None]


@dataclass(slots=True)
class Watched:
    """One execution under watch."""

    live: LiveExecution
    record: dict[str, Any]
    recognizer: str
    state: str | None = None  # the last state written to the log
    verdict: Recognition | None = None  # the last look's verdict
    fed: int = 0  # frames fed to the screen so far (each after a _before_feed)
    looked_fed: int = -1  # ``fed`` when the last look was taken
    last_output: float = 0.0  # time.monotonic() of the last chunk
    budget: float = READER_LOOKS  # reader looks left (refilled at READER_LOOKS_PER_S)
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class TurnWatch:
    """Watches executions' screens and keeps their turn log."""

    def __init__(self, *, catalog: Catalog, live: LiveTable, notifier: ChangeNotifier) -> None:
        self.log = TurnLog(catalog)
        self._catalog = catalog
        self._live = live
        self._notifier = notifier
        self._watched: dict[str, Watched] = {}
        self._listeners: list[Listener] = []
        self._enders: list[Callable[[LiveExecution], None]] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` after every look (also when the state did not change), in the
        order of subscription."""
        self._listeners.append(listener)

    def on_end(self, listener: Callable[[LiveExecution], None]) -> None:
        """Call ``listener`` when a watch ends: its runtime ended or was replaced."""
        self._enders.append(listener)

    # -- which executions ------------------------------------------------------------------

    def watching(self, execution_id: str) -> Watched | None:
        watched = self._watched.get(execution_id)
        if watched is not None and self._live.get(execution_id) is not watched.live:
            return None  # its runtime ended (or was replaced): the watch is over
        return watched

    def start(self, record: dict[str, Any], live: LiveExecution, recognizer: str = "auto") -> Watched:
        """Watch ``live`` from now on (a managed agent at launch: no first look until it
        draws). Idempotent for the same runtime."""
        current = self.watching(live.execution_id)
        if current is not None:
            if recognizer != "auto" and recognizer != current.recognizer:
                current.recognizer = recognizer
            return current
        last = self.log.latest(live.execution_id)
        watched = Watched(live=live, record=record, recognizer=recognizer,
                          state=last.to_state if last is not None and last.generation == live.generation
                          else None)
        self._watched[live.execution_id] = watched
        live.before_feed = lambda: self._before_feed(watched)
        watched.task = asyncio.get_running_loop().create_task(
            self._run(watched), name=f"turn-watch-{live.execution_id}")
        return watched

    async def ensure(self, record: dict[str, Any], recognizer: str = "auto") -> Recognition | None:
        """Watch this execution if it runs here, and look at it now: the verdict (None when
        it has no runtime here). Its current state is in the log when this returns."""
        live = self._live.get(record["execution_id"])
        if live is None:
            return None
        self.start(record, live, recognizer)
        return await self.look_now(record["execution_id"])

    async def look_now(self, execution_id: str) -> Recognition | None:
        """A settled look at once (the screen brought up to date first)."""
        watched = self.watching(execution_id)
        if watched is None:
            return None
        await watched.live.screen.snapshot_async()
        if self.watching(execution_id) is not watched:
            return None
        return self._look(watched, settled=True)

    def current(self, execution_id: str) -> Recognition | None:
        """The last look's verdict of a watched execution."""
        watched = self.watching(execution_id)
        return watched.verdict if watched is not None else None

    def summary(self, execution_id: str) -> dict[str, Any] | None:
        """The short verdict records carry as ``recognition``: the last look's while it
        runs here, else the last state the log holds (rule and reason as then)."""
        verdict = self.current(execution_id)
        if verdict is not None:
            return verdict.summary()
        last = self.log.latest(execution_id)
        if last is None:
            return None
        return {"state": last.to_state, "attention": None, "rule": last.rule,
                "recognizer": last.recognizer, "reason": "last_recorded"}

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover(self) -> list[dict[str, Any]]:
        """The executions watched besides managed agents (whose watch starts with their
        runtime), with the recognizer each was asked about."""
        return [{"execution_id": execution_id, "recognizer": watched.recognizer}
                for execution_id, watched in self._watched.items()
                if watched.live.kind != "agent" and self.watching(execution_id) is watched]

    def adopt(self, handed: list[dict[str, Any]]) -> None:
        """Watch again what the code before a live upgrade watched (runtimes adopted first)."""
        for item in handed:
            live = self._live.get(item["execution_id"])
            record = self._catalog.get_execution(item["execution_id"])
            if live is not None and record is not None:
                self.start(record, live, item["recognizer"])

    # -- looking ---------------------------------------------------------------------------

    async def _run(self, watched: Watched) -> None:
        try:
            await self._watch(watched)
        except Exception:
            log.exception("turn watch of %s failed", watched.live.execution_id)
        finally:
            watched.live.before_feed = None
            if self._watched.get(watched.live.execution_id) is watched:
                del self._watched[watched.live.execution_id]
            for ender in self._enders:
                try:
                    ender(watched.live)
                except Exception:
                    log.exception("end of the watch of %s: a listener failed",
                                  watched.live.execution_id)

    async def _watch(self, watched: Watched) -> None:
        live = watched.live
        loop = asyncio.get_running_loop()
        seen = -1  # output already looked at (settled); -1: look once at the start
        quick_seen = -1
        first: float | None = None  # when output began that no settled look has seen yet
        while not live.done.is_set():
            if live.activity_seq == seen:
                await self._notifier.wait(1.0)
                continue
            if first is None:
                first = loop.time()
            paused = await self._pause(live, QUICK_QUIET_S)
            overdue = loop.time() >= first + MAX_LOOK_S
            if not paused and not overdue:
                continue  # still drawing
            if paused and live.activity_seq != quick_seen:
                quick_seen = live.activity_seq
                await live.screen.snapshot_async()
                if self.watching(live.execution_id) is not watched:
                    return
                self._look(watched, settled=False)
            if not overdue and not await self._pause(live, LOOK_QUIET_S - QUICK_QUIET_S):
                continue  # a new burst: it gets its own quick look
            seen, first = live.activity_seq, None
            await live.screen.snapshot_async()
            if live.done.is_set() or self.watching(live.execution_id) is not watched:
                return
            self._look(watched, settled=True)

    async def _pause(self, live: LiveExecution, quiet_s: float) -> bool:
        """True once no output came for ``quiet_s``; False as soon as some does."""
        loop = asyncio.get_running_loop()
        mark = live.activity_seq
        until = loop.time() + quiet_s
        while not live.done.is_set() and live.activity_seq == mark:
            left = until - loop.time()
            if left <= 0:
                return True
            await self._notifier.wait(left)
        return live.activity_seq == mark

    def _before_feed(self, watched: Watched) -> None:
        """On the reader's path, before a chunk is fed: look at the frame before it if it
        was never looked at (see the module's docstring)."""
        live = watched.live
        now = time.monotonic()
        gap = now - watched.last_output
        watched.last_output = now
        watched.budget = min(READER_LOOKS, watched.budget + gap * READER_LOOKS_PER_S)
        if (watched.budget >= 1 and watched.looked_fed != watched.fed
                and live.screen.settled and self._watched.get(live.execution_id) is watched):
            watched.budget -= 1
            try:
                live.screen.snapshot()  # settled: a small backlog at most
                self._look(watched, settled=False)
            except Exception:  # the reader must go on whatever a look meets (a full disk)
                log.exception("turn watch of %s could not look", live.execution_id)
        watched.fed += 1  # the frame about to be fed

    def _look(self, watched: Watched, *, settled: bool) -> Recognition:
        """Recognize the (already emulated) screen; write a turn row when the state changed;
        tell the listeners. One transaction."""
        live = watched.live
        verdict, _ = recognize_record(watched.record, live, watched.recognizer)
        watched.looked_fed = watched.fed
        if not settled and verdict.state not in DEFINITE:
            return watched.verdict or verdict  # maybe a half-drawn frame: no evidence
        turn: Turn | None = None
        with self._catalog.transaction():
            if verdict.state != watched.state:
                turn = self.log.record(
                    live.execution_id, live.generation, watched.state, verdict.state,
                    rule=verdict.rule, recognizer=verdict.recognizer)
                watched.state = verdict.state
            watched.verdict = verdict
            for listener in self._listeners:
                listener(live, verdict, turn)
        if turn is not None:
            self._notifier.notify()
        return verdict
