"""The managed-agent actions of the ``Agent`` tool (docs/tools.md#managed-agents, capability
``agent_lifecycle``).

``launch``, ``close``, ``resume``, ``archive``, ``unarchive``, ``cancel``, ``label``,
``notifications``, ``list`` and ``get`` of managed agents, and ``wait`` for event
``notification``. Every one needs a guardian speaking protocol 1.5; an older guardian gets
``capability_missing`` with ``input_sent: false`` before anything is sent or resolved. The
actions that start or type something (``launch``, ``cancel``, ``resume``, ``unarchive``) carry
the mode guard of the thread they were authorised in, like a prompt (``modes``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types

from tether.frontend.guardians.agent_tree import archive_everywhere
from tether.frontend.guardians.locator import GuardianHandle
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
from tether.protocol.method_table import (
    AGENT_CANCEL,
    AGENT_CLOSE,
    AGENT_GET,
    AGENT_LABEL,
    AGENT_LAUNCH,
    AGENT_LIST,
    AGENT_NOTIFICATIONS,
    AGENT_RESUME,
    AGENT_UNARCHIVE,
    Method,
)
from tether.protocol.results import AgentResult, Result
from tether.protocol.versions import Capability

R = TypeVar("R", bound=Result)


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


async def _guarded(
    life: _Life, method: Method[Any, R], params: dict[str, Any], timeout_s: float,
) -> R:
    """Send an action that starts or types something with the mode guard it was authorised
    under; when the mode changed meanwhile, authorise again and send once more."""
    session, root, scope = life.session, life.root, life.scope

    async def check(fresh: bool) -> Guard:
        if not fresh:
            return life.guard
        return await check_agent_action(session, root, scope, life.args.action, fresh=True)

    async def send(current: Guard) -> R:
        return await session.locator.call(root, method, {**params, **current},
                                          timeout_s=timeout_s)

    return await send_checked(session, root, scope, check, send)


@dataclass(slots=True)
class _Life:
    """What every lifecycle action of one Agent call works with (``guard``: what
    authorising it gave; ``handle``: the guardian, known to have ``agent_lifecycle``)."""

    session: Session
    args: AgentArgs
    root: str
    scope: dict[str, Any]
    guard: Guard
    handle: GuardianHandle

    @property
    def targeted(self) -> dict[str, Any]:
        """The scope with the target agent (``invalid_request`` when the call names none)."""
        return {**self.scope, "execution_id": need_arg(self.args.target, "target",
                                                       self.args.action)}


async def run_lifecycle(
    session: Session, args: AgentArgs, root: str, scope: dict[str, Any], guard: Guard,
) -> types.CallToolResult:
    """Carry out one lifecycle action (the caller checked the action is one, and authorised
    it: ``guard`` is what the check handed back)."""
    handle = await session.locator.handle(root)
    handle.require(Capability.AGENT_LIFECYCLE)  # before resolving or sending anything
    return await _ACTIONS[args.action](_Life(session, args, root, scope, guard, handle))


async def _list(life: _Life) -> types.CallToolResult:
    args = life.args
    page = {}
    if args.before is not None:
        life.handle.require(Capability.LIST_PAGES)  # an older guardian would ignore it
        page["before"] = args.before
    listed = await life.session.locator.call(life.root, AGENT_LIST, {
        **life.scope, "parent": args.parent, "include_archived": args.include_archived,
        "limit": args.limit, **page}, timeout_s=RPC_SLACK_S)
    data = replies.as_data(listed)
    lines = [agent_line(a) for a in data["agents"]]
    if listed.next_before is not None:
        lines.append(f"(older agents: list with before={listed.next_before})")
    return replies.ok(data, "\n".join(lines) or "no agents")


async def _launch(life: _Life) -> types.CallToolResult:
    session, args = life.session, life.args
    parent = await session.lineage.parent(session.locator, life.root)
    params = {
        **life.scope, "provider": args.provider, "argv": args.argv, "recognizer": args.recognizer,
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
    launched = await _guarded(life, AGENT_LAUNCH, params, AGENT_RPC_TIMEOUT_S)
    data = (replies.as_data(launched) if parent is None
            else replies.as_data(launched, parent_source=parent.source))
    return replies.ok(data, "launched " + agent_line(data["agent"]))


async def _get(life: _Life) -> types.CallToolResult:
    got = await life.session.locator.call(life.root, AGENT_GET, life.targeted,
                                          timeout_s=RPC_SLACK_S)
    data = replies.as_data(got)
    return replies.ok(data, agent_line(data["agent"]))


async def _archive(life: _Life) -> types.CallToolResult:
    target = life.targeted["execution_id"]
    done = await archive_everywhere(life.session.locator, life.root, target,
                                    life.scope.get("thread_id"))
    skipped = {"other_workspaces_skipped": done.skipped} if done.skipped else {}
    data = replies.as_data(done.reply, archived=done.archived, detached=done.detached, **skipped)
    return replies.ok(data, f"archived {', '.join(done.archived)}; detached "
                            f"{', '.join(done.detached) or 'none'}")


async def _cancel(life: _Life) -> types.CallToolResult:
    args = life.args
    cancelled = await _guarded(life, AGENT_CANCEL, {
        **life.targeted, "timeout_ms": int(args.timeout_seconds * 1000),
        "idempotency_key": life.session.idempotency_key()}, args.timeout_seconds + RPC_SLACK_S)
    data = replies.as_data(cancelled)
    return replies.ok(data, f"cancel acknowledged: {agent_line(data['agent'])}")


async def _label(life: _Life) -> types.CallToolResult:
    targeted = life.targeted
    labels = need_arg(life.args.labels, "labels", life.args.action)
    labelled = await life.session.locator.call(life.root, AGENT_LABEL,
                                               {**targeted, "labels": labels},
                                               timeout_s=RPC_SLACK_S)
    data = replies.as_data(labelled)
    return replies.ok(data, agent_line(data["agent"]))


async def _close(life: _Life) -> types.CallToolResult:
    closed = await life.session.locator.call(life.root, AGENT_CLOSE, life.targeted,
                                             timeout_s=AGENT_RPC_TIMEOUT_S)
    return _agent_reply(life, closed)


async def _resume(life: _Life) -> types.CallToolResult:
    return _agent_reply(life, await _guarded(life, AGENT_RESUME, life.targeted,
                                             AGENT_RPC_TIMEOUT_S))  # starts a program


async def _unarchive(life: _Life) -> types.CallToolResult:
    return _agent_reply(life, await _guarded(life, AGENT_UNARCHIVE, life.targeted,
                                             AGENT_RPC_TIMEOUT_S))  # starts a program


def _agent_reply(life: _Life, reply: AgentResult) -> types.CallToolResult:
    data = replies.as_data(reply)
    return replies.ok(data, f"{life.args.action}: {agent_line(data['agent'])}")


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
    notices = await session.locator.call(root, AGENT_NOTIFICATIONS, {
        **scope, "parent": parent_id, "after": after, "limit": min(args.limit, MAX_NOTIFICATIONS),
        "timeout_ms": int(timeout_s * 1000)}, timeout_s=timeout_s + RPC_SLACK_S)
    # The cursor goes to the caller as a string, as every Tether cursor does.
    data = replies.as_data(notices, cursor=str(notices.cursor))
    if args.action == "wait":
        data["outcome"] = "changed" if notices.notifications else "timeout"
    lines = [f"#{n.id} {n.child_execution_id} {n.kind} (turn {n.turn_seq})"
             for n in notices.notifications]
    return replies.ok(data, "\n".join(lines) or "no notifications")


async def _notices(life: _Life) -> types.CallToolResult:
    return await _notifications(life.session, life.args, life.root, life.scope)


#: Each lifecycle action to the one function that carries it out.
_ACTIONS: dict[str, Callable[[_Life], Awaitable[types.CallToolResult]]] = {
    "list": _list, "notifications": _notices, "wait": _notices, "launch": _launch,
    "get": _get, "archive": _archive, "cancel": _cancel, "label": _label, "close": _close,
    "resume": _resume, "unarchive": _unarchive,
}
