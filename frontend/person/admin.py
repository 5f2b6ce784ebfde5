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

import filelock
import psutil

from tether.frontend.guardians.health import process_status
from tether.frontend.guardians.locator import START_TIMEOUT_S, GuardianLocator, ask, read_info
from tether.frontend.person.connect import workspace_arg
from tether.frontend.person.doctor import lock_holders
from tether.frontend.person.term import Progress, visible
from tether.frontend.person.upgrades import RESTART_ASKED, upgrade
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.method_table import GUARDIAN_SHUTDOWN, HELLO
from tether.protocol.transport import GuardianClient
from tether.protocol.versions import Version
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import GuardianPaths, canonical_workspace, guardian_key, guardian_paths
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import left_running

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
        result = await ask(client, GUARDIAN_SHUTDOWN,
                           {"reason": "tether guardians", "dry_run": dry_run}, timeout_s=5)
        return list(result.running_executions)
    finally:
        client.close()


async def _answers(info: dict[str, Any]) -> bool:
    """Whether the guardian answers a handshake within a moment."""
    client = GuardianClient(info["endpoint"], info["auth_token"], version=Version(1, 0))
    try:
        hello = await ask(client, HELLO, {}, timeout_s=ANSWER_TIMEOUT_S)
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
            "its running records become unknown (guardian_lost) when the next guardian starts")


def _paths(config: Config, root: str, principal: str) -> GuardianPaths | None:
    """The paths of the guardian of ``root`` (canonical) for ``principal``, checked as a
    guardian checks them (docs/security.md#state-and-runtime-directories); None when no guardian was ever
    started for it here: looking
    creates nothing."""
    key = guardian_key(principal, root)
    if not (config.runtime_dir / key).is_dir() and not (config.state_home / "guardians" / key).is_dir():
        return None
    return guardian_paths(config, principal, root)


def _clear_stale(paths: GuardianPaths | None, root: str) -> tuple[bool, str]:
    """With no live guardian for ``root``: remove the guardian.json of a dead one. Returns
    whether no guardian runs for ``root`` now, and a sentence saying what happened.

    Under the start lock the front-end takes to start a guardian (so none is being started
    meanwhile), the file is read again, and removed only when the process it names is gone
    (pid, create time and boot: never a pid alone, docs/protocol.md#identity) and no process holds
    guardian.lock
    (which every running guardian holds). The catalog is only read: the dead guardian's
    records still marked running become unknown (guardian_lost) when the next guardian of
    ``root`` starts, and ``tether ls`` and ``show`` already show them so.
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
            lost: int | str = 0
            if info is not None:
                try:
                    lost = left_running(paths.catalog, str(info.get("instance_id")))
                except (StoreError, OSError):  # a log only a guardian recovers, a damaged file
                    lost = "any"
            paths.info.unlink(missing_ok=True)
    except filelock.Timeout:
        return False, (f"a guardian for {root} is being started (its start lock {paths.start_lock} "
                       f"stayed taken for {START_TIMEOUT_S:g}s); try again")
    if info is None:
        return True, (f"no guardian is running for {root}; removed its unreadable "
                      f"{paths.info}")
    return True, (f"no guardian is running for {root}: pid {info.get('pid')} (instance "
                  f"{info.get('instance_id')}) is gone; removed its stale record {paths.info}"
                  + (f"; {lost} of its executions it left running become unknown "
                     "(guardian_lost) when the next guardian starts" if lost else ""))


def _stop(config: Config, root: str, principal: str, *, yes: bool) -> int:
    """``stop`` (and the first half of ``restart``) for the guardian of ``root`` serving
    ``principal``: without ``yes``, only say what stopping it would end. Returns the exit
    status (2 when nothing was stopped because ``yes`` was not given, or it could not be)."""
    paths = _paths(config, root, principal)
    info = read_info(paths) if paths is not None else None
    ident = ProcessIdentity.from_dict(info) if info else None
    alive = bool(ident and ident.alive())
    if not alive:
        # Nothing to end, so no --yes needed: a stale record is removed, and restart goes on
        # to start a guardian.
        cleared, what = _clear_stale(paths, root)
        _say(what)
        return 0 if cleared else 2
    assert info is not None and ident is not None
    # A stopped guardian answers nothing: asking it would only wait out the timeout.
    stopped = process_status(ident.pid) == psutil.STATUS_STOPPED
    if not yes:
        try:
            if stopped:
                raise TetherError(ErrorCode.GUARDIAN_UNRESPONSIVE, "stopped")
            running = asyncio.run(_shutdown(info, dry_run=True))
        except TetherError:
            _say(f"The guardian of {root} (pid {info['pid']}) is alive but does not answer "
                 f"(process status: {process_status(ident.pid)}), so the executions stopping "
                 "it would end cannot be listed. With --yes it is stopped by signal: SIGTERM "
                 f"to pid {info['pid']}, checked to be that very process (SIGCONT too if it is "
                 f"stopped; SIGKILL after {SIGTERM_WAIT_S:g}s). Its terminals end; their "
                 "records stay readable.")
            return 2
        _say(f"This stops the guardian of {root} (pid {info['pid']}, protocol "
             f"{info['protocol']}). Every terminal it holds is hung up, which ends these running "
             f"executions: {', '.join(running) or 'none'} (and each thread's idle shell). Their "
             "records and output stay readable. Run again with --yes.")
        return 2
    try:
        if stopped:
            raise TetherError(ErrorCode.GUARDIAN_UNRESPONSIVE,
                              "it is stopped (SIGSTOP or Ctrl-Z)")
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
            _say(f"it is still running after {SIGTERM_WAIT_S:g}s; {_stop_by_signal(ident)}")
    return 0


def _stop_all(config: Config, principal: str | None, *, yes: bool) -> int:
    """``stop --all``: every guardian that announced itself (of ``principal`` only, when
    given), HTTP principals' too; each as ``stop --workspace`` would."""
    infos = [info for info in _all_infos(config)
             if principal is None or (info.get("principal") or "local") == principal]
    if not infos:
        _say("no guardian is running" + (f" for principal {principal}" if principal else "")
             + "; nothing to stop")
        return 0
    statuses = []
    for info in infos:
        root = info.get("workspace_root")
        if not isinstance(root, str):
            _say(f"a guardian.json without a workspace_root (pid {info.get('pid')}): left as "
                 "it is; `tether doctor` says more")
            statuses.append(2)
            continue
        statuses.append(_stop(config, root, str(info.get("principal") or "local"), yes=yes))
    return max(statuses)


def _status_text(root: str, principal: str, facts: dict[str, Any]) -> str:
    """``guardians status`` for a person: one line of what it is doing, then its facts."""
    who = "" if principal == "local" else f" (principal {principal})"
    if not facts.get("pid"):
        return f"no guardian is running for {root}{who}"
    if not facts["alive"]:
        head = f"the guardian of {root}{who} is gone (pid {facts['pid']} exited)"
    elif facts["answering"]:
        head = f"the guardian of {root}{who} is running and answering"
    else:
        head = (f"the guardian of {root}{who} is alive but does not answer "
                f"(process status: {facts['process_status']})")
    shown = ("pid", "instance_id", "protocol", "endpoint", "principal", "started_unix_ms")
    lines = [head] + [f"  {key}: {'-' if facts.get(key) is None else facts[key]}"
                      for key in shown if key in facts]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("guardians", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether guardians",
        description="List, inspect, stop and restart guardians. A guardian serves one "
        "workspace for one principal (`local` for `tether serve` over stdio, or a principal "
        "of `tether serve --http`); --principal names another than local.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every guardian of this user (every principal)")
    up = sub.add_parser("upgrade", help="hand a guardian over to the installed code, keeping "
                        "every terminal (a guardian too old for that: only with --restart)")
    where = up.add_mutually_exclusive_group(required=True)
    where.add_argument("--workspace", type=workspace_arg,
                       help="workspace root (relative to the current directory, or absolute)")
    where.add_argument("--all", action="store_true",
                       help="every guardian that announced itself, of every principal (of "
                       "--principal only, when given)")
    up.add_argument("--principal", help="the principal the guardian serves (default: local)")
    up.add_argument("--dry-run", action="store_true",
                    help="only try the installed code on the guardian's state; change nothing")
    up.add_argument("--restart", action="store_true",
                    help="a guardian too old to hand itself over is restarted (with --yes), "
                    "which ends its running terminals")
    up.add_argument("--yes", action="store_true", help="with --restart: really restart it")
    for name, help_ in (("status", "one workspace's guardian"),
                        ("stop", "stop a workspace's guardian, or with --all every guardian "
                                 "(ends their terminals)"),
                        ("restart", "stop it and start one of this version")):
        p = sub.add_parser(name, help=help_)
        workspace_help = "workspace root (relative to the current directory, or absolute)"
        if name == "stop":
            where = p.add_mutually_exclusive_group(required=True)
            where.add_argument("--workspace", type=workspace_arg, help=workspace_help)
            where.add_argument("--all", action="store_true",
                               help="every guardian that announced itself, of every principal "
                               "(of --principal only, when given)")
        else:
            p.add_argument("--workspace", required=True, type=workspace_arg, help=workspace_help)
        p.add_argument("--principal", help="the principal the guardian serves (default: "
                       "local; with stop --all, every principal)")
        if name in ("stop", "restart"):
            p.add_argument("--yes", action="store_true",
                           help="really stop it, ending every running terminal it holds")
        if name == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env()
        if args.command == "list":
            entries = _all_infos(config)
            if not entries:
                _say(f"no guardian has announced itself in {config.runtime_dir} (one starts "
                     "with the first tool call in a workspace)")
            for entry in entries:
                state = "alive" if entry["alive"] else "gone"
                who = entry.get("principal") or "local"
                _say(f"{entry.get('workspace_root')}  protocol {entry.get('protocol')}  "
                     f"pid {entry.get('pid')}  {state}  instance {entry.get('instance_id')}"
                     + ("" if who == "local" else f"  principal {who}"))
            return 0
        if args.command == "stop" and args.all:
            return _stop_all(config, args.principal, yes=args.yes)
        if args.command == "upgrade":
            return _upgrade_command(config, args)
        principal = args.principal or "local"
        root = canonical_workspace(args.workspace)
        if args.command == "status":
            paths = _paths(config, root, principal)
            info = read_info(paths) if paths is not None else None
            ident = ProcessIdentity.from_dict(info) if info else None
            alive = bool(ident and ident.alive())
            status = process_status(ident.pid) if ident else "gone"
            answering = (alive and info is not None and status != psutil.STATUS_STOPPED
                         and asyncio.run(_answers(info)))
            facts = {"alive": alive, "answering": answering, "process_status": status,
                     **{k: v for k, v in (info or {}).items() if k != "auth_token"}}
            if args.json:
                print(json.dumps(facts, indent=2))
            else:
                _say(_status_text(root, principal, facts))
            return 0 if alive else 1
        stopped = _stop(config, root, principal, yes=args.yes)
        if args.command == "stop" or stopped != 0:
            return stopped
        return _start(config, root, principal)
    except TetherError as err:
        print(f"tether guardians: {visible(err.message)}", file=sys.stderr)
        return 2


def _start(config: Config, root: str, principal: str) -> int:
    """Start the guardian of ``root`` with this version (the second half of ``restart``)."""

    async def start() -> dict[str, Any]:
        locator = GuardianLocator(config, principal)
        try:
            handle = await locator.handle(root)
            return {"instance_id": handle.instance_id, "protocol": str(handle.version)}
        finally:
            locator.close()

    with Progress("starting a guardian"):
        started = asyncio.run(start())
    _say(f"started guardian {started['instance_id']} (protocol {started['protocol']})")
    return 0


def _upgrade_command(config: Config, args: argparse.Namespace) -> int:
    """``upgrade --workspace`` or ``--all``: each guardian handed over to the installed code
    (docs/protocol.md#live-upgrade); one too old for that restarted only with --restart --yes."""
    if args.all:
        targets = [(str(info["workspace_root"]), str(info.get("principal") or "local"))
                   for info in _all_infos(config) if info.get("alive")
                   and isinstance(info.get("workspace_root"), str)
                   and (args.principal is None or (info.get("principal") or "local")
                        == args.principal)]
        if not targets:
            _say("no guardian is running; nothing to upgrade")
            return 0
    else:
        targets = [(canonical_workspace(args.workspace), args.principal or "local")]
    statuses = []
    for root, principal in targets:
        paths = _paths(config, root, principal)
        if paths is None:
            _say(f"no guardian was ever started for {root}; nothing to upgrade")
            statuses.append(0)
            continue
        with Progress(f"upgrading the guardian of {root}"):
            outcome = asyncio.run(upgrade(paths, root, dry_run=args.dry_run,
                                          restart=args.restart, yes=args.yes))
        if outcome.status == RESTART_ASKED:
            stopped = _stop(config, root, principal, yes=True)
            statuses.append(stopped if stopped else _start(config, root, principal))
            continue
        _say(outcome.text)
        statuses.append(outcome.status)
    return max(statuses)
