"""The managed-agent lifecycle (docs/tools.md#managed-agents): launch, close, resume, cancel, label, list,
get.

Every state change goes through :meth:`AgentLifecycle.apply`, which turns a persisted
transition into its consequences: waiters woken, a notice typed into a managed parent,
``auto_archive`` after the first terminal turn. Archive, detach and parentage are in
``tree``; notices in ``notifications``; runtimes and the state watch in ``runtime``.

Agents belong to the workspace: every action here finds an agent by id among all of the
workspace's agents, whichever thread or front-end launched it.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from tether.guardian.agents.launch_env import LaunchEnvStore
from tether.guardian.agents.notifications import NoticeDesk
from tether.guardian.agents.processes import AgentRuntimes, Stopping
from tether.guardian.agents.providers import launch_plan, resume_argv
from tether.guardian.agents.recognize import default_rule_sets, pick_recognizer
from tether.guardian.agents.tree import Tree
from tether.guardian.history.records import list_page
from tether.guardian.runtime.caps import exhausted
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.terminal.keys import key_bytes
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import (
    AgentCancelParams,
    AgentLabelParams,
    AgentLaunchParams,
    AgentListParams,
    AgentScoped,
    AgentTargetParams,
    Scoped,
)
from tether.protocol.results import AgentCancelResult, AgentGetResult, AgentListResult, AgentResult
from tether.shared.agent_states import LIVE_STATES
from tether.shared.store.agent_table import AgentStore, Transition

if TYPE_CHECKING:
    from tether.guardian.agents.notify_hook import NoticeHook
    from tether.guardian.agents.receipts import PromptDesk
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.history.idempotency import IdempotencyLedger
    from tether.guardian.runtime.assembly import Runtime

log = logging.getLogger(__name__)

#: How many recent events ``agent.get`` returns with the record.
EVENTS_IN_GET = 100
#: Between two presses of an interrupt that takes more than one (``interrupt_presses``): time
#: for the program to read the first on its own, so the two never arrive as one Alt-Escape.
INTERRUPT_GAP_S = 0.3


class AgentLifecycle:
    """The ``agent.*`` lifecycle handlers over this guardian's runtime room."""

    def __init__(
        self, *, runtime: Runtime, watch: TurnWatch, prompts: PromptDesk,
        ledger: IdempotencyLedger, instance_id: str, hook: NoticeHook | None = None,
    ) -> None:
        self.rt = runtime
        self.watch = watch
        self.scope = runtime.scope
        self.instance_id = instance_id
        self.store = AgentStore(runtime.catalog)
        self.hook = hook
        if hook is not None and hook.enabled:
            self.store.on_transition = self._hook_notice  # written with the transition
        self.envs = LaunchEnvStore(runtime.paths.state)  # launch {env}: private, 0600
        self._ledger = ledger
        self.runtimes = AgentRuntimes(runtime, watch, on_recognized=self._recognized, on_exit=self._exited)
        self.notices = NoticeDesk(runtime, self.store, prompts)
        self.tree = Tree(self)
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Agents whose interrupt was pressed: the look that sees them idle is the
        #: acknowledgement (event reason ``cancel_acknowledged``).
        self._cancelling: set[str] = set()

    def handlers(self) -> dict[str, Any]:
        return {
            "agent.launch": self.launch, "agent.close": self.close, "agent.resume": self.resume,
            "agent.cancel": self.cancel, "agent.label": self.label, "agent.list": self.list_agents,
            "agent.get": self.get, "agent.notifications": self.notices.notifications,
            **self.tree.handlers(),
        }

    # -- scope -----------------------------------------------------------------------------

    def check_scope(self, params: AgentScoped | Scoped) -> None:
        if (params.principal, params.workspace_root) != (self.scope.principal,
                                                         self.scope.workspace_root):
            raise TetherError(
                ErrorCode.SESSION_MISMATCH,
                f"this guardian serves {self.scope.workspace_root!r}, not {params.workspace_root!r}",
                {"input_sent": False},
            )
        if params.thread_id is not None:
            self.scope.thread_for(Scoped(principal=params.principal,
                                     workspace_root=params.workspace_root,
                                     thread_id=params.thread_id))

    def agent(self, params: AgentScoped, execution_id: str) -> dict[str, Any]:
        """An agent of this workspace (any thread), else ``not_found``."""
        self.check_scope(params)
        record = self.store.get(execution_id)
        if record is None or record["principal"] != params.principal:
            raise TetherError(
                ErrorCode.NOT_FOUND,
                f"no managed agent {execution_id!r} in this workspace",
                {"input_sent": False},
            )
        return record

    def view(self, record: dict[str, Any]) -> dict[str, Any]:
        """The agent record with ``recognition``: the turn watch's last verdict, the very
        step that set ``agent_state`` (an ``unknown`` verdict leaves the state as it was)."""
        view = self.rt.live.view(record)
        recognition = self.watch.summary(record["execution_id"])
        if recognition is not None:
            view["recognition"] = recognition
        return view

    # -- transitions -----------------------------------------------------------------------

    def apply(self, moved: Transition | None) -> None:
        """The consequences of a persisted transition."""
        if moved is None:
            return
        record = moved.record
        self.rt.notifier.notify()
        if moved.notification_id is not None and record["parent_execution_id"]:
            self.notices.deliver_soon(record["parent_execution_id"])
        if record["agent_state"] == "idle":
            self.notices.deliver_soon(record["execution_id"])  # notices waiting for it
        if moved.step.terminal_turn and record["auto_archive"] and record["archived_at"] is None:
            self.spawn(self.tree.archive_cascade(record["execution_id"]))

    def _hook_notice(self, moved: Transition) -> None:
        """A finished turn, an error or a close, for the operator hook (docs/tools.md#the-operator-hook;
        approvals are the approval desk's): inside the transition's transaction."""
        kind = moved.step.notification
        if self.hook is None or kind not in ("finished", "error", "closed"):
            return
        record = moved.record
        self.hook.add(kind, {
            "execution_id": record["execution_id"], "parent_execution_id":
            record["parent_execution_id"], "agent_state": record["agent_state"],
            "turn_seq": record["turn_seq"], "title": record["title"],
            "notification_id": moved.notification_id, "event_seq": moved.event_seq})

    def spawn(self, work: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("agent lifecycle task failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _recognized(self, execution_id: str, live: LiveExecution, state: str,
                    attention: str | None) -> None:
        record = self.store.get(execution_id)
        if record is None or record["agent_state"] not in LIVE_STATES:
            return  # closed or in error: recognition of a leftover screen moves nothing
        reason = ("cancel_acknowledged" if state == "idle" and execution_id in self._cancelling
                  else "recognized")
        self.apply(self.store.transition(execution_id, state, reason=reason,  # type: ignore[arg-type]
                                         attention=attention))

    def _exited(self, execution_id: str, live: LiveExecution, stopping: Stopping) -> None:
        self.apply(self.store.transition(execution_id, stopping.state, reason=stopping.reason))

    # -- launch ----------------------------------------------------------------------------

    async def launch(self, request: Request, params: AgentLaunchParams) -> AgentResult:
        self.check_scope(params)
        outcome = await self._ledger.once(
            params.principal, params.idempotency_key, request.method, params,
            lambda: self._launch(params),
        )
        record = self.store.get(outcome["execution_id"])
        assert record is not None
        reply: dict[str, Any] = {"agent": self.view(record), "input_sent": True}
        if params.env:
            reply["env_names"] = sorted(params.env)  # the names only, never a value
        return AgentResult.model_validate(reply)

    async def _launch(self, params: AgentLaunchParams) -> dict[str, Any]:
        plan = launch_plan(params.provider, params.argv, recognizer=params.recognizer,
                           conversation_id=params.conversation_id)
        if plan.recognizer not in default_rule_sets():
            raise TetherError(ErrorCode.UNKNOWN_RECOGNIZER,
                              f"unknown recognizer {plan.recognizer!r}", {"input_sent": False})
        parent = params.parent_execution_id
        workspace_root = self.scope.workspace_root
        parent_workspace = params.parent_workspace or (workspace_root if parent else None)
        if parent and parent_workspace == workspace_root:
            found = self.rt.catalog.get_execution(parent)
            if found is None or found["principal"] != params.principal:
                raise TetherError(ErrorCode.NOT_FOUND, f"parent execution {parent!r} not found",
                                  {"input_sent": False})
        thread = self.scope.thread_for(params)
        self.rt.caps.check(self.rt.live.running(thread["thread_id"]))  # before any record
        execution_id = self.rt.clock.new_id("ag")
        notify = params.notify_on_finish if params.notify_on_finish is not None else bool(parent)
        record = {
            "execution_id": execution_id,
            "principal": self.scope.principal,
            "workspace_root": workspace_root,
            "thread_id": thread["thread_id"],
            "command": shlex.join(plan.argv),
            "cwd": self.rt.threads.cwd(thread["thread_id"], thread["cwd"]),
            "status": "running",
            "started_unix_ms": self.rt.clock.now_ms(),
            "guardian_instance_id": self.instance_id,
            "generation": 1,
            "parent_execution_id": parent,
            "parent_workspace": parent_workspace,
            "labels": dict(params.labels),
            "rows": params.rows,
            "cols": params.cols,
            "recovery": plan.recovery,
            "provider": params.provider,
            "title": params.title,
            "conversation_id": plan.conversation_id,
            "auto_archive": params.auto_archive,
            "notify_on_finish": notify,
            "argv": plan.argv,
            "agent_recognizer": plan.recognizer,
        }
        # Before the record: a launch whose variables cannot be kept starts nothing.
        self.envs.save(execution_id, dict(params.env))
        self.apply(self.store.create(record))
        self._start(self.store.get(execution_id) or record, plan.argv, 1)
        return {"execution_id": execution_id, "input_sent": True}

    def _start(self, record: dict[str, Any], argv: list[str], generation: int) -> None:
        """Spawn the runtime; a program that cannot start leaves the agent in ``error``, its
        record ``unknown`` with reason ``spawn_failed`` (no exit was observed:
        docs/tools.md#unknown-is-not-success, as for a
        background command that cannot start)."""
        execution_id = record["execution_id"]
        try:
            live = self.runtimes.start(record, argv, generation,
                                       extra_env=self.envs.load(execution_id))
        except OSError as exc:
            now = self.rt.clock.now_ms()
            self.apply(self.store.transition(
                execution_id, "error", reason=f"spawn_failed: {exc}",
                fields={"status": "unknown", "exit_code": None, "reason": f"spawn_failed: {exc}",
                        "ended_unix_ms": now, "terminal_unix_ms": now}))
            ran_out = exhausted(exc)
            if ran_out is not None:
                ran_out.data["execution_id"] = execution_id
                raise ran_out from None
            raise TetherError(ErrorCode.SPAWN_FAILED, f"could not start {argv[0]!r}: {exc}",
                              {"input_sent": False, "execution_id": execution_id}) from None
        identity = live.runtime.identity
        self.rt.catalog.update_execution(
            execution_id,
            runtime={**identity.to_dict(), "guardian_instance_id": self.instance_id}
            if identity else None,
        )

    # -- close / resume --------------------------------------------------------------------

    async def close(self, request: Request, params: AgentTargetParams) -> AgentResult:
        """Release the process; keep the record, its labels, parent and history
        (docs/tools.md#close-resume-archive)."""
        record = self.agent(params, params.execution_id)
        if self.runtimes.live(params.execution_id) is not None:
            await self.runtimes.stop([params.execution_id], Stopping("closed", "closed"))
        else:
            self.apply(self.store.transition(params.execution_id, "closed", reason="closed"))
        record = self.store.get(params.execution_id) or record
        return AgentResult.model_validate({"agent": self.view(record)})

    async def resume(self, request: Request, params: AgentTargetParams) -> AgentResult:
        record = self.agent(params, params.execution_id)
        if record["archived_at"] is not None:
            raise TetherError(ErrorCode.INVALID_STATE,
                              f"agent {params.execution_id} is archived; unarchive it instead",
                              {"input_sent": False})
        return await self.resume_record(record)

    async def resume_record(self, record: dict[str, Any]) -> AgentResult:
        """A new runtime for the same agent: generation + 1, no earlier prompt re-sent."""
        execution_id = record["execution_id"]
        if self.runtimes.live(execution_id) is not None:
            raise TetherError(
                ErrorCode.INVALID_STATE,
                f"agent {execution_id} is {record['agent_state']} with a live runtime; close it "
                "first (resume starts a new runtime)",
                {"input_sent": False, "agent_state": record["agent_state"]},
            )
        argv = resume_argv(record)
        self.rt.caps.check(self.rt.live.running(record["thread_id"]))  # before it changes
        generation = int(record["generation"]) + 1
        self.apply(self.store.transition(
            execution_id, "initializing", reason="resumed",
            fields={"status": "running", "exit_code": None, "reason": None, "ended_unix_ms": None,
                    "terminal_unix_ms": None, "generation": generation, "runtime": None,
                    "guardian_instance_id": self.instance_id, "command": shlex.join(argv)}))
        updated = self.store.get(execution_id)
        assert updated is not None
        self._start(updated, argv, generation)
        return AgentResult.model_validate(
            {"agent": self.view(self.store.get(execution_id) or updated), "input_sent": True})

    # -- cancel ----------------------------------------------------------------------------

    async def cancel(self, request: Request, params: AgentCancelParams) -> AgentCancelResult:
        self.agent(params, params.execution_id)
        return AgentCancelResult.model_validate(await self._ledger.once(
            params.principal, params.idempotency_key, request.method, params,
            lambda: self._cancel(params),
        ))

    async def _cancel(self, params: AgentCancelParams) -> dict[str, Any]:
        """Press the program's interrupt; the state changes only on its acknowledgement
        (docs/tools.md#deaths-cancel-and-notices)."""
        execution_id = params.execution_id
        self.agent(params, execution_id)
        live = self.runtimes.live(execution_id)
        # Judge from the screen as it is now, not from a state the watch wrote a moment ago:
        # this look moves agent_state too, so a turn that just ended reads idle here.
        verdict = await self.watch.look_now(execution_id) if live is not None else None
        record = self.agent(params, execution_id)
        if live is not None and verdict is not None and (
                verdict.state == "awaiting_input" or record["agent_state"] == "idle"):
            raise TetherError(
                ErrorCode.NOT_BUSY,
                f"agent {execution_id} is not in a turn (its screen waits for input, rule "
                f"{verdict.rule}): nothing was pressed. A turn that ended before the cancel "
                "needs no cancel.",
                {"input_sent": False, "agent_state": record["agent_state"],
                 "recognition": verdict.summary()},
            )
        if live is None or record["agent_state"] != "running":
            raise TetherError(
                ErrorCode.INVALID_STATE,
                f"agent {execution_id} is {record['agent_state']}, not running: nothing to cancel",
                {"input_sent": False, "agent_state": record["agent_state"]},
            )
        recognizer = record["agent_recognizer"] or pick_recognizer(record["command"])
        rules = default_rule_sets()[recognizer]
        interrupt = rules.interrupt
        self._cancelling.add(execution_id)
        try:
            await self._interrupt(live, params, interrupt, rules.interrupt_presses)
        finally:
            self._cancelling.discard(execution_id)
        if not live.done.is_set():
            self.apply(self.store.transition(execution_id, "idle", reason="cancel_acknowledged"))
        current = self.store.get(execution_id) or record
        return {"agent": self.view(current), "acknowledged": True, "interrupt": interrupt,
                "input_sent": True}

    async def _interrupt(self, live: LiveExecution, params: AgentCancelParams, interrupt: str,
                         presses: int) -> None:
        """Press ``interrupt`` (``presses`` times at most) until the screen waits for input."""
        execution_id = params.execution_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.timeout_ms / 1000
        baseline = live.activity_seq
        # Some programs want the interrupt twice (OpenCode: the first Escape only arms it):
        # the next press goes INTERRUPT_GAP_S after the last, and only while the turn holds.
        pressed, next_press = 0, loop.time()
        while not live.done.is_set():
            if live.activity_seq != baseline:
                decision = await self.watch.look_now(execution_id)
                if decision is not None and decision.state == "awaiting_input":
                    break
            if pressed < presses and loop.time() >= next_press:
                await live.runtime.write(key_bytes(interrupt), timeout_s=5.0)
                pressed += 1
                next_press = loop.time() + INTERRUPT_GAP_S
                continue
            if loop.time() >= deadline:
                raise TetherError(
                    ErrorCode.CANCEL_NOT_ACKNOWLEDGED,
                    f"{interrupt} was sent but the program did not leave its turn within "
                    f"{params.timeout_ms / 1000:g}s; the agent is still running (its turn is "
                    "intact, prompts are refused until it ends). Wait, cancel again, or close it.",
                    {"input_sent": True, "interrupt": interrupt, "agent_state": "running"},
                )
            wake = deadline if pressed >= presses else min(deadline, next_press)
            await self.rt.notifier.wait(wake - loop.time())

    # -- labels, list, get -----------------------------------------------------------------

    async def label(self, request: Request, params: AgentLabelParams) -> AgentResult:
        self.agent(params, params.execution_id)
        try:
            record = self.store.set_labels(params.execution_id, params.labels)
        except ValueError as exc:
            raise TetherError(ErrorCode.LIMIT_EXCEEDED, str(exc), {"input_sent": False}) from None
        return AgentResult.model_validate({"agent": self.view(record)})

    async def list_agents(self, request: Request, params: AgentListParams) -> AgentListResult:
        self.check_scope(params)
        with self.rt.catalog.snapshot():
            records = self.store.list_agents(
                params.principal, params.workspace_root, parent=params.parent,
                include_archived=params.include_archived, limit=params.limit + 1,
                before=params.before)
            cursor = self.rt.catalog.change_seq()
        agents, next_before = list_page(records, params.limit, self.rt.live.listed)
        listed: dict[str, Any] = {"agents": agents, "catalog_cursor": cursor}
        if next_before is not None:
            listed["next_before"] = next_before
        return AgentListResult.model_validate(listed)

    async def get(self, request: Request, params: AgentTargetParams) -> AgentGetResult:
        record = self.agent(params, params.execution_id)
        return AgentGetResult.model_validate(
            {"agent": self.view(record), "events": self.store.events(params.execution_id,
                                                                     EVENTS_IN_GET)})

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover_blocked(self) -> str | None:
        """Why the agents cannot be handed over at this instant (None: they can): an archive
        cascade, a notice being typed into a parent, an agent being stopped or cancelled."""
        if any(not task.done() for task in self._tasks):
            return "an agent task (an archive cascade) is running"
        if self.notices.busy():
            return "a notice is being typed into a managed parent"
        if self.runtimes.stopping():
            return "an agent is being stopped"
        if self._cancelling:
            return "an agent's interrupt is being pressed"
        return None

    def adopt(self, entries: list[dict[str, Any]]) -> None:
        """Take over the agents' runtimes (``entries``: the runtime room left them to this
        room); notices that came due meanwhile are delivered."""
        for entry in entries:
            record = self.store.get(entry["execution_id"])
            if record is None:
                raise ValueError(f"agent {entry['execution_id']} has no record")
            self.runtimes.adopt(record, entry)
        for entry in entries:
            record = self.store.get(entry["execution_id"])
            if record is not None and record["agent_state"] == "idle":
                self.notices.deliver_soon(entry["execution_id"])

    # -- guardian lifecycle ----------------------------------------------------------------

    async def shutdown(self) -> None:
        """Guardian stopping: every live agent ends in ``error`` (reason ``guardian_stopped``)."""
        live_ids = [live.execution_id for live in self.rt.live if live.kind == "agent"]
        await self.runtimes.stop(live_ids, Stopping("error", "guardian_stopped"))
        for execution_id in live_ids:
            self.store.runtime_lost(execution_id, "guardian_stopped")

