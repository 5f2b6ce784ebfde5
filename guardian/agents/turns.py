"""Turn recognition over live executions: ``exec.explain`` and ``exec.wait_turn``
(docs/tools.md#recognizers)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.recognize import Recognition, ScreenView, UnknownRecognizerError, recognize
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ExecExplainParams, ExecWaitTurnParams
from tether.protocol.results import ExplainResult, WaitTurnResult

if TYPE_CHECKING:
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.runtime.live import LiveExecution, LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.guardian.runtime.scope import Scope
    from tether.shared.store.catalog import Catalog

READY_STATES = frozenset({"awaiting_input", "awaiting_approval"})


def recognize_record(
    record: dict[str, Any], live: LiveExecution | None, recognizer: str = "auto"
) -> tuple[Recognition, dict[str, Any]]:
    """Recognition of an execution's current screen (live) or last screen, plus metadata.

    Synchronous and never stalling: with a large backlog it looks at the last snapshot
    taken, so async callers ``await live.screen.snapshot_async()`` first. For a managed
    agent, ``auto`` means the recognizer chosen at its launch."""
    if recognizer == "auto" and record.get("agent_recognizer"):
        recognizer = str(record["agent_recognizer"])
    if live is not None:
        snap = live.screen.snapshot_now()
        view = ScreenView(lines=snap.lines, title=snap.title)
        source = "live_screen"
    else:
        view = ScreenView.from_text(str(record.get("screen_text") or ""))
        source = "retained_screen"
    try:
        decision = recognize(view, recognizer, command=record.get("command"))
    except UnknownRecognizerError as exc:
        raise TetherError(ErrorCode.UNKNOWN_RECOGNIZER, str(exc), {"input_sent": False}) from None
    observation = {
        "detection_source": source,
        "screen_bytes_fed": live.screen.bytes_fed if live is not None else None,
        "output_activity_seq": live.activity_seq if live is not None else None,
        "execution_status": record["status"],
    }
    return decision, observation


async def refresh(live: LiveExecution | None) -> None:
    """Bring a live screen up to date without stalling the loop (then recognize it)."""
    if live is not None:
        await live.screen.snapshot_async()


class Turns:
    """``exec.explain`` and ``exec.wait_turn`` over this guardian's executions."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, notifier: ChangeNotifier,
        watch: TurnWatch,
    ) -> None:
        self._watch = watch
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._notifier = notifier

    def handlers(self) -> dict[str, Any]:
        return {"exec.explain": self.explain, "exec.wait_turn": self.wait_turn}

    async def explain(self, request: Request, params: ExecExplainParams) -> ExplainResult:
        """The whole recognition decision: recognizer, state, rule, priority, reason."""
        self._scope.thread_for(params)
        record = self._scope.record_for(params, params.execution_id)
        live = self._live.get(params.execution_id)
        await refresh(live)
        # Asking about it is what puts an observed execution under the guardian's watch.
        await self._watch.ensure(record, params.recognizer)
        decision, observation = recognize_record(record, live, params.recognizer)
        return ExplainResult.model_validate({
            "execution_id": params.execution_id, "recognition": decision.to_dict(),
            "observation": observation})

    async def wait_turn(self, request: Request, params: ExecWaitTurnParams) -> WaitTurnResult:
        """Wait until the program waits for input (or approval) and its output has been quiet
        for ``quiet_ms``; or it ends; or the timeout passes.

        An end is ``exited`` only when it was observed; an execution whose end nobody saw (its
        guardian was lost: the process may even live on) is ``unknown``, as its record says
        (docs/tools.md#unknown-is-not-success), never taken for an exit because this guardian does not hold
        it."""
        self._scope.thread_for(params)
        record = self._scope.record_for(params, params.execution_id)
        live = self._live.get(params.execution_id)
        await self._watch.ensure(record, params.recognizer)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.timeout_ms / 1000
        quiet_s = params.quiet_ms / 1000
        outcome = "timeout"
        while True:
            await refresh(live)
            decision, _ = recognize_record(record, live, params.recognizer)
            if live is None or live.done.is_set():
                outcome = "ended"
                break
            seen = live.activity_seq
            if decision.state in READY_STATES:
                # Ready now: it must stay quiet for quiet_ms to count as the end of a turn.
                quiet_until = min(deadline, loop.time() + quiet_s)
                while live.activity_seq == seen and loop.time() < quiet_until:
                    await self._notifier.wait(quiet_until - loop.time())
                if live.activity_seq == seen and loop.time() >= quiet_until and quiet_until <= deadline:
                    await refresh(live)
                    decision, _ = recognize_record(record, live, params.recognizer)
                    if decision.state in READY_STATES:
                        outcome = "turn_ready"
                        break
            if loop.time() >= deadline:
                break
            if live.activity_seq == seen:
                await self._notifier.wait(deadline - loop.time())
        record = self._catalog.get_execution(params.execution_id) or record
        if outcome == "ended":
            outcome = "exited" if record["status"] == "exited" else "unknown"
        return WaitTurnResult.model_validate({"outcome": outcome, "recognition": decision.to_dict(),
                "execution": self._live.view(record)})
