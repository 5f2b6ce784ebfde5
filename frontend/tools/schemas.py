"""Tool input models (pydantic): the MCP input schemas are generated from these."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from tether.frontend.herdr.herdr_cli import MAX_READ_LINES
from tether.protocol.limits import (
    CHOICE_PATTERN,
    CONVERSATION_ID_PATTERN,
    DEFAULT_LIST_LIMIT,
    DEFAULT_OBSERVE_PAGE_BYTES,
    DEFAULT_PAGE_BYTES,
    ID_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_AGENT_LIST,
    MAX_ARGV_BYTES,
    MAX_CANONICAL_LINE_BYTES,
    MAX_COLS,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_ENV_VARS,
    MAX_GENERATION,
    MAX_KEYS,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    MAX_OBSERVE_ITEMS,
    MAX_OBSERVE_WAIT_MS,
    MAX_PAGE_BYTES,
    MAX_PROMPT_BYTES,
    MAX_PROMPT_WAIT_MS,
    MAX_QUIET_MS,
    MAX_ROWS,
    MAX_TEXT_BYTES,
    MAX_TITLE,
    MAX_WAIT_IDS,
    MAX_WAIT_MS,
    MAX_WIRE_INT,
    MIN_COLS,
    MIN_PAGE_BYTES,
    MIN_ROWS,
    PROMPT_ID_PATTERN,
    RECOGNIZER_PATTERN,
)
from tether.protocol.methods import (
    Argv,
    Command,
    Cursor,
    InputText,
    ItemCursor,
    LabelValue,
    LaunchEnv,
    ListBefore,
    PromptText,
    check_cursor,
)
from tether.protocol.text import CleanText

Id = Annotated[str, Field(pattern=ID_PATTERN)]
#: ``catalog_cursor`` of list/observe/wait: the catalog's change sequence at that moment.
CatalogCursor = Annotated[int, Field(ge=0, le=MAX_WIRE_INT)]
#: Every path, command and text is refused (never altered) when it holds NUL, a lone
#: surrogate or invalid UTF-8; every integer has a range (nothing overflows the wire).
WorkspaceRoot = Annotated[CleanText, Field(
    description="absolute path of the workspace, or ssh://[user@]host[:port]/absolute/path "
    "for one on another host")]


def _check_after(value: int | str | None) -> int | str | None:
    return check_cursor(value) if isinstance(value, str) else value


#: A wait's baseline: a wait's ``cursor``, or the ``catalog_cursor`` that list/observe/wait
#: return (a malformed string is ``invalid_cursor``, like a cursor).
After = Annotated[CatalogCursor | str | None, AfterValidator(_check_after)]
WAIT_AFTER = ("wait: a cursor (data.cursor of an earlier wait, or a catalog_cursor) is a "
              "position: every state change after it is reported, a turn that began and ended "
              "since included (changed[].transitions); without it, only what happens from this "
              "call on counts (data.current has the state now)")
Generation = Annotated[int, Field(
    ge=1, le=MAX_GENERATION,
    description="refuse (stale_generation) unless the target runtime is at this generation")]


class ToolArgs(BaseModel):
    # strict: a number is a JSON number ("5" is refused, as the published schema says), and
    # true is not 1 (pydantic's lax mode takes both).
    model_config = ConfigDict(extra="forbid", strict=True)


class CodeWriterArgs(ToolArgs):
    """What mode code_writer lets through."""

    allowed_commands: list[CleanText] | Literal["all"] = Field(
        description="command names allowed in every segment of a command line (pipes, &&, ||, "
                    ";, subshells, $( ), backticks, <( )), or \"all\"")
    allowed_globs: list[CleanText] | Literal["all"] = Field(
        description="globs of files a redirection may write (relative ones are under the "
                    "workspace; ** crosses directories), or \"all\"")


class InitializeArgs(ToolArgs):
    """Start or reattach to a thread in a workspace, show its status, reset its shell, or
    change its mode."""

    type: Literal["first_call", "status", "reset_shell", "change_mode"] = "first_call"
    workspace_root: WorkspaceRoot
    thread_id: Id | None = Field(default=None, description="thread to reattach to")
    mode: Literal["wcgw", "architect", "code_writer"] | None = Field(
        default=None,
        description="wcgw: unrestricted; architect: read-only commands, no writes; "
                    "code_writer: the allowlists in code_writer. Neither restricted mode may "
                    "prompt agents.")
    code_writer: CodeWriterArgs | None = None


class CommandAction(ToolArgs):
    type: Literal["command"]
    generation: Generation | None = None
    command: Command = Field(
        min_length=1, description="shell command line (may be multi-line; at most "
                                  f"{MAX_COMMAND_BYTES // 1024} KiB in UTF-8)")
    is_background: bool = False
    rows: int | None = Field(default=None, ge=MIN_ROWS, le=MAX_ROWS)
    cols: int | None = Field(default=None, ge=MIN_COLS, le=MAX_COLS)


class StatusCheckAction(ToolArgs):
    type: Literal["status_check"]
    execution_id: Id | None = None


class SendTextAction(ToolArgs):
    type: Literal["send_text"]
    generation: Generation | None = None
    text: InputText = Field(description=f"at most {MAX_TEXT_BYTES // 1024} KiB in UTF-8; a "
                            "program that reads whole lines takes lines of at most "
                            f"{MAX_CANONICAL_LINE_BYTES} bytes")
    execution_id: Id | None = None
    submit: bool = Field(default=False, description="press Enter after the text (without it, "
                         "a program that reads lines waits for Enter)")


class SendKeysAction(ToolArgs):
    type: Literal["send_keys"]
    generation: Generation | None = None
    keys: list[str] = Field(min_length=1, max_length=MAX_KEYS)
    execution_id: Id | None = None


class ScreenAction(ToolArgs):
    type: Literal["screen"]
    execution_id: Id | None = None
    lines: int | None = Field(default=None, ge=1, le=MAX_ROWS)


Recognizer = Annotated[str, Field(pattern=RECOGNIZER_PATTERN,
                                   description="auto, or claude, codex, opencode, gemini, aider, shell")]


class WaitForTurnAction(ToolArgs):
    type: Literal["wait_for_turn"]
    execution_id: Id
    recognizer: Recognizer = "auto"
    quiet_ms: int = Field(default=500, ge=0, le=MAX_QUIET_MS)
    timeout_seconds: float = Field(default=30, ge=0, le=MAX_WAIT_MS // 1000)


BashAction = Annotated[
    CommandAction | StatusCheckAction | SendTextAction | SendKeysAction | ScreenAction
    | WaitForTurnAction,
    Field(discriminator="type"),
]


class BashCommandArgs(ToolArgs):
    """Run a command in the thread's shell (or in the background), check on it, type into
    it, or read its screen."""

    thread_id: Id
    workspace_root: WorkspaceRoot
    action_json: BashAction
    wait_for_seconds: float | None = Field(default=None, ge=0, le=MAX_WAIT_MS // 1000)

    @field_validator("action_json", mode="before")
    @classmethod
    def _accept_json_text(cls, value: Any) -> Any:
        # Some clients send the action as a JSON string rather than an object.
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("action_json must be an object or a JSON object string") from None
        return value


class ObserveItemArgs(ToolArgs):
    execution_id: Id
    source: Literal["output", "screen", "detection"] = "output"
    # The guardian checks the page range (naming the item and its rule); the schema says it.
    page_bytes: int = Field(default=DEFAULT_OBSERVE_PAGE_BYTES, ge=0, le=MAX_WIRE_INT,
                            json_schema_extra={"minimum": MIN_PAGE_BYTES,
                                               "maximum": MAX_PAGE_BYTES})
    cursor: ItemCursor | None = None


#: Where the next, older page of a listing starts (the previous page's ``next_before``).
BEFORE_DESCRIPTION = "the next_before of the previous page: its older records"


class ListAction(ToolArgs):
    type: Literal["list"]
    limit: int = Field(default=DEFAULT_LIST_LIMIT, ge=1, le=MAX_LIST_LIMIT)
    before: ListBefore | None = Field(default=None, description=BEFORE_DESCRIPTION)


class GetAction(ToolArgs):
    type: Literal["get"]
    execution_id: Id


class ReadAction(ToolArgs):
    type: Literal["read"]
    execution_id: Id
    source: Literal["output", "screen", "detection"] = "output"
    page_bytes: int = Field(default=DEFAULT_PAGE_BYTES, ge=MIN_PAGE_BYTES, le=MAX_PAGE_BYTES)
    cursor: Cursor | None = None


class ObserveAction(ToolArgs):
    type: Literal["observe"]
    # The guardian checks the count (observe_item_count); the schema says it.
    items: list[ObserveItemArgs] = Field(json_schema_extra={"minItems": 1,
                                                            "maxItems": MAX_OBSERVE_ITEMS})
    timeout_seconds: float = Field(default=5, ge=0, le=MAX_OBSERVE_WAIT_MS // 1000)


WaitEvent = Literal[
    "state", "output", "exited", "awaiting_input", "awaiting_approval", "busy", "unknown"
]


class WaitAction(ToolArgs):
    type: Literal["wait"]
    execution_ids: list[Id] = Field(min_length=1, max_length=MAX_WAIT_IDS)
    after: After = Field(default=None, description=WAIT_AFTER)
    timeout_seconds: float = Field(default=5, ge=0, le=MAX_OBSERVE_WAIT_MS // 1000)
    events: list[WaitEvent] | None = None


class ExplainAction(ToolArgs):
    type: Literal["explain"]
    execution_id: Id
    recognizer: Recognizer = "auto"


ExecutionAction = Annotated[
    ListAction | GetAction | ReadAction | ObserveAction | WaitAction | ExplainAction,
    Field(discriminator="type"),
]


class ExecutionArgs(ToolArgs):
    """Look back at what ran: list, get, read pages, observe several, wait for changes."""

    thread_id: Id
    workspace_root: WorkspaceRoot
    action: ExecutionAction


AgentWaitEvent = Literal[
    "state", "output", "exited", "awaiting_input", "awaiting_approval", "busy", "unknown",
    "notification",
]
LabelKey = Annotated[str, Field(pattern=LABEL_KEY_PATTERN)]
#: Herdr's lifecycle states, which a Herdr wait can wait ``until``.
HerdrState = Literal["idle", "working", "blocked", "done", "unknown"]


class AgentArgs(ToolArgs):
    """Observe agents, prompt them exactly once, and run managed agents' lifecycle."""

    thread_id: Id
    workspace_root: WorkspaceRoot
    backend: Literal["native", "herdr"] = "native"
    action: Literal["list", "get", "read", "explain", "wait", "prompt", "launch", "close",
                    "resume", "archive", "unarchive", "cancel", "label", "notifications",
                    "approvals", "respond"]
    target: Id | None = Field(default=None, description="native: execution_id of the agent; "
                                                        "herdr: a configured target alias")
    prompt_id: Annotated[str, Field(pattern=PROMPT_ID_PATTERN)] | None = None
    text: PromptText | None = Field(
        default=None, description=f"prompt text (at most {MAX_PROMPT_BYTES // 1024} KiB in UTF-8)")
    recognizer: Recognizer = "auto"
    timeout_seconds: float = Field(default=10, ge=0, le=MAX_PROMPT_WAIT_MS // 1000)
    limit: int = Field(default=DEFAULT_LIST_LIMIT, ge=1, le=MAX_AGENT_LIST)
    source: Literal["output", "screen", "detection"] = "output"
    page_bytes: int = Field(default=DEFAULT_PAGE_BYTES, ge=MIN_PAGE_BYTES, le=MAX_PAGE_BYTES)
    cursor: Cursor | None = None
    events: list[AgentWaitEvent] | None = None
    after: After = Field(default=None, description=WAIT_AFTER)
    # launch
    provider: Literal["command", "claude", "codex", "opencode"] = Field(
        default="command", description="launch: what to run; command needs argv")
    argv: Argv | None = Field(
        default=None, description="launch: program and arguments (no shell); at most "
                                  f"{MAX_ARGV_BYTES // 1024} KiB in UTF-8 in all")
    conversation_id: Annotated[str, Field(pattern=CONVERSATION_ID_PATTERN)] | None = None
    title: CleanText | None = Field(default=None, max_length=MAX_TITLE)
    labels: dict[LabelKey, LabelValue | None] | None = Field(
        default=None, max_length=MAX_LABELS,
        description="launch: initial labels; label: changes (null removes a key). A client "
                    "holding an agent open sets tether.open.<client-id> = \"true\"")
    auto_archive: bool = False
    notify_on_finish: bool | None = Field(
        default=None, description="default: true when this server runs inside a Tether execution")
    rows: int | None = Field(default=None, ge=MIN_ROWS, le=MAX_ROWS)
    cols: int | None = Field(default=None, ge=MIN_COLS, le=MAX_COLS)
    env: LaunchEnv | None = Field(
        default=None, description=f"launch: variables for the agent and its resumes (POSIX "
                                  f"names, not TETHER_*; at most {MAX_ENV_VARS}, "
                                  f"{MAX_ENV_BYTES // 1024} KiB in all); kept privately, "
                                  "never shown back")
    # prompt
    replace_draft: bool = Field(
        default=False, description="prompt: when the input box already holds text, clear it "
                                   "with the program's own keys first (else the prompt is "
                                   "refused: input_not_empty, nothing typed)")
    # the herdr backend
    lines: int | None = Field(default=None, ge=1, le=MAX_READ_LINES,
                              description="herdr read: recent lines (default 100)")
    until: HerdrState | Annotated[list[HerdrState], Field(min_length=1, max_length=5)] | None = Field(
        default=None, description="herdr wait: the state(s) to wait for (default: idle, done "
                                  "or blocked); the wait ends by the operator's deadline_ms")
    # approvals / respond
    approval_id: Id | None = Field(default=None, description="respond: the approval to answer")
    choice: Annotated[str, Field(pattern=CHOICE_PATTERN)] | None = Field(
        default=None, description="respond: approve, deny, or the key of an offered option")
    pending_only: bool = Field(default=True, description="approvals: only those still asked")
    # list / notifications / approvals
    parent: Id | None = Field(default=None, description="list/notifications/approvals: the "
                                                        "parent execution")
    include_archived: bool = False
    before: ListBefore | None = Field(default=None, description=f"list: {BEFORE_DESCRIPTION}")


def wire_cursor(after: int | str | None) -> str | None:
    """A wait baseline as the guardian takes it: a catalog cursor travels as its digits."""
    return str(after) if isinstance(after, int) else after
