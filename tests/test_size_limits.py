"""Size limits are enforced whole, in the unit the SPEC names, before anything happens (R29),
and launch failures are reported as what they are (R13).

A launch's argv is measured in UTF-8 bytes, in all; over the limit it is ``limit_exceeded``
naming the size, the limit and what to do instead, and leaves no record. A launch that cannot
start leaves its record ``unknown`` (no exit was observed) with the reason. Real MCP client,
real guardian, real PTYs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import guardian_thread
from tests.mcp_helpers import agent, execution, initialize
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_ARGV_BYTES
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


async def _agents(client: Client, session: dict[str, Any]) -> list[dict[str, Any]]:
    listed = await agent(client, session, {"action": "list", "include_archived": True})
    return list(listed["data"]["agents"])


# -- 1. argv is measured in UTF-8 bytes, in all --------------------------------------------


async def test_argv_over_its_byte_limit_is_refused_before_any_record(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    launch = {"action": "launch", "provider": "command"}
    # The reviewer's argv: 40 arguments of 60,000 bytes (each under the old per-element check).
    many = await agent(client, session, {**launch, "argv": ["echo"] + ["y" * 60000] * 40},
                       error=True)
    assert many["code"] == "limit_exceeded", many
    size = 5 + 40 * 60001  # each argument's bytes plus 1
    assert many["data"] == {"input_sent": False, "field": "argv", "limit": MAX_ARGV_BYTES,
                            "size": size}
    assert f"{size} bytes" in many["message"] and str(MAX_ARGV_BYTES) in many["message"]
    assert "file" in many["message"] and len(many["message"]) < 400
    # 30,000 characters, 90,000 bytes: under a character count, over the byte limit.
    euro = await agent(client, session, {**launch, "argv": ["cat", "€" * 30000]}, error=True)
    assert euro["code"] == "limit_exceeded" and euro["data"]["size"] == 4 + 90001, euro
    assert await _agents(client, session) == []
    assert (await execution(client, session, {"type": "list"}))["data"]["executions"] == []
    # At the limit exactly, the launch goes ahead ("true" + NUL, then the argument + NUL).
    fits = ["true", "y" * (MAX_ARGV_BYTES - 5 - 1)]
    launched = (await agent(client, session, {**launch, "argv": fits}))["data"]["agent"]
    assert [a["execution_id"] for a in await _agents(client, session)] == [
        launched["execution_id"]]
    over = await agent(client, session, {**launch, "argv": [*fits[:1], fits[1] + "y"]},
                       error=True)
    assert over["code"] == "limit_exceeded" and over["data"]["size"] == MAX_ARGV_BYTES + 1


async def test_the_guardian_measures_argv_in_bytes_too(
    tether_env: Config, workspace: Path
) -> None:
    """A front-end that checks nothing (an older one, a bug) still cannot get them through."""
    async with guardian_thread(tether_env, workspace) as (handle, scope):
        with pytest.raises(TetherError) as argv:
            await handle.call("agent.launch", {
                **scope, "provider": "command", "argv": ["cat", "€" * 30000],
                "idempotency_key": "big-argv"}, timeout_s=10)
        assert argv.value.code == ErrorCode.LIMIT_EXCEEDED, argv.value
        assert argv.value.data["size"] == 4 + 90001 and argv.value.data["field"] == "argv"
        listed = await handle.call("agent.list", {**scope, "include_archived": True}, timeout_s=10)
        assert listed.agents == []


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
