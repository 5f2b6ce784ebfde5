"""``tether guardians``: list, inspect, stop and restart guardians (a person's commands)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import psutil

from tether.frontend.guardians import GuardianLocator, read_info
from tether.frontend.health import process_status
from tether.frontend.person.term import Progress, visible
from tether.protocol.errors import TetherError
from tether.protocol.results import HelloResult, ShutdownResult, read_result
from tether.protocol.transport import GuardianClient
from tether.protocol.versions import Version
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, canonical_workspace, guardian_paths

ANSWER_TIMEOUT_S = 2.0
SIGTERM_WAIT_S = 10.0


def _say(text: str) -> None:
    """Print a line that quotes guardian.json (workspace paths, which agents can choose) with
    its control characters made visible."""
    print(visible(text))


def _all_infos(config: Config) -> list[dict[str, Any]]:
    infos = []
    if config.runtime_dir.is_dir():
        for path in sorted(config.runtime_dir.glob("*/guardian.json")):
            try:
                info = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            ident = ProcessIdentity.from_dict(info)
            info["alive"] = bool(ident and ident.alive())
            infos.append(info)
    return infos


async def _shutdown(info: dict[str, Any], *, dry_run: bool) -> list[str]:
    """Stop the guardian (or, with ``dry_run``, only ask what stopping it would end)."""
    client = GuardianClient(info["endpoint"], info["auth_token"], version=Version(1, 0),
                            instance_id=info["instance_id"])
    try:
        reply = await client.call(
            "guardian.shutdown", {"reason": "tether guardians", "dry_run": dry_run}, timeout_s=5)
        result = read_result("guardian.shutdown", reply)
        assert isinstance(result, ShutdownResult)
        return list(result.running_executions)
    finally:
        client.close()


async def _answers(info: dict[str, Any]) -> bool:
    """Whether the guardian answers a handshake within a moment."""
    client = GuardianClient(info["endpoint"], info["auth_token"], version=Version(1, 0))
    try:
        hello = read_result("hello", await client.call("hello", {}, timeout_s=ANSWER_TIMEOUT_S))
        assert isinstance(hello, HelloResult)
        return bool(hello.instance_id == info["instance_id"])
    except TetherError:
        return False
    finally:
        client.close()


def _wait_gone(ident: ProcessIdentity, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while ident.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stop_by_signal(ident: ProcessIdentity) -> str:
    """Stop a guardian that does not answer, by the identity in guardian.json: each signal
    goes to that very process (pid, create time and boot checked just before), never to
    whatever reuses its pid."""
    if not ident.alive():
        return "it had already exited"
    os.kill(ident.pid, signal.SIGTERM)
    if process_status(ident.pid) == psutil.STATUS_STOPPED and ident.alive():
        os.kill(ident.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM once continued
    if _wait_gone(ident, SIGTERM_WAIT_S):
        return "stopped it with SIGTERM (a clean shutdown: terminals hung up, records finalised)"
    if ident.alive():
        os.kill(ident.pid, signal.SIGKILL)
        _wait_gone(ident, 5)
    return (f"it did not exit within {SIGTERM_WAIT_S:g}s of SIGTERM, so it was killed (SIGKILL); "
            "its running records become unknown (guardian_lost) on the next call")


def _paths(config: Config, workspace: str) -> GuardianPaths:
    return guardian_paths(config, "local", canonical_workspace(workspace))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether guardians")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every guardian of this user")
    for name, help_ in (("status", "one workspace's guardian"),
                        ("stop", "stop a workspace's guardian (ends its terminals)"),
                        ("restart", "stop it and start one of this version")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--workspace", required=True)
        if name in ("stop", "restart"):
            p.add_argument("--yes", action="store_true",
                           help="really stop it, ending every running terminal it holds")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env()
        if args.command == "list":
            for entry in _all_infos(config):
                state = "alive" if entry["alive"] else "gone"
                _say(f"{entry.get('workspace_root')}  protocol {entry.get('protocol')}  "
                      f"pid {entry.get('pid')}  {state}  instance {entry.get('instance_id')}")
            return 0
        paths = _paths(config, args.workspace)
        info = read_info(paths)
        ident = ProcessIdentity.from_dict(info) if info else None
        alive = bool(ident and ident.alive())
        if args.command == "status":
            answering = alive and info is not None and asyncio.run(_answers(info))
            extra = {"answering": answering,
                     "process_status": process_status(ident.pid) if ident else "gone"}
            print(json.dumps({"alive": alive, **extra, **{k: v for k, v in (info or {}).items()
                                                           if k != "auth_token"}}, indent=2))
            return 0 if alive else 1
        if alive and info is not None and ident is not None and not args.yes:
            try:
                running = asyncio.run(_shutdown(info, dry_run=True))
            except TetherError:
                _say(f"The guardian of {args.workspace} (pid {info['pid']}) is alive but does "
                      f"not answer (process status: {process_status(ident.pid)}), so the "
                      "executions stopping it would end cannot be listed. With --yes it is "
                      f"stopped by signal: SIGTERM to pid {info['pid']}, checked to be that "
                      f"very process (SIGCONT too if it is stopped; SIGKILL after "
                      f"{SIGTERM_WAIT_S:g}s). Its terminals end; their records stay readable.")
                return 2
            _say(f"This stops the guardian of {args.workspace} (pid {info['pid']}, protocol "
                  f"{info['protocol']}). Every terminal it holds is hung up, which ends these "
                  f"running executions: {', '.join(running) or 'none'} (and each thread's idle "
                  "shell). Their records and output stay readable. Run again with --yes.")
            return 2
        if alive and info is not None and ident is not None:
            try:
                ended = asyncio.run(_shutdown(info, dry_run=False))
            except TetherError as err:
                outcome = _stop_by_signal(ident)
                _say(f"guardian {info['instance_id']} (pid {info['pid']}) did not answer "
                      f"({err.message}); {outcome}")
            else:
                _say(f"stopped guardian {info['instance_id']}; ended executions: "
                      f"{', '.join(ended) or 'none'}")
                with Progress(f"waiting for guardian pid {ident.pid} to exit"):
                    gone = _wait_gone(ident, SIGTERM_WAIT_S)
                if not gone:
                    _say(f"it is still running after {SIGTERM_WAIT_S:g}s; "
                          f"{_stop_by_signal(ident)}")
        if args.command == "restart":
            async def start() -> dict[str, Any]:
                locator = GuardianLocator(config)
                try:
                    handle = await locator.handle(canonical_workspace(args.workspace))
                    return {"instance_id": handle.instance_id, "protocol": str(handle.version)}
                finally:
                    locator.close()

            with Progress("starting a guardian"):
                started = asyncio.run(start())
            _say(f"started guardian {started['instance_id']} (protocol {started['protocol']})")
        return 0
    except TetherError as err:
        print(f"tether guardians: {visible(err.message)}", file=sys.stderr)
        return 2
