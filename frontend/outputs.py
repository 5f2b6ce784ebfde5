"""What each tool returns, as pydantic models: the source of every tool's ``outputSchema``.

Every result is ``{ok, status, code?, message?, data}`` (SPEC §6). ``data`` is one of the
tool's shapes on success and the error's detail on failure. The schema validates the envelope
and *describes* the shapes of ``data`` under ``$defs`` (named in ``data``'s description)
without making clients validate them: MCP clients check every result against the schema (the
Python SDK with jsonschema, on every call), and a union descending into 32 observe items cost
a client more than the call itself (measured: 0.6-20 ms against 0.02 ms for the envelope).
The nested records are the result models of ``tether.protocol.results``. Every model keeps
keys it does not name, so a newer guardian's additions pass through.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

#: A nested record (execution, recognition, receipt, page, screen): see protocol/results.py.
Nested = dict[str, Any]


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorData(Open):
    """Detail of a refusal: whether input was sent, and the limit or rule that was hit."""

    input_sent: bool | str | None = None


class ToolOutput(Open):
    """The structured content of every tool result (SPEC §6)."""

    ok: bool
    status: str
    code: str | None = None
    message: str | None = None
    data: dict[str, Any]


# -- Initialize --------------------------------------------------------------------------------


class InitializeData(Open):
    thread_id: str | None = None
    workspace_root: str
    generation: int | None = None
    cwd: str | None = None
    reattached: bool = False
    mode: str
    profile: str | None = None
    principal: str | None = None
    guardian: Nested
    shell_running: bool | None = None


# -- BashCommand -------------------------------------------------------------------------------


class CommandData(Open):
    """A command's state after the wait: its record in short, output tail and cwd."""

    execution_id: str
    status: str
    exit_code: int | None = None
    reason: str | None = None
    cwd: str | None = None
    output: str
    output_start: int | None = None
    output_end: int | None = None
    output_truncated: bool = False
    generation: int | None = None
    kind: str | None = None
    input_sent: bool | str | None = None
    delivery: str | None = None
    warning: str | None = None


class ScreenData(Open):
    screen: Nested


class TurnData(Open):
    outcome: str
    recognition: Nested
    execution: Nested


# -- Execution and Agent -----------------------------------------------------------------------


class ListData(Open):
    executions: list[Nested]
    catalog_cursor: int | None = None


class GetData(Open):
    execution: Nested


class PageData(Open):
    text: str
    start: int
    end: int
    has_more: bool
    next_cursor: str
    execution: Nested | None = None


class ObserveData(Open):
    items: list[Nested]
    catalog_cursor: int


class WaitData(Open):
    outcome: str
    changed: list[Nested]
    cursor: str
    recognition: Nested | None = None


class ExplainData(Open):
    execution_id: str
    recognition: Nested
    observation: Nested


class PromptData(Open):
    receipt: Nested
    replayed: bool
    input_sent: bool


def output_schema(*shapes: type[BaseModel]) -> dict[str, Any]:
    """The envelope's JSON schema, with ``data``'s possible shapes described in ``$defs``."""
    schema = ToolOutput.model_json_schema()
    defs: dict[str, Any] = {}
    every: tuple[type[BaseModel], ...] = (*shapes, ErrorData)
    for shape in every:
        shape_schema = shape.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(shape_schema.pop("$defs", {}))
        defs[shape.__name__] = shape_schema
    schema["$defs"] = defs
    names = ", ".join(shape.__name__ for shape in shapes)
    schema["properties"]["data"]["description"] = (
        f"on success one of {names} (see $defs); on failure ErrorData")
    return schema


INITIALIZE_OUTPUT = output_schema(InitializeData)
BASH_COMMAND_OUTPUT = output_schema(CommandData, ScreenData, TurnData)
EXECUTION_OUTPUT = output_schema(ListData, GetData, PageData, ObserveData, WaitData, ExplainData)
AGENT_OUTPUT = output_schema(ListData, GetData, PageData, ExplainData, WaitData, PromptData)
