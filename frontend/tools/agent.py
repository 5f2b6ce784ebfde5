"""``Agent``: observe agent CLIs running in Tether terminals, prompt them exactly once, and
run managed agents (launch, close, resume, archive, cancel, ...; ``agent_lifecycle``).

Prompting goes through the guardian's receipts (``prompt_receipts``); with a guardian that
lacks it the call fails with ``capability_missing`` — never a fallback to raw typing. The
lifecycle actions are in ``agent_lifecycle``, the Herdr backend's in ``herdr_agent``. Who may
do which action (observe, control, input) is decided once, in ``authority``, before anything
is sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from tether.frontend.tools import replies
from tether.frontend.tools.agent_lifecycle import agent_line, need_arg, run_lifecycle
from tether.frontend.tools.base import Progress, Session, Tool, require_list_pages
from tether.frontend.tools.herdr_agent import check_native_args, run_herdr
from tether.frontend.tools.modes import Guard, check_agent_action, send_checked
from tether.frontend.tools.outputs import AGENT_OUTPUT
from tether.frontend.tools.schemas import AgentArgs, wire_cursor
from tether.protocol.limits import (
    LIST_COMMAND_CHARS,
    MAX_APPROVAL_LIST,
    MAX_LIST_LIMIT,
    MAX_RESPOND_WAIT_MS,
    RPC_SLACK_S,
)
from tether.protocol.method_table import (
    AGENT_APPROVALS,
    AGENT_LIST,
    AGENT_PROMPT,
    AGENT_RECEIPT,
    AGENT_RESPOND,
    EXEC_EXPLAIN,
    EXEC_GET,
    EXEC_LIST,
    EXEC_READ,
    EXEC_WAIT,
)
from tether.protocol.methods import AGENT_LIFECYCLE_ACTIONS
from tether.protocol.results import (
    AgentRespondResult,
    ApprovalRecord,
    PromptResult,
    Receipt,
    Recognition,
)
from tether.protocol.versions import Capability


class AgentTool(Tool):
    name = "Agent"
    description = (
        "Run and observe coding agents (Claude Code, Codex, any interactive program) in their "
        "own terminals, and prompt them exactly once. Managed agents belong to the workspace: "
        "launch {provider, argv?, env?, title?, labels?, auto_archive?, notify_on_finish?}, list "
        "{parent?, include_archived?, before?} (records in short, as Execution's list: the "
        f"command's first {LIST_COMMAND_CHARS} characters, no screen_text; next_before pages "
        "on, and a record may show on two pages), get, close, resume, archive (cascades to "
        "its children), "
        "unarchive, cancel (waits for the program to acknowledge), label {labels}, "
        "notifications {parent?, after?}. Also read {target, source, cursor}, explain, wait "
        "{target, prompt_id? | events?} and prompt {target, prompt_id, text, replace_draft?}: a "
        "prompt is typed only when the agent waits for input with an empty input box "
        "(replace_draft clears a draft first); the same prompt_id never types twice, and the "
        "guardian completes its receipt itself (wait {prompt_id} after the turn answers at "
        "once). wait {events, after}: after a cursor every state change since is reported "
        "(a turn that ran in between included); without after, from now on. A managed "
        "agent's record carries recognition (the same verdict as agent_state); cancel of an "
        "agent not in a turn is not_busy, nothing pressed. States: "
        "initializing, idle, running (attention: approval), error, closed. backend herdr: "
        "agents in Herdr, by the target aliases the operator configured: list, get, read "
        "{target, lines?}, explain, wait {target, until?, timeout_seconds?}, prompt {target, "
        "text} (no prompt_id; submitted once, never resent). Approvals: "
        "approvals {parent?, target?, pending_only?} lists the questions agents ask (what: "
        "command/file/url/tool, the detail as shown, options with their keys); respond "
        "{approval_id, choice: approve | deny | an option's key} answers one exactly once (a "
        "repeat returns the first outcome; approval_stale when it is no longer on screen) and "
        "says whether the screen left the question."
    )
    args_model = AgentArgs
    output_schema = AGENT_OUTPUT
    annotations = types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, open_world_hint=True
    )

    async def run(self, session: Session, args: AgentArgs, progress: Progress) -> types.CallToolResult:
        if args.backend == "herdr":
            return await run_herdr(session, args)
        check_native_args(args)
        root, scope = session.scope(args.thread_id, args.workspace_root)
        # Who may do this action, in this thread's mode: checked before anything is sent.
        first_guard = await check_agent_action(session, root, scope, args.action)
        if await _lifecycle_action(session, args, root):
            return await run_lifecycle(session, args, root, scope, first_guard)
        return await _ACTIONS[args.action](_Call(session, args, root, scope, first_guard))


@dataclass(slots=True)
class _Call:
    """What every action of one Agent call works with (``guard``: what authorising it gave)."""

    session: Session
    args: AgentArgs
    root: str
    scope: dict[str, Any]
    guard: Guard

    @property
    def target(self) -> str:
        return str(need_arg(self.args.target, "target", self.args.action))

    async def recognition(self, execution_id: str) -> dict[str, Any]:
        """The current verdict in short (state, attention, rule), as get/list/wait carry it."""
        explained = await self.session.locator.call(self.root, EXEC_EXPLAIN, {
            **self.scope, "execution_id": execution_id, "recognizer": self.args.recognizer},
            timeout_s=RPC_SLACK_S)
        return _summary(explained.recognition)


async def _list(call: _Call) -> types.CallToolResult:
    session, args, root, scope = call.session, call.args, call.root, call.scope
    page: dict[str, Any] = {}
    if args.before is not None:
        await require_list_pages(session, root)
        page["before"] = args.before
    data = replies.as_data(await session.locator.call(
        root, EXEC_LIST, {**scope, "limit": min(args.limit, MAX_LIST_LIMIT),
                          "agents_only": True, **page}, timeout_s=RPC_SLACK_S))
    for record in data["executions"]:
        record["recognition"] = await call.recognition(record["execution_id"])
    lines = [f"{r['execution_id']} {r['status']} {_state_text(r['recognition'])} "
             f"{r['command'][:80]}" for r in data["executions"]]
    if await _has_lifecycle(session, root):
        # The workspace's managed agents too, whichever thread launched them.
        managed = await session.locator.call(root, AGENT_LIST, {**scope, "limit": args.limit,
                                                                **page}, timeout_s=RPC_SLACK_S)
        agents = replies.as_data(managed)["agents"]
        data["agents"] = agents
        lines += [agent_line(a) for a in agents]
        # One position pages both lists: the newer of their two ends, so that neither
        # skips a record (the other may show some again).
        ends = [end for end in (data.get("next_before"), managed.next_before)
                if end is not None]
        data.pop("next_before", None)
        if ends:
            data["next_before"] = max(ends)
    if data.get("next_before") is not None:
        lines.append(f"(older records: list with before={data['next_before']})")
    return replies.ok(data, "\n".join(lines) or "no agents")


async def _get(call: _Call) -> types.CallToolResult:
    target = call.target
    data = replies.as_data(await call.session.locator.call(
        call.root, EXEC_GET, {**call.scope, "execution_id": target}, timeout_s=RPC_SLACK_S))
    data["execution"]["recognition"] = await call.recognition(target)
    return replies.ok(data, replies.json_text(data["execution"]))


async def _read(call: _Call) -> types.CallToolResult:
    args = call.args
    page = await call.session.locator.call(call.root, EXEC_READ, {
        **call.scope, "execution_id": call.target, "source": args.source,
        "page_bytes": args.page_bytes, "cursor": args.cursor}, timeout_s=RPC_SLACK_S)
    return replies.ok(page, page.text or "(empty page)")


async def _explain(call: _Call) -> types.CallToolResult:
    explained = await call.session.locator.call(
        call.root, EXEC_EXPLAIN, {**call.scope, "execution_id": call.target,
                                  "recognizer": call.args.recognizer}, timeout_s=RPC_SLACK_S)
    data = replies.as_data(explained)
    return replies.ok(data, replies.json_text(data["recognition"]))


async def _wait(call: _Call) -> types.CallToolResult:
    """``wait`` for events (a recognition verdict with every change) or, with
    ``prompt_id``, for a prompt's receipt."""
    session, args, root = call.session, call.args, call.root
    target = call.target
    timeout_ms = int(args.timeout_seconds * 1000)
    if args.prompt_id is not None:
        receipt = await session.locator.call(root, AGENT_RECEIPT, {
            **call.scope, "execution_id": target, "prompt_id": args.prompt_id,
            "timeout_ms": timeout_ms}, timeout_s=args.timeout_seconds + RPC_SLACK_S)
        return replies.ok(receipt, _receipt_text(receipt.receipt))
    # Its answer carries a recognition verdict: a guardian without one is refused
    # now, not after the whole wait (exec.wait alone is 1.1).
    (await session.locator.handle(root, args.thread_id)).require(Capability.RECOGNITION)
    data = replies.as_data(await session.locator.call(root, EXEC_WAIT, {
        **call.scope, "execution_ids": [target], "after": wire_cursor(args.after),
        "events": args.events, "timeout_ms": timeout_ms},
        timeout_s=args.timeout_seconds + RPC_SLACK_S))
    for item in data["changed"]:
        item["recognition"] = await call.recognition(item["execution_id"])
    data["recognition"] = await call.recognition(target)
    fired = ", ".join(e for item in data["changed"] for e in item.get("fired", []))
    text = data["outcome"] + (f" ({fired})" if fired else "")
    return replies.ok(data, f"{text}: {_state_text(data['recognition'])}")


async def _prompt(call: _Call) -> types.CallToolResult:
    session, args, root, scope = call.session, call.args, call.root, call.scope
    target = call.target
    prompt_id = need_arg(args.prompt_id, "prompt_id", args.action)
    text = need_arg(args.text, "text", args.action)
    params = {**scope, "execution_id": target, "prompt_id": prompt_id, "text": text,
              "recognizer": args.recognizer, "timeout_ms": int(args.timeout_seconds * 1000)}
    if args.replace_draft:
        params["replace_draft"] = True  # an older guardian is refused (replace_draft)

    async def check(fresh: bool) -> Guard:
        if not fresh:
            return call.guard
        return await check_agent_action(session, root, scope, "prompt", fresh=True)

    async def send(guard: Guard) -> PromptResult:
        return await session.locator.call(root, AGENT_PROMPT, {**params, **guard},
                                          timeout_s=args.timeout_seconds + RPC_SLACK_S)

    prompted = await send_checked(session, root, scope, check, send)
    return replies.ok(prompted, _receipt_text(prompted.receipt))


def approval_line(approval: ApprovalRecord) -> str:
    """One line per approval for a result's text (and ``tether approvals``)."""
    request = approval.request
    asked = " ".join(part for part in (request.tool, request.detail) if part) or \
        str(request.question or request.what)
    options = " | ".join(f"{o.key} {o.label}" for o in request.options) or "no options read"
    state = approval.status if approval.resolved is None else \
        f"{approval.status} {approval.resolved.how}"
    return (f"{approval.approval_id} {approval.execution_id} {state} {request.what}: "
            f"{asked.splitlines()[0] if asked else ''} [{options}]")


async def _approvals(call: _Call) -> types.CallToolResult:
    session, args, root = call.session, call.args, call.root
    (await session.locator.handle(root, args.thread_id)).require(Capability.APPROVALS)
    listed = await session.locator.call(root, AGENT_APPROVALS, {
        **call.scope, "parent": args.parent, "execution_id": args.target,
        "pending_only": args.pending_only, "limit": min(args.limit, MAX_APPROVAL_LIST)},
        timeout_s=RPC_SLACK_S)
    lines = [approval_line(a) for a in listed.approvals]
    return replies.ok(replies.as_data(listed), "\n".join(lines) or "no approvals")


async def _respond(call: _Call) -> types.CallToolResult:
    session, args, root, scope = call.session, call.args, call.root, call.scope
    approval_id = need_arg(args.approval_id, "approval_id", args.action)
    choice = need_arg(args.choice, "choice", args.action)
    (await session.locator.handle(root, args.thread_id)).require(Capability.APPROVALS)
    timeout_ms = min(int(args.timeout_seconds * 1000), MAX_RESPOND_WAIT_MS)

    async def check(fresh: bool) -> Guard:
        if not fresh:
            return call.guard
        return await check_agent_action(session, root, scope, "respond", fresh=True)

    async def send(guard: Guard) -> AgentRespondResult:
        return await session.locator.call(root, AGENT_RESPOND, {
            **scope, "approval_id": approval_id, "choice": choice, "timeout_ms": timeout_ms,
            **guard}, timeout_s=timeout_ms / 1000 + RPC_SLACK_S)

    answered = await send_checked(session, root, scope, check, send)
    response = answered.response
    text = (f"approval {approval_id}: {'replayed, nothing typed; ' if answered.replayed else ''}"
            f"chose {response.option} ({' '.join(response.keys)}), input_sent="
            f"{response.input_sent}, left_approval={response.left_approval}")
    return replies.ok(answered, text)


#: Each action that is not the managed-agent lifecycle's to the one function that does it.
_ACTIONS: dict[str, Callable[[_Call], Awaitable[types.CallToolResult]]] = {
    "list": _list, "get": _get, "read": _read, "explain": _explain, "wait": _wait,
    "prompt": _prompt, "approvals": _approvals, "respond": _respond,
}


async def _has_lifecycle(session: Session, root: str) -> bool:
    handle = await session.locator.handle(root)
    return str(Capability.AGENT_LIFECYCLE) in handle.capabilities


async def _lifecycle_action(session: Session, args: AgentArgs, root: str) -> bool:
    """Whether this call goes to the managed-agent lifecycle (``agent_lifecycle``)."""
    if args.action in AGENT_LIFECYCLE_ACTIONS:
        return True
    if args.action == "wait":
        return "notification" in (args.events or [])
    if args.action == "list":
        # An agent's subagents, or archived ones, exist only with the capability: an older
        # guardian is refused (capability_missing), not answered with a guess.
        return args.parent is not None or args.include_archived
    if args.action == "get" and args.target and await _has_lifecycle(session, root):
        # A managed agent's record with its events; an observed agent CLI is an execution.
        record = await session.locator.call(root, EXEC_GET, {
            "principal": session.principal, "workspace_root": root,
            "thread_id": args.thread_id, "execution_id": args.target}, timeout_s=RPC_SLACK_S)
        return record.execution.kind == "agent"
    return False


def _summary(recognition: Recognition) -> dict[str, Any]:
    return {"state": recognition.state, "attention": recognition.attention,
            "rule": recognition.rule, "recognizer": recognition.recognizer,
            "reason": recognition.reason}


def _state_text(recognition: dict[str, Any]) -> str:
    attention = f"/{recognition['attention']}" if recognition.get("attention") else ""
    return f"{recognition['state']}{attention} (rule {recognition['rule']})"



def _receipt_text(receipt: Receipt) -> str:
    delivered = str(receipt.delivered)
    if receipt.reason:  # why delivery is unknown (or did not happen)
        delivered += f" ({receipt.reason})"
    return (f"prompt {receipt.prompt_id}: delivered={delivered} "
            f"activity_observed={receipt.activity_observed} "
            f"wait_reached={receipt.wait_reached} (generation {receipt.generation})")
