"""The managed-agent actions of the ``Agent`` tool (SPEC §8, capability ``agent_lifecycle``).

``launch``, ``close``, ``resume``, ``archive``, ``unarchive``, ``cancel``, ``label``,
``notifications``, ``list`` and ``get`` of managed agents, and ``wait`` for event
``notification``. Every one needs a guardian speaking protocol 1.5; an older guardian gets
``capability_missing`` with ``input_sent: false`` before anything is sent or resolved. The
actions that start or type something (``launch``, ``cancel``, ``resume``, ``unarchive``) carry
the mode guard of the thread they were authorised in, like a prompt (``modes``).
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tether.frontend.guardians.agent_tree import archive_everywhere
from tether.frontend.tools import replies
from tether.frontend.tools.base import Session
from tether.frontend.tools.modes import Guard, check_agent_action, send_checked
from tether.frontend.tools.schemas import AgentArgs
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import (
    AGENT_RPC_TIMEOUT_S,
    DEFAULT_COLS,
    DEFAULT_ROWS,
    MAX_NOTIFICATIONS,
    MAX_WIRE_INT,
    RPC_SLACK_S,
)
from tether.protocol.versions import Capability


def need_arg(value: Any, name: str, action: str) -> Any:
    """``value``, or ``invalid_request`` naming the argument ``action`` lacks (nothing sent)."""
    if value is None:
        raise TetherError(ErrorCode.INVALID_REQUEST, f"Agent {action} needs {name}",
                          {"input_sent": False})
    return value


def agent_line(agent: dict[str, Any]) -> str:
    """One line per agent for a result's text."""
    parent = f" parent={agent['parent_execution_id']}" if agent.get("parent_execution_id") else ""
    archived = " archived" if agent.get("archived_at") else ""
    attention = f" attention={agent['attention']}" if agent.get("attention") else ""
    what = agent.get("title") or agent.get("command", "")
    return (f"{agent['execution_id']} {agent.get('agent_state')}{attention}{archived} "
            f"gen {agent.get('generation')}{parent} {str(what)[:60]}")


async def _read(session: Session, root: str, method: str, params: dict[str, Any],
                timeout_s: float) -> dict[str, Any]:
    """A reply, read through its model, as this tool's data."""
    reply = await session.locator.call(root, method, params, timeout_s=timeout_s)
    data: dict[str, Any] = reply.wire()
    return data


async def _guarded(
    session: Session, root: str, scope: dict[str, Any], action: str, guard: Guard, method: str,
    params: dict[str, Any], timeout_s: float,
) -> Any:
    """Send an action that starts or types something with the mode guard it was authorised
    under; when the mode changed meanwhile, authorise again and send once more."""

    async def check(fresh: bool) -> Guard:
        if not fresh:
            return guard
        return await check_agent_action(session, root, scope, action, fresh=True)

    async def send(current: Guard) -> Any:
        reply = await session.locator.call(root, method, {**params, **current}, timeout_s=timeout_s)
        return reply.wire()

    return await send_checked(session, root, scope, check, send)


async def run_lifecycle(
    session: Session, args: AgentArgs, root: str, scope: dict[str, Any], guard: Guard,
) -> types.CallToolResult:
    """Carry out one lifecycle action (the caller checked the action is one, and authorised
    it: ``guard`` is what the check handed back)."""
    locator = session.locator
    handle = await locator.handle(root)
    handle.require(Capability.AGENT_LIFECYCLE)  # before resolving or sending anything
    action = args.action
    if action == "list":
        page = {}
        if args.before is not None:
            handle.require(Capability.LIST_PAGES)  # an older guardian would ignore it
            page["before"] = args.before
        data = (await locator.call(root, "agent.list", {
            **scope, "parent": args.parent, "include_archived": args.include_archived,
            "limit": args.limit, **page}, timeout_s=RPC_SLACK_S)).wire()
        lines = [agent_line(a) for a in data["agents"]]
        if data.get("next_before") is not None:
            lines.append(f"(older agents: list with before={data['next_before']})")
        return replies.ok(data, "\n".join(lines) or "no agents")
    if action in ("notifications", "wait"):
        return await _notifications(session, args, root, scope)
    if action == "launch":
        parent = await session.lineage.parent(locator, root)
        params = {
            **scope, "provider": args.provider, "argv": args.argv, "recognizer": args.recognizer,
            "conversation_id": args.conversation_id, "title": args.title,
            "labels": {k: v for k, v in (args.labels or {}).items() if v is not None},
            "auto_archive": args.auto_archive, "notify_on_finish": args.notify_on_finish,
            "rows": args.rows or DEFAULT_ROWS, "cols": args.cols or DEFAULT_COLS,
            "parent_execution_id": parent.execution_id if parent else None,
            "parent_workspace": parent.workspace_root if parent else None,
            "idempotency_key": session.idempotency_key(),
        }
        if args.env:
            params["env"] = dict(args.env)  # an older guardian is refused (launch_env)
        data = await _guarded(session, root, scope, action, guard, "agent.launch", params,
                              AGENT_RPC_TIMEOUT_S)
        if parent is not None:
            data["parent_source"] = parent.source
        return replies.ok(data, "launched " + agent_line(data["agent"]))
    target = need_arg(args.target, "target", action)
    targeted = {**scope, "execution_id": target}
    if action == "get":
        data = (await locator.call(root, "agent.get", targeted, timeout_s=RPC_SLACK_S)).wire()
        return replies.ok(data, agent_line(data["agent"]))
    if action == "archive":
        data = await archive_everywhere(locator, root, target, scope.get("thread_id"))
        return replies.ok(data, f"archived {', '.join(data['archived'])}; detached "
                                f"{', '.join(data['detached']) or 'none'}")
    if action == "cancel":
        data = await _guarded(session, root, scope, action, guard, "agent.cancel", {
            **targeted, "timeout_ms": int(args.timeout_seconds * 1000),
            "idempotency_key": session.idempotency_key()}, args.timeout_seconds + RPC_SLACK_S)
        return replies.ok(data, f"cancel acknowledged: {agent_line(data['agent'])}")
    if action == "label":
        labels = need_arg(args.labels, "labels", action)
        data = (await locator.call(root, "agent.label", {**targeted, "labels": labels},
                                   timeout_s=RPC_SLACK_S)).wire()
        return replies.ok(data, agent_line(data["agent"]))
    if action == "close":
        data = (await locator.call(root, "agent.close", targeted,
                                   timeout_s=AGENT_RPC_TIMEOUT_S)).wire()
    else:  # resume, unarchive: they start a program
        data = await _guarded(session, root, scope, action, guard, f"agent.{action}", targeted,
                              AGENT_RPC_TIMEOUT_S)
    return replies.ok(data, f"{action}: {agent_line(data['agent'])}")


async def _notifications(
    session: Session, args: AgentArgs, root: str, scope: dict[str, Any]
) -> types.CallToolResult:
    """``notifications`` (a read) and ``wait`` for event ``notification`` (a read that waits)."""
    parent_id = args.parent or (args.target if args.action == "wait" else None)
    if parent_id is None:
        own = await session.lineage.parent(session.locator, root)
        if own is None:
            raise TetherError(
                ErrorCode.INVALID_REQUEST,
                "Agent notifications needs parent: this server does not run inside a Tether "
                "execution, so there is no default parent",
                {"input_sent": False},
            )
        parent_id = own.execution_id
    after = args.after if args.after is not None else 0
    if isinstance(after, str):
        # ASCII digits only: str.isdigit() also takes "²" (int() refuses it) and "٣" (3).
        if not (after.isascii() and after.isdigit()) or int(after) > MAX_WIRE_INT:
            raise TetherError(
                ErrorCode.INVALID_REQUEST,
                "after must be the cursor of an earlier notifications result (a number)",
                {"input_sent": False})
        after = int(after)
    timeout_s = args.timeout_seconds if args.action == "wait" else 0.0
    data = await _read(session, root, "agent.notifications", {
        **scope, "parent": parent_id, "after": after, "limit": min(args.limit, MAX_NOTIFICATIONS),
        "timeout_ms": int(timeout_s * 1000)}, timeout_s + RPC_SLACK_S)
    data["cursor"] = str(data["cursor"])
    if args.action == "wait":
        data["outcome"] = "changed" if data["notifications"] else "timeout"
    lines = [f"#{n['id']} {n['child_execution_id']} {n['kind']} (turn {n['turn_seq']})"
             for n in data["notifications"]]
    return replies.ok(data, "\n".join(lines) or "no notifications")
