"""What each tool returns: every tool's ``outputSchema`` and the shapes of its ``data``.

Every result is ``{ok, status, code?, message?, data}`` (docs/tools.md). ``data`` is one of the
tool's shapes on success and the error's detail on failure. The schema validates the envelope
and *names* the shapes of ``data`` in ``data``'s description, field by field, without making
clients validate them:

- MCP clients check every result against the schema (the Python SDK with jsonschema, on every
  call): a union descending into 32 observe items cost a client more than the call itself
  (measured: 0.6-20 ms against 0.02 ms for the envelope);
- and they compile the schema first, once per tool, checking every subschema against the
  JSON Schema metaschema: with the shapes as subschemas (under ``$defs``) that took 11-17 ms
  per tool on an idle machine (the first call of each tool, and every restart), against
  about 1.5 ms for the envelope alone.

The shapes are ``TypedDict`` classes (a pydantic model per shape cost about 1 ms of start-up
each, for a description); tests/test_typed_results.py checks that each tool's ``data``
satisfies one of them. The nested records are the result models of
``tether.protocol.results``; every shape keeps keys it does not name, so a newer guardian's
additions pass through.
"""

from __future__ import annotations

from typing import Any, NotRequired

# typing_extensions' TypedDict, not typing's: pydantic can check data against it before
# Python 3.12 (the tests do).
from typing_extensions import TypedDict

#: A nested record (execution, recognition, receipt, page, screen): see protocol/results.py.
Nested = dict[str, Any]


class ErrorData(TypedDict):
    """Detail of a refusal: whether input was sent, and the limit or rule that was hit."""

    input_sent: NotRequired[bool | str | None]


# -- Initialize --------------------------------------------------------------------------------


class InitializeData(TypedDict):
    thread_id: NotRequired[str | None]
    workspace_root: str
    generation: NotRequired[int | None]
    cwd: NotRequired[str | None]
    reattached: NotRequired[bool]
    mode: str
    profile: NotRequired[str | None]
    principal: NotRequired[str | None]
    guardian: Nested
    shell_running: NotRequired[bool | None]
    #: architect: what its commands run inside, or None and why (``sandbox_missing``).
    sandbox: NotRequired[str | None]
    sandbox_missing: NotRequired[str | None]
    #: A mode change's fresh shell: processes of the old one left running.
    orphans: NotRequired[list[Nested]]
    #: A reattach that found the thread's shell replaced without a reset (ShellReplaced).
    shell_replaced: NotRequired[Nested]
    #: The thread's managed temporary directory (TETHER_TMP), from a guardian with ``files``.
    temporary_dir: NotRequired[str]


# -- BashCommand -------------------------------------------------------------------------------


class CommandData(TypedDict):
    """A command's state after the wait: its record in short, output tail and cwd."""

    execution_id: str
    status: str
    exit_code: NotRequired[int | None]
    reason: NotRequired[str | None]
    cwd: NotRequired[str | None]
    output: str
    output_start: NotRequired[int | None]
    output_end: NotRequired[int | None]
    output_truncated: NotRequired[bool]
    generation: NotRequired[int | None]
    kind: NotRequired[str | None]
    input_sent: NotRequired[bool | str | None]
    delivery: NotRequired[str | None]
    warning: NotRequired[str | None]
    #: The first command in a shell that replaced a lost one (ShellReplaced).
    shell_replaced: NotRequired[Nested]


class ScreenData(TypedDict):
    screen: Nested


class TurnData(TypedDict):
    outcome: str
    recognition: Nested
    execution: Nested


# -- Execution and Agent -----------------------------------------------------------------------


class ListData(TypedDict):
    executions: list[Nested]
    catalog_cursor: NotRequired[int | None]
    next_before: NotRequired[int | None]


class GetData(TypedDict):
    execution: Nested


class PageData(TypedDict):
    text: str
    start: int
    end: int
    has_more: bool
    next_cursor: str
    execution: NotRequired[Nested | None]


class ObserveData(TypedDict):
    items: list[Nested]
    catalog_cursor: int


class WaitData(TypedDict):
    outcome: str
    changed: list[Nested]
    cursor: str
    recognition: NotRequired[Nested | None]


class ExplainData(TypedDict):
    execution_id: str
    recognition: Nested
    observation: Nested


class PromptData(TypedDict):
    receipt: Nested
    replayed: bool
    input_sent: bool


# -- Agent with backend herdr (docs/tools.md#herdr-backend) --------------------------------------


class HerdrListData(TypedDict):
    """The configured targets, each with ``present`` and, when Herdr lists it, its state."""

    backend: str
    targets: list[Nested]


class HerdrAgentData(TypedDict):
    backend: str
    target: str
    agent: Nested


class HerdrReadData(TypedDict):
    backend: str
    target: str
    text: str
    lines: int
    source: str


class HerdrExplainData(TypedDict):
    backend: str
    target: str
    explain: Nested


class HerdrWaitData(TypedDict):
    backend: str
    target: str
    outcome: str
    until: list[str]
    timeout_ms: int
    agent: NotRequired[Nested]


class HerdrPromptData(TypedDict):
    """Herdr acknowledged the submission (text and Enter); not that the work was done."""

    backend: str
    target: str
    input_sent: bool
    acknowledged: bool
    completion_observed: bool
    agent: Nested


# -- ReadFiles and EditFiles -------------------------------------------------------------------


class ReadFilesData(TypedDict):
    #: each {spec, ok, path, content?, start_line?, end_line?, total_lines?, revision?,
    #: size_bytes?, invalid_utf8?, error?}, in request order
    files: list[Nested]
    temporary: NotRequired[Nested | None]


class EditFilesData(TypedDict):
    applied: bool
    #: each {path, ok, action, revision?, previous_revision?, diff?, error?}
    files: list[Nested]
    temporary: NotRequired[Nested | None]


class ReleaseData(TypedDict):
    #: each {name, status: released | absent | kept | refused, reason?, pids?, error?}
    helpers: list[Nested]
    temporary: Nested


def _field(name: str, annotation: Any) -> str:
    # Annotations are postponed (PEP 563): a TypedDict holds them as ForwardRefs of the text.
    annotation = getattr(annotation, "__forward_arg__", annotation)
    if annotation.startswith("NotRequired["):
        return f"{name}?: {annotation[len('NotRequired['):-1]}"
    return f"{name}: {annotation}"


def describe(shape: type) -> str:
    """``Name {field: type, optional?: type}``, from the shape's own annotations."""
    fields = ", ".join(_field(name, annotation)
                       for name, annotation in shape.__annotations__.items())
    return f"{shape.__name__} {{{fields}}}"


def output_schema(*shapes: type) -> dict[str, Any]:
    """The envelope's JSON schema, with ``data``'s possible shapes named in its description."""
    described = "; ".join(describe(shape) for shape in shapes)
    return {
        "type": "object",
        "description": "The structured content of every tool result (docs/tools.md).",
        "properties": {
            "ok": {"type": "boolean"},
            "status": {"type": "string"},
            "code": {"type": ["string", "null"]},
            "message": {"type": ["string", "null"]},
            "data": {
                "type": "object",
                "description": (f"on success one of: {described}. On failure "
                                f"{describe(ErrorData)} and the limit or rule that was hit. "
                                "Nested: a record (execution, recognition, receipt, screen)."),
            },
        },
        "required": ["ok", "status", "data"],
    }


#: The shapes of each tool's ``data`` on success, in the order its description names them.
SHAPES: dict[str, tuple[type, ...]] = {
    "Initialize": (InitializeData,),
    "BashCommand": (CommandData, ScreenData, TurnData),
    "Execution": (ListData, GetData, PageData, ObserveData, WaitData, ExplainData),
    "Agent": (ListData, GetData, PageData, ExplainData, WaitData, PromptData, HerdrListData,
              HerdrAgentData, HerdrReadData, HerdrExplainData, HerdrWaitData, HerdrPromptData),
    "ReadFiles": (ReadFilesData,),
    "EditFiles": (EditFilesData, ReleaseData),
}

INITIALIZE_OUTPUT = output_schema(*SHAPES["Initialize"])
BASH_COMMAND_OUTPUT = output_schema(*SHAPES["BashCommand"])
EXECUTION_OUTPUT = output_schema(*SHAPES["Execution"])
AGENT_OUTPUT = output_schema(*SHAPES["Agent"])
READ_FILES_OUTPUT = output_schema(*SHAPES["ReadFiles"])
EDIT_FILES_OUTPUT = output_schema(*SHAPES["EditFiles"])
