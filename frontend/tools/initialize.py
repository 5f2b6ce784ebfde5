"""``Initialize``: start or reattach to a thread, show status, reset the shell, change mode."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from tether.frontend.guardians.locator import GuardianHandle
from tether.frontend.policy.authority import BASH
from tether.frontend.tools import replies
from tether.frontend.tools.base import Progress, Session, Tool
from tether.frontend.tools.modes import mode_of, read_thread_mode, set_thread_mode
from tether.frontend.tools.outputs import INITIALIZE_OUTPUT
from tether.frontend.tools.schemas import InitializeArgs
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import THREAD_OPEN, THREAD_RESET_SHELL
from tether.protocol.methods import ModeSpec
from tether.protocol.results import ThreadModeResult
from tether.protocol.transport import REPLY_GRACE_S
from tether.protocol.versions import Capability

#: Opening a thread may start its guardian and its shell: more than an ordinary call.
THREAD_OPEN_TIMEOUT_S = 15.0
STATUS_TIMEOUT_S = 5.0


class InitializeTool(Tool):
    name = "Initialize"
    description = (
        "Call first. Starts (or with thread_id, reattaches to) a thread in workspace_root: a "
        "persistent shell that survives restarts of this server. Returns thread_id and the "
        "canonical workspace_root that every other call must present. type=status changes "
        "nothing; type=reset_shell replaces the thread's shell (generation + 1); "
        "type=change_mode sets the thread's mode (wcgw, architect, or code_writer with "
        "code_writer.allowed_commands and allowed_globs); first_call may set it too."
    )
    args_model = InitializeArgs
    output_schema = INITIALIZE_OUTPUT
    annotations = types.ToolAnnotations(read_only_hint=False, destructive_hint=False)

    async def run(
        self, session: Session, args: InitializeArgs, progress: Progress
    ) -> types.CallToolResult:
        root = session.workspace(args.workspace_root)
        requested = _requested_mode(args)
        thread, handle = await _THREADS[args.type](session, args, root)
        return await _reply(session, args, root, requested, thread, handle)


#: What a thread's reply says, as this tool's data takes it, and the guardian that gave it
#: (None: none runs, for a status).
Opened = tuple[dict[str, Any], GuardianHandle | None]


async def _status_of(session: Session, args: InitializeArgs, root: str) -> Opened:
    # Read-only: starts no guardian, no shell, and so no generation.
    handle = await session.locator.live(root)
    return await _status(session, root, args.thread_id, handle), handle


async def _reset_shell(session: Session, args: InitializeArgs, root: str) -> Opened:
    if args.thread_id is None:
        raise ValueError("reset_shell needs thread_id")
    session.caller.check_tool(BASH)  # replacing the shell ends what runs in it
    reset = await session.locator.call(
        root, THREAD_RESET_SHELL,
        {"principal": session.principal, "workspace_root": root,
         "thread_id": args.thread_id, "idempotency_key": session.idempotency_key()},
        timeout_s=THREAD_OPEN_TIMEOUT_S,
    )
    return replies.as_data(reset), await session.locator.handle(root)


async def _open(session: Session, args: InitializeArgs, root: str) -> Opened:
    """``first_call`` and ``change_mode``: open (or reattach to) the thread."""
    if args.type == "change_mode" and args.thread_id is None:
        raise ValueError("change_mode needs thread_id (from a first_call)")
    opened = await session.locator.call(
        root, THREAD_OPEN,
        {"principal": session.principal, "workspace_root": root, "thread_id": args.thread_id},
        timeout_s=THREAD_OPEN_TIMEOUT_S,
    )
    return replies.as_data(opened), await session.locator.handle(root)


#: Each call type to the one function that finds or opens its thread.
_THREADS: dict[str, Callable[[Session, InitializeArgs, str], Awaitable[Opened]]] = {
    "status": _status_of, "reset_shell": _reset_shell, "first_call": _open,
    "change_mode": _open,
}


async def _reply(session: Session, args: InitializeArgs, root: str,
                 requested: ModeSpec | None, thread: dict[str, Any],
                 handle: GuardianHandle | None) -> types.CallToolResult:
    """The thread as this call leaves it (its mode set first, when asked), and its guardian."""
    data: dict[str, Any] = {
        "thread_id": thread.get("thread_id", args.thread_id),
        "workspace_root": root,
        "generation": thread.get("generation"),
        "cwd": thread.get("cwd"),
        "reattached": thread.get("reattached", False),
        "mode": "wcgw",
        "profile": session.caller.profile,
        "principal": session.principal,
        "guardian": _guardian(handle),
        "agent_backends": {
            "native": {"availability": "available"},
            # Whether the operator set TETHER_HERDR_CONFIG, no more: nothing is read or run.
            "herdr": session.herdr.hint(),
        },
    }
    if "shell_running" in thread:
        data["shell_running"] = thread["shell_running"]
    if thread.get("shell_replaced"):  # the shell was lost and replaced: never silently
        data["shell_replaced"] = thread["shell_replaced"]
    if thread.get("temporary_dir"):  # TETHER_TMP of the thread's shell (protocol 1.9)
        data["temporary_dir"] = thread["temporary_dir"]
    found = await _mode(session, root, data["thread_id"], handle, thread, requested)
    sandbox_text = ""
    if found is not None:
        mode, reply = found
        data["mode"] = mode.name
        if mode.code_writer is not None:
            data["code_writer"] = mode.code_writer.model_dump(mode="json")
        if reply is not None and reply.generation is not None:  # a fresh shell
            data["generation"] = reply.generation
            data["cwd"] = reply.cwd
            if reply.orphans:
                data["orphans"] = reply.orphans
        if mode.name == "architect":
            data.update(_sandbox(root, handle, reply))
            sandbox_text = (f"; sandbox: {data['sandbox']}" if data["sandbox"]
                            else f"; NOT sandboxed: {data['sandbox_missing']}")
    if handle is not None and handle.lost_records:
        data["guardian"]["lost_records"] = handle.lost_records
    guardian = f"guardian protocol {handle.version}" if handle else "no guardian running"
    text = (
        f"thread {data['thread_id']} in {root} (shell generation {data['generation']}, "
        f"cwd {data['cwd']}, mode {data['mode']}{sandbox_text}); {guardian}"
    )
    if data.get("shell_replaced"):
        text += f"\nWARNING: {data['shell_replaced']['message']}"
    return replies.ok(data, text)


def _guardian(handle: GuardianHandle | None) -> dict[str, Any]:
    if handle is None:
        return {"running": False, "instance_id": None, "protocol": None, "capabilities": [],
                "pid": None}
    return {"running": True, "instance_id": handle.instance_id,
            "protocol": str(handle.version), "capabilities": sorted(handle.capabilities),
            "pid": handle.info.get("pid")}


async def _mode(session: Session, root: str, thread_id: str | None,
                handle: GuardianHandle | None, thread: dict[str, Any],
                requested: ModeSpec | None) -> tuple[ModeSpec, ThreadModeResult | None] | None:
    """The thread's mode after this call (setting ``requested`` first) with the guardian's
    reply (what an architect thread's sandbox is), or None without a thread. With no
    guardian running (status) it comes from the catalog on disk, with no reply."""
    if thread_id is None:
        return None
    scope = {"principal": session.principal, "workspace_root": root, "thread_id": thread_id}
    if requested is not None:
        reply = await set_thread_mode(session, root, scope, requested)
        return mode_of(reply), reply
    if handle is None:
        stored = thread.get("mode")
        return (ModeSpec.model_validate(stored) if stored else ModeSpec()), None
    if str(Capability.THREAD_MODES) not in handle.capabilities:
        return ModeSpec(), None  # an older guardian's threads are all wcgw
    reply = await read_thread_mode(session, root, scope)
    return mode_of(reply), reply


def _sandbox(root: str, handle: GuardianHandle | None,
             reply: ThreadModeResult | None) -> dict[str, Any]:
    """What an architect thread's commands run inside (``sandbox``), or why nothing
    (``sandbox_missing``): said plainly, since the mode then rests on the command check."""
    if handle is None:
        return {"sandbox": None, "sandbox_missing": "no guardian is running; the next call "
                "starts one, and its shell in the sandbox where the kernel offers one"}
    if str(Capability.MODE_SANDBOX) not in handle.capabilities or reply is None:
        return {"sandbox": None, "sandbox_missing": (
            f"guardian protocol {handle.version} has no mode sandbox (protocol 1.6 adds "
            "it): architect is enforced by the command check alone. Upgrade the guardian: "
            f"tether guardians restart --workspace {root} --yes")}
    if reply.sandbox is not None:
        return {"sandbox": reply.sandbox}
    return {"sandbox": None, "sandbox_missing": reply.sandbox_missing}


async def _status(session: Session, root: str, thread_id: str | None,
                  handle: GuardianHandle | None) -> dict[str, Any]:
    """The thread as it is, from its guardian when one runs, else from the catalog on disk."""
    if thread_id is None:
        return {}
    if handle is not None:
        try:
            status = await handle.call(
                THREAD_OPEN, {"principal": session.principal, "workspace_root": root,
                                "thread_id": thread_id, "read_only": True},
                timeout_s=STATUS_TIMEOUT_S)
        except TetherError as err:
            if err.code == ErrorCode.GUARDIAN_UNAVAILABLE:
                # Alive a moment ago, silent now: say so (and, being read-only, start nothing).
                raise handle.unresponsive(waited_s=STATUS_TIMEOUT_S + REPLY_GRACE_S,
                                          input_sent=False) from None
            raise
        return replies.as_data(status)
    row = session.locator.known_thread(root, thread_id)
    if row is None:
        raise TetherError(
            ErrorCode.SESSION_MISMATCH,
            f"no thread {thread_id!r} in this workspace; call Initialize without thread_id "
            "to start a new one", {"input_sent": False})
    return {"thread_id": thread_id, "generation": row["generation"], "cwd": row["cwd"],
            "shell_running": False, "mode": row.get("mode")}


def _requested_mode(args: InitializeArgs) -> ModeSpec | None:
    """The mode this call sets, validated before anything else happens."""
    if args.type == "change_mode" and args.mode is None:
        raise ValueError("change_mode needs mode: wcgw, architect or code_writer")
    if args.mode is None:
        if args.code_writer is not None:
            raise ValueError("code_writer settings need mode=code_writer")
        return None
    if args.type not in ("first_call", "change_mode"):
        raise TetherError(ErrorCode.INVALID_REQUEST,
                          f"mode can be set with type=first_call or change_mode, not {args.type}")
    config = args.code_writer.model_dump() if args.code_writer is not None else None
    return ModeSpec.model_validate({"name": args.mode, "code_writer": config})
