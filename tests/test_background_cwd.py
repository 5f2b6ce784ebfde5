"""A background execution's status says its own directory (issue 31, defect 2).

``status_check`` of a server started with ``is_background`` in A said B once the main shell
had done ``cd B``, while ``Execution.get`` and ``/proc/PID/cwd`` said A: the reply took the
thread's shell's directory for every execution.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client

from tests.mcp_helpers import bash, execution, initialize, run

pytestmark = pytest.mark.anyio


async def test_status_check_of_a_background_server_says_where_it_runs(
    client: Client, workspace: Path
) -> None:
    a, b = workspace / "a", workspace / "b"
    a.mkdir()
    b.mkdir()
    session = await initialize(client, workspace)
    assert (await run(client, session, f"cd {a}"))["cwd"] == str(a)
    server = await bash(client, session, {"type": "command", "command": "exec python3 -m "
                                          "http.server 0 --bind 127.0.0.1",
                                          "is_background": True}, wait=0)
    eid = server["execution_id"]
    assert server["cwd"] == str(a)
    moved = await run(client, session, f"cd {b}")
    assert moved["cwd"] == str(b)  # the main shell's own command: its shell's directory

    async def serving() -> int | None:
        got = (await execution(client, session, {"type": "get", "execution_id": eid}))["data"]
        out = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=0)
        return int(got["execution"]["runtime"]["pid"]) if "Serving HTTP" in out["output"] \
            else None

    pid = None
    for _ in range(200):
        pid = await serving()
        if pid:
            break
        await anyio.sleep(0.05)
    assert pid is not None
    status = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=0)
    assert status["status"] == "running"
    assert status["cwd"] == str(a), status
    got = (await execution(client, session, {"type": "get", "execution_id": eid}))["data"]
    assert got["execution"]["cwd"] == str(a)
    jobs = [p for p in psutil.Process(pid).children(recursive=True) if "http.server" in
            " ".join(p.cmdline())]
    assert jobs and all(os.readlink(f"/proc/{p.pid}/cwd") == str(a) for p in jobs)
    # The latest main-shell command's status still says the main shell's directory.
    assert (await bash(client, session, {"type": "status_check"}, wait=0))["cwd"] == str(b)
    # Ended, it says where it ran.
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"], "execution_id": eid},
               wait=0)

    async def ended() -> dict[str, object] | None:
        out = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=1)
        return out if out["status"] != "running" else None

    final = None
    for _ in range(30):
        final = await ended()
        if final:
            break
    assert final is not None and final["cwd"] == str(a), final


async def test_a_status_check_answers_at_once_unless_asked_to_wait(
    client: Client, workspace: Path
) -> None:
    """It cost the whole default wait (5 s) of every BashCommand: a check is a look."""
    session = await initialize(client, workspace)
    job = await bash(client, session, {"type": "command", "command": "sleep 30",
                                       "is_background": True}, wait=0)
    check = {"type": "status_check", "execution_id": job["execution_id"]}
    began = time.monotonic()
    status = await bash(client, session, check)  # no wait_for_seconds
    looked = time.monotonic() - began
    assert status["status"] == "running"
    assert looked < 3.0, looked  # generous: the old default wait was 5 s
    began = time.monotonic()
    await bash(client, session, check, wait=1)  # asked to wait: it does
    assert time.monotonic() - began >= 1.0
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                 "execution_id": job["execution_id"]}, wait=0)
    ended = await bash(client, session, check, wait=10)
    assert ended["status"] == "exited"
