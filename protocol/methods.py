"""The RPC methods' params models (each method's name, capability and result model are in
:mod:`tether.protocol.method_table`).

Limits and id patterns come from :mod:`tether.protocol.limits` (one definition each).

Params models ignore unknown keys (a newer front-end may send fields an older guardian does
not know) but validate every known field strictly. Results are the models of
:mod:`tether.protocol.results`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import (
    CHOICE_PATTERN,
    CONVERSATION_ID_PATTERN,
    DEFAULT_AGENT_LIST,
    DEFAULT_APPROVAL_LIST,
    DEFAULT_CANCEL_WAIT_MS,
    DEFAULT_COLS,
    DEFAULT_LIST_LIMIT,
    DEFAULT_OBSERVE_PAGE_BYTES,
    DEFAULT_PAGE_BYTES,
    DEFAULT_RESPOND_WAIT_MS,
    DEFAULT_ROWS,
    ID_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_AGENT_LIST,
    MAX_ANCESTORS,
    MAX_APPROVAL_LIST,
    MAX_ARGV,
    MAX_ARGV_BYTES,
    MAX_CANCEL_WAIT_MS,
    MAX_COLS,
    MAX_COMMAND_BYTES,
    MAX_CURSOR,
    MAX_ENV_BYTES,
    MAX_ENV_VARS,
    MAX_GENERATION,
    MAX_IDEMPOTENCY_KEY,
    MAX_KEYS,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    MAX_MODE_ENTRIES,
    MAX_NOTIFICATION_WAIT_MS,
    MAX_NOTIFICATIONS,
    MAX_OBSERVE_WAIT_MS,
    MAX_OFFSET,
    MAX_PAGE_BYTES,
    MAX_PATH,
    MAX_PRINCIPAL,
    MAX_PROMPT_BYTES,
    MAX_PROMPT_WAIT_MS,
    MAX_QUIET_MS,
    MAX_RESPOND_WAIT_MS,
    MAX_ROWS,
    MAX_STREAM_BYTES,
    MAX_STREAM_LINGER_MS,
    MAX_STREAM_WAIT_MS,
    MAX_TEXT_BYTES,
    MAX_TITLE,
    MAX_WAIT_IDS,
    MAX_WAIT_MS,
    MAX_WIRE_INT,
    MAX_WORKSPACE_LIST,
    MIN_COLS,
    MIN_PAGE_BYTES,
    MIN_ROWS,
    PROMPT_ID_PATTERN,
    RECOGNIZER_PATTERN,
    argv_bytes,
)
from tether.protocol.text import UNSAFE_TEXT_ERROR, CleanText
from tether.protocol.versions import Capability


def coded_error(code: ErrorCode, message: str, **context: Any) -> PydanticCustomError:
    """A validation failure that carries its own stable code: :func:`validation_error` answers
    with ``code`` (not ``invalid_request``) when every failure of a request carries it, and
    ``context`` becomes the error's data. Messages name the rule and what to do next."""
    return PydanticCustomError(code.value, "{message}", {"message": message, **context})


def check_cursor(value: str) -> str:
    """A cursor that could have come from Tether: not empty (no cursor is ``null``, never
    ``""``) and not longer than any Tether issues. Anything else is ``invalid_cursor`` (docs/tools.md), like
    a cursor that was edited, before the request goes further."""
    if not value:
        raise coded_error(ErrorCode.INVALID_CURSOR,
                          "an empty string is not a cursor; to start from the beginning leave "
                          "it out (or null), else pass a cursor that a previous call returned")
    if len(value) > MAX_CURSOR:
        raise coded_error(ErrorCode.INVALID_CURSOR,
                          f"{len(value)} characters, longer than any cursor Tether issues (at "
                          f"most {MAX_CURSOR}); pass a cursor that a previous call returned, "
                          "unchanged, or leave it out to start again")
    return value


def check_argv_size(argv: list[str]) -> list[str]:
    """Refuse an argv over ``MAX_ARGV_BYTES`` in UTF-8 (:func:`argv_bytes`) before any record
    is made: the kernel may refuse a big one only at exec time (E2BIG), and the record, which
    keeps the argv and the command line made of it, is in every reply that lists it."""
    size = argv_bytes(argv)
    if size > MAX_ARGV_BYTES:
        raise coded_error(
            ErrorCode.LIMIT_EXCEEDED,
            f"{size} bytes in UTF-8 (each argument's bytes plus 1 for its end); the limit is "
            f"{MAX_ARGV_BYTES} bytes. Nothing was started. Put long input in a file and pass "
            "its path, or send it to the program once it runs.",
            limit=MAX_ARGV_BYTES, size=size)
    return argv


def utf8_limit(limit: int, advice: str) -> Callable[[str], str]:
    """A validator refusing text over ``limit`` bytes in UTF-8 (what a terminal receives;
    pydantic's ``max_length`` counts characters, and "€" is 3 bytes) with ``limit_exceeded``
    naming the size, the limit and ``advice``: what to do instead."""

    def check(value: str) -> str:
        if len(value) <= limit // 4:  # 4 bytes per character at most: short text is quick
            return value
        size = len(value.encode())
        if size > limit:
            raise coded_error(
                ErrorCode.LIMIT_EXCEEDED,
                f"{size} bytes in UTF-8; the limit is {limit} bytes. Nothing was typed. {advice}",
                limit=limit, size=size)
        return value

    return check


#: A command line (docs/tools.md): at most MAX_COMMAND_BYTES.
Command = Annotated[CleanText, AfterValidator(utf8_limit(
    MAX_COMMAND_BYTES, "Put long scripts in a file and run the file."))]
#: Text for send_text: at most MAX_TEXT_BYTES (a line-reading program holds less per line:
#: MAX_CANONICAL_LINE_BYTES, checked by the guardian, which knows the terminal's mode).
InputText = Annotated[CleanText, AfterValidator(utf8_limit(
    MAX_TEXT_BYTES, "Write long text to a file and have the program read the file, or send "
                    "it in parts."))]
#: A prompt (docs/tools.md#prompts): at most MAX_PROMPT_BYTES.
PromptText = Annotated[CleanText, AfterValidator(utf8_limit(
    MAX_PROMPT_BYTES, "Put long instructions or material in a file and prompt the agent to "
                      "read it."))]
#: A label's value (docs/tools.md#managed-agents), at most MAX_LABEL_VALUE characters.
LabelValue = Annotated[CleanText, Field(max_length=MAX_LABEL_VALUE)]
#: A cursor as a client may send it (see :func:`check_cursor`).
Cursor = Annotated[str, AfterValidator(check_cursor), Field(max_length=MAX_CURSOR)]
#: An observe item's cursor: a bad one is that item's invalid_cursor, as a forged one is
#: (one bad item does not sink the request, docs/tools.md); over the size limit it is a bad budget.
ItemCursor = Annotated[str, Field(max_length=MAX_CURSOR)]
#: A launch's program and arguments: at most MAX_ARGV of them, MAX_ARGV_BYTES in all.
Argv = Annotated[list[CleanText], Field(max_length=MAX_ARGV), AfterValidator(check_argv_size)]

#: A POSIX environment variable name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")
#: Names Tether stamps on every process it starts (docs/tools.md#trees-and-parents): a launch may not set
#: them.
TETHER_ENV_PREFIX = "TETHER_"


def check_launch_env(env: dict[str, str]) -> dict[str, str]:
    """``Agent.launch {env}``: POSIX names, none of Tether's own marks, at most
    ``MAX_ENV_VARS`` variables and ``MAX_ENV_BYTES`` in all. No message repeats a value."""
    if len(env) > MAX_ENV_VARS:
        raise coded_error(ErrorCode.LIMIT_EXCEEDED,
                          f"{len(env)} variables; the limit is {MAX_ENV_VARS}. Nothing was "
                          "started.", limit=MAX_ENV_VARS, size=len(env))
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name[:64]!r} is not a POSIX variable name (letters, digits "
                             "and _, not starting with a digit, at most 256); nothing was started")
        if name.upper().startswith(TETHER_ENV_PREFIX):
            raise ValueError(f"{name} is Tether's own: every process Tether starts gets its "
                             "TETHER_* marks, which a launch cannot set; nothing was started")
        if "\x00" in value:
            raise ValueError(f"the value of {name} holds a NUL byte, which no environment "
                             "can carry; nothing was started")
    size = sum(len(name.encode()) + len(value.encode()) + 2 for name, value in env.items())
    if size > MAX_ENV_BYTES:
        raise coded_error(ErrorCode.LIMIT_EXCEEDED,
                          f"{size} bytes in UTF-8 (each NAME=value plus its end); the limit is "
                          f"{MAX_ENV_BYTES}. Nothing was started. Put large values in a file "
                          "and pass its path.", limit=MAX_ENV_BYTES, size=size)
    return env


LaunchEnv = Annotated[dict[str, str], AfterValidator(check_launch_env)]

ExecutionId = Annotated[str, Field(pattern=ID_PATTERN)]
ThreadId = Annotated[str, Field(pattern=ID_PATTERN)]
VersionPart = Annotated[int, Field(ge=0, le=MAX_WIRE_INT)]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=MAX_IDEMPOTENCY_KEY)]


class Params(BaseModel):
    """Base for every params model: unknown keys ignored, known keys strict."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class HelloParams(Params):
    client_min: tuple[VersionPart, VersionPart] = (1, 0)
    client_max: tuple[VersionPart, VersionPart] = (1, 0)
    capabilities: list[str] = Field(default_factory=list, max_length=64)


class Scoped(Params):
    """Every thread-scoped call names the principal, workspace and thread it acts for."""

    principal: str = Field(min_length=1, max_length=MAX_PRINCIPAL)
    workspace_root: CleanText = Field(min_length=1, max_length=MAX_PATH)
    thread_id: ThreadId


class ThreadOpenParams(Params):
    principal: str = Field(min_length=1, max_length=MAX_PRINCIPAL)
    workspace_root: CleanText = Field(min_length=1, max_length=MAX_PATH)
    thread_id: ThreadId | None = None
    # Initialize {type: status}: describe the thread, start nothing (no shell, no generation).
    read_only: bool = False


class ResetShellParams(Scoped):
    idempotency_key: IdempotencyKey


class ExecStartParams(Scoped):
    command: Command = Field(min_length=1)
    background: bool = False
    rows: int = Field(default=DEFAULT_ROWS, ge=MIN_ROWS, le=MAX_ROWS)
    cols: int = Field(default=DEFAULT_COLS, ge=MIN_COLS, le=MAX_COLS)
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS)
    idempotency_key: IdempotencyKey
    generation: int | None = Field(default=None, ge=1, le=MAX_GENERATION)
    parent_execution_id: ExecutionId | None = None


class ExecStatusParams(Scoped):
    execution_id: ExecutionId | None = None
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS)


class ExecInputParams(Scoped):
    execution_id: ExecutionId | None = None
    text: InputText | None = None
    keys: list[str] | None = Field(default=None, max_length=MAX_KEYS)
    submit: bool = False
    idempotency_key: IdempotencyKey
    generation: int | None = Field(default=None, ge=1, le=MAX_GENERATION)
    wait_ms: int = Field(default=0, ge=0, le=MAX_WAIT_MS)


class ExecScreenParams(Scoped):
    execution_id: ExecutionId | None = None
    lines: int | None = Field(default=None, ge=1, le=MAX_ROWS)


#: A listing's ``next_before``, sent back for the next, older page (``list_pages``).
ListBefore = Annotated[int, Field(ge=1, le=MAX_OFFSET)]


class ExecListParams(Scoped):
    limit: int = Field(default=DEFAULT_LIST_LIMIT, ge=1, le=MAX_LIST_LIMIT)
    kind: Literal["command", "background", "agent"] | None = None
    agents_only: bool = False  # executions running a known agent CLI (or launched as agents)
    before: ListBefore | None = None


class ExecGetParams(Scoped):
    execution_id: ExecutionId


class ExecReadParams(Scoped):
    execution_id: ExecutionId
    source: Literal["output", "screen", "detection"] = "output"
    page_bytes: int = Field(default=DEFAULT_PAGE_BYTES, ge=MIN_PAGE_BYTES, le=MAX_PAGE_BYTES)
    cursor: Cursor | None = None


class ObserveItem(Params):
    execution_id: ExecutionId
    source: Literal["output", "screen", "detection"] = "output"
    # Range checked by exec.observe itself, so one bad item does not sink the request.
    page_bytes: int = Field(default=DEFAULT_OBSERVE_PAGE_BYTES, ge=0, le=MAX_WIRE_INT)
    cursor: ItemCursor | None = None


class ExecObserveParams(Scoped):
    items: list[ObserveItem]
    timeout_ms: int = Field(default=5000, ge=0, le=MAX_OBSERVE_WAIT_MS)


class ExecWaitParams(Scoped):
    execution_ids: list[ExecutionId] = Field(min_length=1, max_length=MAX_WAIT_IDS)
    after: Cursor | None = None
    timeout_ms: int = Field(default=5000, ge=0, le=MAX_OBSERVE_WAIT_MS)
    events: list[
        Literal["state", "output", "exited", "awaiting_input", "awaiting_approval", "busy", "unknown"]
    ] | None = None


RecognizerName = Annotated[str, Field(pattern=RECOGNIZER_PATTERN)]
PromptId = Annotated[str, Field(pattern=PROMPT_ID_PATTERN)]


class ExecExplainParams(Scoped):
    execution_id: ExecutionId
    recognizer: RecognizerName = "auto"


class ExecWaitTurnParams(Scoped):
    execution_id: ExecutionId
    recognizer: RecognizerName = "auto"
    quiet_ms: int = Field(default=500, ge=0, le=MAX_QUIET_MS)
    timeout_ms: int = Field(default=30_000, ge=0, le=MAX_WAIT_MS)


class AgentPromptParams(Scoped):
    execution_id: ExecutionId
    prompt_id: PromptId
    text: PromptText = Field(min_length=1)
    recognizer: RecognizerName = "auto"
    timeout_ms: int = Field(default=10_000, ge=0, le=MAX_PROMPT_WAIT_MS)
    #: A draft in the input box is cleared with the program's own keys first (1.8); without
    #: it such a prompt is refused (``input_not_empty``) with nothing typed.
    replace_draft: bool = False


class AgentReceiptParams(Scoped):
    execution_id: ExecutionId
    prompt_id: PromptId
    timeout_ms: int = Field(default=0, ge=0, le=MAX_PROMPT_WAIT_MS)


class WorkspaceScoped(Params):
    """A person's request over a whole workspace (every thread), from the guardian's own user
    holding its token: ``tether ls``, ``show``, ``tail``, ``attach``."""

    principal: str = Field(min_length=1, max_length=MAX_PRINCIPAL)
    workspace_root: str = Field(min_length=1, max_length=MAX_PATH)


class WorkspaceListParams(WorkspaceScoped):
    limit: int = Field(default=50, ge=1, le=MAX_WORKSPACE_LIST)


class ExecDescribeParams(WorkspaceScoped):
    execution_id: ExecutionId


class ExecStreamParams(WorkspaceScoped):
    """Raw output from ``offset`` (default: the first retained byte), waiting up to
    ``timeout_ms`` for some when there is none yet; or, with ``screen``, the current screen
    and the offset it corresponds to."""

    execution_id: ExecutionId
    offset: int | None = Field(default=None, ge=0, le=MAX_OFFSET)
    max_bytes: int = Field(default=256 * 1024, ge=1, le=MAX_STREAM_BYTES)
    timeout_ms: int = Field(default=0, ge=0, le=MAX_STREAM_WAIT_MS)
    screen: bool = False
    #: After waiting, when fewer than ``min_bytes`` have arrived, linger this long once for
    #: more: a fast program then costs a few large replies instead of one per PTY read.
    min_bytes: int = Field(default=1, ge=1, le=MAX_STREAM_BYTES)
    linger_ms: int = Field(default=0, ge=0, le=MAX_STREAM_LINGER_MS)


class PersonInputParams(WorkspaceScoped):
    """Bytes a person typed into ``tether attach --write``, delivered raw."""

    # The idempotency fingerprint dumps params as JSON: raw keystrokes need not be UTF-8.
    model_config = ConfigDict(extra="ignore", frozen=True, ser_json_bytes="base64")
    execution_id: ExecutionId
    data: bytes = Field(min_length=1, max_length=MAX_TEXT_BYTES)
    attach_id: Annotated[str, Field(pattern=ID_PATTERN)]
    idempotency_key: IdempotencyKey


ModeName = Literal["wcgw", "architect", "code_writer"]
CommandName = Annotated[str, Field(min_length=1, max_length=256)]
WriteGlob = Annotated[str, Field(min_length=1, max_length=MAX_PATH)]


class CodeWriterSpec(Params):
    """What ``code_writer`` mode lets through: command names checked on every segment of a
    command line, and globs of the files a redirection may write ("all" for no limit)."""

    allowed_commands: list[CommandName] | Literal["all"] = Field(max_length=MAX_MODE_ENTRIES)
    allowed_globs: list[WriteGlob] | Literal["all"] = Field(max_length=MAX_MODE_ENTRIES)


class ModeSpec(Params):
    """A thread's mode (docs/security.md#profiles-and-modes): ``wcgw`` (unrestricted), ``architect`` (no
    writes) or
    ``code_writer`` (with its allowlists). Stored on the thread by the guardian; enforced by
    the front-end before anything is typed."""

    name: ModeName = "wcgw"
    code_writer: CodeWriterSpec | None = None

    @model_validator(mode="after")
    def _config_only_for_code_writer(self) -> ModeSpec:
        if self.name == "code_writer" and self.code_writer is None:
            raise ValueError("mode code_writer needs code_writer: {allowed_commands, allowed_globs}")
        if self.name != "code_writer" and self.code_writer is not None:
            raise ValueError(f"code_writer settings apply only to mode code_writer, not {self.name}")
        return self


class ThreadModeParams(Scoped):
    """Read a thread's mode (and its shell's cwd, which write globs are resolved against)."""


class ThreadSetModeParams(Scoped):
    mode: ModeSpec
# -- managed agents (docs/tools.md#managed-agents, capability agent_lifecycle, protocol 1.5)
# ----------------------

Provider = Literal["command", "claude", "codex", "opencode"]
LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
ConversationId = Annotated[str, Field(pattern=CONVERSATION_ID_PATTERN)]


class AgentScoped(WorkspaceScoped):
    """Managed agents belong to the workspace, not a thread (docs/tools.md#managed-agents): a person's CLI
    acts
    without a thread; a front-end passes its thread for the record of who launched."""

    workspace_root: CleanText = Field(min_length=1, max_length=4096)
    thread_id: ThreadId | None = None


class AgentLaunchParams(Scoped):
    provider: Provider = "command"
    argv: Argv | None = None
    recognizer: RecognizerName = "auto"
    conversation_id: ConversationId | None = None
    title: CleanText | None = Field(default=None, max_length=MAX_TITLE)
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_LABELS)
    auto_archive: bool = False
    notify_on_finish: bool | None = None  # default: true when there is a parent execution
    rows: int = Field(default=DEFAULT_ROWS, ge=MIN_ROWS, le=MAX_ROWS)
    cols: int = Field(default=DEFAULT_COLS, ge=MIN_COLS, le=MAX_COLS)
    # resolved by the front-end (docs/tools.md#trees-and-parents)
    parent_execution_id: ExecutionId | None = None
    parent_workspace: CleanText | None = Field(default=None, max_length=4096)
    idempotency_key: IdempotencyKey
    #: Variables for the agent's process and its resumes (1.8); kept privately, never in a
    #: record, a log or a reply.
    env: LaunchEnv = Field(default_factory=dict)


class AgentTargetParams(AgentScoped):
    """``close``, ``resume``, ``archive``, ``unarchive``, ``detach`` of one agent."""

    execution_id: ExecutionId
    idempotency_key: IdempotencyKey | None = None


class AgentCancelParams(AgentScoped):
    execution_id: ExecutionId
    timeout_ms: int = Field(default=DEFAULT_CANCEL_WAIT_MS, ge=0, le=MAX_CANCEL_WAIT_MS)
    idempotency_key: IdempotencyKey


class AgentLabelParams(AgentScoped):
    execution_id: ExecutionId
    labels: dict[LabelKey, LabelValue | None] = Field(
        min_length=1, max_length=MAX_LABELS)


class AgentListParams(AgentScoped):
    parent: ExecutionId | None = None
    include_archived: bool = False
    limit: int = Field(default=DEFAULT_AGENT_LIST, ge=1, le=MAX_AGENT_LIST)
    before: ListBefore | None = None


class AgentNotificationsParams(AgentScoped):
    parent: ExecutionId
    after: int = Field(default=0, ge=0, le=MAX_WIRE_INT)
    limit: int = Field(default=DEFAULT_AGENT_LIST, ge=1, le=MAX_NOTIFICATIONS)
    # > 0: ``Agent wait`` for event ``notification`` (answers at the first one)
    timeout_ms: int = Field(default=0, ge=0, le=MAX_NOTIFICATION_WAIT_MS)


class AgentApprovalsParams(AgentScoped):
    """``agent.approvals`` (docs/tools.md#approvals): the workspace's approvals, newest first;
    ``parent``: only its children's, ``execution_id``: only that execution's."""

    parent: ExecutionId | None = None
    execution_id: ExecutionId | None = None
    pending_only: bool = True
    limit: int = Field(default=DEFAULT_APPROVAL_LIST, ge=1, le=MAX_APPROVAL_LIST)


class AgentRespondParams(AgentScoped):
    """``agent.respond``: answer one approval, once (``choice``: ``approve``, ``deny`` or an
    offered option's key); waits up to ``timeout_ms`` for the screen to leave the question."""

    approval_id: Annotated[str, Field(pattern=ID_PATTERN)]
    choice: Annotated[str, Field(pattern=CHOICE_PATTERN)]
    timeout_ms: int = Field(default=DEFAULT_RESPOND_WAIT_MS, ge=0, le=MAX_RESPOND_WAIT_MS)


class AgentDetachRemoteParams(AgentScoped):
    """Detach this workspace's agents whose parent, in ``parent_workspace``, was archived."""

    parent_workspace: CleanText = Field(min_length=1, max_length=4096)
    parent_ids: list[ExecutionId] = Field(min_length=1, max_length=4096)


class ExecAncestorParams(AgentScoped):
    """Which live execution of this guardian is one of these processes (docs/tools.md#trees-and-parents
    fallback)?

    ``ancestors`` are ``[pid, create_time]`` of the asking front-end's process and its
    parents, nearest first; pids alone are never identity (docs/protocol.md#identity)."""

    ancestors: list[tuple[Annotated[int, Field(ge=1, le=MAX_WIRE_INT)], float]] = Field(
        min_length=1, max_length=MAX_ANCESTORS)


#: Agent actions that need the guardian's ``agent_lifecycle`` capability (protocol 1.5).
AGENT_LIFECYCLE_ACTIONS = frozenset(
    {"launch", "close", "resume", "archive", "unarchive", "cancel", "label", "notifications"}
)


def mode_fingerprint(mode: ModeSpec) -> str:
    """A short digest of a mode: what the front-end checked against, sent with every input.

    A mode without settings (``wcgw``, ``architect``) is its name alone: its digest is worked
    out once, not by a dump, JSON and SHA-256 per input."""
    if mode.code_writer is None:
        return _named_mode_fingerprint(mode.name)
    return _digest(mode)


@functools.cache
def _named_mode_fingerprint(name: str) -> str:
    return _digest(ModeSpec.model_validate({"name": name}))


def _digest(mode: ModeSpec) -> str:
    blob = json.dumps(mode.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ModeGuard(Params):
    """The mode fields of an input-bearing request, read beside its own params model (so they
    never enter the idempotency fingerprint): the front-end names the mode it checked the
    input against, and the guardian refuses (``mode_changed``) when the thread's mode is
    another one by now. A request without it passes only on a ``wcgw`` thread."""

    thread_id: ThreadId | None = None
    mode_fingerprint: str | None = Field(default=None, max_length=64)


#: Methods that type into a terminal on a thread: the guardian checks their ModeGuard.
MODE_GUARDED = frozenset({"exec.start", "exec.input", "agent.prompt", "agent.launch",
                          "agent.cancel", "agent.resume", "agent.unarchive", "agent.respond"})


class ShutdownParams(Params):
    reason: str = Field(default="requested", max_length=200)
    dry_run: bool = False  # only report what stopping would end


class UpgradeParams(Params):
    reason: str = Field(default="requested", max_length=200)
    dry_run: bool = False  # only try the installed code: load the handover and exit


#: ``exec.wait`` events that come from a recognizer's verdict, not from the record.
RECOGNIZER_EVENTS = frozenset({"awaiting_input", "awaiting_approval", "busy"})


def params_capability(method: str, params: Mapping[str, Any]) -> Capability | None:
    """The capability that what ``params`` ask for needs beyond ``method``'s own
    (docs/protocol.md#versions-and-capabilities): a
    ``detection`` page, and a recognizer's events, are a recognition verdict (1.2), which a
    guardian that lacks ``recognition`` must not hand out under an older method's name.
    A listing's ``before`` pages (1.7): a guardian without ``list_pages`` would ignore it
    and answer with the newest page again.
    ``params`` are the wire map, well-formed (validated, or about to be by the guardian)."""
    if method in ("exec.list", "agent.list"):
        return Capability.LIST_PAGES if params.get("before") is not None else None
    if method == "agent.prompt":
        return Capability.REPLACE_DRAFT if params.get("replace_draft") else None
    if method == "agent.launch":
        return Capability.LAUNCH_ENV if params.get("env") else None
    if method == "exec.read":
        needs = params.get("source") == "detection"
    elif method == "exec.observe":
        needs = any(isinstance(item, Mapping) and item.get("source") == "detection"
                    for item in params.get("items") or ())
    elif method == "exec.wait":
        needs = not RECOGNIZER_EVENTS.isdisjoint(params.get("events") or ())
    else:
        return None
    return Capability.RECOGNITION if needs else None


def validation_error(exc: ValidationError, what: str, source: Any = None) -> TetherError:
    """The error for a pydantic failure (front-end arguments or guardian params), with the
    message naming each bad field; ``data.field``/``data.offset`` locate unsafe text.

    The code is ``invalid_request``, unless every failure is of one kind with a code of its
    own: a size over a limit (pydantic's ``max_length`` or :func:`coded_error`) is
    ``limit_exceeded``, a malformed cursor ``invalid_cursor``. With the validated ``source``,
    fields are named by their path in it (a tagged union's tag, which pydantic puts in the
    location, is left out). No message repeats the value it refuses."""
    parts = []
    codes: set[str] = set()
    data: dict[str, object] = {"input_sent": False}
    errors = exc.errors()
    for error in errors[:6]:
        where = _field_path(error["loc"], source) or what
        if error["type"] in _TOO_LONG:
            size, limit, unit = _size_of(error, "max_length")
            parts.append(f"{where} is {_amount(size, unit)}; the limit is {_amount(limit, unit)}")
            codes.add(ErrorCode.LIMIT_EXCEEDED.value)
            if "field" not in data:
                data.update(field=where, size=size, limit=limit, unit=unit)
            continue
        if error["type"] in _TOO_SHORT:
            size, least, unit = _size_of(error, "min_length")
            parts.append(f"{where} is empty" if size == 0 else f"{where} is {_amount(size, unit)}")
            parts[-1] += f"; it needs at least {_amount(least, unit)}"
            codes.add(ErrorCode.INVALID_REQUEST.value)
            continue
        parts.append(f"{where}: {error['msg']}")
        codes.add(error["type"] if error["type"] in _CODED else ErrorCode.INVALID_REQUEST.value)
        context = error.get("ctx") or {}
        if error["type"] == UNSAFE_TEXT_ERROR and "field" not in data:
            data["field"] = where
            data["offset"] = context.get("offset")
        elif error["type"] in _CODED and "field" not in data:
            data["field"] = where
            data.update({k: v for k, v in context.items() if k != "message"})
    for error in errors[6:]:  # not described, but they count for the code as much
        kind = error["type"]
        codes.add(ErrorCode.LIMIT_EXCEEDED.value if kind in _TOO_LONG
                  else kind if kind in _CODED else ErrorCode.INVALID_REQUEST.value)
    more = f" (and {len(errors) - 6} more)" if len(errors) > 6 else ""
    if len(codes) == 1 and (code := codes.pop()) != ErrorCode.INVALID_REQUEST.value:
        return TetherError(ErrorCode(code), "; ".join(parts) + more, data)
    return TetherError(ErrorCode.INVALID_REQUEST, f"invalid {what}: " + "; ".join(parts) + more,
                       data)


#: pydantic's ``max_length`` and ``min_length`` failures (a string, bytes, list or dict).
_TOO_LONG = frozenset({"string_too_long", "bytes_too_long", "too_long"})
_TOO_SHORT = frozenset({"string_too_short", "bytes_too_short", "too_short"})
#: Failures raised by :func:`coded_error`, whose type is the code to answer with.
_CODED = frozenset({ErrorCode.LIMIT_EXCEEDED.value, ErrorCode.INVALID_CURSOR.value})


def _size_of(error: Any, bound: str) -> tuple[int, int, str]:
    """(size, limit, unit) of a length failure, in the unit the value is measured in:
    characters of a string (pydantic's ``too_long`` calls them "items" when the limit is
    checked after a validator), bytes of bytes, items of a list, keys of a map."""
    value = error.get("input")
    context = error.get("ctx") or {}
    limit = int(context.get(bound, 0))
    size = len(value) if isinstance(value, str | bytes | list | tuple | dict) else int(
        context.get("actual_length") or 0)
    unit = ("characters" if isinstance(value, str) else "bytes" if isinstance(value, bytes)
            else "keys" if isinstance(value, dict) else "items")
    return size, limit, unit


def _amount(count: int, unit: str) -> str:
    return f"{count} {unit[:-1] if count == 1 else unit}"


def _field_path(loc: tuple[int | str, ...], source: Any) -> str:
    if source is None:
        return ".".join(str(p) for p in loc)
    names: list[str] = []
    node = source
    for index, part in enumerate(loc):
        if isinstance(node, dict) and node.get("type") == part and index < len(loc) - 1:
            continue  # the tag of a union tagged by "type" (pydantic puts it in the location)
        if isinstance(node, dict) and part in node:  # noqa: SIM114 (each narrows its own type)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
        names.append(str(part))
    return ".".join(names)
