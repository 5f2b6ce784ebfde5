"""``Execution`` (read-only): list, get, read, observe and wait over recorded executions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from tether.frontend.tools import replies
from tether.frontend.tools.base import Progress, Session, Tool, require_list_pages
from tether.frontend.tools.outputs import EXECUTION_OUTPUT
from tether.frontend.tools.schemas import (
    ExecutionArgs,
    ExplainAction,
    GetAction,
    ListAction,
    ObserveAction,
    ReadAction,
    ToolArgs,
    WaitAction,
    wire_cursor,
)
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import LIST_COMMAND_CHARS, RPC_SLACK_S
from tether.protocol.method_table import (
    EXEC_EXPLAIN,
    EXEC_GET,
    EXEC_LIST,
    EXEC_OBSERVE,
    EXEC_READ,
    EXEC_WAIT,
)
from tether.protocol.methods import params_capability
from tether.protocol.results import ObserveResult


class ExecutionTool(Tool):
    name = "Execution"
    description = (
        "Look back at what ran in this thread (read-only). action.type: list {limit, before}, "
        "get {execution_id}, read {execution_id, source: output|screen|detection, page_bytes, "
        "cursor}, observe {items (1-32), timeout_seconds}, wait {execution_ids, after, events, "
        "timeout_seconds}. list gives records newest first, in short: the command's first "
        f"{LIST_COMMAND_CHARS} characters (command_truncated: true when cut) and no "
        "screen_text (get has the whole record); next_before, when older records remain, "
        "is the before of the next page. wait: after = a cursor reports every recognized "
        "state change since it (changed[].transitions, a whole turn that ran in between "
        "included); without after it waits for what happens from the call on (one that has "
        "already ended answers at once, ended_before_wait); every reply "
        "has current: each record now, with its recognition."
    )
    args_model = ExecutionArgs
    output_schema = EXECUTION_OUTPUT
    annotations = types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, open_world_hint=False
    )

    async def run(
        self, session: Session, args: ExecutionArgs, progress: Progress
    ) -> types.CallToolResult:
        root, scope = session.scope(args.thread_id, args.workspace_root)
        action = args.action
        return await _ACTIONS[type(action)](_Call(session, root, scope, args.thread_id), action)


@dataclass(slots=True)
class _Call:
    """What every action of one Execution call works with."""

    session: Session
    root: str
    scope: dict[str, Any]
    thread_id: str


async def _list(call: _Call, action: ListAction) -> types.CallToolResult:
    params = {**call.scope, "limit": action.limit}
    if action.before is not None:
        await require_list_pages(call.session, call.root)
        params["before"] = action.before
    listed = await call.session.locator.call(call.root, EXEC_LIST, params, timeout_s=RPC_SLACK_S)
    lines = [f"{r.execution_id} {replies.status_words(r.status, r.exit_code, r.reason)} "
             f"{(r.command or '')[:80]}"
             for r in listed.executions]
    if listed.next_before is not None:
        lines.append(f"(older records: list with before={listed.next_before})")
    return replies.ok(listed, "\n".join(lines) or "no executions yet")


async def _get(call: _Call, action: GetAction) -> types.CallToolResult:
    got = await call.session.locator.call(call.root, EXEC_GET,
                                          {**call.scope, "execution_id": action.execution_id},
                                          timeout_s=RPC_SLACK_S)
    data = replies.as_data(got)
    return replies.ok(data, replies.json_text(data["execution"]))


async def _read(call: _Call, action: ReadAction) -> types.CallToolResult:
    page = await call.session.locator.call(
        call.root, EXEC_READ,
        {**call.scope, "execution_id": action.execution_id, "source": action.source,
         "page_bytes": action.page_bytes, "cursor": action.cursor},
        timeout_s=RPC_SLACK_S,
    )
    return replies.ok(page, page.text or "(empty page)")


async def _observe(call: _Call, action: ObserveAction) -> types.CallToolResult:
    timeout_ms = int(action.timeout_seconds * 1000)
    items = action.model_dump(include={"items"})["items"]  # one pass
    refused = await _refused_items(call.session, call.root, call.thread_id, items)
    observed = await call.session.locator.call(
        call.root, EXEC_OBSERVE,
        {**call.scope, "items": [item for i, item in enumerate(items) if i not in refused]
         or items,  # all refused: the call is, as a whole (capability_missing)
         "timeout_ms": timeout_ms},
        timeout_s=(timeout_ms / 1000 or 0.25) + RPC_SLACK_S,
    )
    data = replies.as_data(observed)
    if refused:
        answered = iter(data["items"])
        data["items"] = [refused[i] if i in refused else next(answered)
                         for i in range(len(items))]
        data["completed_with_issues"] = True
    if data.pop("completed_with_issues", False):
        return replies.issues(
            data, ErrorCode.EXECUTION_OBSERVATION_ISSUES.value,
            "some observe items failed; see each item's errors",
        )
    return replies.ok(data, _observe_text(observed))


async def _explain(call: _Call, action: ExplainAction) -> types.CallToolResult:
    explained = await call.session.locator.call(
        call.root, EXEC_EXPLAIN,
        {**call.scope, "execution_id": action.execution_id, "recognizer": action.recognizer},
        timeout_s=RPC_SLACK_S)
    decision = explained.recognition
    return replies.ok(explained, f"{decision.state} (recognizer {decision.recognizer}, "
                                 f"rule {decision.rule or '-'}, reason {decision.reason or '-'})")


async def _wait(call: _Call, action: WaitAction) -> types.CallToolResult:
    timeout_ms = int(action.timeout_seconds * 1000)
    waited = await call.session.locator.call(
        call.root, EXEC_WAIT,
        {**call.scope, "execution_ids": action.execution_ids, "after": wire_cursor(action.after),
         "timeout_ms": timeout_ms, "events": action.events},
        timeout_s=timeout_ms / 1000 + RPC_SLACK_S,
    )
    changed = ", ".join(f"{r.execution_id} {replies.status_words(r.status, r.exit_code, r.reason)}"
                        + (" (it had ended before the wait)" if r.ended_before_wait else "")
                        for r in waited.changed)
    text = (f"{waited.outcome}: {changed}" if changed else
            f"{waited.outcome}: nothing changed within {action.timeout_seconds:g}s; wait "
            "again with after = data.cursor to miss nothing meanwhile")
    return replies.ok(waited, text)


#: Each action type to the one function that carries it out.
_ACTIONS: dict[type[ToolArgs], Callable[[_Call, Any], Awaitable[types.CallToolResult]]] = {
    ListAction: _list,
    GetAction: _get,
    ReadAction: _read,
    ObserveAction: _observe,
    ExplainAction: _explain,
    WaitAction: _wait,
}


async def _refused_items(session: Session, root: str, thread_id: str,
                         items: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The observe items this guardian lacks the capability for (a detection page without
    ``recognition``), by position, each answered as a failed item (``capability_missing``,
    nothing asked): the other items are still observed, as with any item that fails."""
    refused: dict[int, dict[str, Any]] = {}
    if params_capability(EXEC_OBSERVE.name, {"items": items}) is None:
        return refused  # nothing asked needs more than observe
    handle = await session.locator.handle(root, thread_id)
    for index, item in enumerate(items):
        try:
            handle.require(params_capability(EXEC_READ.name, item),
                           "A detection page is a recognition verdict. ")
        except TetherError as err:
            refused[index] = {"errors": [{"stage": "capability", "code": err.code.value,
                                          "message": err.message, **err.data}],
                              "execution": None, "status": "error"}
    return refused


def _observe_text(observed: ObserveResult) -> str:
    parts = []
    for item in observed.items:
        execution, page = item.get("execution") or {}, item.get("page")
        parts.append(f"## {execution.get('execution_id')} {execution.get('status')}\n"
                     f"{page['text'] if page else ''}")
    return "\n".join(parts)
