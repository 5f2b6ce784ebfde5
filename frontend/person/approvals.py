"""``tether approvals``, ``tether approve ID``, ``tether deny ID``: a person's queue of the
questions agents ask (docs/person.md#tether-approvals, docs/tools.md#approvals).

``approvals`` lists the pending approvals of every running guardian (of one workspace with
``--workspace``; resolved ones too with ``--all``) as a table, or ``--json``. ``approve`` and
``deny`` answer one, as ``Agent respond`` does: once (a repeat says what the first answer
did and types nothing), and only while the question is still on screen (``approval_stale``
otherwise). An id may be given by a unique start of it. Nothing here starts a guardian.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from tether.frontend.person.connect import (
    Found,
    ambiguous,
    as_data,
    guardians,
    run_cli,
    workspace_arg,
)
from tether.frontend.person.term import table, visible
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import DEFAULT_RESPOND_WAIT_MS, MAX_APPROVAL_LIST, RPC_SLACK_S
from tether.protocol.method_table import AGENT_APPROVALS, AGENT_RESPOND
from tether.protocol.versions import Capability
from tether.shared.config import Config


async def _listed(entry: Found, pending_only: bool) -> list[dict[str, Any]]:
    if entry.handle is None:
        return []
    entry.handle.require(Capability.APPROVALS)
    listed = await entry.call(AGENT_APPROVALS, {"pending_only": pending_only,
                                                "limit": MAX_APPROVAL_LIST})
    return [dict(a) for a in as_data(listed)["approvals"]]


def _rows(approvals: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for a in approvals:
        request = a["request"]
        asked = " ".join(str(p) for p in (request.get("tool"), request.get("detail")) if p) \
            or str(request.get("question") or request.get("what"))
        options = " | ".join(f"{o['key']} {o['label']}" for o in request.get("options", []))
        state = a["status"] + (f" {a['resolved']['how']}" if a.get("resolved") else "")
        rows.append([a["approval_id"], a["execution_id"], state, str(request.get("what")),
                     asked.splitlines()[0] if asked else "", options or "-"])
    return rows


def main(argv: list[str] | None = None, command: str = "approvals") -> int:
    prog = f"tether {command}"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0]
                                     if __doc__ else None)
    if command == "approvals":
        parser.add_argument("--all", action="store_true", help="resolved approvals too")
        parser.add_argument("--json", action="store_true", help="print the records as JSON")
    else:
        parser.add_argument("approval_id", help="the approval (a unique start of its id will do)")
        parser.add_argument("--timeout", type=float, default=DEFAULT_RESPOND_WAIT_MS / 1000,
                            help="seconds to wait for the question to leave the screen")
    parser.add_argument("--workspace", type=workspace_arg, help="only this workspace's guardian")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env()
    except ValueError as exc:
        print(f"{prog}: {visible(str(exc))}", file=sys.stderr)
        return 2

    async def listing() -> int:
        shown: list[dict[str, Any]] = []
        failed = 0
        async with guardians(config, args.workspace) as found:
            for entry in found:
                try:
                    shown += await _listed(entry, not args.all)
                except TetherError as err:
                    failed += 1
                    print(f"{prog}: {visible(entry.workspace)}: {visible(err.message)} "
                          f"[{err.code.value}]", file=sys.stderr)
        shown.sort(key=lambda a: a["created_at_unix_ms"], reverse=True)
        if args.json:
            print(json.dumps(shown, indent=2))
        elif shown:
            print(table(["APPROVAL", "EXECUTION", "STATE", "WHAT", "ASKS", "OPTIONS"],
                        _rows(shown), max_width=shutil.get_terminal_size().columns))
        else:
            print("no pending approvals" if not args.all else "no approvals")
        return 1 if failed else 0

    async def answer() -> int:
        async with guardians(config, args.workspace) as found:
            candidates: list[tuple[Found, dict[str, Any]]] = []
            for entry in found:
                try:
                    candidates += [(entry, a) for a in await _listed(entry, False)
                                   if str(a["approval_id"]).startswith(args.approval_id)]
                except TetherError:
                    continue  # a guardian too old or gone holds none we can answer
            exact = [(e, a) for e, a in candidates if a["approval_id"] == args.approval_id]
            if exact:
                candidates = exact
            if len(candidates) > 1:
                raise ambiguous(args.approval_id, [a["approval_id"] for _, a in candidates])
            if not candidates:
                raise TetherError(ErrorCode.NOT_FOUND,
                                  f"no approval {args.approval_id!r} in any running guardian")
            entry, approval = candidates[0]
            timeout_ms = int(max(0.0, min(args.timeout, 30.0)) * 1000)
            answered = await entry.call(AGENT_RESPOND, {
                "approval_id": approval["approval_id"], "choice": command,
                "timeout_ms": timeout_ms}, timeout_s=timeout_ms / 1000 + RPC_SLACK_S)
        response = answered.response
        print(visible("  ".join(_rows([dict(as_data(answered)["approval"])])[0])))
        what = "already answered, nothing typed" if answered.replayed else \
            f"typed {' '.join(response.keys)}"
        print(f"{command}: {what}; the question "
              f"{'left the screen' if response.left_approval else 'is still on screen'}")
        return 0 if response.left_approval else 1

    return run_cli(prog, listing if command == "approvals" else answer)


def approve(argv: list[str] | None = None) -> int:
    """``tether approve ID``."""
    return main(argv, "approve")


def deny(argv: list[str] | None = None) -> int:
    """``tether deny ID``."""
    return main(argv, "deny")
