"""A front-end's parent execution (docs/tools.md#trees-and-parents) is looked up once it can be certain: a
guardian that
could not be asked leaves "no parent" open, and a later lookup finds the parent."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from mcp import Client

from tests.helpers import poll, tether_processes
from tests.mcp_helpers import initialize
from tether.frontend.guardians import lineage
from tether.frontend.guardians.locator import GuardianLocator
from tether.shared.config import Config


@pytest.mark.anyio
async def test_a_guardian_that_could_not_answer_leaves_the_parent_to_a_later_lookup(
    tether_env: Config, client: Client, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await initialize(client, workspace)
    started = await client.call_tool("BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "sleep 60", "is_background": True}})
    assert started.structured_content is not None
    execution_id = started.structured_content["data"]["execution_id"]
    # A process inside that execution: its ancestry is what a front-end started there has.
    inside = poll(lambda: tether_processes(tether_env.runtime_dir, "sleep 60"))[0]
    chain = lineage.ancestors(inside.pid)
    monkeypatch.setattr(lineage, "ancestors", lambda: chain)
    monkeypatch.setattr(lineage, "LOOKUP_TIMEOUT_S", 0.5)

    locator = GuardianLocator(tether_env, "local")
    root = session["workspace_root"]
    handle = await locator.handle(root)
    found = lineage.Lineage(env={})
    os.kill(int(handle.info["pid"]), signal.SIGSTOP)
    try:
        assert await found.parent(locator, root) is None  # asked, not answered: not certain
        assert await found.parent(locator, root) is None  # and not asked again at once
    finally:
        os.kill(int(handle.info["pid"]), signal.SIGCONT)
    monkeypatch.setattr(found, "_retry_at", 0.0)  # the retry's time has come
    parent = await found.parent(locator, root)
    assert parent == lineage.Parent(execution_id, root, "ancestry")
    locator.close()


@pytest.mark.anyio
async def test_a_certain_no_parent_is_kept(
    tether_env: Config, client: Client, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await initialize(client, workspace)
    locator = GuardianLocator(tether_env, "local")
    found = lineage.Lineage(env={})
    root = session["workspace_root"]
    assert await found.parent(locator, root) is None  # this test runs inside no execution
    asked: list[str] = []
    monkeypatch.setattr(found, "_by_ancestry", lambda *a: asked.append("again"))
    assert await found.parent(locator, root) is None
    assert asked == []
    locator.close()
