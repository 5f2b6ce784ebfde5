"""The RPC methods, each declared once: its name, params model, result model and capability.

Both sides read this one table. The guardian admits a request by the method's params model
and capability and answers with its result model; the front-end calls a :class:`Method`
and gets its result model back (``GuardianHandle.call(EXEC_START, ...) -> ExecResult``), so
mypy sees every reply's type at the call site and no method name is spelled twice.

A reply is checked once, on the front-end (:meth:`Method.read`): a shape changed on one side
fails on the other instead of drifting. The guardian builds some replies from its own rows
unchecked (``Result.built``); the front-end's check covers those too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.file_methods import (
    EditFilesParams,
    EditFilesResult,
    ReadFilesParams,
    ReadFilesResult,
    ReleaseResult,
    ReleaseTemporaryParams,
)
from tether.protocol.methods import (
    AgentApprovalsParams,
    AgentCancelParams,
    AgentDetachRemoteParams,
    AgentLabelParams,
    AgentLaunchParams,
    AgentListParams,
    AgentNotificationsParams,
    AgentPromptParams,
    AgentReceiptParams,
    AgentRespondParams,
    AgentTargetParams,
    ExecAncestorParams,
    ExecDescribeParams,
    ExecExplainParams,
    ExecGetParams,
    ExecInputParams,
    ExecListParams,
    ExecObserveParams,
    ExecReadParams,
    ExecScreenParams,
    ExecStartParams,
    ExecStatusParams,
    ExecStreamParams,
    ExecWaitParams,
    ExecWaitTurnParams,
    HelloParams,
    Params,
    PersonInputParams,
    ResetShellParams,
    ShutdownParams,
    ThreadModeParams,
    ThreadOpenParams,
    ThreadSetModeParams,
    UpgradeParams,
    WorkspaceListParams,
)
from tether.protocol.results import (
    AgentApprovalsResult,
    AgentArchiveResult,
    AgentCancelResult,
    AgentGetResult,
    AgentListResult,
    AgentNotificationsResult,
    AgentRespondResult,
    AgentResult,
    AncestorResult,
    DescribeResult,
    DetachRemoteResult,
    ExecResult,
    ExplainResult,
    GetResult,
    HelloResult,
    ListResult,
    ObserveResult,
    PersonInputResult,
    PromptResult,
    ReadResult,
    ResetShellResult,
    Result,
    ScreenResult,
    ShutdownResult,
    StreamResult,
    ThreadModeResult,
    ThreadOpenResult,
    UpgradeResult,
    WaitResult,
    WaitTurnResult,
    WorkspaceListResult,
)
from tether.protocol.versions import Capability

# Covariant: a method is usable wherever one with a wider params or result type is asked for
# (a Method[ExecListParams, ListResult] is a Method[Any, Result]); it is never written to.
P = TypeVar("P", bound=Params, covariant=True)
R = TypeVar("R", bound=Result, covariant=True)


@dataclass(frozen=True, slots=True, eq=False)
class Method(Generic[P, R]):
    """One RPC method. ``capability`` is what a guardian must advertise to serve it (None:
    every guardian serves it, the handshake and shutdown). ``read_only``: it puts nothing
    into a terminal, so a call a lost guardian never answered may be sent again to the one
    that replaces it. ``types_text``: its ``text`` is typed into a terminal (the front-end
    checks its line lengths against older guardians). ``instance_optional``: it may be sent
    without naming a guardian instance (no side effect a replay to a restarted guardian
    could repeat)."""

    name: str
    params: type[P]
    result: type[R]
    capability: Capability | None
    read_only: bool = False
    types_text: bool = False
    instance_optional: bool = False

    def __repr__(self) -> str:
        return f"Method({self.name!r})"

    def checker_built(self) -> bool:
        """Whether the result model has its validator yet (pydantic builds it on first use)."""
        return bool(self.result.__pydantic_complete__)

    def build_checker(self) -> None:
        """Build the result model's validator now (1-2 ms, once per model), so that a caller
        can do it while it waits for the reply instead of after it arrives."""
        self.result.model_rebuild()

    def read(self, reply: Any) -> R:
        """A guardian's reply as the result model; a reply of another shape is refused
        (``protocol_mismatch``: the call may have acted)."""
        try:
            return self.result.model_validate(reply)
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'result'}: {error['msg']}"
                for error in exc.errors()[:3]
            )
            raise TetherError(
                ErrorCode.PROTOCOL_MISMATCH,
                f"the guardian's reply to {self.name} does not have the shape of its protocol "
                f"({where}); the call may have acted. Restart the guardian with this version "
                "of Tether.",
                {"method": self.name, "operator_action_required": True},
            ) from None


# -- handshake and guardian --------------------------------------------------------------------

HELLO = Method("hello", HelloParams, HelloResult, None, read_only=True, instance_optional=True)
GUARDIAN_SHUTDOWN = Method("guardian.shutdown", ShutdownParams, ShutdownResult, None)
GUARDIAN_UPGRADE = Method("guardian.upgrade", UpgradeParams, UpgradeResult,
                          Capability.LIVE_UPGRADE)

# -- threads -----------------------------------------------------------------------------------

THREAD_OPEN = Method("thread.open", ThreadOpenParams, ThreadOpenResult, Capability.EXEC,
                     read_only=True)
THREAD_RESET_SHELL = Method("thread.reset_shell", ResetShellParams, ResetShellResult,
                            Capability.EXEC)
THREAD_MODE = Method("thread.mode", ThreadModeParams, ThreadModeResult, Capability.THREAD_MODES,
                     read_only=True)
THREAD_SET_MODE = Method("thread.set_mode", ThreadSetModeParams, ThreadModeResult,
                         Capability.THREAD_MODES, read_only=True)

# -- commands ----------------------------------------------------------------------------------

EXEC_START = Method("exec.start", ExecStartParams, ExecResult, Capability.EXEC)
EXEC_STATUS = Method("exec.status", ExecStatusParams, ExecResult, Capability.EXEC,
                     read_only=True)
EXEC_INPUT = Method("exec.input", ExecInputParams, ExecResult, Capability.EXEC,
                    types_text=True)
EXEC_SCREEN = Method("exec.screen", ExecScreenParams, ScreenResult, Capability.SCREEN,
                     read_only=True)
EXEC_LIST = Method("exec.list", ExecListParams, ListResult, Capability.EXEC, read_only=True)
EXEC_GET = Method("exec.get", ExecGetParams, GetResult, Capability.EXEC, read_only=True)
EXEC_READ = Method("exec.read", ExecReadParams, ReadResult, Capability.EXEC, read_only=True)
EXEC_OBSERVE = Method("exec.observe", ExecObserveParams, ObserveResult, Capability.OBSERVE,
                      read_only=True)
EXEC_WAIT = Method("exec.wait", ExecWaitParams, WaitResult, Capability.WAIT, read_only=True)

# -- recognition and prompts -------------------------------------------------------------------

EXEC_EXPLAIN = Method("exec.explain", ExecExplainParams, ExplainResult, Capability.RECOGNITION,
                      read_only=True)
EXEC_WAIT_TURN = Method("exec.wait_turn", ExecWaitTurnParams, WaitTurnResult,
                        Capability.RECOGNITION, read_only=True)
AGENT_PROMPT = Method("agent.prompt", AgentPromptParams, PromptResult,
                      Capability.PROMPT_RECEIPTS, types_text=True)
AGENT_RECEIPT = Method("agent.receipt", AgentReceiptParams, PromptResult,
                       Capability.PROMPT_RECEIPTS, read_only=True)

# -- a person's view ---------------------------------------------------------------------------

WORKSPACE_LIST = Method("workspace.list", WorkspaceListParams, WorkspaceListResult,
                        Capability.PERSON_VIEW, read_only=True)
EXEC_DESCRIBE = Method("exec.describe", ExecDescribeParams, DescribeResult,
                       Capability.PERSON_VIEW, read_only=True)
EXEC_STREAM = Method("exec.stream", ExecStreamParams, StreamResult, Capability.PERSON_VIEW,
                     read_only=True)
PERSON_INPUT = Method("person.input", PersonInputParams, PersonInputResult,
                      Capability.PERSON_VIEW)

# -- managed agents ----------------------------------------------------------------------------

AGENT_LAUNCH = Method("agent.launch", AgentLaunchParams, AgentResult, Capability.AGENT_LIFECYCLE)
AGENT_CLOSE = Method("agent.close", AgentTargetParams, AgentResult, Capability.AGENT_LIFECYCLE)
AGENT_RESUME = Method("agent.resume", AgentTargetParams, AgentResult, Capability.AGENT_LIFECYCLE)
AGENT_ARCHIVE = Method("agent.archive", AgentTargetParams, AgentArchiveResult,
                       Capability.AGENT_LIFECYCLE)
AGENT_UNARCHIVE = Method("agent.unarchive", AgentTargetParams, AgentResult,
                         Capability.AGENT_LIFECYCLE)
AGENT_DETACH = Method("agent.detach", AgentTargetParams, AgentResult, Capability.AGENT_LIFECYCLE)
AGENT_DETACH_REMOTE = Method("agent.detach_remote", AgentDetachRemoteParams, DetachRemoteResult,
                             Capability.AGENT_LIFECYCLE)
AGENT_CANCEL = Method("agent.cancel", AgentCancelParams, AgentCancelResult,
                      Capability.AGENT_LIFECYCLE)
AGENT_LABEL = Method("agent.label", AgentLabelParams, AgentResult, Capability.AGENT_LIFECYCLE)
AGENT_LIST = Method("agent.list", AgentListParams, AgentListResult, Capability.AGENT_LIFECYCLE,
                    read_only=True)
AGENT_GET = Method("agent.get", AgentTargetParams, AgentGetResult, Capability.AGENT_LIFECYCLE,
                   read_only=True)
AGENT_NOTIFICATIONS = Method("agent.notifications", AgentNotificationsParams,
                             AgentNotificationsResult, Capability.AGENT_LIFECYCLE,
                             read_only=True)
AGENT_APPROVALS = Method("agent.approvals", AgentApprovalsParams, AgentApprovalsResult,
                         Capability.APPROVALS, read_only=True)
AGENT_RESPOND = Method("agent.respond", AgentRespondParams, AgentRespondResult,
                       Capability.APPROVALS)
EXEC_ANCESTOR = Method("exec.ancestor", ExecAncestorParams, AncestorResult,
                       Capability.AGENT_LIFECYCLE, read_only=True)

# -- files (docs/tools.md#readfiles, docs/tools.md#editfiles) ---------------------------------

FILES_READ = Method("files.read", ReadFilesParams, ReadFilesResult, Capability.FILES,
                    read_only=True)
# Not read_only: it writes. A repeat after a lost reply is refused by its own revisions
# (the file has changed: stale_revision; a created file exists now: revision_required).
FILES_EDIT = Method("files.edit", EditFilesParams, EditFilesResult, Capability.FILES)
# A repeat is safe: a helper released already is ``absent``.
FILES_RELEASE = Method("files.release", ReleaseTemporaryParams, ReleaseResult, Capability.FILES)

#: Every method by its wire name: what the guardian admits, and nothing else.
METHODS: dict[str, Method[Any, Any]] = {method.name: method for method in (
    HELLO, GUARDIAN_SHUTDOWN, GUARDIAN_UPGRADE,
    THREAD_OPEN, THREAD_RESET_SHELL, THREAD_MODE, THREAD_SET_MODE,
    EXEC_START, EXEC_STATUS, EXEC_INPUT, EXEC_SCREEN, EXEC_LIST, EXEC_GET, EXEC_READ,
    EXEC_OBSERVE, EXEC_WAIT,
    EXEC_EXPLAIN, EXEC_WAIT_TURN, AGENT_PROMPT, AGENT_RECEIPT,
    WORKSPACE_LIST, EXEC_DESCRIBE, EXEC_STREAM, PERSON_INPUT,
    AGENT_LAUNCH, AGENT_CLOSE, AGENT_RESUME, AGENT_ARCHIVE, AGENT_UNARCHIVE, AGENT_DETACH,
    AGENT_DETACH_REMOTE, AGENT_CANCEL, AGENT_LABEL, AGENT_LIST, AGENT_GET, AGENT_NOTIFICATIONS,
    EXEC_ANCESTOR, AGENT_APPROVALS, AGENT_RESPOND,
    EXEC_ANCESTOR,
    FILES_READ, FILES_EDIT, FILES_RELEASE,
)}
