"""Guardian lifecycle through real processes: front-end restarts, start races, unsafe dirs."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import psutil
import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.helpers import tether_processes
from tests.mcp_helpers import call_error, initialize, kill_front_end, run
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


async def test_front_end_sigkill_keeps_the_shell(tether_env: Config, workspace: Path) -> None:
    first = Client(stdio_params())
    await first.__aenter__()
    session = await initialize(first, workspace)
    await run(first, session, "cd sub")
    await run(first, session, "TETHER_TEST_VAR=kept-$((6*7))")
    await kill_front_end(first, tether_env)

    async with Client(stdio_params()) as second:
        again = await initialize(second, workspace, session["thread_id"])
        assert again["guardian"]["instance_id"] == session["guardian"]["instance_id"]
        assert again["generation"] == session["generation"]
        out = await run(second, again, 'echo "$PWD $TETHER_TEST_VAR"')
        assert out["output"].strip() == f"{workspace / 'sub'} kept-42"


async def test_racing_front_ends_start_one_guardian(tether_env: Config, workspace: Path) -> None:
    async def init_once() -> str:
        async with Client(build_server(Config.from_env())) as client:
            data = await initialize(client, workspace)
            return str(data["guardian"]["instance_id"])

    ids = await asyncio.gather(*(init_once() for _ in range(3)))
    assert len(set(ids)) == 1
    guardians = tether_processes(tether_env.runtime_dir, "tether-guardian")
    assert len(guardians) == 1, [p.cmdline() for p in guardians]
    # ps names it: the short kernel name and the command line both say tether-guardian.
    assert guardians[0].name() == "tether-guardian"
    assert f"tether-guardian {workspace}" in " ".join(guardians[0].cmdline())


@pytest.mark.parametrize("problem", ["mode", "owner"])
async def test_unsafe_runtime_dir_is_refused(
    problem: str, tether_env: Config, workspace: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unsafe = tmp_path / "rt"
    unsafe.mkdir(mode=0o700)
    if problem == "mode":
        unsafe.chmod(0o755)
    else:
        if os.getuid() != 0:
            pytest.skip("changing a directory's owner needs root")
        os.chown(unsafe, 65534, 65534)
    monkeypatch.setenv("TETHER_RUNTIME_DIR", str(unsafe))
    async with Client(build_server(Config.from_env())) as client:
        refused = await call_error(client, "Initialize",
                                   {"type": "first_call", "workspace_root": str(workspace)})
    assert refused["code"] == "runtime_dir_unsafe"
    expected = "0755" if problem == "mode" else "owned by uid 65534"
    assert expected in refused["message"]
    assert not list(unsafe.iterdir())  # nothing was created in it


async def test_sigterm_stops_guardian_cleanly(tether_env: Config, workspace: Path) -> None:
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        running = await run(client, session, "sleep 30", wait=0.3)
        guardian = psutil.Process(session["guardian"]["pid"])
        guardian.send_signal(signal.SIGTERM)
        guardian.wait(timeout=10)
        # A new guardian serves the thread; the interrupted record was finalised, not lost.
        again = await initialize(client, workspace, session["thread_id"])
        assert again["guardian"]["instance_id"] != session["guardian"]["instance_id"]
        assert again["generation"] == session["generation"] + 1
        record = (await client.call_tool("Execution", {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action": {"type": "get", "execution_id": running["execution_id"]}})
        ).structured_content
        assert record is not None
        execution = record["data"]["execution"]
        assert execution["status"] in ("exited", "unknown")
        assert execution["status"] != "running"
