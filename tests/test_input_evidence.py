"""What ``send_text`` says about input typed while a program switches the terminal from line to
raw mode (issue 30, defect 6): ``discarded_likely`` — and the advice to send again — only with
evidence that nothing was read; otherwise what is known."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.mcp_helpers import bash, initialize

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("run", range(4))
async def test_text_sent_to_a_starting_python_repl_is_not_called_lost(
    client: Client, workspace: Path, run: int
) -> None:
    """A background ``python3 -i`` reads with readline, which switches the terminal to raw mode
    without discarding what waits: the line runs. Saying ``discarded_likely`` with "send again"
    (4 of 4 before) would have it run twice."""
    session = await initialize(client, workspace)
    repl = await bash(client, session, {"type": "command", "command": f"{sys.executable} -q -i",
                                        "is_background": True})
    eid = repl["execution_id"]
    sent = await bash(client, session, {"type": "send_text", "execution_id": eid,
                                        "text": f"print({run} + 6 * 7000)", "submit": True},
                      wait=3)
    assert sent["input_sent"] is True
    assert sent["delivery"] in ("unknown", "unread", "observed"), sent
    assert "send again" not in sent.get("warning", ""), sent
    deadline = time.monotonic() + 15
    while True:  # the line ran, once
        out = (await bash(client, session, {"type": "status_check", "execution_id": eid}))["output"]
        if f"{run + 42000}" in out or time.monotonic() > deadline:
            break
        await anyio.sleep(0.1)
    assert out.count(f"{run + 42000}") == 1, out
    await bash(client, session, {"type": "send_keys", "execution_id": eid, "keys": ["Ctrl-d"]})
    done = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=10)
    assert done["status"] == "exited", done
