#!/usr/bin/env python3
"""A tiny MCP client that launches managed agents from *inside* a Tether execution.

Run by a program in a Tether terminal (the fake agent's ``run:`` prompts, or a BashCommand),
it starts a real ``tether serve`` over stdio — the way an agent CLI starts its MCP servers —
and calls ``Initialize`` and ``Agent launch`` once per entry of a JSON spec::

    agent_launcher.py LAUNCH.json OUT.json

    {"tether": "/path/to/tether", "scrub": false,
     "launches": [{"workspace": "/ws", "argv": [...], "recognizer": "claude",
                   "labels": {...}, "notify_on_finish": null}]}

With ``"scrub": true`` the server gets only HOME, PATH and Tether's directory settings (as MCP
clients start servers), so it must find its parent by process ancestry instead of the
``TETHER_*`` stamp. Writes ``{"results": [structured_content, ...]}`` to OUT.json at the end
(atomically, so a test can wait for the file).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import Client, StdioServerParameters

KEPT_WHEN_SCRUBBED = ("HOME", "PATH", "TETHER_HOME", "TETHER_RUNTIME_DIR", "TETHER_GUARDIAN_IDLE_S")


async def launch_all(spec: dict[str, Any]) -> list[dict[str, Any]]:
    if spec.get("scrub"):
        env = {k: os.environ[k] for k in KEPT_WHEN_SCRUBBED if k in os.environ}
    else:
        env = dict(os.environ)
    results = []
    for item in spec["launches"]:
        server = StdioServerParameters(command=spec["tether"], args=["serve"], env=env)
        async with Client(server) as client:
            init = await client.call_tool("Initialize", {"workspace_root": item["workspace"]})
            assert init.structured_content is not None, init
            session = init.structured_content["data"]
            args = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                    "action": "launch", "provider": "command", "argv": item["argv"],
                    "recognizer": item.get("recognizer", "auto")}
            for key in ("labels", "notify_on_finish", "auto_archive", "title"):
                if item.get(key) is not None:
                    args[key] = item[key]
            launched = await client.call_tool("Agent", args)
            results.append(launched.structured_content or {"error": str(launched)})
    return results


def main() -> int:
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    results = asyncio.run(launch_all(spec))
    with open(out_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"results": results}, f)
    os.replace(out_path + ".tmp", out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
