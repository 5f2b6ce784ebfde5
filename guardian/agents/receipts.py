"""Prompt delivery with receipts (docs/tools.md#prompts, docs/tools.md#once-only): once only, provably, never
resent.

A prompt is typed only when the target's recognizer says ``awaiting_input``. Before a byte
is typed the receipt is persisted as in progress (``delivered: "unknown"``, reason
``delivery_in_progress``), bound to the runtime identity (with this guardian's instance) and
generation, with an activity baseline; the moment Enter is written it is persisted as
delivered. A guardian that dies in between leaves the in-progress receipt, which the next one
turns into ``unknown`` with reason ``guardian_lost`` (``guardian/history/reconcile``): it was
typed, partly or wholly, or not at all, and nobody can say.
The receipt keeps three facts apart:

- ``delivered``: the bytes were written to the target's terminal (``"unknown"`` when that
  cannot be said, with a ``reason``);
- ``activity_observed``: after the baseline, the screen changed *and* the recognizer saw work
  or an approval question. The echo of the text, a stale idle screen and elapsed time never
  count; if the text itself looks like a work or approval marker, activity stays unconfirmed
  for the receipt's lifetime;
- ``wait_reached``: after activity, the program came back to waiting (input or approval).

The last two are completed by the guardian itself, from the turn log of its own watch
(``watch``): the baseline holds the log's position before the first byte, and every later
row of the same runtime generation is judged as it is written — activity by a row that
enters ``busy`` or ``awaiting_approval``, the wait by a later row (or that same one) that
enters ``awaiting_input`` or ``awaiting_approval``. A receipt read or waited on afterwards
returns what the log already decided, whoever was waiting meanwhile.

A repeat of a prompt id with the same text returns the stored receipt and types nothing; with
other text it is ``prompt_id_conflict``. Nothing here ever resends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.drafts import abbreviated, clear_draft, draft_on
from tether.guardian.agents.recognize import Recognition, ScreenView, UnknownRecognizerError, recognize
from tether.guardian.agents.turns import READY_STATES, recognize_record, refresh
from tether.guardian.runtime.inputs import refuse_long_line
from tether.guardian.runtime.waits import only_waiting
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_PROMPT_BYTES
from tether.protocol.methods import AgentPromptParams, AgentReceiptParams
from tether.protocol.results import DELIVERY_IN_PROGRESS, PromptResult
from tether.shared.store.store_errors import STORAGE_ERRORS

if TYPE_CHECKING:
    from tether.guardian.agents.recognize import Recognition
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.runtime.live import LiveExecution, LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.guardian.runtime.scope import Scope
    from tether.shared.clock import Clock
    from tether.shared.store.catalog import Catalog
    from tether.shared.store.turn_table import Turn

MAX_RECEIPTS_PER_GENERATION = 64
ACTIVITY_STATES = frozenset({"busy", "awaiting_approval"})
#: How long to wait for the typed text to reach the screen before pressing Enter, so a TUI
#: that treats one burst of input as a paste does not swallow the Enter into the text.
ECHO_WAIT_S = 0.5
#: Enter goes no sooner than this after the text, and only once the echo has been quiet for
#: ENTER_QUIET_S: Codex treats an Enter that follows a burst of typed characters within about
#: 120 ms as part of a paste (a newline in the draft), measured with Codex 0.171.
ENTER_GAP_S = 0.3
ENTER_QUIET_S = 0.15


def _screen_digest(live: LiveExecution) -> str:
    return hashlib.sha256(live.screen.snapshot_now().text.encode()).hexdigest()[:16]


def _restart_advice(record: dict[str, Any]) -> str:
    """What starts a gone agent again: resume refuses an archived one (unarchive resumes it)."""
    if record.get("kind") != "agent":
        return ""
    if record.get("archived_at") is not None:
        return "; the agent is archived: Agent unarchive resumes it"
    return "; Agent resume starts it again"


class PromptDesk:
    """``agent.prompt`` and ``agent.receipt`` over this guardian's executions."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, notifier: ChangeNotifier,
        clock: Clock, instance_id: str, watch: TurnWatch,
    ) -> None:
        self._watch = watch
        # Delivered receipts the watch still completes: execution id -> prompt id ->
        # (payload, receipt). The dict is the one the handlers answer with.
        self._open: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        watch.subscribe(self._on_look)
        self._instance_id = instance_id  # on each receipt: whose typing it was (reconcile)
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._notifier = notifier
        self._clock = clock

    def handlers(self) -> dict[str, Any]:
        return {"agent.prompt": self.prompt, "agent.receipt": self.receipt}

    async def prompt(self, request: Request | None, params: AgentPromptParams) -> PromptResult:
        self._scope.thread_for(params)
        size = len(params.text.encode())
        if size > MAX_PROMPT_BYTES:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"prompt text is {size} bytes; the limit is {MAX_PROMPT_BYTES}",
                {"input_sent": False, "limit": MAX_PROMPT_BYTES},
            )
        payload = hashlib.sha256(params.text.encode()).hexdigest()
        catalog = self._catalog
        record = self._scope.record_for(params, params.execution_id)
        stored = catalog.get_receipt(params.execution_id, params.prompt_id)
        if stored is not None:
            if stored[0] != payload:
                raise TetherError(
                    ErrorCode.PROMPT_ID_CONFLICT,
                    f"prompt_id {params.prompt_id!r} was already used with different text on "
                    "this execution; nothing was typed. Use a new prompt_id for new text.",
                    {"input_sent": False},
                )
            return PromptResult.model_validate({"receipt": stored[1], "replayed": True, "input_sent": False})
        live = self._live.get(params.execution_id)
        if live is None:
            raise TetherError(
                ErrorCode.NOT_RUNNING,
                f"execution {params.execution_id} is {record['status']}"
                + (f" ({record['reason']})" if record.get("reason") else "")
                + "; its runtime is gone and nothing was typed"
                + _restart_advice(record),
                {"input_sent": False, "status": record["status"]},
            )
        # One input lock per terminal, from the readiness check through the typing to Enter:
        # a second prompt (or any input) meanwhile is refused with target_busy, untyped.
        with live.runtime.claim_input() as claim:
            if catalog.count_receipts(params.execution_id, live.generation) >= MAX_RECEIPTS_PER_GENERATION:
                raise TetherError(
                    ErrorCode.RECEIPT_LIMIT,
                    f"this runtime (generation {live.generation}) already has "
                    f"{MAX_RECEIPTS_PER_GENERATION} prompt receipts; nothing was typed. A new "
                    "generation starts with none: Agent close, then resume (or launch a new "
                    "one)",
                    {"input_sent": False, "limit": MAX_RECEIPTS_PER_GENERATION},
                )
            # Under the guardian's watch from here on: the receipt is completed from its log.
            await self._watch.ensure(record, params.recognizer)
            await refresh(live)
            decision, _ = recognize_record(record, live, params.recognizer)
            if decision.state != "awaiting_input":
                raise TetherError(
                    ErrorCode.INPUT_NOT_READY,
                    f"the program is not waiting for input (recognized {decision.state}); "
                    "nothing was typed. Wait for its turn (Agent wait, or BashCommand "
                    "wait_for_turn) and try again.",
                    {"input_sent": False, "state": decision.state, "recognition": decision.to_dict()},
                )
            # A program reading whole lines would lose the tail of a longer one, silently.
            refuse_long_line(params.text, live.runtime.input_mode())
            # Never type into a draft: the text would merge with it into one prompt.
            decision = await self._empty_box(live, record, params, decision, claim)
            receipt: dict[str, Any] = {
                "prompt_id": params.prompt_id,
                "execution_id": params.execution_id,
                "generation": live.generation,
                "runtime": {**live.runtime.identity.to_dict(),
                            "guardian_instance_id": self._instance_id}
                if live.runtime.identity else None,
                "recognizer": decision.recognizer,
                "delivered": "unknown",
                "reason": DELIVERY_IN_PROGRESS,
                "activity_observed": False,
                "wait_reached": False,
                "activity_unconfirmable": self._looks_like_marker(params.text, decision.recognizer),
                "baseline": {
                    "output_activity_seq": live.activity_seq,
                    "screen_sha256": _screen_digest(live),
                    "state": decision.state,
                    "at_unix_ms": self._clock.now_ms(),
                    # Turn-log rows after this position are the program's reaction.
                    "turn_seq": self._watch.log.position(),
                },
                "observed_at_unix_ms": self._clock.now_ms(),
            }
            # Persisted before the first byte: a guardian that dies while typing leaves a
            # receipt that says so (reconciled to guardian_lost), never "not delivered".
            catalog.put_receipt(params.execution_id, params.prompt_id, live.generation, payload, receipt)
            try:
                entered = await self._type(live, params.text, claim)
            except BaseException as exc:
                # Typing stopped part-way (or never began, when the first write took
                # nothing): say which, instead of leaving "in progress" behind.
                code = str(exc.code) if isinstance(exc, TetherError) else "interrupted"
                sent = exc.data.get("input_sent") if isinstance(exc, TetherError) else "unknown"
                receipt.update(delivered=False if sent is False else "unknown", reason=code,
                               observed_at_unix_ms=self._clock.now_ms())
                with contextlib.suppress(*STORAGE_ERRORS):  # the typing error is the news
                    catalog.put_receipt(params.execution_id, params.prompt_id, live.generation,
                                        payload, receipt)
                raise
            # Written the moment Enter is (no await in between): the window in which a
            # crash leaves "unknown" is the typing itself, not the program's reaction.
            receipt["delivered"] = True
            del receipt["reason"]
            receipt["observed_at_unix_ms"] = self._clock.now_ms()
            catalog.put_receipt(params.execution_id, params.prompt_id, live.generation, payload, receipt)
            self._follow(payload, receipt)
            await self._reacted(live, entered)
        await self._observe(receipt, live, record, payload, params.timeout_ms / 1000)
        return PromptResult.model_validate({"receipt": receipt, "replayed": False, "input_sent": True})

    async def receipt(self, request: Request, params: AgentReceiptParams) -> PromptResult:
        """The stored receipt, observed further for up to ``timeout_ms`` while still live."""
        self._scope.thread_for(params)
        record = self._scope.record_for(params, params.execution_id)
        stored = self._catalog.get_receipt(params.execution_id, params.prompt_id)
        if stored is None:
            raise TetherError(
                ErrorCode.NOT_FOUND,
                f"no receipt for prompt_id {params.prompt_id!r} on this execution",
            )
        payload, receipt = stored
        followed = self._open.get(params.execution_id, {}).get(params.prompt_id)
        if followed is not None:
            payload, receipt = followed  # the live copy: the watch completes it
        live = self._live.get(params.execution_id)
        if live is not None and live.generation == receipt["generation"] and receipt["delivered"] is True:
            if followed is None and not receipt["wait_reached"]:
                self._follow(payload, receipt)
            await self._observe(receipt, live, record, payload, params.timeout_ms / 1000)
        return PromptResult.model_validate({"receipt": receipt, "replayed": True, "input_sent": False})

    async def _empty_box(
        self, live: LiveExecution, record: dict[str, Any], params: AgentPromptParams,
        decision: Recognition, claim: object,
    ) -> Recognition:
        """The verdict on a screen whose input box holds no draft: as it is, or after clearing
        the draft with the program's own keys when the caller asked (``replace_draft``).
        Refuses (``input_not_empty``, nothing of the prompt typed) otherwise."""
        draft = draft_on(live, decision.recognizer)
        if draft is None:
            return decision
        if not params.replace_draft:
            raise TetherError(
                ErrorCode.INPUT_NOT_EMPTY,
                f"the input box already holds text ({abbreviated(draft)}); typing would merge "
                "the prompt into it, so nothing was typed. Pass replace_draft: true to clear it "
                "with the program's own keys first, or clear it yourself and try again.",
                {"input_sent": False, "draft": abbreviated(draft), "draft_cleared": False},
            )
        return await clear_draft(live, record, params.recognizer, decision, draft, claim,
                                 self._notifier)

    def _looks_like_marker(self, text: str, recognizer: str) -> bool:
        """docs/tools.md#once-only: text that itself reads as work or approval can never prove activity."""
        try:
            state = recognize(ScreenView.from_text(text), recognizer).state
        except UnknownRecognizerError:
            return True
        return state in ACTIVITY_STATES

    async def _type(self, live: LiveExecution, text: str, claim: object) -> int:
        """Type the text, then Enter once its echo settled; returns the output sequence from
        just before Enter. Raises ``input_sent: False`` only when not a byte was taken."""
        loop = asyncio.get_running_loop()
        before = live.activity_seq
        try:
            try:
                await live.runtime.write(text.encode(), timeout_s=5.0, claim=claim)
            except TimeoutError as exc:
                if getattr(exc, "written", None) == 0:
                    raise TetherError(
                        ErrorCode.INPUT_INCOMPLETE,
                        f"the program stopped reading input before the prompt was typed "
                        f"({exc}); nothing was typed",
                        {"input_sent": False},
                    ) from None
                raise
            typed_at = loop.time()
            deadline = typed_at + ECHO_WAIT_S
            while live.activity_seq == before and loop.time() < deadline:
                await self._notifier.wait(deadline - loop.time())
            # Let the echo settle, so the Enter reads as a key press and not as pasted text.
            give_up = loop.time() + 2 * ECHO_WAIT_S
            while loop.time() < give_up:
                seen = live.activity_seq
                quiet_until = max(loop.time() + ENTER_QUIET_S, typed_at + ENTER_GAP_S)
                while live.activity_seq == seen and loop.time() < quiet_until:
                    await self._notifier.wait(quiet_until - loop.time())
                if live.activity_seq == seen:
                    break
            before_enter = live.activity_seq
            await live.runtime.write(b"\r", timeout_s=5.0, claim=claim)
            return before_enter
        except TimeoutError as exc:
            raise TetherError(
                ErrorCode.INPUT_INCOMPLETE,
                f"the program stopped reading while the prompt was typed ({exc}); how much of "
                "it arrived is unknown, and it will not be resent",
                {"input_sent": "unknown"},
            ) from None
        except OSError as exc:
            raise TetherError(
                ErrorCode.NOT_RUNNING,
                f"the terminal went away while the prompt was typed ({exc}); how much of it "
                "arrived is unknown, and it will not be resent",
                {"input_sent": "unknown"},
            ) from None

    async def _reacted(self, live: LiveExecution, before_enter: int) -> None:
        """Keep the input lock until the program has reacted to Enter (at most
        :data:`ECHO_WAIT_S`): until then its screen still shows it waiting, and a second
        prompt would pass the check."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ECHO_WAIT_S
        while live.activity_seq == before_enter and loop.time() < deadline:
            await self._notifier.wait(deadline - loop.time())

    async def _observe(
        self, receipt: dict[str, Any], live: LiveExecution, record: dict[str, Any],
        payload: str, timeout_s: float,
    ) -> None:
        """Wait until the watch has seen the turn come back, the runtime end, or
        ``timeout_s`` pass; the facts are the watch's (see :meth:`_complete`)."""
        only_waiting()  # the receipt is written: a live upgrade may cut the wait from here
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not receipt["wait_reached"] and not live.done.is_set():
            left = deadline - loop.time()
            if left <= 0:
                break
            await self._notifier.wait(left, output=False)
        if receipt.get("state") is None:
            verdict = self._watch.current(receipt["execution_id"])
            if verdict is not None:
                receipt["state"] = verdict.state

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover(self) -> list[Any]:
        """The delivered receipts the watch still completes: ``[payload, receipt]`` each."""
        return [[payload, receipt] for following in self._open.values()
                for payload, receipt in following.values()]

    def adopt(self, handed: list[Any]) -> None:
        """Go on completing the receipts the code before a live upgrade followed (and judge
        the turn rows written meanwhile at once)."""
        for payload, receipt in handed:
            self._follow(str(payload), dict(receipt))

    # -- completion from the turn log ------------------------------------------------------

    def _follow(self, payload: str, receipt: dict[str, Any]) -> None:
        """Complete a delivered receipt from the turn log, now and as rows come."""
        if "turn_seq" not in receipt.get("baseline", {}):
            return  # delivered by a Tether that kept no turn log: nothing to judge from
        self._open.setdefault(receipt["execution_id"], {})[receipt["prompt_id"]] = (payload, receipt)
        self._complete(payload, receipt)

    def _on_look(self, live: LiveExecution, verdict: Recognition, turn: Turn | None) -> None:
        """The watch looked (inside its transaction): judge the new row, if it wrote one."""
        following = self._open.get(live.execution_id)
        if turn is None or not following:
            return
        for payload, receipt in list(following.values()):
            if receipt["generation"] != live.generation:
                following.pop(receipt["prompt_id"], None)
                continue
            self._complete(payload, receipt)

    def _complete(self, payload: str, receipt: dict[str, Any]) -> None:
        """Activity and wait facts from the rows after the baseline; persisted if changed."""
        execution_id = receipt["execution_id"]
        rows = self._watch.log.since([execution_id], int(receipt["baseline"]["turn_seq"]))
        before = (receipt["activity_observed"], receipt["wait_reached"], receipt.get("state"))
        for row in rows.get(execution_id, []):
            if row.generation != receipt["generation"]:
                continue
            receipt["state"] = row.to_state
            if (not receipt["activity_observed"] and not receipt["activity_unconfirmable"]
                    and row.to_state in ACTIVITY_STATES):
                receipt["activity_observed"] = True
            if receipt["activity_observed"] and row.to_state in READY_STATES:
                receipt["wait_reached"] = True
                break
        if receipt["wait_reached"]:
            self._open.get(execution_id, {}).pop(receipt["prompt_id"], None)
        if (receipt["activity_observed"], receipt["wait_reached"], receipt.get("state")) != before:
            receipt["observed_at_unix_ms"] = self._clock.now_ms()
            self._catalog.put_receipt(execution_id, receipt["prompt_id"], receipt["generation"],
                                      payload, receipt)
