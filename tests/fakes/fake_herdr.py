#!/usr/bin/env python3
"""A scripted stand-in for Herdr's CLI (0.8.0: ``docs/next`` of ogulcancelik/herdr), for the
Herdr backend's tests.

It answers what the real CLI prints, in the same shapes: one line of JSON ``{"id", "result"}``
on stdout (``agent list``, ``get``, ``prompt``, ``wait``, ``pane run``), the terminal text
itself (``agent read``), the explain object (``agent explain --json``); an error as
``{"id", "error": {"code", "message"}}`` on stderr with exit status 1; a usage error as text
with exit status 2 (any command it does not have, such as ``agent start``, ``agent attach``,
``server`` or the 0.7.4 ``agent send``).

Its "server" is the JSON file at ``HERDR_SOCKET_PATH``, which the test writes and may
rewrite while a wait polls it::

    {"agents": [AgentInfo, ...], "screens": {pane_id: text}, "explain": {...},
     "switches": {"hang": [command, ...], "flood": [...], "flood_stderr": [...],
                  "other_terminal": [...], "fail": {command: exit_status}}}

where a command is ``"agent prompt"``, ``"agent list"``, ... With ``"cli": "0.7.4"`` it is
the older CLI instead (docs/versions/0.7.4): ``agent send <target> <text>`` (literal text,
no Enter) in place of ``agent prompt``, and ``agent wait <target> --status S``.

Every run appends one JSON line to ``<socket>.log`` first: its argv, its ``HERDR_*``
variables, the names of all variables, and its parent's command line.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, NoReturn

STATES = ("idle", "working", "blocked", "done", "unknown")


def _out(value: Any) -> None:
    sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _error(request: str, code: str, message: str) -> NoReturn:
    sys.stderr.write(json.dumps({"id": request, "error": {"code": code, "message": message}},
                                separators=(",", ":")) + "\n")
    sys.exit(1)


def _usage(text: str) -> NoReturn:
    sys.stderr.write(text + "\n")
    sys.exit(2)


def _parent_cmdline() -> list[str]:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as fh:
            return [part.decode(errors="replace") for part in fh.read().split(b"\0") if part]
    except OSError:
        return []


def _load(socket: str) -> dict[str, Any]:
    with open(socket, encoding="utf-8") as fh:
        world: dict[str, Any] = json.load(fh)
    return world


def main(argv: list[str]) -> None:
    socket = os.environ.get("HERDR_SOCKET_PATH", "")
    command = " ".join(argv[:2])
    if socket:
        with open(socket + ".log", "a", encoding="utf-8") as log:
            log.write(json.dumps({
                "argv": argv, "herdr_env": {k: v for k, v in os.environ.items()
                                            if k.startswith("HERDR_")},
                "env_names": sorted(os.environ), "parent": _parent_cmdline(),
                "pid": os.getpid()}) + "\n")
    if not socket or not os.path.exists(socket):
        _error("cli", "server_not_running", "herdr server is not running")
    world = _load(socket)
    switches = world.get("switches", {})
    if command in switches.get("hang", []):
        time.sleep(3600)
    if command in switches.get("flood", []):
        sys.stdout.write("x" * (70 * 1024))
        sys.stdout.flush()
    if command in switches.get("flood_stderr", []):
        sys.stderr.write("e" * (20 * 1024))
        sys.stderr.flush()
    failing = switches.get("fail", {})
    if command in failing:
        sys.stderr.write(json.dumps({"id": "cli", "error": {
            "code": "internal", "message": "scripted failure"}}) + "\n")
        sys.exit(int(failing[command]))
    if argv[:1] == ["agent"] and world.get("cli") == "0.7.4":
        _legacy_agent(world, argv[1:], socket=socket)
    elif argv[:1] == ["agent"]:
        _agent(world, argv[1:], other=command in switches.get("other_terminal", []),
               socket=socket)
    elif argv[:2] == ["pane", "run"] and len(argv) == 4:
        _out({"id": "cli:pane:run", "result": {"type": "ok"}})
    else:
        _usage("herdr: unknown command; see herdr --help")


def _find(world: dict[str, Any], target: str, request: str) -> dict[str, Any]:
    """An agent by its name or its pane id, as Herdr 0.7.5+ resolves targets (terminal ids
    are not agent targets)."""
    for agent in world.get("agents", []):
        if target in (agent.get("name"), agent.get("pane_id")):
            return dict(agent)
    _error(request, "agent_not_found", f"agent target {target} not found")


def _shown(agent: dict[str, Any], other: bool) -> dict[str, Any]:
    return {**agent, "terminal_id": "term_someone_else"} if other else agent


def _agent(world: dict[str, Any], args: list[str], *, other: bool, socket: str) -> None:
    sub, rest = (args[0], args[1:]) if args else ("", [])
    if sub == "list" and not rest:
        _out({"id": "cli:agent:list", "result": {"type": "agent_list", "agents": [
            _shown(a, other) for a in world.get("agents", [])]}})
    elif sub == "get" and len(rest) == 1:
        found = _find(world, rest[0], "cli:agent:get")
        _out({"id": "cli:agent:get", "result": {"type": "agent_info",
                                                 "agent": _shown(found, other)}})
    elif sub == "read" and rest:
        _read(world, rest)
    elif sub == "explain" and rest:
        found = _find(world, rest[0], "cli:agent:explain")
        explain = world.get("explain", {"agent": found.get("agent"),
                                        "state": found["agent_status"]})
        if "--json" in rest[1:]:
            sys.stdout.write(json.dumps(explain) + "\n")
        else:
            sys.stdout.write(f"agent: {explain.get('agent')}\nstate: {explain.get('state')}\n")
    elif sub == "prompt" and len(rest) >= 2:
        if rest[2:]:
            _usage("herdr agent prompt: this fake takes no options")
        found = _find(world, rest[0], "cli:agent:prompt")
        if not rest[1]:
            _error("cli:agent:prompt", "empty_agent_prompt", "agent prompt must not be empty")
        _out({"id": "cli:agent:prompt", "result": {"type": "agent_prompted",
                                                    "agent": _shown(found, other)}})
    elif sub == "wait" and rest:
        _wait(rest, socket, other)
    else:
        _usage("herdr agent commands: list, get, read, send-keys, prompt, rename, focus, wait, "
               "attach, start, explain")


def _legacy_agent(world: dict[str, Any], args: list[str], *, socket: str) -> None:
    """Herdr 0.7.4: ``agent send`` writes literal text; waits take ``--status``."""
    sub, rest = (args[0], args[1:]) if args else ("", [])
    if sub == "send" and len(rest) >= 2:
        _find(world, rest[0], "cli:agent:send")
        _out({"id": "cli:agent:send", "result": {"type": "ok"}})
    elif sub == "wait" and len(rest) >= 3 and rest[1] == "--status" and rest[2] in STATES:
        _wait([rest[0], "--until", rest[2], *rest[3:]], socket, False)
    elif sub in ("list", "get", "read", "explain"):
        _agent(world, args, other=False, socket=socket)
    else:
        _usage("herdr agent commands: list, get, read, send, rename, focus, wait, attach, "
               "start, explain")


def _read(world: dict[str, Any], rest: list[str]) -> None:
    found = _find(world, rest[0], "cli:agent:read")
    lines = 80  # Herdr's default for recent sources
    options = rest[1:]
    while options:
        flag, value, options = options[0], options[1] if len(options) > 1 else None, options[2:]
        if flag == "--lines" and value is not None and value.isdigit():
            lines = int(value)
        elif flag != "--source" or value not in ("visible", "recent", "recent-unwrapped",
                                                 "detection"):
            _usage(f"unknown option: {flag}")
    text = world.get("screens", {}).get(found["pane_id"], "")
    sys.stdout.write("\n".join(text.split("\n")[-lines:]))


def _wait(rest: list[str], socket: str, other: bool) -> None:
    target, options = rest[0], rest[1:]
    until: list[str] = []
    timeout_ms: int | None = None
    while options:
        flag, value, options = options[0], options[1] if len(options) > 1 else None, options[2:]
        if flag == "--until" and value in STATES:
            until.append(value)
        elif flag == "--timeout" and value is not None and value.isdigit():
            timeout_ms = int(value)
        else:
            _usage(f"unknown option: {flag}")
    wanted = until or ["idle", "done", "blocked"]
    start = time.monotonic()
    while True:  # the test rewrites the world to move the agent
        found = _find(_load(socket), target, "cli:agent:wait")
        if found["agent_status"] in wanted:
            _out({"id": "cli:agent:wait", "result": {"type": "agent_info",
                                                      "agent": _shown(found, other)}})
            return
        if timeout_ms is not None and (time.monotonic() - start) * 1000 >= timeout_ms:
            _error("cli:agent:wait", "timeout", "timed out waiting for agent status")
        time.sleep(0.02)


if __name__ == "__main__":
    main(sys.argv[1:])
