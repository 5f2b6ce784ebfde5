"""The MCP server: lists the tools and dispatches calls (low-level ``mcp.server.Server``).

Every call's arguments are validated by the tool's pydantic model; every failure becomes a
tool result with ``is_error`` and a stable code. The protocol errors are a call to a tool
that does not exist, and a prompt or resource asked for by name (there are none): JSON-RPC
-32602, as the MCP specification has it.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from pydantic import ValidationError

from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.herdr.operator_config import HerdrSettings
from tether.frontend.policy.authority import LOCAL, PROFILES, Caller
from tether.frontend.tools import replies
from tether.frontend.tools.base import KnownModes, Session
from tether.frontend.tools.registry import all_tools
from tether.frontend.usage import UsageLog, phase
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import validation_error
from tether.shared.config import Config

log = logging.getLogger(__name__)

SERVER_NAME = "tether"
SERVER_VERSION = "0.1.0"


#: Who is calling, from a request's context (the HTTP transport's authenticated user).
CallerResolver = Callable[[Any], Caller]


def build_server(
    config: Config | None = None,
    principal: str = "local",
    *,
    callers: CallerResolver | None = None,
    local: Caller = LOCAL,
) -> Server[Any]:
    """An MCP server whose tools talk to this machine's guardians.

    Over stdio every request is ``principal`` (``local``, with the tools of ``local``). Over HTTP,
    ``callers`` names the principal of each request; a request it cannot name is refused.
    Each principal gets its own guardian locator: guardians are keyed by principal
    (docs/protocol.md#guardians-one-per-key, docs/security.md#principals).
    """
    config = config or Config.from_env()
    fixed = local if principal == "local" else Caller(principal, "full", PROFILES["full"])
    resolve: CallerResolver = callers or (lambda ctx: fixed)
    locators: dict[str, GuardianLocator] = {}
    known_modes = KnownModes()  # keyed by principal too: no principal sees another's
    tools = {tool.name: tool for tool in all_tools()}
    # Built once: generating the JSON schemas costs milliseconds per tools/list.
    definitions = {name: tool.definition() for name, tool in tools.items()}
    usage = UsageLog.from_env()  # docs/person.md#usage-log: every call is recorded in one place, here
    herdr = HerdrSettings.from_env()  # only whether TETHER_HERDR_CONFIG is set: no file is read

    sessions: dict[Caller, Session] = {}

    def session_for(caller: Caller) -> Session:
        # One session per caller, kept: its lineage is resolved once (it scans the
        # environment, and may ask guardians), not once per call.
        session = sessions.get(caller)
        if session is None:
            locator = locators.get(caller.principal)
            if locator is None:
                locator = locators[caller.principal] = GuardianLocator(config, caller.principal)
            session = sessions[caller] = Session(locator=locator, caller=caller,
                                                 modes=known_modes, herdr=herdr)
        return session

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = resolve(ctx)  # raises for an unauthenticated request: nothing is listed
        return types.ListToolsResult(
            tools=[definition for name, definition in definitions.items() if name in caller.tools]
        )

    def input_schema(name: str) -> dict[str, Any] | None:
        # The SDK asks on every modern-era HTTP call, only to check Mcp-Param-* headers
        # against the schema's x-mcp-header annotations. Tether's tools declare none, so the
        # check can find nothing: answering None spares it a walk of the schema per call.
        return None

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await usage.around(params.name, params.arguments, lambda: dispatch(ctx, params))

    async def dispatch(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            caller = resolve(ctx)
            tool = tools.get(params.name)
            if tool is None:
                # The MCP specification lists an unknown tool among protocol errors, not
                # tool results: JSON-RPC -32602 (invalid params), the same on every transport.
                visible = [name for name in tools if name in caller.tools]
                raise MCPError(types.INVALID_PARAMS,
                               f"unknown tool {params.name!r}; tools: {', '.join(visible)}")
            # checked at call as well as at list (docs/security.md#profiles-and-modes)
            caller.check_tool(tool.name)
        except TetherError as err:
            return replies.error(err)
        session = session_for(caller)

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(done, total, message)

        try:
            with phase("validation"):
                args = tool.args_model.model_validate(params.arguments or {})
            return await tool.run(session, args, progress)
        except ValidationError as exc:
            return replies.error(validation_error(exc, "arguments", params.arguments or {}))
        except TetherError as err:
            return replies.error(err)
        except ValueError as exc:
            return replies.error(TetherError(ErrorCode.INVALID_REQUEST, str(exc),
                                             {"input_sent": False}))
        except Exception:
            log.exception("tool %s failed", params.name)
            return replies.error(TetherError(
                ErrorCode.INTERNAL, "internal error in the Tether front-end; see its stderr log"
            ))

    # Tether offers tools only. It still declares prompts and resources, with none of
    # either, as the SDK's own MCPServer does for a server of tools: clients (and the MCP
    # conformance suite's caching checks) ask for both lists whatever was declared, and an
    # empty list with its caching hints answers them better than -32601. Reading a resource
    # or getting a prompt names nothing that exists: -32602 with what was asked for, as the
    # specification has it for an unknown resource (docs/tools.md#mcp-surface).
    async def list_prompts(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        resolve(ctx)  # an unauthenticated request is refused, as for tools/list
        return types.ListPromptsResult(prompts=[])

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        resolve(ctx)
        raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}: Tether has no "
                       "prompts, only tools", {"name": params.name})

    async def list_resources(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resolve(ctx)
        return types.ListResourcesResult(resources=[])

    async def list_resource_templates(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        resolve(ctx)
        return types.ListResourceTemplatesResult(resource_templates=[])

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        resolve(ctx)
        raise MCPError(types.INVALID_PARAMS, f"resource not found: {params.uri}; Tether has no "
                       "resources (read executions with the Execution tool)",
                       {"uri": str(params.uri)})

    async def set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        # Tether sends no log messages at any level, so every level is honoured as it is.
        # Answered (not -32601) because handshake-era clients and the MCP conformance suite
        # set a level whether or not a server logs.
        return types.EmptyResult()

    with warnings.catch_warnings():
        # The SDK warns that logging is deprecated from protocol 2026-07-28 on; the eras
        # before it (most clients in use) still have logging/setLevel.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            SERVER_NAME,
            version=SERVER_VERSION,
            instructions="Terminals that survive restarts. Call Initialize first.",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            get_tool_input_schema=input_schema,
            on_set_logging_level=set_logging_level,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_list_resources=list_resources,
            on_list_resource_templates=list_resource_templates,
            on_read_resource=read_resource,
        )
    _drop_idle_tracing(server)
    return server


def _drop_idle_tracing(server: Server[Any]) -> None:
    """Take the SDK's OpenTelemetry middleware off every request when no tracer provider is
    installed (``tether serve`` installs none; ``opentelemetry-instrument`` would, before
    this runs). With none, its spans record nothing, yet entering one per request cost about
    4% of tether serve's CPU per BashCommand (a py-spy profile of `echo hi` over stdio)."""
    try:
        from mcp.server._otel import OpenTelemetryMiddleware
        from opentelemetry import trace
    except ImportError:  # another SDK layout: keep what it installs
        return
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        server.middleware = [m for m in server.middleware
                             if not isinstance(m, OpenTelemetryMiddleware)]
