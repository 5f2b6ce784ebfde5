"""What each tool returns, as pydantic models: the source of every tool's ``outputSchema``.

Every result is ``{ok, status, code?, message?, data}`` (SPEC §6). ``data`` is the tool's
own shape on success and the error's detail on failure; both keep keys they do not name, so
a newer guardian's additions pass through and the schema never refuses a valid answer.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from tether.protocol.results import (
    ExecutionRecord,
    ExplainResult,
    GetResult,
    ListResult,
    ObserveResult,
    PromptResult,
    ReadResult,
    Recognition,
    ScreenResult,
    WaitResult,
    WaitTurnResult,
)

D = TypeVar("D")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorData(Open):
    """Detail of a refusal: whether input was sent, and the limit or rule that was hit."""

    input_sent: bool | str | None = None


class ToolOutput(Open, Generic[D]):
    """The structured content of every tool result (SPEC §6)."""

    ok: bool
    status: str
    code: str | None = None
    message: str | None = None
    data: D | ErrorData


# -- Initialize --------------------------------------------------------------------------------


class GuardianSummary(Open):
    running: bool
    instance_id: str | None = None
    protocol: str | None = None
    capabilities: list[str] = []
    pid: int | None = None


class InitializeData(Open):
    thread_id: str | None = None
    workspace_root: str
    generation: int | None = None
    cwd: str | None = None
    reattached: bool = False
    mode: str
    profile: str | None = None
    principal: str | None = None
    guardian: GuardianSummary
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
    screen: ScreenResult


# -- Agent -------------------------------------------------------------------------------------


class AgentRecord(ExecutionRecord):
    recognition: Recognition | None = None


class AgentListData(Open):
    executions: list[AgentRecord]
    catalog_cursor: int | None = None


class AgentGetData(Open):
    execution: AgentRecord


class AgentWaitData(Open):
    outcome: str
    changed: list[AgentRecord]
    cursor: str
    recognition: Recognition | None = None


InitializeOutput = ToolOutput[InitializeData]
BashCommandOutput = ToolOutput[CommandData | ScreenData | WaitTurnResult]
ExecutionOutput = ToolOutput[
    ListResult | GetResult | ReadResult | ObserveResult | WaitResult | ExplainResult
]
AgentOutput = ToolOutput[
    AgentListData | AgentGetData | ReadResult | ExplainResult | AgentWaitData | PromptResult
]


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema an MCP client sees as the tool's ``outputSchema``."""
    return model.model_json_schema()
