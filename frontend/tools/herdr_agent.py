"""``Agent`` with ``backend: herdr`` (docs/tools.md#herdr-backend): a person's agents in Herdr,
observed and prompted through the targets the operator bound to this principal and workspace.

A call is checked whole before anything runs: the configuration is there at all, the fields
belong to the action (``prompt_id`` never: Herdr cannot deduplicate), the workspace and
thread are the caller's, the action is allowed (a prompt needs BashCommand authority and a
``wcgw`` thread, read fresh), the configuration file passes every rule, this principal has a
binding for this workspace, and the alias is one of its targets. An alias of another binding
is ``not_found`` exactly as one that was never configured.

A prompt is submitted once: Herdr's acknowledgement says it submitted text and Enter, not
that the agent did the work; a timeout or an unreadable answer is ``input_sent: "unknown"``
and is never sent again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from tether.frontend.herdr.herdr_cli import (
    DEFAULT_READ_LINES,
    HerdrCli,
    check_identity,
    summary,
    wait_timeout_ms,
)
from tether.frontend.herdr.operator_config import Binding, disabled, not_configured
from tether.frontend.tools import replies
from tether.frontend.tools.base import Session
from tether.frontend.tools.modes import check_agent_action, read_thread_mode
from tether.frontend.tools.schemas import AgentArgs
from tether.protocol.errors import ErrorCode, TetherError

#: The fields every Agent call has.
_COMMON = frozenset({"thread_id", "workspace_root", "backend", "action"})
#: Each Herdr action and the fields it takes besides those.
FIELDS = {
    "list": frozenset(),
    "get": frozenset({"target"}),
    "read": frozenset({"target", "lines"}),
    "explain": frozenset({"target"}),
    "wait": frozenset({"target", "until", "timeout_seconds"}),
    "prompt": frozenset({"target", "text"}),
}
#: A listing's reply at most (UTF-8 JSON of its data).
MAX_LIST_BYTES = 64 * 1024
#: Fields only the Herdr backend takes.
HERDR_ONLY = frozenset({"lines", "until"})


def check_native_args(args: AgentArgs) -> None:
    """The native backend refuses the Herdr backend's own fields."""
    given = sorted(HERDR_ONLY & args.model_fields_set)
    if given:
        raise TetherError(ErrorCode.INVALID_REQUEST, (
            f"{', '.join(given)} belong to backend herdr; the native backend does not take "
            "them. Nothing was sent."), {"input_sent": False, "field": given[0]})


async def run_herdr(session: Session, args: AgentArgs) -> types.CallToolResult:
    """One Agent call on the Herdr backend."""
    settings = session.herdr
    if settings.config_path is None:
        raise not_configured()
    _check_fields(args)
    root, scope = session.scope(args.thread_id, args.workspace_root)
    # The caller's authority, and its thread (the guardian knows it: session_mismatch
    # otherwise). A prompt reads the thread's mode fresh: nothing in Herdr re-checks it.
    await check_agent_action(session, root, scope, args.action, fresh=True)
    if args.action != "prompt":
        await read_thread_mode(session, root, scope)
    config = settings.load()
    binding = config.binding(session.principal, root)
    if binding is None:
        raise disabled("binding_missing", (
            f"the operator bound no Herdr targets to principal {session.principal} in this "
            "workspace; ask the operator to add a binding (retrying unchanged will not help). "
            "Nothing was sent."))
    call = _Call(HerdrCli(settings, config), binding, args)
    return await _ACTIONS[args.action](call)


def _check_fields(args: AgentArgs) -> None:
    if args.action not in FIELDS:
        raise TetherError(ErrorCode.INVALID_REQUEST, (
            f"action {args.action} is not available on backend herdr, which has "
            f"{', '.join(FIELDS)} only: no agent start, attach, raw keys or lifecycle. "
            "Nothing was sent."), {"input_sent": False, "field": "action"})
    if "prompt_id" in args.model_fields_set:
        raise TetherError(ErrorCode.INVALID_REQUEST, (
            "prompt_id is not accepted on backend herdr: Herdr cannot tell a repeated prompt "
            "from a new one, so a prompt is submitted once per call and never resent. Omit "
            "prompt_id. Nothing was sent."), {"input_sent": False, "field": "prompt_id"})
    extra = sorted(args.model_fields_set - _COMMON - FIELDS[args.action])
    if extra:
        raise TetherError(ErrorCode.INVALID_REQUEST, (
            f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not used by backend "
            f"herdr's {args.action} (it takes {', '.join(sorted(FIELDS[args.action])) or 'no'} "
            "fields of its own). Nothing was sent."), {"input_sent": False, "field": extra[0]})
    for needed in ("target", "text"):
        if needed in FIELDS[args.action] and getattr(args, needed) is None:
            raise TetherError(ErrorCode.INVALID_REQUEST,
                              f"backend herdr's {args.action} needs {needed}. Nothing was sent.",
                              {"input_sent": False, "field": needed})


@dataclass(slots=True)
class _Call:
    cli: HerdrCli
    binding: Binding
    args: AgentArgs

    @property
    def alias(self) -> str:
        assert self.args.target is not None  # checked with the fields
        return self.args.target

    def terminal(self) -> str:
        """The bound terminal id of the alias; ``not_found`` as for any unknown id."""
        terminal = self.binding.targets.get(self.alias)
        if terminal is None:
            raise TetherError(ErrorCode.NOT_FOUND, (
                f"no Herdr target {self.alias!r} is configured for this principal and "
                "workspace; Agent list with backend herdr shows the configured ones"),
                {"input_sent": False, "target": self.alias})
        return terminal

    async def pane(self) -> tuple[str, str]:
        """The bound terminal and the pane Herdr lists it in now."""
        terminal = self.terminal()
        listed = await self.cli.locate(terminal, self.alias)
        return terminal, str(listed["pane_id"])

    async def confirm(self, pane: str, terminal: str, command: str) -> None:
        """After an answer that names no terminal (read, explain): the pane still holds it."""
        check_identity(await self.cli.get(pane), terminal, self.alias, command)


def _data(call: _Call, **fields: Any) -> dict[str, Any]:
    return {"backend": "herdr", "target": call.alias, **fields}


async def _list(call: _Call) -> types.CallToolResult:
    agents = {a["terminal_id"]: a for a in await call.cli.agents()}
    targets = []
    for alias in sorted(call.binding.targets):
        record = agents.get(call.binding.targets[alias])
        targets.append({"target": alias, "present": record is not None,
                        **(summary(record) if record is not None else {})})
    data = {"backend": "herdr", "targets": targets}
    size = len(json.dumps(data, ensure_ascii=False).encode())
    if size > MAX_LIST_BYTES:
        raise TetherError(ErrorCode.LIMIT_EXCEEDED, (
            f"the listing of {len(targets)} Herdr targets is {size} bytes; the limit is "
            f"{MAX_LIST_BYTES // 1024} KiB. Get the targets one by one."),
            {"input_sent": False, "size": size, "limit": MAX_LIST_BYTES})
    lines = [f"{t['target']} {t.get('status', 'absent')}"
             + (f" ({t['agent']})" if t.get("agent") else "") for t in targets]
    return replies.ok(data, "\n".join(lines))


async def _get(call: _Call) -> types.CallToolResult:
    terminal, pane = await call.pane()
    record = await call.cli.get(pane)
    check_identity(record, terminal, call.alias, "agent get")
    agent = summary(record)
    return replies.ok(_data(call, agent=agent), f"{call.alias}: {replies.json_text(agent)}")


async def _read(call: _Call) -> types.CallToolResult:
    lines = call.args.lines or DEFAULT_READ_LINES
    terminal, pane = await call.pane()
    text = await call.cli.read(pane, lines)
    await call.confirm(pane, terminal, "agent read")
    return replies.ok(_data(call, text=text, lines=lines, source="recent"),
                      text or "(no recent text)")


async def _explain(call: _Call) -> types.CallToolResult:
    terminal, pane = await call.pane()
    explained = await call.cli.explain(pane)
    await call.confirm(pane, terminal, "agent explain")
    return replies.ok(_data(call, explain=explained), replies.json_text(explained))


async def _wait(call: _Call) -> types.CallToolResult:
    until = call.args.until
    states = [until] if isinstance(until, str) else list(dict.fromkeys(until or []))
    terminal, pane = await call.pane()
    timeout_ms = wait_timeout_ms(int(call.args.timeout_seconds * 1000), call.cli.remaining_ms())
    record = await call.cli.wait(pane, states, timeout_ms)
    data = _data(call, until=states or ["idle", "done", "blocked"], timeout_ms=timeout_ms)
    if record is None:
        return replies.ok({**data, "outcome": "timeout"},
                          f"timeout after {timeout_ms} ms: {call.alias} is in none of "
                          f"{', '.join(data['until'])}")
    check_identity(record, terminal, call.alias, "agent wait")
    agent = summary(record)
    return replies.ok({**data, "outcome": "matched", "agent": agent},
                      f"matched: {call.alias} is {agent['status']}")


async def _prompt(call: _Call) -> types.CallToolResult:
    text = call.args.text
    assert text is not None  # checked with the fields
    terminal, pane = await call.pane()
    record = await call.cli.prompt(pane, text)
    check_identity(record, terminal, call.alias, "agent prompt", input_sent="unknown")
    agent = summary(record)
    data = _data(call, input_sent=True, acknowledged=True, completion_observed=False,
                 agent=agent)
    return replies.ok(data, f"prompt submitted to {call.alias} (Herdr acknowledged text and "
                            "Enter; whether the agent did the work is not known yet: get, "
                            f"read or wait to follow it); it is {agent['status']}")


_ACTIONS: dict[str, Callable[[_Call], Awaitable[types.CallToolResult]]] = {
    "list": _list, "get": _get, "read": _read, "explain": _explain, "wait": _wait,
    "prompt": _prompt,
}
