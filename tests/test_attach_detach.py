"""``tether attach`` ends when the person detaches, at once, also on a busy machine: after
Ctrl-\\ nothing may keep the process (and the person's terminal) waiting.

The real ``tether attach`` runs in a real PTY (tests/person_terminal.py) while two processes
spin on the two cores. Each try starts it, waits for its mirror, types the detach key and
times, by the process's own state in /proc, how long it lives after its farewell. A process
still there is described before it is killed: each of its threads by name, state and the
kernel function it waits in, which is what a person's hung terminal needs explained.
By hand, ``TETHER_DETACH_TRIES=200`` runs the issue's 200 tries.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from tests.mcp_helpers import bash, initialize
from tests.person_terminal import PersonTerminal

pytestmark = pytest.mark.anyio

#: Tries in the suite: a failure seen in about half of the tries by hand is caught by eight
#: with a chance of 1 - 2^-8 (TETHER_DETACH_TRIES=200 by hand).
TRIES = int(os.environ.get("TETHER_DETACH_TRIES", "8"))
#: A person notices a terminal that does not come back within about a second.
EXIT_WITHIN_S = 1.0


@pytest.fixture
def burners() -> Iterator[None]:
    """Two processes spinning on the CPU for the test's length: the machine under load."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


def gone(pid: int) -> bool:
    """Every thread of the process has exited. A zombie waiting to be reaped is gone; a
    thread group whose main thread has ended while another thread lives on is not (its
    leader reads as a zombie too: each thread is asked)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return False
    return True


def threads_of(pid: int) -> list[str]:
    """Each live thread of ``pid``: name, state and the kernel function it waits in."""
    found: list[str] = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return found
    for tid in tids:
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text().strip() or "-"
        except OSError:
            continue
        found.append(f"{name}[{tid}] {state} in {wchan}")
    return found


def detach_once(execution_id: str, within_s: float) -> str | None:
    """Attach, detach, and time the exit; None when it left within ``within_s`` of its
    farewell with status 0, else what was seen."""
    viewer = PersonTerminal(["attach", execution_id])
    pid = viewer.proc.pid
    try:
        viewer.wait_for("detaches", timeout=30)
        viewer.type(b"\x1c")
        viewer.wait_for("detached from", timeout=30)
        shown = time.monotonic()
        while not gone(pid) and time.monotonic() - shown < max(within_s, 5.0):
            time.sleep(0.005)
        took = time.monotonic() - shown
        if not gone(pid):
            return f"alive {took:.2f}s after 'detached', threads: {threads_of(pid)}"
        status = viewer.wait_exit()
        if took > within_s or status != 0:
            return f"exited {status} {took:.2f}s after 'detached'"
        return None
    finally:
        viewer.close()


@pytest.mark.timeout(60 + 10 * TRIES)
async def test_attach_exits_within_a_second_of_detaching_under_load(
        client: Client, workspace: Path, burners: None) -> None:
    session = await initialize(client, workspace)
    started = await bash(client, session, {
        "type": "command", "is_background": True,
        "command": os.environ.get("TETHER_DETACH_CMD", "while true; do echo tick; sleep 0.05; done")})
    eid = str(started["execution_id"])
    slow = [f"try {attempt}: {seen}" for attempt in range(TRIES)
            if (seen := detach_once(eid, EXIT_WITHIN_S)) is not None]
    assert not slow, f"{len(slow)} of {TRIES} tries: " + "; ".join(slow[:10])
