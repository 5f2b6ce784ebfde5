"""The guardian's RPC surface: one handler per method, registered in one table.

:meth:`GuardianService.handle_frame` is the only entry point from the socket. It decodes
with limits, checks auth, version, capability, target instance and deadline (docs/protocol.md#envelope,
docs/protocol.md#deadlines-and-the-guardian-instance) before
any handler runs, so a refused request never acts.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tether.guardian.agents.approval_desk import ApprovalDesk
from tether.guardian.agents.notify_hook import NoticeHook
from tether.guardian.agents.receipts import PromptDesk
from tether.guardian.agents.turns import Turns
from tether.guardian.agents.watch import TurnWatch
from tether.guardian.history.idempotency import IdempotencyLedger
from tether.guardian.runtime import waits
from tether.guardian.runtime.assembly import Runtime
from tether.guardian.runtime.eager import in_task
from tether.guardian.runtime.file_desk import FileDesk
from tether.guardian.runtime.mode_store import ThreadModes
from tether.guardian.views.inspection import Inspector
from tether.guardian.views.reads import History
from tether.guardian.views.workspace_view import PersonDesk
from tether.protocol import codec
from tether.protocol.envelope import Request, error_response, ok_response, parse_request, request_id_of
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import (
    EXEC_DESCRIBE,
    EXEC_EXPLAIN,
    EXEC_GET,
    EXEC_INPUT,
    EXEC_LIST,
    EXEC_READ,
    EXEC_SCREEN,
    EXEC_START,
    EXEC_STATUS,
    GUARDIAN_SHUTDOWN,
    GUARDIAN_UPGRADE,
    HELLO,
    METHODS,
    THREAD_OPEN,
    THREAD_RESET_SHELL,
    WORKSPACE_LIST,
)
from tether.protocol.methods import (
    ExecInputParams,
    ExecStartParams,
    ExecStatusParams,
    HelloParams,
    Params,
    ResetShellParams,
    ShutdownParams,
    ThreadOpenParams,
    UpgradeParams,
    params_capability,
    validation_error,
)
from tether.protocol.results import (
    ExecResult,
    HelloResult,
    InputOutcome,
    ResetShellResult,
    Result,
    ShutdownResult,
    ThreadOpenResult,
    UpgradeResult,
)
from tether.protocol.versions import MAJOR, Capability, Version
from tether.shared.clock import Clock
from tether.shared.store.store_errors import StoreError, storage_unavailable

if TYPE_CHECKING:
    from tether.guardian.agents.lifecycle import AgentLifecycle

log = logging.getLogger(__name__)

Handler = Callable[[Request, Any], Awaitable[Result]]
UpgradeHandler = Callable[[Request, UpgradeParams], Awaitable[UpgradeResult]]

#: Methods answered straight from the socket's reader callback, with no task: they never
#: wait for an event (at most for a screen catch-up) and never enter asyncio.timeout().
IMMEDIATE = frozenset(method.name for method in (
    HELLO, EXEC_GET, EXEC_LIST, EXEC_READ, EXEC_SCREEN, EXEC_EXPLAIN, EXEC_DESCRIBE,
    WORKSPACE_LIST,
))

#: Methods that also start in the reader callback but may wait: they run eagerly up to their
#: first wait and move into a task themselves (``runtime/eager.in_task``) before any timeout.
#: A command is typed without a loop turn first; the turn is taken while the shell runs it.
EAGER = frozenset({EXEC_START.name})

#: Methods this build serves whatever protocol it was told to speak (``--protocol``): an
#: older protocol emulated limits what front-ends may use, not what its operator may do. A
#: live upgrade is how such a guardian gets the newer protocol (docs/protocol.md#live-upgrade).
ALWAYS_SERVED = frozenset({GUARDIAN_UPGRADE.name})

#: Time kept back from a request's deadline so the answer reaches the client in time.
REPLY_MARGIN_S = 0.05


#: A reply the front-end would refuse to decode (its frame limit) is never sent: a dropped
#: reply would leave the caller waiting until its deadline, and then blaming the guardian.
MAX_REPLY_BYTES = codec.DEFAULT_LIMITS.max_frame_bytes


def reply_too_large(method: str, size: int) -> TetherError:
    """The error that replaces a reply over :data:`MAX_REPLY_BYTES` (nothing was changed by
    the reads this can happen to: lists of records with long commands and screens)."""
    return TetherError(
        ErrorCode.LIMIT_EXCEEDED,
        f"the reply to {method} would be {size} bytes; a reply may be at most "
        f"{MAX_REPLY_BYTES} bytes. Ask for less: a smaller limit, fewer items, or get the "
        "records one by one",
        {"reply_bytes": size, "limit_bytes": MAX_REPLY_BYTES},
    )


class GuardianService:
    """Validates requests and runs their handlers against the guardian's rooms."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        instance_id: str,
        identity: dict[str, Any],
        auth_token: str,
        version: Version,
        capabilities: frozenset[Capability],
        clock: Clock,
        on_activity: Callable[[], None],
        on_shutdown: Callable[[str], None],
        reconciled: list[dict[str, Any]] | None = None,
        notify_command: tuple[str, ...] = (),
        notify_timeout_s: float = 10.0,
        code_version: str | None = None,
        upgraded_unix_ms: int | None = None,
    ) -> None:
        self._rt = runtime
        self.code_version = code_version
        self.upgraded_unix_ms = upgraded_unix_ms
        #: While the guardian hands itself over to new code (docs/protocol.md#live-upgrade):
        #: every request but hello is refused, ``guardian_upgrading``, and a request cut at
        #: its wait is answered so.
        self.handing_off = False
        #: Requests admitted and not yet answered, and the tasks of those that run in one.
        self.in_flight = 0
        self._request_tasks: set[asyncio.Task[Any]] = set()
        self._on_upgrade: UpgradeHandler | None = None
        #: What this guardian reconciled at start (``hello`` says it: ``lost_records``).
        self._reconciled = reconciled or []
        self._ledger = IdempotencyLedger(runtime.catalog)
        self.instance_id = instance_id
        self.identity = identity
        self._auth = auth_token.encode()
        # hello's answer depends only on the client's range: built once per range.
        self._hellos: dict[tuple[tuple[int, int], tuple[int, int]], HelloResult] = {}
        self.version = version
        self.capabilities = capabilities
        self.clock = clock
        self._on_activity = on_activity
        self._on_shutdown = on_shutdown
        self._handlers: dict[str, Handler] = {
            HELLO.name: self.hello,
            GUARDIAN_SHUTDOWN.name: self.shutdown,
            GUARDIAN_UPGRADE.name: self.upgrade,
            THREAD_OPEN.name: self.thread_open,
            THREAD_RESET_SHELL.name: self.reset_shell,
            EXEC_START.name: self.exec_start,
            EXEC_STATUS.name: self.exec_status,
            EXEC_INPUT.name: self.exec_input,
        }
        rt = runtime
        # The turn watch (agents/) records every recognized state change of a watched
        # execution; the readers, the prompt desk and the agent lifecycle share it.
        watch = self._watch = TurnWatch(catalog=rt.catalog, live=rt.live, notifier=rt.notifier)
        inspector = self._inspector = Inspector(scope=rt.scope, catalog=rt.catalog, live=rt.live,
                                                threads=rt.threads, retention=rt.retention)
        history = History(scope=rt.scope, catalog=rt.catalog, live=rt.live,
                          notifier=rt.notifier, paths=rt.paths, inspector=inspector,
                          watch=watch)
        turns = Turns(scope=rt.scope, catalog=rt.catalog, live=rt.live, notifier=rt.notifier,
                      watch=watch)
        desk = PromptDesk(scope=rt.scope, catalog=rt.catalog, live=rt.live,
                          notifier=rt.notifier, clock=rt.clock, instance_id=instance_id,
                          watch=watch)
        person = PersonDesk(scope=rt.scope, catalog=rt.catalog, live=rt.live,
                            threads=rt.threads, retention=rt.retention, notifier=rt.notifier,
                            ledger=self._ledger)
        modes = self._modes = ThreadModes(scope=rt.scope, catalog=rt.catalog, threads=rt.threads)
        # The operator hook (TETHER_NOTIFY_COMMAND) and the approvals: subscribed to the watch
        # before the agent lifecycle is, so a look records its question before the agent's
        # transition writes the notice naming it (docs/tools.md#approvals).
        self.hook = NoticeHook(rt.catalog, notify_command, notify_timeout_s)
        approvals = ApprovalDesk(scope=rt.scope, catalog=rt.catalog, live=rt.live,
                                 notifier=rt.notifier, clock=rt.clock, instance_id=instance_id,
                                 watch=watch, hook=self.hook)
        self.hook.kick()  # notices an earlier guardian wrote and never handed over
        files = FileDesk(scope=rt.scope, threads=rt.threads, modes=modes)
        for side in (inspector, history, turns, desk, person, modes, approvals, files):
            self._handlers.update(side.handlers())
        unknown = set(self._handlers) - set(METHODS)
        assert not unknown, f"handlers for methods the table does not declare: {unknown}"
        # The agent lifecycle (and the modules behind it, about 0.4 MB resident;
        # docs/development.md#benchmarks
        # idle RSS) is built on the first method that needs it: a guardian that only runs
        # commands never loads it. Every method left is the lifecycle's.
        self._desk = desk
        self._agents: AgentLifecycle | None = None
        for method in set(METHODS) - set(self._handlers):
            self._handlers[method] = self._agent_method(method)

    @property
    def agents(self) -> AgentLifecycle:
        """The agent lifecycle, built on first use."""
        if self._agents is None:
            from tether.guardian.agents.lifecycle import AgentLifecycle

            lifecycle = AgentLifecycle(runtime=self._rt, watch=self._watch, prompts=self._desk,
                                       ledger=self._ledger, instance_id=self.instance_id,
                                       hook=self.hook)
            handlers = lifecycle.handlers()
            missing = {m for m, h in self._handlers.items() if getattr(h, "agent_method", False)}
            assert missing <= set(handlers), f"methods without handlers: {missing - set(handlers)}"
            self._handlers.update(handlers)
            self._agents = lifecycle
        return self._agents

    def handover_part(self) -> dict[str, Any]:
        """This room's part of a live upgrade's handover document: the receipts the watch
        still completes and the executions it watches besides managed agents (whose watch
        starts again with their runtime)."""
        return {"receipts": self._desk.handover(), "watches": self._watch.handover()}

    def adopt_part(self, agents: list[dict[str, Any]], part: dict[str, Any] | None) -> None:
        """Take over the agents' runtimes the runtime room left (``agents``), then the
        watches and receipts in progress (``part``: :meth:`handover_part`)."""
        if agents:
            self.agents.adopt(agents)
        if part is not None:
            self._watch.adopt(part["watches"])
            self._desk.adopt(part["receipts"])

    @property
    def agents_if_built(self) -> AgentLifecycle | None:
        """The agent lifecycle, if some method built it (no agent ever ran here: None)."""
        return self._agents

    async def shutdown_agents(self) -> None:
        """Guardian stopping: end live agents (none if the lifecycle was never built), and
        run the operator hook no more."""
        if self._agents is not None:
            await self._agents.shutdown()
        self.hook.close()

    def _agent_method(self, method: str) -> Handler:
        async def handle(request: Request, params: Any) -> Result:
            result: Result = await self.agents.handlers()[method](request, params)
            return result

        handle.agent_method = True  # type: ignore[attr-defined]
        return handle

    # -- the socket entry point ------------------------------------------------------------

    async def handle_frame(self, frame: bytes) -> bytes | None:
        """Answer one frame. Never raises: every failure becomes an error reply."""
        rid: str | None = None
        method = ""
        counted = False
        try:
            obj = codec.decode(frame)
            rid = request_id_of(obj)
            request = parse_request(obj)
            params = self._admit(request)
            method = request.method
            if self.handing_off and method != HELLO.name:
                raise TetherError(
                    ErrorCode.GUARDIAN_UPGRADING,
                    "the guardian is handing itself over to newly installed code (tether "
                    "guardians upgrade); nothing was done. Send the request again in a moment: "
                    "the same guardian answers it, with the new code.",
                    {"input_sent": False, "retry": True},
                )
            self._modes.guard(request)  # input checked against another mode is never typed
            self._on_activity()
            # Expired records of every thread, not only the threads in use (docs/tools.md#retention): lazily,
            # a sweep at most every second or so, in batches after this request.
            self._rt.retention.sweep_soon(self._rt.live.protected)
            self.in_flight += 1
            counted = True
            if method not in IMMEDIATE and method not in EAGER:
                await in_task()  # a method that waits runs all of it in a task (eager.py)
                if METHODS[method].read_only:
                    self.only_waiting()  # a read: a live upgrade may cut it at any wait
            result = await self._handlers[method](request, params)
            if not isinstance(result, Result):
                # A handler still building a plain map: its reply is checked all the same.
                result = METHODS[request.method].result.model_validate(result)
            reply = codec.encode(ok_response(self.version, request.id, result.wire()))
            if len(reply) > MAX_REPLY_BYTES:
                raise reply_too_large(request.method, len(reply))
            return reply
        except TetherError as err:
            return codec.encode(error_response(self.version, rid, err))
        except asyncio.CancelledError:
            if not self.handing_off:
                raise
            return codec.encode(error_response(self.version, rid, _cut(method)))
        except StoreError as exc:
            log.warning("catalog write failed: %s", exc)
            refused = storage_unavailable(self._rt.catalog.path, exc)
            return codec.encode(error_response(self.version, rid, refused))
        except Exception:
            log.exception("handler failed")
            internal = TetherError(ErrorCode.INTERNAL, "the guardian hit an internal error; see its log")
            return codec.encode(error_response(self.version, rid, internal))
        finally:
            if counted:
                self.in_flight -= 1
                task = asyncio.current_task()
                if task is not None:
                    self._request_tasks.discard(task)
                waits.done(task)

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def only_waiting(self) -> None:
        """The current request delivers nothing more: a live upgrade may cut it from here
        (``runtime/waits``)."""
        task = asyncio.current_task()
        if task is not None:
            self._request_tasks.add(task)
            waits.only_waiting()

    def waiting_requests(self) -> set[asyncio.Task[Any]]:
        """Request tasks that only wait now (what a live upgrade cuts)."""
        return waits.waiting_tasks() & self._request_tasks

    def set_upgrader(self, handler: UpgradeHandler) -> None:
        self._on_upgrade = handler

    async def upgrade(self, request: Request, params: UpgradeParams) -> UpgradeResult:
        if self._on_upgrade is None:
            raise TetherError(ErrorCode.UPGRADE_FAILED, "this guardian cannot hand itself over",
                              {"input_sent": False})
        return await self._on_upgrade(request, params)

    def _admit(self, request: Request) -> Params:
        """Every check that must pass before a handler may act (docs/protocol.md#envelope,
        docs/protocol.md#deadlines-and-the-guardian-instance)."""
        if not hmac.compare_digest(request.auth.encode(), self._auth):
            raise TetherError(ErrorCode.UNAUTHORIZED, "bad auth token")
        if request.version.major != MAJOR:
            raise TetherError(
                ErrorCode.PROTOCOL_MISMATCH,
                f"client speaks protocol {request.version}, this guardian speaks "
                f"{MAJOR}.0-{self.version}",
                {"client": str(request.version), "guardian": str(self.version)},
            )
        method = METHODS.get(request.method)
        if method is None:
            raise TetherError(ErrorCode.UNKNOWN_METHOD, f"unknown method {request.method!r}")
        if method.name not in ALWAYS_SERVED:
            self._require(method.capability)
        if not method.instance_optional and request.guardian_instance_id != self.instance_id:
            raise TetherError(
                ErrorCode.WRONG_GUARDIAN,
                "request was addressed to guardian instance "
                f"{request.guardian_instance_id!r}, not {self.instance_id!r}; not acted upon",
                {"input_sent": False, "guardian_instance_id": self.instance_id},
            )
        if request.deadline_unix_ms <= self.clock.now_ms():
            raise TetherError(
                ErrorCode.DEADLINE_EXPIRED,
                "request arrived after its deadline; not acted upon",
                {"input_sent": False},
            )
        try:
            params: Params = method.params.model_validate(request.params)
        except ValidationError as exc:
            raise validation_error(exc, "params", request.params) from None
        # What the params ask for may need more than the method (a detection page): an
        # older version is honoured exactly, not answered with what it does not advertise.
        self._require(params_capability(request.method, request.params))
        return params

    def _require(self, capability: Capability | None) -> None:
        if capability is not None and capability not in self.capabilities:
            raise TetherError(
                ErrorCode.CAPABILITY_MISSING,
                f"this guardian speaks protocol {self.version}, which has no {capability}",
                {
                    "capability": str(capability),
                    "guardian_protocol": str(self.version),
                    "input_sent": False,
                },
            )

    def _remaining_s(self, request: Request) -> float:
        return max(0.0, request.deadline_unix_ms / 1000 - self.clock.now_ms() / 1000 - REPLY_MARGIN_S)

    # -- handlers --------------------------------------------------------------------------

    async def hello(self, request: Request, params: HelloParams) -> HelloResult:
        """Handshake (docs/protocol.md#handshake): version chosen, identity, capabilities."""
        key = (params.client_min, params.client_max)
        known = self._hellos.get(key)
        if known is not None:
            return known
        lo, hi = Version(*params.client_min), Version(*params.client_max)
        if not lo.major <= MAJOR <= hi.major:
            raise TetherError(
                ErrorCode.PROTOCOL_MISMATCH,
                f"client supports protocol {lo}-{hi}; this guardian speaks {MAJOR}.0-{self.version}",
                {"client_range": [str(lo), str(hi)], "guardian_range": ["1.0", str(self.version)]},
            )
        chosen = min(self.version, hi) if hi.major == MAJOR else self.version
        result = self._hellos[key] = HelloResult.model_validate({
            "version": [chosen.major, chosen.minor],
            "guardian_protocol": str(self.version),
            "instance_id": self.instance_id,
            "identity": self.identity,
            "capabilities": sorted(str(c) for c in self.capabilities),
            "workspace_root": self._rt.scope.workspace_root,
            "principal": self._rt.scope.principal,
            **({"lost_records": self._reconciled} if self._reconciled else {}),
            **({"code_version": self.code_version} if self.code_version else {}),
            **({"upgraded_unix_ms": self.upgraded_unix_ms} if self.upgraded_unix_ms else {}),
        })
        return result

    async def shutdown(self, request: Request, params: ShutdownParams) -> ShutdownResult:
        running = self._rt.live.ids()
        if not params.dry_run:
            self._on_shutdown(params.reason)
        return ShutdownResult.model_validate({"stopping": not params.dry_run, "running_executions": running})

    async def thread_open(self, request: Request, params: ThreadOpenParams) -> ThreadOpenResult:
        if params.read_only:
            return self._inspector.thread_status(params)
        return ThreadOpenResult.model_validate(await self._rt.threads.open(params))

    async def reset_shell(self, request: Request, params: ResetShellParams) -> ResetShellResult:
        return ResetShellResult.model_validate(await self._ledger.once(
            params.principal,
            params.idempotency_key,
            request.method,
            params,
            lambda: self._rt.threads.reset(params),
        ))

    async def exec_start(self, request: Request, params: ExecStartParams) -> ExecResult:
        remaining = self._remaining_s(request)
        outcome = await self._ledger.once_claiming(
            params.principal,
            params.idempotency_key,
            request.method,
            params,
            lambda claim: self._rt.launcher.start(
                params, write_timeout_s=min(remaining, 5.0), claim=claim),
        )
        await in_task()  # typed already (EAGER): this loop turn overlaps the shell's work
        self.only_waiting()  # its key holds the outcome: a repeat replays it, types nothing
        reply = await self._rt.results.wait(
            outcome["execution_id"], min(params.wait_ms / 1000, self._remaining_s(request))
        )
        if "shell_replaced" in outcome:  # rare: the reply is built again, with the notice
            reply = ExecResult.built({**reply.wire(), "shell_replaced": outcome["shell_replaced"]})
        return reply

    async def exec_status(self, request: Request, params: ExecStatusParams) -> ExecResult:
        execution_id = self._rt.results.status_target(params)
        return await self._rt.results.wait(
            execution_id, min(params.wait_ms / 1000, self._remaining_s(request))
        )

    async def exec_input(self, request: Request, params: ExecInputParams) -> ExecResult:
        remaining = self._remaining_s(request)
        outcome = await self._ledger.once(
            params.principal,
            params.idempotency_key,
            request.method,
            params,
            lambda: self._rt.inputs.send(params, write_timeout_s=min(remaining, 5.0)),
        )
        self.only_waiting()  # its key holds the outcome: a repeat replays it, types nothing
        result = await self._rt.results.settle(
            outcome["execution_id"], min(params.wait_ms / 1000, self._remaining_s(request))
        )
        result.input = InputOutcome.model_validate(await self._rt.inputs.observe(outcome))
        return result


def _cut(method: str) -> TetherError:
    """The answer to a request a live upgrade cut at its wait (``runtime/waits``)."""
    read = METHODS[method].read_only if method in METHODS else False
    return TetherError(
        ErrorCode.GUARDIAN_UPGRADING,
        "the guardian handed itself over to newly installed code while this request waited; "
        + ("nothing was changed. " if read else
           "what it delivered is recorded under its idempotency key (or prompt id), so sending "
           "it again replays that and delivers nothing twice. ")
        + "Send it again in a moment: the same guardian answers it, with the new code.",
        {"input_sent": not read, "retry": True, "cut_at_wait": True},
    )
