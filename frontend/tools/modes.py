"""Thread modes in the front-end (docs/security.md#profiles-and-modes): read and change a thread's mode, and
check every
action that could type something against it before anything is sent.

The mode lives on the thread in the guardian's catalog (``thread.mode``/``thread.set_mode``)
so that it outlives front-ends, like the thread itself. The front-end remembers the mode it
last saw per thread (``Session.modes``) only as a hint: every input it sends names the
mode it was checked against (``mode_fingerprint``), and the guardian refuses it
(``mode_changed``, nothing typed) when the thread has another mode by now — then the mode is
read again, the input checked again, and sent once more (:func:`send_checked`). A ``wcgw``
thread therefore costs no extra round trip per command; a restricted one is read fresh each
time (its checks need the shell's current directory).

A guardian without the ``thread_modes`` capability cannot hold a mode: its threads are
``wcgw``, and changing the mode there is ``capability_missing``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tether.frontend.policy.authority import agent_action_class, authorize_agent_action
from tether.frontend.policy.shell_policy import Violation, check_command, denied
from tether.frontend.tools.base import Session
from tether.frontend.tools.schemas import CommandAction, SendKeysAction, SendTextAction
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MODE_RPC_TIMEOUT_S
from tether.protocol.method_table import EXEC_GET, THREAD_MODE, THREAD_SET_MODE
from tether.protocol.methods import ModeSpec, mode_fingerprint
from tether.protocol.results import ThreadModeResult
from tether.protocol.versions import Capability

T = TypeVar("T")
#: Longer command lines are parsed in a worker thread so other calls are not held up.
PARSE_INLINE_CHARS = 4096

#: Keys a restricted mode lets through ``send_keys``: none of them recalls, yanks or edits
#: text that could become a command (Up/Down/Ctrl-r/Ctrl-y/Ctrl-x are left out on purpose).
RESTRICTED_KEYS = frozenset({
    "Enter", "Escape", "Space", "Backspace", "Tab", "Left", "Right", "Home", "End", "PageUp",
    "PageDown", "Delete", "Ctrl-c", "Ctrl-d",
})

#: The one key a restricted mode sends to the main shell: the terminal turns it into SIGINT
#: as it arrives. Any other key sent while a command runs waits in the terminal and reaches
#: readline with the next command line: Tab Tab opened the completion pager, which ate part
#: of the next line, and the rest ran as another command.
MAIN_SHELL_KEYS = frozenset({"Ctrl-c"})

#: What a check hands to the request it guards: ``{"mode_fingerprint": ...}``.
Guard = dict[str, Any]

def _key(session: Session, root: str, scope: dict[str, Any]) -> tuple[str, str, str]:
    return (session.principal, root, str(scope["thread_id"]))


async def thread_mode(session: Session, root: str, scope: dict[str, Any], *,
                      fresh: bool = True) -> tuple[ModeSpec, str]:
    """The thread's mode and its shell's cwd (the workspace root when not read: a guardian
    without modes, or a remembered ``wcgw`` when ``fresh`` is false)."""
    handle = await session.locator.handle(root, scope["thread_id"])
    if str(Capability.THREAD_MODES) not in handle.capabilities:
        return ModeSpec(), root
    key = _key(session, root, scope)
    known = None if fresh else session.modes.get(key)
    if known is not None and known.name == "wcgw":
        return known, root  # nothing to check, so no cwd needed; the guardian verifies
    reply = await read_thread_mode(session, root, scope)
    return mode_of(reply), reply.cwd


def mode_of(reply: ThreadModeResult) -> ModeSpec:
    """The mode a ``thread.mode`` or ``thread.set_mode`` reply names, as the front-end checks
    actions against it (read from the reply's model: unknown fields a newer guardian sends
    are left out)."""
    return ModeSpec.model_validate(reply.mode, from_attributes=True)


async def read_thread_mode(session: Session, root: str,
                           scope: dict[str, Any]) -> ThreadModeResult:
    """The guardian's ``thread.mode`` reply (remembered as a hint); the guardian must have
    ``thread_modes``."""
    reply = await session.locator.call(root, THREAD_MODE, scope, timeout_s=MODE_RPC_TIMEOUT_S)
    session.modes.remember(_key(session, root, scope), mode_of(reply))
    return reply


async def set_thread_mode(
    session: Session, root: str, scope: dict[str, Any], mode: ModeSpec
) -> ThreadModeResult:
    """Store ``mode`` on the thread (a change gives it a fresh shell on a guardian with
    ``mode_sandbox``); ``capability_missing`` on a guardian without modes."""
    reply = await session.locator.call(
        root, THREAD_SET_MODE, {**scope, "mode": mode.model_dump(mode="json")},
        timeout_s=MODE_RPC_TIMEOUT_S,
    )
    session.modes.remember(_key(session, root, scope), mode_of(reply))
    return reply


async def check_bash_action(
    session: Session, root: str, scope: dict[str, Any], action: Any, *, fresh: bool = False
) -> Guard:
    """Refuse (``mode_denied``) a BashCommand action the thread's mode does not allow;
    returns the guard to send with it.

    ``command`` lines are parsed and checked segment by segment; ``send_text`` is refused in
    a restricted mode (typed text can be a command line the parser never sees); ``send_keys``
    is limited to :data:`RESTRICTED_KEYS`, and to :data:`MAIN_SHELL_KEYS` for the main shell
    (see :func:`key_violations`). Reading actions are never restricted.
    """
    if not isinstance(action, CommandAction | SendTextAction | SendKeysAction):
        return {}
    mode, cwd = await thread_mode(session, root, scope, fresh=fresh)
    guard = {"mode_fingerprint": mode_fingerprint(mode)}
    if mode.name == "wcgw":
        return guard
    if isinstance(action, CommandAction):
        if len(action.command) > PARSE_INLINE_CHARS:  # parsing 64 KiB takes ~1 s: off the loop
            await asyncio.to_thread(check_command, mode, action.command, cwd=cwd,
                                    workspace_root=root)
        else:
            check_command(mode, action.command, cwd=cwd, workspace_root=root)
    elif isinstance(action, SendTextAction):
        raise denied(mode, [Violation(action.text, "no_typing",
                                      "send_text could type a command line that cannot be "
                                      "checked; use type=command")])
    else:
        violations = await key_violations(session, root, scope, action)
        if violations:
            raise denied(mode, violations)
    return guard


async def key_violations(session: Session, root: str, scope: dict[str, Any],
                         action: SendKeysAction) -> list[Violation]:
    """Why a restricted mode refuses these keys: a key that recalls or edits a command line
    (``restricted_keys``); a key other than Ctrl-c to the main shell (``main_shell_keys``);
    any key to a terminal that is not a background execution of this thread, such as an
    agent's, where Enter approves what it asks (``key_target``)."""
    keys = " ".join(action.keys)
    found = []
    refused = [key for key in action.keys if key not in RESTRICTED_KEYS]
    if refused:
        found.append(Violation(keys, "restricted_keys",
                               f"keys {', '.join(refused)} can recall or edit a command line; "
                               f"allowed: {', '.join(sorted(RESTRICTED_KEYS))}"))
    kind = "command"  # no execution_id: the main shell's current command
    if action.execution_id is not None:
        # The guardian's record, read-only; an execution's thread and kind never change,
        # so what is checked here is what the keys reach (the mode guard covers the mode).
        got = await session.locator.call(
            root, EXEC_GET, {**scope, "execution_id": action.execution_id},
            timeout_s=MODE_RPC_TIMEOUT_S)
        record = got.execution
        if record.thread_id != scope["thread_id"] or record.kind not in ("command", "background"):
            what = "an agent's terminal" if record.kind == "agent" else (
                f"of thread {record.thread_id}, kind {record.kind}")
            found.append(Violation(keys, "key_target",
                                   f"execution {record.execution_id} is {what}; a restricted "
                                   "mode sends keys only to this thread's own background "
                                   "executions (an agent takes Enter for an answer). Send "
                                   "them from a thread in mode wcgw"))
            return found
        kind = record.kind
    if kind == "command" and (extra := [k for k in action.keys if k not in MAIN_SHELL_KEYS]):
        found.append(Violation(keys, "main_shell_keys",
                               f"keys {', '.join(extra)} to the main shell wait in its terminal "
                               "and reach readline as part of the next command line; a "
                               "restricted mode sends it only Ctrl-c. To type into a program, "
                               "start it with is_background=true"))
    return found


async def check_agent_action(
    session: Session, root: str, scope: dict[str, Any], action: str, *, fresh: bool = False
) -> Guard:
    """The authority check of one Agent action (see :mod:`tether.frontend.policy.authority`):
    call it before sending anything for ``action``, and send the returned guard with an
    action that types. Reads the thread's mode only when the action is not an observation."""
    if agent_action_class(action) == "observe":
        authorize_agent_action(session.caller, action, None)
        return {}
    mode = None
    if session.caller.has_bash_authority:
        mode, _ = await thread_mode(session, root, scope, fresh=fresh)
    authorize_agent_action(session.caller, action, mode)
    return {"mode_fingerprint": mode_fingerprint(mode)} if mode is not None else {}


async def send_checked(
    session: Session, root: str, scope: dict[str, Any],
    check: Callable[[bool], Awaitable[Guard]], send: Callable[[Guard], Awaitable[T]],
) -> T:
    """Check, then send with the guard; when the guardian says the mode changed meanwhile,
    read it again, check again and send once more (nothing was typed the first time)."""
    guard = await check(False)
    try:
        return await send(guard)
    except TetherError as err:
        if err.code != ErrorCode.MODE_CHANGED:
            raise
    session.modes.forget(_key(session, root, scope))
    return await send(await check(True))
