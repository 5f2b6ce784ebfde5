"""``BashCommand``: run, check, type into, and look at terminals."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types

from tether.frontend import usage
from tether.frontend.tools import replies
from tether.frontend.tools.base import Progress, Session, Tool
from tether.frontend.tools.modes import Guard, check_bash_action, send_checked
from tether.frontend.tools.outputs import BASH_COMMAND_OUTPUT
from tether.frontend.tools.schemas import (
    BashCommandArgs,
    CommandAction,
    ScreenAction,
    SendKeysAction,
    SendTextAction,
    StatusCheckAction,
    ToolArgs,
    WaitForTurnAction,
)
from tether.protocol.limits import (
    DEFAULT_COLS,
    DEFAULT_ROWS,
    DEFAULT_WAIT_MS,
    MAX_INPUT_WAIT_MS,
    RPC_SLACK_S,
)
from tether.protocol.method_table import (
    EXEC_INPUT,
    EXEC_SCREEN,
    EXEC_START,
    EXEC_STATUS,
    EXEC_WAIT_TURN,
    Method,
)
from tether.protocol.results import ExecResult

PROGRESS_EVERY_S = 1.0
T = TypeVar("T")


class BashCommandTool(Tool):
    name = "BashCommand"
    description = (
        "Run a shell command in the thread's persistent shell (type=command), or in its own "
        "terminal with is_background=true; check on it (status_check), type into it "
        "(send_text, send_keys), or read its screen (screen). Waits up to wait_for_seconds "
        "(default 5, max 60) and returns as soon as the command ends; a command still running "
        "then is status=running with its execution_id. A status_check answers at once unless "
        "wait_for_seconds is given."
    )
    args_model = BashCommandArgs
    output_schema = BASH_COMMAND_OUTPUT
    annotations = types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, open_world_hint=True
    )

    async def run(
        self, session: Session, args: BashCommandArgs, progress: Progress
    ) -> types.CallToolResult:
        usage.wait_requested(args.wait_for_seconds)
        root, scope = session.scope(args.thread_id, args.workspace_root)
        action = args.action_json
        if args.wait_for_seconds is not None:
            wait_s = args.wait_for_seconds
        elif isinstance(action, StatusCheckAction):
            wait_s = 0.0  # a check answers at once: waiting for the end is asked for by name
        else:
            wait_s = DEFAULT_WAIT_MS / 1000
        call = _Call(session, root, scope, progress, wait_s)
        return await _ACTIONS[type(action)](call, action)


@dataclass(slots=True)
class _Call:
    """What every action of one BashCommand call works with."""

    session: Session
    root: str
    scope: dict[str, Any]
    progress: Progress
    wait_s: float

    @property
    def wait_ms(self) -> int:
        return int(self.wait_s * 1000)


async def _command(call: _Call, action: CommandAction) -> types.CallToolResult:
    return await _send(call, action, EXEC_START, {
        **call.scope, "command": action.command, "background": action.is_background,
        "rows": action.rows or DEFAULT_ROWS, "cols": action.cols or DEFAULT_COLS,
        "wait_ms": 0 if action.is_background else call.wait_ms,
        "idempotency_key": call.session.idempotency_key(), "generation": action.generation,
    })


async def _status_check(call: _Call, action: StatusCheckAction) -> types.CallToolResult:
    return await _send(call, action, EXEC_STATUS, {
        **call.scope, "execution_id": action.execution_id, "wait_ms": call.wait_ms,
    })


async def _send_input(call: _Call, action: SendTextAction | SendKeysAction
                      ) -> types.CallToolResult:
    params: dict[str, Any] = {
        **call.scope, "execution_id": action.execution_id,
        "idempotency_key": call.session.idempotency_key(),
        "wait_ms": min(call.wait_ms, MAX_INPUT_WAIT_MS), "generation": action.generation,
    }
    if isinstance(action, SendTextAction):
        params.update(text=action.text, submit=action.submit)
    else:
        params["keys"] = action.keys
    return await _send(call, action, EXEC_INPUT, params)


async def _send(call: _Call, action: CommandAction | StatusCheckAction | SendTextAction
                | SendKeysAction, method: Method[Any, ExecResult], params: dict[str, Any]
                ) -> types.CallToolResult:
    session, root, scope = call.session, call.root, call.scope

    async def check(fresh: bool) -> Guard:
        return await check_bash_action(session, root, scope, action, fresh=fresh)

    async def send(guard: Guard) -> ExecResult:
        reply = await _with_progress(
            session.locator.call(root, method, {**params, **guard},
                                 timeout_s=call.wait_s + RPC_SLACK_S),
            call.progress, call.wait_s,
        )
        usage.wait_taken(params["wait_ms"])  # a refusal (shell_busy, ...) waited for nothing
        return reply

    # The thread's mode is checked before anything is sent (mode_denied), and the
    # guardian verifies the input was checked against the mode the thread has now.
    return _execution_result(await send_checked(session, root, scope, check, send))


async def _wait_for_turn(call: _Call, action: WaitForTurnAction) -> types.CallToolResult:
    turn = await _with_progress(call.session.locator.call(
        call.root, EXEC_WAIT_TURN,
        {**call.scope, "execution_id": action.execution_id, "recognizer": action.recognizer,
         "quiet_ms": action.quiet_ms, "timeout_ms": int(action.timeout_seconds * 1000)},
        timeout_s=action.timeout_seconds + RPC_SLACK_S), call.progress, action.timeout_seconds)
    text = f"{turn.outcome}: {turn.recognition.state} (rule {turn.recognition.rule})"
    if turn.outcome == "unknown":  # an end nobody saw: say why, never "exited"
        text = (f"unknown ({turn.execution.reason or 'no reason recorded'}): how "
                f"execution {turn.execution.execution_id} ended was not observed; "
                f"its last screen reads {turn.recognition.state}")
    return replies.ok(turn, text)


async def _screen(call: _Call, action: ScreenAction) -> types.CallToolResult:
    screen = await call.session.locator.call(
        call.root, EXEC_SCREEN,
        {**call.scope, "execution_id": action.execution_id, "lines": action.lines},
        timeout_s=RPC_SLACK_S,
    )
    return replies.ok({"screen": replies.as_data(screen)}, screen.text or "(empty screen)")


#: Each action type to the one function that carries it out.
_ACTIONS: dict[type[ToolArgs], Callable[[_Call, Any], Awaitable[types.CallToolResult]]] = {
    CommandAction: _command,
    StatusCheckAction: _status_check,
    SendTextAction: _send_input,
    SendKeysAction: _send_input,
    WaitForTurnAction: _wait_for_turn,
    ScreenAction: _screen,
}


async def _with_progress(call: Awaitable[T], progress: Progress, wait_s: float) -> T:
    """Await ``call`` in this task while sending MCP progress notifications once a second.

    Most calls end well within a second, so the ticker that sends them is a task started
    by a timer only once the first second has passed: a short call costs one timer, not a
    task of its own and a wait with a timeout.
    """
    loop = asyncio.get_running_loop()
    ticker: asyncio.Task[None] | None = None

    async def tick() -> None:
        elapsed = PROGRESS_EVERY_S
        while True:
            with contextlib.suppress(Exception):  # progress is best-effort
                await progress(elapsed, wait_s or None, f"waiting ({elapsed:.0f}s)")
            await asyncio.sleep(PROGRESS_EVERY_S)
            elapsed += PROGRESS_EVERY_S

    def start() -> None:
        nonlocal ticker
        ticker = loop.create_task(tick())

    timer = loop.call_later(PROGRESS_EVERY_S, start)
    try:
        return await call
    finally:
        timer.cancel()
        if ticker is not None:
            ticker.cancel()


_DELIVERY_FIELDS = ("delivery", "terminal_mode", "terminal_mode_after", "reads_keys",
                    "screen_changed", "echo_seen", "warning")


def _execution_result(reply: ExecResult) -> types.CallToolResult:
    execution, output = reply.execution, reply.output
    data: dict[str, Any] = {
        "execution_id": execution.execution_id,
        "status": execution.status,
        "exit_code": execution.exit_code,
        "reason": execution.reason,
        "cwd": reply.cwd,
        "output": output.text,
        "output_start": output.start,
        "output_end": output.end,
        "output_truncated": output.truncated,
        "generation": execution.generation,
        "kind": execution.kind,
    }
    if reply.shell_replaced is not None:
        data["shell_replaced"] = replies.as_data(reply.shell_replaced)
    if reply.input is not None:
        typed = replies.as_data(reply.input)
        data["input_sent"] = typed.get("input_sent", True)
        # What delivery looked like (guardians before 1.3 do not say): see InputDesk.observe.
        for key in _DELIVERY_FIELDS:
            if key in typed:
                data[key] = typed[key]
    text = data["output"]
    trailer = f"[{data['status']}"
    if data["exit_code"] is not None:
        trailer += f", exit code {data['exit_code']}"
    if data["reason"] and data["status"] == "unknown":
        trailer += f" ({data['reason']})"
    trailer += f"; execution {data['execution_id']}; cwd {data['cwd']}]"
    if data.get("warning"):
        trailer += f"\n[input {data.get('delivery')}: {data['warning']}]"
    if reply.shell_replaced is not None:
        trailer += f"\n[warning: {reply.shell_replaced.message}]"
    if data["output_truncated"]:
        trailer += (f"\n[output truncated: showing the tail from byte {data['output_start']}; "
                    "page the rest with Execution.read]")
    return replies.ok(data, f"{text}\n{trailer}" if text else trailer)
