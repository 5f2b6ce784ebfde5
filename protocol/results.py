"""The RPC methods' results: one pydantic model per method, beside the params models.

The guardian builds every reply as one of these models; the front-end reads every reply
through the same model (each method's ``result`` in :mod:`tether.protocol.method_table`), so a
shape changed on one side fails on the other instead of drifting. Compatibility, both ways:

- every model keeps keys it does not know (``extra="allow"``): a newer guardian's additions
  reach a client unchanged, and an older front-end ignores them;
- a field added after protocol 1.0 is optional (a 1.0 guardian does not send it);
- the guardian sends exactly the fields it set (``model_dump(exclude_unset=True)``), so the
  wire carries no ``null`` an older front-end has never seen.

Observe's items are typed maps (``TypedDict``), checked the same way (types, required keys,
unknown keys kept) but not built into models: 32 items made 97 models per call, ~420 objects
alive at once, enough to set off the front-end's cyclic collector on nearly every call.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Self

from pydantic import BaseModel, ConfigDict, Field, with_config

# typing_extensions' TypedDict: pydantic validates it before Python 3.12.
from typing_extensions import TypedDict


class Result(BaseModel):
    """Base of every result model: unknown keys kept, values checked.

    A result validated from a map remembers that map: it is what the checked reply looks
    like on the wire, so :meth:`wire` hands it back instead of serialising the model again
    (observe of 32 items would otherwise pay for a second pass on each side). Assigning a
    field forgets it.
    """

    # Built on first use: a guardian that has served one command needs a few of them.
    model_config = ConfigDict(extra="allow", defer_build=True)

    # The map is kept in pydantic's private slot, not in a PrivateAttr: declaring one makes
    # pydantic run a Python hook for every nested model it validates (32 observe items...).

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        result = super().model_validate(obj, *args, **kwargs)
        if isinstance(obj, dict):
            object.__setattr__(result, "__pydantic_private__", {"wire": obj})
        return result

    @classmethod
    def built(cls, wire: dict[str, Any]) -> Self:
        """A reply the guardian assembled from its own rows, sent as it is, unchecked here.

        The front-end checks every reply through ``Method.read`` (a wrong shape is
        ``protocol_mismatch`` there), so checking on this side as well only paid twice for
        the same shape: ~0.13 ms of an observe of 32 items, and ~260 short-lived objects
        for the guardian's collector. Only the top-level fields are set (nested ones stay
        maps, so reading through them fails loudly): it is for :meth:`wire`, not for reading.
        tests/test_typed_results.py checks such replies against their model.
        """
        result = cls.model_construct(**wire)
        object.__setattr__(result, "__pydantic_private__", {"wire": wire})
        return result

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, "__pydantic_private__", None)
        super().__setattr__(name, value)

    def wire(self) -> dict[str, Any]:
        """The reply as it goes on the wire: the fields that were set, nothing else."""
        kept = self.__pydantic_private__
        if kept is not None and "wire" in kept:
            raw: dict[str, Any] = kept["wire"]
            return raw
        return self.model_dump(exclude_unset=True)


# -- shared pieces -----------------------------------------------------------------------------


class ProcessIdentityInfo(Result):
    """pid + process start time + boot id: a process, never a reused pid."""

    pid: int
    create_time: float
    boot_id: str


class RuntimeInfo(Result):
    """The process behind an execution, and the guardian instance that started it."""

    pid: int | None = None
    create_time: float | None = None
    boot_id: str | None = None
    guardian_instance_id: str | None = None


class RecoveryAdvice(Result):
    """How a coding agent's conversation could be resumed (docs/tools.md#recovery-advice)."""

    advice: str
    source: str | None = None
    command: str | None = None
    current_conversation_verified: bool | None = None
    reason: str | None = None


class RecognitionSummary(Result):
    """A recognizer's verdict in short, as records carry it (``recognition``)."""

    state: str
    attention: str | None = None
    rule: str | None = None
    recognizer: str | None = None
    reason: str | None = None


class TurnRow(Result):
    """One row of the turn log: a recognized state change (protocol 1.8, ``turn_log``)."""

    seq: int
    execution_id: str
    generation: int
    from_state: str | None = None
    to_state: str
    rule: str | None = None
    recognizer: str | None = None
    at_unix_ms: int


class ExecutionRecord(Result):
    """An execution record as clients see it (docs/tools.md), live output figures merged in."""

    execution_id: str
    thread_id: str | None = None
    principal: str | None = None
    workspace_root: str | None = None
    kind: str | None = None
    command: str | None = None
    cwd: str | None = None
    status: str
    exit_code: int | None = None
    reason: str | None = None
    started_unix_ms: int | None = None
    ended_unix_ms: int | None = None
    terminal_unix_ms: int | None = None
    observed_at_unix_ms: int | None = None
    guardian_instance_id: str | None = None
    runtime: RuntimeInfo | None = None
    generation: int | None = None
    output_start: int | None = None
    output_end: int | None = None
    output_pending: bool | None = None
    output_activity_seq: int | None = None
    screen_text: str | None = None
    recognizer: str | None = None
    parent_execution_id: str | None = None
    labels: dict[str, str] | None = None
    archived_at: int | None = None
    recovery: RecoveryAdvice | None = None
    rows: int | None = None
    cols: int | None = None
    #: In a listing: ``command`` is its first LIST_COMMAND_CHARS characters (get has it all).
    command_truncated: bool | None = None
    #: The turn watch's last verdict (a managed agent's record; wait's ``current``).
    recognition: RecognitionSummary | None = None
    #: In ``exec.wait``'s ``changed``: the turn-log rows after the cursor, oldest first.
    transitions: list[TurnRow] | None = None
    #: In ``exec.wait``'s ``changed``: it had ended before a wait without a cursor began.
    ended_before_wait: bool | None = None


@with_config(ConfigDict(extra="allow"))
class CompactRecord(TypedDict, total=False):
    """The few figures of a record that ``exec.observe`` repeats per item (a typed map)."""

    execution_id: str | None
    kind: str | None
    status: str | None
    exit_code: int | None
    reason: str | None
    started_unix_ms: int | None
    ended_unix_ms: int | None
    observed_at_unix_ms: int | None
    output_start: int | None
    output_end: int | None
    output_pending: bool | None
    output_activity_seq: int | None
    generation: int | None


class OutputTail(Result):
    """The rendered tail of an execution's output, with the offsets to page the rest."""

    text: str
    start: int
    end: int
    truncated: bool
    retained_start: int | None = None


class RuleEvaluation(Result):
    """One recognizer rule as it was tried."""

    rule: str | None = None
    priority: int | None = None
    state: str | None = None
    matched: bool | None = None
    evidence: str | None = None


class Recognition(Result):
    """A recognizer's verdict on a screen (docs/tools.md#recognizers)."""

    state: str
    attention: str | None = None
    recognizer: str | None = None
    rule: str | None = None
    priority: int | None = None
    source: str | None = None
    reason: str | None = None
    evaluated: list[RuleEvaluation] = Field(default_factory=list)


class Observation(Result):
    """What a recognition looked at."""

    detection_source: str | None = None
    screen_bytes_fed: int | None = None
    output_activity_seq: int | None = None
    execution_status: str | None = None


class CursorPosition(Result):
    row: int
    col: int


class Page(Result):
    """One page of output, screen or detection text, with the cursor for the next."""

    text: str
    start: int
    end: int
    has_more: bool
    next_cursor: str
    gap: int | None = None
    resync_required: bool | None = None


@with_config(ConfigDict(extra="allow"))
class PageSlice(TypedDict):
    """An observe item's page: the fields of :class:`Page`, as a typed map."""

    text: str
    start: int
    end: int
    has_more: bool
    next_cursor: str
    gap: NotRequired[int | None]
    resync_required: NotRequired[bool | None]


@with_config(ConfigDict(extra="allow"))
class ErrorDetail(TypedDict):
    """A failure inside a call that still answered (an observe item; a typed map)."""

    stage: NotRequired[str | None]
    code: str
    message: str


class WireError(Result):
    """An error as the envelope carries it."""

    code: str
    message: str
    data: dict[str, Any] = Field(default_factory=dict)


# -- hello, shutdown, threads ------------------------------------------------------------------


class HelloResult(Result):
    version: tuple[int, int]
    instance_id: str
    capabilities: list[str]
    guardian_protocol: str | None = None
    identity: ProcessIdentityInfo | None = None
    workspace_root: str | None = None
    principal: str | None = None
    #: What this guardian reconciled when it started, before answering anything: the records
    #: (and receipts) its predecessor left unfinished, now ``unknown`` (``guardian_lost``),
    #: with the processes that outlived it. Sent only when there were any.
    lost_records: list[dict[str, Any]] | None = None
    #: The code the guardian runs (``protocol/versions.CODE_VERSION``), from 1.9.
    code_version: str | None = None
    #: When this process last re-executed itself with new code (``guardian.upgrade``).
    upgraded_unix_ms: int | None = None


class UpgradeResult(Result):
    """``guardian.upgrade``: the installed code took its dry run; unless ``dry_run``, the
    guardian hands itself over right after this reply (docs/protocol.md#live-upgrade)."""

    handing_over: bool
    from_code_version: str
    to_code_version: str
    from_protocol: str
    #: The executions whose terminals go over to the new code.
    executions: list[str]
    #: How long the dry run of the installed code took.
    dry_run_ms: int


class ShutdownResult(Result):
    stopping: bool
    running_executions: list[str]


class Orphan(Result):
    """A process of a replaced shell that is still running, reported, never adopted
    (docs/tools.md#unknown-is-not-success)."""

    pid: int
    reason: str


class ShellReplaced(Result):
    """The thread's main shell was replaced without a ``reset_shell``: the shell of
    ``previous_generation`` ended (``reason``: ``guardian_lost``, ``guardian_idle_exit``,
    ``guardian_stopped`` or ``shell_exited``) and a new one (``generation``) started in
    ``cwd``, with none of the old one's environment, variables or functions. ``message`` says
    so in a sentence; ``orphans``: processes of the old shell still running."""

    previous_generation: int
    generation: int
    reason: str
    cwd: str
    message: str
    orphans: list[Orphan] | None = None


class ThreadOpenResult(Result):
    thread_id: str | None
    workspace_root: str
    reattached: bool
    generation: int | None
    cwd: str | None
    #: Only for ``read_only`` (status) requests: whether the thread's shell runs.
    shell_running: bool | None = None
    #: A reattach that found the thread's shell replaced since its last command.
    shell_replaced: ShellReplaced | None = None
    #: The thread's managed temporary directory, TETHER_TMP in its shell (1.9, ``files``).
    temporary_dir: str | None = None


class ResetShellResult(Result):
    thread_id: str
    generation: int
    cwd: str
    replayed: bool | None = None
    #: Processes of the old shell that survived the reset or had left its session.
    orphans: list[Orphan] | None = None


class ModeConfig(Result):
    allowed_commands: list[str] | Literal["all"]
    allowed_globs: list[str] | Literal["all"]


class Mode(Result):
    name: str
    code_writer: ModeConfig | None = None


class ThreadModeResult(Result):
    mode: Mode
    cwd: str
    #: What an input names to prove it was checked against this mode (``mode_changed``).
    fingerprint: str | None = None
    #: (mode_sandbox) What the thread's architect shell runs inside, or None; and why none.
    sandbox: str | None = None
    sandbox_missing: str | None = None
    #: (mode_sandbox) The shell generation after this call; a mode change starts a new one.
    generation: int | None = None
    #: (mode_sandbox) Processes of the replaced shell left running (as reset_shell says).
    orphans: list[dict[str, Any]] | None = None


# -- commands ----------------------------------------------------------------------------------


class InputOutcome(Result):
    """What typing into a terminal did: delivery facts and what was seen afterwards."""

    execution_id: str
    input_sent: bool | str
    bytes: int | None = None
    replayed: bool | None = None
    terminal_mode: str | None = None
    reads_keys: bool | None = None
    terminal_mode_after: str | None = None
    screen_changed: bool | None = None
    echo_seen: bool | None = None
    delivery: str | None = None
    warning: str | None = None


class ExecResult(Result):
    """``exec.start``, ``exec.status`` and ``exec.input``: the record, its output tail, cwd."""

    execution: ExecutionRecord
    output: OutputTail
    cwd: str | None
    input: InputOutcome | None = None
    #: The first command in a shell that replaced a lost one (once).
    shell_replaced: ShellReplaced | None = None


class ScreenResult(Result):
    execution_id: str | None
    live: bool
    text: str
    lines: list[str]
    cursor: CursorPosition | None
    rows: int | None = None
    cols: int | None = None
    alternate: bool | None = None
    title: str | None = None
    shell_running: bool | None = None


class ListResult(Result):
    """Records newest first, each in short (no ``screen_text``, the command cut); with
    ``next_before`` when older ones remain (beyond ``limit``, or past LIST_REPLY_BYTES)."""

    executions: list[ExecutionRecord]
    catalog_cursor: int
    next_before: int | None = None


class ExecutionEvent(Result):
    """Something observed about an execution that changed nothing (issue 11)."""

    kind: str
    detail: str | None = None
    at_unix_ms: int | None = None


class GetResult(Result):
    execution: ExecutionRecord
    events: list[ExecutionEvent] | None = None


class ReadResult(Page):
    execution: ExecutionRecord


@with_config(ConfigDict(extra="allow"))
class ObserveItemResult(TypedDict):
    """One observe item (a typed map): its errors, figures and page."""

    errors: list[ErrorDetail]
    execution: NotRequired[CompactRecord | None]
    page: NotRequired[PageSlice | None]
    status: str


class ObserveResult(Result):
    items: list[ObserveItemResult]
    catalog_cursor: int
    completed_with_issues: bool | None = None


class WaitResult(Result):
    outcome: str
    changed: list[ExecutionRecord]
    cursor: str
    fired: dict[str, list[str]] | None = None
    #: Every execution waited on as it is now, in short, with ``recognition`` (1.8).
    current: list[ExecutionRecord] | None = None


# -- recognition and prompts -------------------------------------------------------------------


class ExplainResult(Result):
    execution_id: str
    recognition: Recognition
    observation: Observation


class WaitTurnResult(Result):
    outcome: str
    recognition: Recognition
    execution: ExecutionRecord


class ReceiptBaseline(Result):
    output_activity_seq: int | None = None
    screen_sha256: str | None = None
    state: str | None = None
    at_unix_ms: int | None = None
    #: The turn log's position before the first byte (1.8): later rows complete the receipt.
    turn_seq: int | None = None


#: ``Receipt.reason`` while a guardian is typing the prompt (stored before the first byte).
DELIVERY_IN_PROGRESS = "delivery_in_progress"
#: ``Receipt.reason`` once the guardian that was typing it is gone (``guardian/history/reconcile``).
DELIVERY_GUARDIAN_LOST = "guardian_lost"


class Receipt(Result):
    """A prompt's receipt (docs/tools.md#prompts, docs/tools.md#once-only): delivered, activity observed,
    wait reached, kept apart.

    ``delivered`` is ``True`` once the text and Enter were written to the terminal, ``False``
    when nothing was typed, and ``"unknown"`` when that cannot be said, with ``reason``:
    :data:`DELIVERY_IN_PROGRESS` (being typed right now), :data:`DELIVERY_GUARDIAN_LOST`
    (the guardian died before it recorded how the typing ended), or the error code that
    stopped the typing part-way (``input_incomplete``, ``not_running``, ``interrupted``).
    """

    prompt_id: str
    execution_id: str
    generation: int
    runtime: RuntimeInfo | None = None
    recognizer: str | None = None
    delivered: bool | Literal["unknown"]
    #: Why ``delivered`` is ``"unknown"`` (absent otherwise).
    reason: str | None = None
    activity_observed: bool
    wait_reached: bool
    activity_unconfirmable: bool | None = None
    baseline: ReceiptBaseline | None = None
    observed_at_unix_ms: int | None = None
    state: str | None = None


class PromptResult(Result):
    receipt: Receipt
    replayed: bool
    input_sent: bool


# -- a person's view ---------------------------------------------------------------------------


class ThreadRow(Result):
    thread_id: str
    principal: str | None = None
    workspace_root: str | None = None
    created_unix_ms: int | None = None
    shell_execution_id: str | None = None
    generation: int | None = None
    cwd: str | None = None
    shell_alive: bool | None = None
    shell_busy: bool | None = None


class WorkspaceListResult(Result):
    principal: str
    workspace_root: str
    threads: list[ThreadRow]
    executions: list[ExecutionRecord]
    counts: dict[str, int]
    catalog_cursor: int


class PersonEvent(Result):
    seq: int | None = None
    kind: str
    attach_id: str | None = None
    at_unix_ms: int | None = None


class AgentEvent(Result):
    """One persisted state transition of a managed agent (``agent_events``, docs/tools.md#agent-states)."""

    seq: int | None = None
    execution_id: str | None = None
    from_state: str | None = None
    to_state: str | None = None
    attention: str | None = None
    reason: str | None = None
    generation: int | None = None
    turn_seq: int | None = None
    at_unix_ms: int | None = None


class DescribeResult(Result):
    execution: ExecutionRecord
    thread: ThreadRow | None
    live: bool
    receipts: list[Receipt]
    agent_events: list[AgentEvent]
    person_events: list[PersonEvent]
    recognition: Recognition | None = None
    observation: Observation | None = None
    recognition_error: WireError | None = None


class StreamScreen(Result):
    lines: list[str]
    cursor_row: int | None
    cursor_col: int | None
    rows: int
    cols: int
    alternate: bool
    title: str


class StreamResult(Result):
    execution_id: str
    status: str
    exit_code: int | None
    reason: str | None = None
    live: bool
    journal_start: int
    journal_end: int
    data: bytes
    start: int
    end: int
    gap: int
    rows: int
    cols: int
    screen: StreamScreen | None = None


class PersonInputResult(Result):
    execution_id: str
    input_sent: bool | str
    bytes: int
    replayed: bool | None = None


# -- managed agents (docs/tools.md#managed-agents, agent_lifecycle)
# --------------------------------------------------


class AgentRecord(ExecutionRecord):
    """An execution of kind ``agent`` with its lifecycle fields."""

    provider: str | None = None
    agent_state: str | None = None
    attention: str | None = None
    title: str | None = None
    conversation_id: str | None = None
    auto_archive: bool | None = None
    notify_on_finish: bool | None = None
    parent_workspace: str | None = None
    argv: list[str] | None = None
    agent_recognizer: str | None = None
    turn_seq: int | None = None


class ApprovalOption(Result):
    """One answer a question offers: the key that selects it, its label as shown, and
    whether it approves, denies or does something else (docs/tools.md#approvals)."""

    key: str
    label: str
    kind: str  # approve | deny | other
    selected: bool = False


class ApprovalRequest(Result):
    """What is asked, normalized from the screen: ``what`` (command, file, url, tool, trust,
    login, choice, other), the tool and the detail (command line, file, URL) as the
    program shows them, the question, and the options."""

    attention: str | None = None
    what: str
    tool: str | None = None
    detail: str | None = None
    question: str | None = None
    options: list[ApprovalOption]


class ApprovalResolution(Result):
    """How an approval ended: ``approved``, ``denied``, ``other`` or ``unknown``, by whom
    (``respond``, ``input`` typed into the terminal, the ``program`` itself, ``runtime``
    gone, ``guardian_lost``)."""

    how: str
    by: str
    at_unix_ms: int
    reason: str | None = None
    option: str | None = None


class ApprovalResponse(Result):
    """What ``agent.respond`` typed (once): the choice asked, the option and keys it chose,
    and the receipt — whether the screen left the question (``left_approval``)."""

    choice: str
    option: str
    keys: list[str]
    input_sent: bool | str
    left_approval: bool
    state_after: str | None = None
    at_unix_ms: int


class ApprovalRecord(Result):
    """A question an agent asked (docs/tools.md#approvals)."""

    approval_id: str
    execution_id: str
    generation: int
    turn_seq: int
    provider: str | None = None
    recognizer: str | None = None
    rule: str | None = None
    parent_execution_id: str | None = None
    status: str  # pending | resolved
    request: ApprovalRequest
    screen: str
    created_at_unix_ms: int
    resolved: ApprovalResolution | None = None
    response: ApprovalResponse | None = None


class AgentApprovalsResult(Result):
    approvals: list[ApprovalRecord]


class AgentRespondResult(Result):
    approval: ApprovalRecord
    response: ApprovalResponse
    replayed: bool
    input_sent: bool | str


class AgentNotification(Result):
    """A durable notice for a parent (docs/tools.md#deaths-cancel-and-notices); an approval
    notice carries the approval (docs/tools.md#approvals)."""

    id: int
    parent_execution_id: str
    child_execution_id: str
    kind: str
    turn_seq: int
    created_at_unix_ms: int
    delivered_prompt_id: str | None = None
    approval: ApprovalRecord | None = None


class AgentResult(Result):
    """``agent.launch``, ``close``, ``resume``, ``unarchive``, ``label``, ``detach``."""

    agent: AgentRecord
    input_sent: bool | None = None
    replayed: bool | None = None
    #: launch: the names of the launch's own variables (their values are never replied).
    env_names: list[str] | None = None


class AgentGetResult(Result):
    agent: AgentRecord
    events: list[AgentEvent] = Field(default_factory=list)


class AgentArchiveResult(Result):
    agent: AgentRecord
    archived: list[str]
    detached: list[str]
    workspace_root: str | None = None


class AgentCancelResult(Result):
    agent: AgentRecord
    acknowledged: bool
    interrupt: str | None = None
    input_sent: bool | None = None
    replayed: bool | None = None


class AgentListResult(Result):
    """As :class:`ListResult`, over the workspace's managed agents."""

    agents: list[AgentRecord]
    catalog_cursor: int | None = None
    next_before: int | None = None


class AgentNotificationsResult(Result):
    notifications: list[AgentNotification]
    cursor: int


class DetachRemoteResult(Result):
    detached: list[str]


class AncestorResult(Result):
    """The live execution a front-end's process descends from, if any (docs/tools.md#trees-and-parents)."""

    execution_id: str | None = None
    thread_id: str | None = None
    workspace_root: str | None = None
