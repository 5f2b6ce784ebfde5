"""``tether serve``: the MCP front-end over stdio."""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from tether.frontend.server import build_server
from tether.frontend.stdio import stdio_transport
from tether.protocol.errors import TetherError
from tether.shared.config import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether serve", description="Run the MCP server.")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s tether-serve %(levelname)s %(message)s")
    try:
        server = build_server(Config.from_env())
    except (ValueError, TetherError) as exc:
        print(f"tether serve: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        async with stdio_transport() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(run)
    return 0
