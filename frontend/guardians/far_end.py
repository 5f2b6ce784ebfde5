"""``tether remote``: what a front-end on another machine runs on this host over SSH
(docs/hosts.md#the-far-end).

``ensure`` finds this workspace's guardian, or starts it, exactly as a local front-end does
(the same locator: identity checked, handshake, start lock, reconciliation), then prints its
``guardian.json`` on stdout after a marker. The token travels over the SSH channel, never on a
command line. ``check`` says what this host has. Nothing here stays running: the guardian it
starts is detached, and this process ends at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from typing import Any

from tether.frontend.guardians.locator import GuardianLocator
from tether.frontend.guardians.ssh_link import MARKER
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.versions import known_minor_versions
from tether.shared.config import Config
from tether.shared.console import version
from tether.shared.paths import canonical_workspace, refuse_broad_workspace


async def ensure(principal: str, workspace: str, *, start: bool,
                 thread_id: str | None) -> dict[str, Any]:
    """This host's guardian of ``workspace`` for ``principal`` (started when ``start``), as
    the answer a front-end reads."""
    config = Config.from_env()
    root = refuse_broad_workspace(canonical_workspace(workspace), config)
    locator = GuardianLocator(config, principal)
    try:
        handle = await (locator.handle(root, thread_id) if start else locator.live(root))
        if handle is None:
            return {"ok": True, "version": version(), "workspace_root": root, "guardian": None}
        return {"ok": True, "version": version(), "workspace_root": root,
                "guardian": handle.info, "lost_records": handle.lost_records}
    finally:
        locator.close()


def check() -> dict[str, Any]:
    config = Config.from_env()
    return {"ok": True, "version": version(), "python": platform.python_version(),
            "protocol": str(known_minor_versions()[-1]), "state_home": str(config.state_home),
            "runtime_dir": str(config.runtime_dir), "executable": sys.executable}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tether remote", description="Run by a front-end on another machine over SSH: "
        "find or start a guardian here and print how to reach it. Not for people.")
    sub = parser.add_subparsers(dest="command", required=True)
    found = sub.add_parser("ensure")
    found.add_argument("--principal", default="local")
    found.add_argument("--workspace", required=True)
    found.add_argument("--start", action="store_true")
    found.add_argument("--thread")
    sub.add_parser("check")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            reply = check()
        else:
            reply = asyncio.run(ensure(args.principal, args.workspace, start=args.start,
                                       thread_id=args.thread))
    except TetherError as err:
        reply = {"ok": False, "error": err.to_wire()}
    except Exception as exc:  # the front-end must hear why, not a bare exit status
        reply = {"ok": False, "error": TetherError(
            ErrorCode.INTERNAL, f"tether remote {args.command} failed: {exc!r}").to_wire()}
    print(MARKER + json.dumps(reply), flush=True)
    return 0
