"""``tether ls``: guardians, their threads and executions, as tables (or ``--json``).

A guardian that is gone is listed from the catalog it left, read-only (``offline.py``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import time
from typing import Any

import psutil

from tether.frontend.person.connect import Found, as_data, guardians, run_cli, workspace_arg
from tether.frontend.person.offline import list_on_disk
from tether.frontend.person.term import Progress, table, visible
from tether.protocol.errors import TetherError
from tether.protocol.limits import MAX_WORKSPACE_LIST
from tether.protocol.method_table import WORKSPACE_LIST
from tether.shared.config import Config
from tether.shared.store.store_errors import StoreError

DEFAULT_LIMIT = 20
#: Exit status when some guardian could not be looked into (gone, stopped, too old): the
#: rest is listed all the same, and each such guardian's line says why and what to do.
EXIT_INCOMPLETE = 1
#: What a gone guardian's line says: where its listing comes from, and what to do.
GONE = "guardian.json names a process that is gone"
CLEAR = "`tether doctor` says how to clear it"


def age(ms: float | None, now_ms: float) -> str:
    """A short human age: 42s, 5m, 3h, 2d."""
    if not isinstance(ms, int | float):
        return "-"
    seconds = max(0.0, (now_ms - ms) / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def state_of(record: dict[str, Any]) -> str:
    state = str(record.get("status"))
    if record.get("agent_state"):
        state += f"/{record['agent_state']}"
    if record.get("status") == "unknown" and record.get("reason"):
        state += f" ({record['reason']})"
    return state


def what_of(record: dict[str, Any]) -> str:
    """The agent's title when it has one, else the command line."""
    return str(record.get("title") or record.get("command") or "")


def guardian_facts(entry: Found, now_ms: float) -> dict[str, Any]:
    info = entry.info
    facts: dict[str, Any] = {
        "workspace_root": info.get("workspace_root"), "principal": info.get("principal"),
        "pid": info.get("pid"), "protocol": info.get("protocol"),
        "instance_id": info.get("instance_id"), "alive": entry.alive,
        "started_unix_ms": info.get("started_unix_ms"), "rss_bytes": None,
    }
    if entry.handle is not None:
        facts["protocol"] = str(entry.handle.version)
        facts["capabilities"] = sorted(entry.handle.capabilities)
    if entry.alive:
        with contextlib.suppress(psutil.Error, KeyError, ValueError):
            facts["rss_bytes"] = psutil.Process(int(info["pid"])).memory_info().rss
    return facts


async def collect(config: Config, workspace: str | None, limit: int) -> list[dict[str, Any]]:
    out = []
    async with guardians(config, workspace) as found:
        for entry in found:
            item: dict[str, Any] = {"guardian": guardian_facts(entry, time.time() * 1000)}
            if not entry.alive:
                item.update(await gone(entry, limit))
            else:
                try:
                    listing = as_data(await entry.call(WORKSPACE_LIST, {"limit": limit}))
                    item.update(threads=listing["threads"], executions=listing["executions"],
                                counts=listing["counts"])
                except TetherError as err:
                    item["error"] = err.to_wire()
            out.append(item)
    return out


async def gone(entry: Found, limit: int) -> dict[str, Any]:
    """A gone guardian's item: what its catalog holds, read from disk (``source: disk``), or
    why it could not be read. Either way ``error`` says it is gone (``guardian_gone``), for
    the exit status and for scripts that look for it."""
    catalog = entry.paths.state / "catalog.sqlite3"
    try:
        found = await asyncio.to_thread(list_on_disk, entry.paths.state, entry.scope(), limit)
    except (StoreError, OSError, ValueError) as err:
        why = f"its catalog {catalog} could not be read ({err})"
    else:
        if found is not None:
            listing = as_data(found)
            return {"threads": listing["threads"], "executions": listing["executions"],
                    "counts": listing["counts"], "source": "disk",
                    "error": {"code": "guardian_gone",
                              "message": f"{GONE}; what is listed was read from its files on "
                                         f"disk; {CLEAR}"}}
        why = f"it left no catalog ({catalog})"
    return {"error": {"code": "guardian_gone", "message": f"{GONE}; {why}; {CLEAR}"}}


def _shell(thread: dict[str, Any]) -> str:
    if not thread["shell_alive"]:
        return "no shell"
    return "shell busy" if thread["shell_busy"] else "shell idle"


def render(items: list[dict[str, Any]], now_ms: float, width: int) -> str:
    if not items:
        return "no guardians (a guardian starts with the first MCP call for a workspace)"
    blocks = []
    for item in items:
        g = item["guardian"]
        rss = f"{g['rss_bytes'] / 1e6:.0f} MB" if g.get("rss_bytes") else "-"
        head = (f"{g['workspace_root']}  pid {g['pid']}  protocol {g['protocol']}  "
                f"up {age(g.get('started_unix_ms'), now_ms)}  rss {rss}")
        if not g["alive"]:
            head = f"{g['workspace_root']}  pid {g['pid']}  GONE"
        if item.get("source") == "disk":
            head += f": read from its files on disk; {CLEAR}"
        # Lines built here hold paths and guardian answers: made visible whole (the table
        # makes its own cells visible).
        lines = [visible(head)]
        if "threads" not in item:
            lines.append(f"  {visible(item['error']['message'])}")
        else:
            threads = item["threads"]
            counts = item.get("counts", {})
            shells = ", ".join(f"{t['thread_id']} ({_shell(t)})" for t in threads)
            records = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
            lines.append(visible(f"  threads {len(threads)}: {shells}  records {records}"))
            rows = [[r["execution_id"], r["kind"], state_of(r),
                     "-" if r.get("exit_code") is None else str(r["exit_code"]),
                     age(r.get("started_unix_ms"), now_ms), r["thread_id"], what_of(r)]
                    for r in item["executions"]]
            if rows:
                body = table(["ID", "KIND", "STATE", "EXIT", "AGE", "THREAD", "COMMAND"], rows,
                             max_width=width - 2)
                lines += ["  " + line for line in body.splitlines()]
            else:
                lines.append("  no executions")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


async def on_hosts(config: Config, everything: bool) -> list[dict[str, Any]]:
    """``tether ls --json`` of every host this user's front-ends have reached, run there
    over SSH, each guardian named by its ``ssh://`` workspace; a host that cannot be asked
    is an item of its own saying why."""
    from tether.frontend.guardians.ssh_link import known_hosts
    from tether.frontend.person.hosts import link_for

    async def one(name: str) -> list[dict[str, Any]]:
        try:
            link = link_for(name, config)
            done = await link.run(link.tether_argv(["ls", "--json", *(["--all"] if everything
                                                                      else [])]),
                                  timeout_s=60, what="ls")
            items = json.loads(done.stdout)
            if not isinstance(items, list):
                raise ValueError("not a list")
        except (TetherError, ValueError) as err:
            message = err.message if isinstance(err, TetherError) else (
                f"`tether ls --json` there printed no listing ({err})")
            return [{"guardian": {"workspace_root": f"ssh://{name}", "host": name, "pid": "?",
                                  "protocol": "?", "alive": True},
                     "error": {"code": "host_unreachable", "message": message}}]
        for item in items:
            guardian = item.get("guardian", {})
            guardian["host"] = name
            guardian["workspace_root"] = f"ssh://{name}{guardian.get('workspace_root')}"
        return items

    found = await asyncio.gather(*(one(h.name) for h in known_hosts(config.state_home)))
    return [item for items in found for item in items]


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    if (remote := on_host("ls", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(
        prog="tether ls", description="List guardians, their threads and executions (a gone "
        "guardian's read from the files it left, read-only). Exit status "
        f"{EXIT_INCOMPLETE} when some guardian could not be looked into (gone, stopped, too "
        "old); its line says why and what to do.")
    parser.add_argument("--workspace", type=workspace_arg, help="only this workspace's guardian")
    parser.add_argument("--all", action="store_true",
                        help=f"every retained record (up to {MAX_WORKSPACE_LIST} per guardian), "
                        f"not only the newest {DEFAULT_LIMIT}")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--host", help="list the guardians of this host instead, over SSH "
                        "([user@]host[:port], as your ssh configuration knows it)")
    parser.add_argument("--all-hosts", action="store_true",
                        help="this machine's guardians and those of every host this user's "
                        "front-ends have reached (`tether hosts ls`)")
    args = parser.parse_args(argv)

    async def body() -> int:
        config = Config.from_env()
        limit = MAX_WORKSPACE_LIST if args.all else DEFAULT_LIMIT
        with Progress("asking guardians"):
            items = await collect(config, args.workspace, limit)
            if args.all_hosts:
                items += await on_hosts(config, args.all)
        if args.json:
            print(json.dumps(items, indent=2, default=str))
        else:
            # Cut long commands to the terminal's width; into a pipe, keep them whole.
            cols = shutil.get_terminal_size().columns if sys.stdout.isatty() else 100_000
            print(render(items, time.time() * 1000, cols))
        # What it could not look into is said above; the status says it too, for scripts.
        return EXIT_INCOMPLETE if any("error" in item for item in items) else 0

    return run_cli("tether ls", body)
