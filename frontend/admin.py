"""``tether guardians``: list, inspect, stop and restart guardians (a person's commands)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from typing import Any

import filelock
import psutil

from tether.frontend.guardians import START_TIMEOUT_S, GuardianLocator, read_info
from tether.frontend.health import process_status
from tether.frontend.person.connect import workspace_arg
from tether.frontend.person.doctor import lock_holders
from tether.frontend.person.term import Progress, visible
from tether.protocol.errors import TetherError
from tether.protocol.results import HelloResult, ShutdownResult, read_result
from tether.protocol.transport import GuardianClient
from tether.protocol.versions import Version
from tether.shared.catalog import Catalog
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, canonical_workspace, guardian_key, guardian_paths
from tether.shared.reconcile import reconcile_lost

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


def _paths(config: Config, root: str) -> GuardianPaths | None:
    """The paths of the guardian of ``root`` (canonical), checked as a guardian checks them
    (R1); None when no guardian was ever started for it here: looking creates nothing."""
    key = guardian_key("local", root)
    if not (config.runtime_dir / key).is_dir() and not (config.state_home / "guardians" / key).is_dir():
        return None
    return guardian_paths(config, "local", root)


def _clear_stale(paths: GuardianPaths | None, root: str) -> tuple[bool, str]:
    """With no live guardian for ``root``: remove the guardian.json of a dead one. Returns
    whether no guardian runs for ``root`` now, and a sentence saying what happened.

    Under the start lock the front-end takes to start a guardian (so none is being started
    meanwhile), the file is read again, and removed only when the process it names is gone
    (pid, create time and boot: never a pid alone, R10) and no process holds guardian.lock
    (which every running guardian holds). As the front-end does before it starts a new one,
    the dead guardian's records still marked running become unknown (guardian_lost) first,
    so that ``tether ls`` and ``show`` tell the truth now rather than after the next start.
    """
    never = f"no guardian was ever started for {root}; nothing to stop"
    if paths is None:
        return True, never
    try:
        with filelock.FileLock(str(paths.start_lock), mode=0o600, timeout=START_TIMEOUT_S):
            info = read_info(paths)
            if not paths.info.exists():
                return True, (f"no guardian is running for {root}; nothing to stop"
                              if paths.catalog.exists() else never)
            ident = ProcessIdentity.from_dict(info) if info else None
            if info is not None and ident is not None and ident.alive():
                return False, (f"a guardian (pid {info['pid']}) started for {root} meanwhile; "
                               "run the command again to stop it")
            holders = lock_holders(paths.lock) if paths.lock.exists() else []
            if holders:
                return False, (f"{paths.info} names no live guardian, but pid "
                               f"{', '.join(map(str, holders))} holds {paths.lock} (a guardian "
                               "starting, or stuck): left as it is; `tether doctor` says more")
            lost: list[dict[str, Any]] = []
            if info is not None and paths.catalog.exists():
                try:
                    catalog = Catalog(paths.catalog)
                    try:
                        lost = reconcile_lost(catalog, paths.journals,
                                              owner=str(info.get("instance_id")))
                    finally:
                        catalog.close()
                except (sqlite3.Error, OSError) as exc:  # a full disk, a damaged catalog
                    return False, (f"{paths.info} names no live guardian, but its catalog "
                                   f"{paths.catalog} cannot be updated ({exc}): left as it is; "
                                   "`tether doctor` says more")
            paths.info.unlink(missing_ok=True)
    except filelock.Timeout:
        return False, (f"a guardian for {root} is being started (its start lock {paths.start_lock} "
                       f"stayed taken for {START_TIMEOUT_S:g}s); try again")
    if info is None:
        return True, (f"no guardian is running for {root}; removed its unreadable "
                      f"{paths.info}")
    return True, (f"no guardian is running for {root}: pid {info.get('pid')} (instance "
                  f"{info.get('instance_id')}) is gone; removed its stale record {paths.info}"
                  + (f"; {len(lost)} of its executions it left running are now unknown "
                     "(guardian_lost)" if lost else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether guardians")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every guardian of this user")
    for name, help_ in (("status", "one workspace's guardian"),
                        ("stop", "stop a workspace's guardian (ends its terminals)"),
                        ("restart", "stop it and start one of this version")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--workspace", required=True, type=workspace_arg,
                       help="workspace root (relative to the current directory, or absolute)")
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
        root = canonical_workspace(args.workspace)
        paths = _paths(config, root)
        info = read_info(paths) if paths is not None else None
        ident = ProcessIdentity.from_dict(info) if info else None
        alive = bool(ident and ident.alive())
        if args.command == "status":
            answering = alive and info is not None and asyncio.run(_answers(info))
            extra = {"answering": answering,
                     "process_status": process_status(ident.pid) if ident else "gone"}
            print(json.dumps({"alive": alive, **extra, **{k: v for k, v in (info or {}).items()
                                                           if k != "auth_token"}}, indent=2))
            return 0 if alive else 1
        if not alive:
            # Nothing to end, so no --yes needed: a stale record is removed, and restart
            # goes on to start a guardian.
            cleared, what = _clear_stale(paths, root)
            _say(what)
            if not cleared:
                return 2
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
                    handle = await locator.handle(root)
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
