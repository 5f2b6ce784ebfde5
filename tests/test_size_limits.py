"""Size limits and launch failures are reported as what they are (R13, R29).

A launch that cannot start leaves its record ``unknown`` (no exit was observed) with the
reason. Real MCP client, real guardian, real PTYs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.mcp_helpers import agent, initialize

pytestmark = pytest.mark.anyio


# -- 2. a launch that cannot spawn is unknown, not exited ---------------------------------


async def test_a_launch_that_cannot_spawn_is_unknown_with_its_reason(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    failed = await agent(client, session, {"action": "launch", "provider": "command",
                                           "argv": ["/nonexistent/tether-no-such-program"]},
                         error=True)
    assert failed["code"] == "spawn_failed" and failed["data"]["input_sent"] is False, failed
    record = (await agent(client, session, {"action": "get",
                                            "target": failed["data"]["execution_id"]}))["data"]
    agent_record = record["agent"]
    assert agent_record["status"] == "unknown", agent_record  # no exit was observed (R13)
    assert agent_record["exit_code"] is None
    assert agent_record["reason"].startswith("spawn_failed: ")
    assert agent_record["agent_state"] == "error"
    assert record["events"][-1]["reason"].startswith("spawn_failed: ")
