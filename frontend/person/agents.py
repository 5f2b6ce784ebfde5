"""``tether agents``: a person's view of a workspace's managed agents (docs/tools.md#trees-and-parents).

``list`` shows the agents and their tree; ``detach ID`` is the person's gesture that makes a
subagent a root agent (it clears the parent and every open label, nothing else: the agent
keeps running); ``archive ID`` archives an agent with its cascade, as the Agent tool does.
Detach is deliberately not an agent tool. ``list`` never starts a guardian: with none
running it reads the workspace's catalog, read-only (the next guardian reconciles it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from tether.frontend.guardians.agent_tree import archive_everywhere
from tether.frontend.guardians.locator import GuardianLocator, read_info
from tether.frontend.person.connect import ambiguous, as_data, workspace_arg
from tether.frontend.person.term import table, visible
from tether.frontend.tools.agent_lifecycle import agent_line
from tether.protocol.errors import TetherError
from tether.protocol.limits import AGENT_RPC_TIMEOUT_S, MAX_AGENT_LIST
from tether.protocol.method_table import AGENT_DETACH, AGENT_LIST
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import canonical_workspace, guardian_paths
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import peek_agents


def _rows(agents: list[dict[str, Any]]) -> list[list[str]]:
    """Agents as table rows in tree order: roots first, each followed by its children."""
    ids = {a["execution_id"] for a in agents}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for entry in sorted(agents, key=lambda a: a["started_unix_ms"]):
        parent = entry.get("parent_execution_id")
        children.setdefault(parent if parent in ids else None, []).append(entry)
    rows: list[list[str]] = []

    def walk(parent: str | None, depth: int) -> None:
        for a in children.get(parent, []):
            state = str(a["agent_state"]) + (f" ({a['attention']})" if a.get("attention") else "")
            rows.append(["  " * depth + a["execution_id"], state + (" archived" if a.get("archived_at")
                                                                    else ""),
                         str(a["generation"]), a.get("parent_execution_id") or "-",
                         a.get("title") or a["command"]])
            walk(a["execution_id"], depth + 1)

    walk(None, 0)
    return rows


def _offline_agents(config: Config, root: str, include_archived: bool) -> list[dict[str, Any]]:
    """The agents in the catalog of a workspace whose guardian is not running, read without
    writing a byte of it."""
    paths = guardian_paths(config, "local", root)
    return peek_agents(paths.catalog, "local", root, include_archived=include_archived,
                       limit=MAX_AGENT_LIST)


async def _with_locator(config: Config, work: Callable[[GuardianLocator], Awaitable[int]]) -> int:
    locator = GuardianLocator(config)
    try:
        return await work(locator)
    finally:
        locator.close()


async def _whole_id(locator: GuardianLocator, root: str, scope: dict[str, Any],
                    given: str) -> str:
    """The agent id ``given`` names: itself when an agent has it, else the one agent whose
    id starts with it (as git and docker take ids); a start of several is refused with the
    candidates; a start of none is left for the guardian to call ``not_found``."""
    listed = await locator.call(root, AGENT_LIST, {
        **scope, "include_archived": True, "limit": MAX_AGENT_LIST},
        timeout_s=AGENT_RPC_TIMEOUT_S)
    ids = sorted(str(a["execution_id"]) for a in as_data(listed)["agents"])
    if given in ids:
        return given
    matches = [i for i in ids if i.startswith(given)]
    if len(matches) > 1:
        raise ambiguous(given, matches)
    return matches[0] if matches else given


def main(argv: list[str] | None = None) -> int:
    from tether.frontend.person.hosts import on_host

    # --host H: the same command, run on H over SSH (docs/hosts.md#a-fleet-seen-as-one).
    if (remote := on_host("agents", sys.argv[2:] if argv is None else argv)) is not None:
        return remote
    parser = argparse.ArgumentParser(prog="tether agents", description=__doc__.splitlines()[0]
                                     if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="the workspace's agents, as a tree")
    listing.add_argument("--all", action="store_true", help="include archived agents")
    listing.add_argument("--json", action="store_true", help="print the records as JSON")
    for name, help_ in (("detach", "make a subagent a root agent (clears parent and open labels)"),
                        ("archive", "archive an agent and, in cascade, its subagents")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("execution_id")
    for p in sub.choices.values():
        p.add_argument("--workspace", default=os.getcwd(), type=workspace_arg,
                       help="workspace root (default: the current directory)")
    args = parser.parse_args(argv)
    try:
        config = Config.from_env()
        root = canonical_workspace(args.workspace)
    except (ValueError, TetherError) as exc:
        print(f"tether agents: {visible(str(exc))}", file=sys.stderr)
        return 2
    scope = {"principal": "local", "workspace_root": root}

    async def work(locator: GuardianLocator) -> int:
        if args.command == "list":
            info = read_info(guardian_paths(config, "local", root))
            ident = ProcessIdentity.from_dict(info) if info else None
            if ident is not None and ident.alive():
                listed = await locator.call(root, AGENT_LIST, {
                    **scope, "include_archived": args.all, "limit": MAX_AGENT_LIST},
                    timeout_s=AGENT_RPC_TIMEOUT_S)
                agents = list(as_data(listed)["agents"])  # printed as they came
            else:
                try:
                    agents = _offline_agents(config, root, args.all)
                except StoreError as exc:
                    print(f"tether agents: cannot read the catalog of {visible(root)}: "
                          f"{visible(str(exc))}", file=sys.stderr)
                    return 2
            if args.json:
                print(json.dumps(agents, indent=2))
            elif agents:
                print(table(["AGENT", "STATE", "GEN", "PARENT", "COMMAND"], _rows(agents),
                            max_width=shutil.get_terminal_size().columns))
            else:
                print(f"no agents in {visible(root)}")
            return 0
        args.execution_id = await _whole_id(locator, root, scope, args.execution_id)
        if args.command == "detach":
            detached = await locator.call(root, AGENT_DETACH, {
                **scope, "execution_id": args.execution_id}, timeout_s=AGENT_RPC_TIMEOUT_S)
            print(f"detached: {visible(agent_line(as_data(detached)['agent']))}")  # has its title
            return 0
        done = await archive_everywhere(locator, root, args.execution_id)
        print(f"archived: {visible(', '.join(done.archived))}")
        print(f"detached: {visible(', '.join(done.detached) or 'none')}")
        return 0

    try:
        return asyncio.run(_with_locator(config, work))
    except TetherError as err:
        print(f"tether agents: {err.code.value}: {visible(err.message)}", file=sys.stderr)
        return 2
