"""``Initialize``: start or reattach to a thread, show status, or reset the shell."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tether.frontend import results
from tether.frontend.schemas import InitializeArgs
from tether.frontend.tools.base import Progress, Session, Tool

RPC_TIMEOUT_S = 15.0


class InitializeTool(Tool):
    name = "Initialize"
    description = (
        "Call first. Starts (or with thread_id, reattaches to) a thread in workspace_root: a "
        "persistent shell that survives restarts of this server. Returns thread_id and the "
        "canonical workspace_root that every other call must present. type=status changes "
        "nothing; type=reset_shell replaces the thread's shell (generation + 1)."
    )
    args_model = InitializeArgs
    annotations = types.ToolAnnotations(read_only_hint=False, destructive_hint=False)

    async def run(
        self, session: Session, args: InitializeArgs, progress: Progress
    ) -> types.CallToolResult:
        root = session.workspace(args.workspace_root)
        locator = session.locator
        if args.type == "reset_shell":
            if args.thread_id is None:
                raise ValueError("reset_shell needs thread_id")
            thread: dict[str, Any] = await locator.call(
                root, "thread.reset_shell",
                {"principal": session.principal, "workspace_root": root,
                 "thread_id": args.thread_id, "idempotency_key": session.idempotency_key()},
                timeout_s=RPC_TIMEOUT_S,
            )
        elif args.type == "status" and args.thread_id is None:
            thread = {}
        else:
            thread = await locator.call(
                root, "thread.open",
                {"principal": session.principal, "workspace_root": root,
                 "thread_id": args.thread_id},
                timeout_s=RPC_TIMEOUT_S,
            )
        handle = await locator.handle(root)
        data = {
            "thread_id": thread.get("thread_id", args.thread_id),
            "workspace_root": root,
            "generation": thread.get("generation"),
            "cwd": thread.get("cwd"),
            "reattached": thread.get("reattached", False),
            "mode": "wcgw",
            "profile": "full",
            "guardian": {
                "instance_id": handle.instance_id,
                "protocol": str(handle.version),
                "capabilities": sorted(handle.capabilities),
                "pid": handle.info.get("pid"),
            },
            "agent_backends": {
                "native": {"availability": "available"},
                "herdr": {"configuration_present": False, "availability": "disabled",
                          "reason": "configuration_missing"},
            },
        }
        if handle.lost_records:
            data["guardian"]["lost_records"] = handle.lost_records
        text = (
            f"thread {data['thread_id']} in {root} (shell generation {data['generation']}, "
            f"cwd {data['cwd']}); guardian protocol {handle.version}"
        )
        return results.ok(data, text)
