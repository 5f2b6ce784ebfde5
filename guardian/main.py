"""``tether guardian`` / ``tether-guardian``: run a guardian in the foreground.

The front-end normally starts it as ``tether-guardian <workspace>``, so that ``ps`` names it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from tether.guardian import lean  # noqa: F401  (first: before anything imports asyncio)
from tether.guardian.rpc.daemon import Guardian
from tether.guardian.rpc.handoff import dry_run, load_document
from tether.guardian.runtime.handover import HandoverError
from tether.protocol.errors import TetherError
from tether.protocol.versions import Version, known_minor_versions
from tether.shared.config import Config
from tether.shared.paths import canonical_workspace, guardian_paths, refuse_broad_workspace


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="tether guardian")
    parser.add_argument("workspace_arg", nargs="?", metavar="WORKSPACE",
                        help="workspace root this guardian serves")
    parser.add_argument("--workspace", help="the same, as an option")
    parser.add_argument("--principal", default="local", help="principal (default: local)")
    parser.add_argument(
        "--protocol",
        help="advertise and honour exactly this older protocol version, e.g. 1.0 "
        f"(known: {', '.join(str(v) for v in known_minor_versions())})",
    )
    # A live upgrade (docs/protocol.md#live-upgrade): the guardian before, this very process,
    # re-executes itself with this code and names the state it left.
    parser.add_argument("--handover", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    workspace_arg = args.workspace or args.workspace_arg
    if not workspace_arg:
        parser.error("a workspace root is required")
    set_process_name("tether-guardian")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    try:
        version = Version.parse(args.protocol) if args.protocol else None
        if version is not None and version not in known_minor_versions():
            raise ValueError(f"unknown protocol version {version}")
        config = Config.from_env()
        workspace = refuse_broad_workspace(canonical_workspace(workspace_arg), config)
        handed = load_document(args.handover) if args.handover else None
        if args.dry_run:
            if handed is None:
                raise ValueError("--dry-run needs --handover")
            report = dry_run(handed, guardian_paths(config, args.principal, workspace), config)
            print(json.dumps(report))
            return 0
        guardian = Guardian(
            config=config, principal=args.principal, workspace_root=workspace,
            protocol=version, handover=handed,
        )
    except (ValueError, TetherError, OSError, HandoverError) as exc:
        print(f"tether guardian: {exc}", file=sys.stderr)
        return 2
    return guardian.run()


def set_process_name(name: str) -> None:
    """Set the kernel's short process name (``ps -o comm``, ``pgrep``, ``top``): 15 bytes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_name = 15
        libc.prctl(pr_set_name, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the command line still names the script
