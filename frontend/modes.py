"""Thread modes in the front-end (R27): read and change a thread's mode, and check every
action that could type something against it before anything is sent.

The mode lives on the thread in the guardian's catalog (``thread.mode``/``thread.set_mode``)
so that it outlives front-ends, like the thread itself. It is read again for every action it
governs rather than cached: two front-ends may serve one thread, and a mode changed through
one must hold in the other at once.

A guardian without the ``thread_modes`` capability cannot hold a mode: its threads are
``wcgw``, and changing the mode there is ``capability_missing``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.frontend.authority import agent_action_class, authorize_agent_action
from tether.frontend.schemas import CommandAction, SendKeysAction, SendTextAction
from tether.frontend.shell_policy import Violation, check_command, denied
from tether.frontend.tools.base import Session
from tether.protocol.methods import ModeSpec
from tether.protocol.versions import Capability

RPC_TIMEOUT_S = 5.0
#: Longer command lines are parsed in a worker thread so other calls are not held up.
PARSE_INLINE_CHARS = 4096

#: Keys a restricted mode lets through ``send_keys``: none of them recalls, yanks or edits
#: text that could become a command (Up/Down/Ctrl-r/Ctrl-y/Ctrl-x are left out on purpose).
RESTRICTED_KEYS = frozenset({
    "Enter", "Escape", "Space", "Backspace", "Tab", "Left", "Right", "Home", "End", "PageUp",
    "PageDown", "Delete", "Ctrl-c", "Ctrl-d",
})


async def thread_mode(session: Session, root: str, scope: dict[str, Any]) -> tuple[ModeSpec, str]:
    """The thread's mode and its shell's cwd (the workspace root on a guardian without modes)."""
    handle = await session.locator.handle(root, scope["thread_id"])
    if str(Capability.THREAD_MODES) not in handle.capabilities:
        return ModeSpec(), root
    reply = await session.locator.call(root, "thread.mode", scope, timeout_s=RPC_TIMEOUT_S)
    return ModeSpec.model_validate(reply["mode"]), str(reply["cwd"])


async def set_thread_mode(
    session: Session, root: str, scope: dict[str, Any], mode: ModeSpec
) -> ModeSpec:
    """Store ``mode`` on the thread; ``capability_missing`` on a guardian without modes."""
    reply = await session.locator.call(
        root, "thread.set_mode", {**scope, "mode": mode.model_dump(mode="json")},
        timeout_s=RPC_TIMEOUT_S,
    )
    return ModeSpec.model_validate(reply["mode"])


async def check_bash_action(
    session: Session, root: str, scope: dict[str, Any], action: Any
) -> None:
    """Refuse (``mode_denied``) a BashCommand action the thread's mode does not allow.

    ``command`` lines are parsed and checked segment by segment; ``send_text`` is refused in
    a restricted mode (typed text can be a command line the parser never sees); ``send_keys``
    is limited to :data:`RESTRICTED_KEYS`. Reading actions are never restricted.
    """
    if not isinstance(action, CommandAction | SendTextAction | SendKeysAction):
        return
    mode, cwd = await thread_mode(session, root, scope)
    if mode.name == "wcgw":
        return
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
        refused = [key for key in action.keys if key not in RESTRICTED_KEYS]
        if refused:
            raise denied(mode, [Violation(" ".join(action.keys), "restricted_keys",
                                          f"keys {', '.join(refused)} can recall or edit a "
                                          "command line; allowed: "
                                          f"{', '.join(sorted(RESTRICTED_KEYS))}")])


async def check_agent_action(
    session: Session, root: str, scope: dict[str, Any], action: str
) -> None:
    """The authority check of one Agent action (see :mod:`tether.frontend.authority`):
    call it before sending anything for ``action``. Reads the thread's mode only when the
    action is not a pure observation."""
    mode = None
    if agent_action_class(action) != "observe" and session.caller.has_bash_authority:
        mode, _ = await thread_mode(session, root, scope)
    authorize_agent_action(session.caller, action, mode)
