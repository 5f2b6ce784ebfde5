"""``tether serve``: the MCP front-end over stdio, or over streamable HTTP with ``--http``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

import anyio

from tether.frontend.policy.authority import PROFILES, Caller, tools_for
from tether.frontend.transport.mcp_server import build_server
from tether.frontend.transport.stdio import serve as serve_streams
from tether.frontend.transport.stdio import stdio_transport
from tether.protocol.errors import TetherError
from tether.shared.config import Config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether serve", description="Run the MCP server.")
    parser.add_argument("--log-level", default="WARNING", help="stderr log level")
    local = parser.add_argument_group("the local principal (stdio)")
    local.add_argument("--profile", default="full", choices=sorted(PROFILES),
                       help="tools listed and callable (default full)")
    local.add_argument("--allow-tool", action="append", default=None, metavar="TOOL",
                       help="exactly these tools (repeatable; Agent alone observes)")
    http = parser.add_argument_group("streamable HTTP (instead of stdio)")
    http.add_argument("--http", action="store_true", help="serve MCP over streamable HTTP at /mcp")
    http.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    http.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: a free one)")
    http.add_argument("--principals", type=Path, metavar="FILE",
                      help="TOML file of [[principal]] tables: id, token or token_sha256, "
                           "profile, allow_tools?, workspaces? (mode 0600)")
    http.add_argument("--allow-remote", action="store_true",
                      help="allow a --host that is not a loopback address")
    http.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                      help="another Host/Origin name clients use to reach this server")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s tether-serve %(levelname)s %(message)s")
    if not args.http:
        extra = [flag for flag, given in (("--principals", args.principals),
                                          ("--allow-remote", args.allow_remote),
                                          ("--allowed-host", args.allowed_host)) if given]
        if extra:
            parser.error(f"{', '.join(extra)} need --http")
        try:
            caller = Caller("local", args.profile, tools_for(args.profile, args.allow_tool))
        except ValueError as exc:
            parser.error(str(exc))
        return _serve_stdio(caller)
    if args.principals is None:
        parser.error("--http needs --principals FILE (who may connect, with which token)")
    if args.allow_tool is not None or args.profile != "full":
        parser.error("over --http each principal's profile comes from the principals file")
    return _serve_http(args)


def _serve_stdio(caller: Caller) -> int:
    try:
        server = build_server(Config.from_env(), local=caller)
    except (ValueError, TetherError) as exc:
        print(f"tether serve: {exc}", file=sys.stderr)
        return 2

    async def serve() -> None:
        async with stdio_transport() as (read_stream, write_stream):
            await serve_streams(server, read_stream, write_stream,
                                server.create_initialization_options())

    async def run() -> None:
        # MCP clients stop their servers with SIGINT, then SIGTERM (Claude Code does both):
        # either one ends the session at once and quietly, with exit status 0.
        async with anyio.create_task_group() as group:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:

                async def serve_then_stop() -> None:
                    await serve()
                    group.cancel_scope.cancel()

                group.start_soon(serve_then_stop)
                async for signum in signals:
                    logging.getLogger(__name__).info("stopping on %s", signal.Signals(signum).name)
                    # When stdin is not a pipe or socket it is read by a worker thread blocked
                    # in read(), which no cancel can interrupt: waiting for it would keep us
                    # alive until the client closes stdin. Nothing here needs an orderly stop
                    # (terminals live in the guardian), so leave now.
                    logging.shutdown()
                    with contextlib.suppress(OSError, ValueError):
                        sys.stdout.flush()
                    os._exit(0)

    with contextlib.suppress(KeyboardInterrupt):  # a SIGINT before the handler was in place
        anyio.run(run)
    return 0


def _serve_http(args: argparse.Namespace) -> int:
    # Imported here: stdio serving never loads uvicorn.
    from tether.frontend.policy.principals import load_principals
    from tether.frontend.transport.http import HttpOptions, serve

    try:
        config = Config.from_env()
        principals = load_principals(args.principals)
        options = HttpOptions(host=args.host, port=args.port, allow_remote=args.allow_remote,
                              allowed_hosts=tuple(args.allowed_host))
        serve(config, principals, options, args.log_level)
    except (ValueError, TetherError) as exc:
        print(f"tether serve: {exc}", file=sys.stderr)
        return 2
    return 0
