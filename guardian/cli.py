"""``tether guardian``: run a guardian in the foreground (the front-end normally starts it)."""

from __future__ import annotations

import argparse
import logging
import sys

from guardian.daemon import Guardian
from protocol.errors import TetherError
from protocol.versions import Version, known_minor_versions
from shared.config import Config
from shared.paths import canonical_workspace


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="tether guardian")
    parser.add_argument("--workspace", required=True, help="workspace root this guardian serves")
    parser.add_argument("--principal", default="local", help="principal (default: local)")
    parser.add_argument(
        "--protocol",
        help="advertise and honour exactly this older protocol version, e.g. 1.0 "
        f"(known: {', '.join(str(v) for v in known_minor_versions())})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"
    )
    try:
        version = Version.parse(args.protocol) if args.protocol else None
        if version is not None and version not in known_minor_versions():
            raise ValueError(f"unknown protocol version {version}")
        workspace = canonical_workspace(args.workspace)
        guardian = Guardian(
            config=Config.from_env(), principal=args.principal, workspace_root=workspace,
            protocol=version,
        )
    except (ValueError, TetherError) as exc:
        print(f"tether guardian: {exc}", file=sys.stderr)
        return 2
    return guardian.run()
