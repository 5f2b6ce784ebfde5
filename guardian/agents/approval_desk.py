"""Approvals as records (docs/tools.md#approvals): every question a watched program asks,
what it asks, how it was answered; ``agent.approvals`` and ``agent.respond``.

The turn watch (``watch``) looks at every execution with a recognizer. When a look sees
``awaiting_approval``, this desk reads the question with the program's rule file
(``recognize/asking``: what is asked, the options and the key of each, the region of the
screen it came from) and stores a pending record — in the look's own transaction, so the
agent's ``approval`` notification, written by the same step, can name it. From then on it
listens to the input typed into that terminal (whoever types: ``respond``, ``send_keys``, a
person in ``tether attach --write``). When a look sees the program waiting for input or busy
again, the record is resolved, with how:

- ``respond`` typed an option: that option's kind (``approved``, ``denied``, ``other``);
- other input was typed meanwhile: the option whose keys it ends with, or Enter on the option
  the screen had selected, or a bare Escape as the rule file's ``escape`` says; else ``other``;
- nothing was typed (the program moved on by itself): ``denied`` when the rule file's
  ``denied`` text shows, else ``other``.

A question replaced by another one on screen resolves the first and records the second. A
runtime that ends or is replaced resolves its record ``unknown``; so does a guardian that
died (``history/reconcile``, by the next guardian).

``respond`` answers once: the response is stored before a key is typed and a repeat returns
it, typing nothing. It types only while the very question is still on screen (a fresh look,
under the terminal's input lock); otherwise ``approval_stale``, nothing typed. Its reply says
whether the screen left the question (``left_approval``), as a prompt's receipt says whether
the turn came back.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.recognize import default_rule_sets
from tether.guardian.agents.recognize.asking import Asked, keys_bytes, read_request
from tether.guardian.agents.recognize.model import ScreenView
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import AgentApprovalsParams, AgentRespondParams, AgentScoped
from tether.protocol.results import AgentApprovalsResult, AgentRespondResult
from tether.shared.store.store_errors import STORAGE_ERRORS

if TYPE_CHECKING:
    from tether.guardian.agents.notify_hook import NoticeHook
    from tether.guardian.agents.recognize import Recognition
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.runtime.live import LiveExecution, LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.guardian.runtime.scope import Scope
    from tether.shared.clock import Clock
    from tether.shared.store.catalog import Catalog
    from tether.shared.store.turn_table import Turn

#: Input kept per open question, to tell which option it chose (the tail is what counts).
TYPED_TAIL = 64
#: Between two keys of an answer that takes several (OpenCode's arrows, then Enter).
KEY_GAP_S = 0.05
HOW = {"approve": "approved", "deny": "denied", "other": "other"}
LEFT = frozenset({"awaiting_input", "busy"})


@dataclass(slots=True)
class _Open:
    """A pending approval this guardian watches."""

    record: dict[str, Any]
    asked: Asked
    live: LiveExecution
    opened_at: float = 0.0  # loop time the question was first seen
    typed: bytearray = field(default_factory=bytearray)
    responded: str | None = None  # the option respond typed

    def seen(self, data: bytes) -> None:
        self.typed += data
        del self.typed[:-TYPED_TAIL]


class ApprovalDesk:
    """Records questions from the turn watch; ``agent.approvals`` and ``agent.respond``."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, notifier: ChangeNotifier,
        clock: Clock, instance_id: str, watch: TurnWatch, hook: NoticeHook,
    ) -> None:
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._notifier = notifier
        self._clock = clock
        self._instance_id = instance_id
        self._watch = watch
        self.hook = hook
        self._open: dict[str, _Open] = {}  # execution id -> its pending approval
        watch.subscribe(self._on_look)
        watch.on_end(self._on_end)

    def handlers(self) -> dict[str, Any]:
        return {"agent.approvals": self.approvals, "agent.respond": self.respond}

    # -- from the turn watch (inside the look's transaction) --------------------------------

    def _on_look(self, live: LiveExecution, verdict: Recognition, turn: Turn | None) -> None:
        current = self._open.get(live.execution_id)
        if verdict.state != "awaiting_approval":
            if current is not None and verdict.state in LEFT:
                self._resolve(current, *self._how(current, live))
            return
        if current is not None and current.live is not live:
            self._resolve(current, "unknown", "runtime", "generation_changed")
            current = None
        asked = self._read(live, verdict)
        if current is not None:
            if asked.fingerprint == current.asked.fingerprint:
                current.asked = asked  # the selection may have moved
                return
            before = current.asked.request
            if before["detail"] is None and before["question"] == asked.request["question"] \
                    and [o["label"] for o in before["options"]] == [
                        o["label"] for o in asked.request["options"]]:
                self._refresh(current, asked)  # the first look came before all was drawn
                return
            self._resolve(current, *self._how(current, live))  # another question now
        self._create(live, verdict, asked, turn)

    def _on_end(self, live: LiveExecution) -> None:
        current = self._open.get(live.execution_id)
        if current is not None and current.live is live:
            self._resolve(current, "unknown", "runtime", "runtime_ended")

    def _read(self, live: LiveExecution, verdict: Recognition) -> Asked:
        snap = live.screen.snapshot_now()
        rules = default_rule_sets().get(verdict.recognizer)
        return read_request(ScreenView(lines=snap.lines, title=snap.title),
                            rules.approval if rules is not None else None, verdict.attention)

    def _create(self, live: LiveExecution, verdict: Recognition, asked: Asked,
                turn: Turn | None) -> None:
        record = self._catalog.get_execution(live.execution_id) or {}
        approval: dict[str, Any] = {
            "approval_id": self._clock.new_id("ap"),
            "execution_id": live.execution_id,
            "thread_id": live.thread_id,
            "principal": record.get("principal", self._scope.principal),
            "workspace_root": record.get("workspace_root", self._scope.workspace_root),
            "generation": live.generation,
            "turn_seq": turn.seq if turn is not None else self._watch.log.position(),
            "provider": record.get("provider") or verdict.recognizer,
            "recognizer": verdict.recognizer,
            "rule": verdict.rule,
            "parent_execution_id": record.get("parent_execution_id"),
            "status": "pending",
            "request": asked.request,
            "screen": asked.screen,
            "created_at_unix_ms": self._clock.now_ms(),
        }
        opened = _Open(approval, asked, live, opened_at=asyncio.get_running_loop().time())
        self._catalog.put_approval(approval, self._instance_id)
        self._open[live.execution_id] = opened
        live.runtime.on_input = opened.seen
        self.hook.add("approval", {"execution_id": live.execution_id,
                                   "parent_execution_id": approval["parent_execution_id"],
                                   "approval": approval})
        self._notifier.notify()

    def _refresh(self, current: _Open, asked: Asked) -> None:
        current.asked = asked
        current.record.update(request=asked.request, screen=asked.screen)
        self._catalog.put_approval(current.record, self._instance_id)

    def _how(self, current: _Open, live: LiveExecution) -> tuple[str, str, str | None, str | None]:
        """``(how, by, reason, option)`` for a question that left the screen."""
        options = {o["key"]: o for o in current.asked.request["options"]}
        if current.responded is not None:
            return HOW[options[current.responded]["kind"]], "respond", None, current.responded
        typed = bytes(current.typed)
        rules = default_rule_sets().get(str(current.record["recognizer"]))
        form = rules.approval if rules is not None else None
        if typed:
            by_length = sorted(current.asked.keys.items(), key=lambda kv: -len(keys_bytes(kv[1])))
            for key, keys in by_length:
                if typed.endswith(keys_bytes(keys)):
                    return HOW[options[key]["kind"]], "input", None, key
            selected = next((o for o in options.values() if o.get("selected")), None)
            if typed.endswith(b"\r") and selected is not None:
                return HOW[selected["kind"]], "input", "enter_on_selected", selected["key"]
            if typed.endswith((b"\x1b", b"\x03")) and form is not None and form.escape:
                return HOW[form.escape], "input", "escape", None
            return "other", "input", "keys_not_an_option", None
        if form is not None and form.denied is not None:
            snap = live.screen.snapshot_now()
            if any(form.denied.search(line) for line in snap.lines[-20:]):
                return "denied", "program", "denial_shown", None
        return "other", "program", "left_without_input", None

    def _resolve(self, current: _Open, how: str, by: str, reason: str | None,
                 option: str | None = None) -> None:
        record = current.record
        if self._open.get(record["execution_id"]) is current:
            del self._open[record["execution_id"]]
        if current.live.runtime.on_input == current.seen:
            current.live.runtime.on_input = None
        record["status"] = "resolved"
        record["resolved"] = {"how": how, "by": by, "at_unix_ms": self._clock.now_ms(),
                              "reason": reason, "option": option}
        with contextlib.suppress(*STORAGE_ERRORS):  # kept in memory; the reply still says it
            self._catalog.put_approval(record, self._instance_id)
        self._notifier.notify()

    # -- handlers --------------------------------------------------------------------------

    def _check_scope(self, params: AgentScoped) -> None:
        if (params.principal, params.workspace_root) != (self._scope.principal,
                                                         self._scope.workspace_root):
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                f"this guardian serves {self._scope.workspace_root!r}, not "
                f"{params.workspace_root!r}", {"input_sent": False})

    def _approval(self, params: AgentScoped, approval_id: str) -> dict[str, Any]:
        self._check_scope(params)
        record = self._catalog.get_approval(approval_id)
        if record is None or record["principal"] != params.principal:
            raise TetherError(ErrorCode.NOT_FOUND,
                              f"no approval {approval_id!r} in this workspace",
                              {"input_sent": False})
        current = self._open.get(record["execution_id"])
        if current is not None and current.record["approval_id"] == approval_id:
            return current.record  # the live copy
        return record

    async def approvals(self, request: Request, params: AgentApprovalsParams
                        ) -> AgentApprovalsResult:
        """The workspace's approvals, newest first (pending ones only by default)."""
        self._check_scope(params)
        rows = self._catalog.list_approvals(
            params.principal, params.workspace_root, parent=params.parent,
            execution_id=params.execution_id, pending_only=params.pending_only,
            limit=params.limit)
        for index, row in enumerate(rows):
            current = self._open.get(row["execution_id"])
            if current is not None and current.record["approval_id"] == row["approval_id"]:
                rows[index] = current.record
        return AgentApprovalsResult.model_validate({"approvals": rows})

    async def respond(self, request: Request | None, params: AgentRespondParams
                      ) -> AgentRespondResult:
        """Answer one approval, once (see the module docstring)."""
        record = self._approval(params, params.approval_id)
        if record.get("response") is not None:
            return self._reply(record, replayed=True)
        current = self._open.get(record["execution_id"])
        live = self._live.get(record["execution_id"])
        if (record["status"] != "pending" or current is None or current.record is not record
                or live is None or live is not current.live):
            raise self._stale(record, "it is no longer on screen")
        with live.runtime.claim_input() as claim:
            # A fresh look, under the input lock: the very question must still be there.
            verdict = await self._watch.look_now(record["execution_id"])
            if self._open.get(record["execution_id"]) is not current or verdict is None \
                    or verdict.state != "awaiting_approval":
                raise self._stale(record, "the screen no longer shows it")
            option = self._pick(current, params.choice)
            keys = current.asked.keys[option]
            # A question only just drawn may not read keys yet: wait until it has been on
            # screen for the rule file's settle_ms, then look once more.
            rules = default_rule_sets().get(str(record["recognizer"]))
            settle = (rules.approval.settle_ms if rules is not None and rules.approval
                      is not None else 0) / 1000
            wait = current.opened_at + settle - asyncio.get_running_loop().time()
            if wait > 0:
                await asyncio.sleep(wait)
                verdict = await self._watch.look_now(record["execution_id"])
                if self._open.get(record["execution_id"]) is not current or verdict is None \
                        or verdict.state != "awaiting_approval":
                    raise self._stale(record, "the screen no longer shows it")
            response: dict[str, Any] = {
                "choice": params.choice, "option": option, "keys": list(keys),
                "input_sent": "unknown", "left_approval": False, "state_after": None,
                "at_unix_ms": self._clock.now_ms()}
            # Stored before the first key: a repeat (or a guardian after a crash) never types
            # it again.
            record["response"] = response
            current.responded = option
            self._catalog.put_approval(record, self._instance_id)
            sent = await self._type(live, keys, claim, response)
            self._catalog.put_approval(record, self._instance_id)
            if not sent:
                return self._reply(record, replayed=False)
        await self._left(current, params.timeout_ms / 1000)
        verdict_now = self._watch.current(record["execution_id"])
        response["left_approval"] = record["status"] == "resolved"
        response["state_after"] = verdict_now.state if verdict_now is not None else None
        with contextlib.suppress(*STORAGE_ERRORS):
            self._catalog.put_approval(record, self._instance_id)
        return self._reply(record, replayed=False)

    def _pick(self, current: _Open, choice: str) -> str:
        options = current.asked.request["options"]
        if choice in ("approve", "deny"):
            found = next((o["key"] for o in options if o["kind"] == choice), None)
        else:
            found = next((o["key"] for o in options if o["key"] == choice), None)
        if found is None:
            offered = ", ".join(f"{o['key']} ({o['label']})" for o in options) or "none read"
            raise TetherError(
                ErrorCode.INVALID_REQUEST,
                f"choice {choice!r} is not offered by this question; nothing was typed. Its "
                f"options: {offered}; choose approve, deny or one of those keys (or answer it "
                "with BashCommand send_keys when no option could be read)",
                {"input_sent": False, "options": options})
        return str(found)

    async def _type(self, live: LiveExecution, keys: tuple[str, ...], claim: object,
                    response: dict[str, Any]) -> bool:
        """Type the option's keys one by one; ``input_sent`` says what reached the terminal."""
        typed = 0
        try:
            for index, key in enumerate(keys):
                if index:
                    await asyncio.sleep(KEY_GAP_S)
                await live.runtime.write(keys_bytes((key,)), timeout_s=5.0, claim=claim)
                typed += 1
        except (TimeoutError, OSError) as exc:
            response["input_sent"] = False if typed == 0 and not getattr(exc, "written", 0) \
                else "unknown"
            response["error"] = str(exc)
            return False
        response["input_sent"] = True
        return True

    async def _left(self, current: _Open, timeout_s: float) -> None:
        """Wait until the question left the screen (the watch resolved it), at most
        ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while current.record["status"] == "pending":
            left = deadline - loop.time()
            if left <= 0:
                return
            await self._notifier.wait(left, output=False)

    def _stale(self, record: dict[str, Any], why: str) -> TetherError:
        return TetherError(
            ErrorCode.APPROVAL_STALE,
            f"approval {record['approval_id']} is not on screen any more ({why}); nothing was "
            "typed. List the pending approvals again (Agent approvals) to answer the question "
            "shown now.",
            {"input_sent": False, "approval": record})

    def _reply(self, record: dict[str, Any], *, replayed: bool) -> AgentRespondResult:
        response = record["response"]
        return AgentRespondResult.model_validate({
            "approval": record, "response": response, "replayed": replayed,
            "input_sent": False if replayed else response["input_sent"]})
