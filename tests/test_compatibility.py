"""Protocol versions and capability negotiation against real older guardians (issue 7)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import zmq
from mcp import Client

from tests.helpers import start_guardian
from tests.mcp_helpers import bash, call, call_error, execution, initialize, run
from tether.frontend.server import build_server
from tether.protocol import codec
from tether.protocol.versions import known_minor_versions
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import guardian_paths, write_private_file

pytestmark = pytest.mark.anyio

LATEST = str(known_minor_versions()[-1])
FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"


@pytest.mark.parametrize("protocol", ["1.0", "1.1", "1.2", "1.3", "1.4", None])
async def test_front_end_against_each_guardian_version(
    protocol: str | None, tether_env: Config, workspace: Path, tmp_path: Path,
) -> None:
    info = start_guardian(workspace, tether_env, protocol)
    expected = protocol or LATEST
    assert info["protocol"] == expected
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        status = (await client.call_tool("Initialize", {
            "type": "status", "workspace_root": str(workspace), "thread_id": session["thread_id"]}
        )).structured_content
        assert status is not None
        guardian = status["data"]["guardian"]
        assert guardian["instance_id"] == info["instance_id"]
        assert guardian["protocol"] == expected
        hi = await run(client, session, "echo hi")
        assert hi["output"].strip() == "hi"

        observe_args = {"thread_id": session["thread_id"], "workspace_root": str(workspace),
                        "action": {"type": "observe", "items": [{"execution_id": hi["execution_id"]}]}}
        log = tmp_path / "agent.log"
        fake = await bash(client, session, {
            "type": "command", "is_background": True,
            "command": f"{sys.executable} {FAKE_AGENT} --log {log}"})
        prompt_args = {"thread_id": session["thread_id"], "workspace_root": str(workspace),
                       "action": "prompt", "target": fake["execution_id"], "prompt_id": "c1",
                       "text": "hello", "recognizer": "claude", "timeout_seconds": 0}
        if expected == "1.0":
            missing = await call_error(client, "Execution", observe_args)
            assert missing["code"] == "capability_missing"
            assert missing["data"] == {"capability": "observe", "guardian_protocol": "1.0",
                                       "input_sent": False, "operator_action_required": True}
            assert "tether guardians restart" in missing["message"]
        else:
            observed = await execution(client, session, observe_args["action"])
            assert "hi" in observed["data"]["items"][0]["page"]["text"]
        if expected in ("1.0", "1.1"):
            missing = await call_error(client, "Agent", prompt_args)
            assert missing["code"] == "capability_missing"
            assert missing["data"]["capability"] == "prompt_receipts"
            assert missing["data"]["input_sent"] is False
            # Nothing was typed into any terminal: the fake agent never got a prompt.
            screen = await bash(client, session, {"type": "screen",
                                                  "execution_id": fake["execution_id"]})
            assert "hello" not in screen["screen"]["text"]
            assert not log.exists() or log.read_text() == ""
        # A page of a listing: an older guardian would ignore ``before`` and answer with the
        # newest page again, so the front-end refuses it (its lists are unpaged, as before).
        paged = {"type": "list", "limit": 1, "before": 2**40}
        if expected != LATEST:
            missing = await execution(client, session, paged, expect_error=True)
            assert missing["code"] == "capability_missing"
            assert missing["data"]["capability"] == "list_pages"
            assert missing["data"]["input_sent"] is False
        else:
            page = (await execution(client, session, paged))["data"]
            assert page["executions"][0]["execution_id"] == fake["execution_id"]
            assert page["next_before"]
        change = {"type": "change_mode", "workspace_root": str(workspace),
                  "thread_id": session["thread_id"], "mode": "architect"}
        if expected in ("1.0", "1.1", "1.2", "1.3"):
            # A guardian without thread_modes cannot hold a mode: its threads stay wcgw, and
            # asking for another mode says so instead of pretending.
            missing = await call_error(client, "Initialize", change)
            assert missing["code"] == "capability_missing"
            assert missing["data"]["capability"] == "thread_modes"
            assert status["data"]["mode"] == "wcgw"
        else:
            changed = (await call(client, "Initialize", change))["data"]
            assert changed["mode"] == "architect"
            refused = await call_error(client, "BashCommand", {
                "thread_id": session["thread_id"], "workspace_root": str(workspace),
                "action_json": {"type": "command", "command": "touch nope"}})
            assert refused["code"] == "mode_denied"
            assert not (workspace / "nope").exists()


async def test_guardian_refuses_methods_outside_its_version(
    tether_env: Config, workspace: Path
) -> None:
    info = start_guardian(workspace, tether_env, "1.0")
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(info["endpoint"])
    try:
        sock.send(codec.encode({
            "v": [1, 2], "id": "x1", "method": "exec.observe", "extra_envelope_key": True,
            "params": {"principal": "local", "workspace_root": str(workspace),
                       "thread_id": "th_x", "items": []},
            "deadline_unix_ms": int((time.time() + 30) * 1000),
            "guardian_instance_id": info["instance_id"], "auth": info["auth_token"]}))
        assert sock.poll(5000)
        reply = codec.decode(sock.recv())
        assert reply["error"]["code"] == "capability_missing"
        assert reply["error"]["data"]["capability"] == "observe"
    finally:
        sock.close(0)
        ctx.term()


async def test_major_2_guardian_is_refused(tether_env: Config, workspace: Path) -> None:
    """A test double that speaks protocol 2: the front-end refuses it, naming both ranges."""
    paths = guardian_paths(tether_env, "local", str(workspace))
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(paths.endpoint)
    me = ProcessIdentity.of(psutil.Process().pid)
    assert me is not None
    write_private_file(paths.info, json.dumps({
        "instance_id": "major-two", **me.to_dict(), "endpoint": paths.endpoint,
        "protocol": "2.0", "capabilities": [], "auth_token": "t" * 64}).encode())

    import threading

    def serve() -> None:
        if router.poll(10000):
            ident, frame = router.recv_multipart()
            request = codec.decode(frame)
            router.send_multipart([ident, codec.encode({
                "v": [2, 0], "id": request["id"], "ok": True,
                "result": {"version": [2, 0], "instance_id": "major-two", "capabilities": []}})])

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        async with Client(build_server(tether_env)) as client:
            refused = await call_error(client, "Initialize", {"workspace_root": str(workspace)})
        assert refused["code"] == "protocol_mismatch"
        assert "2.0" in refused["message"] and f"1.0-{LATEST}" in refused["message"]
    finally:
        thread.join()
        router.close(0)
        ctx.term()
        paths.info.unlink(missing_ok=True)


async def test_guardians_restart_says_what_it_ends(tether_env: Config, workspace: Path) -> None:
    start_guardian(workspace, tether_env, "1.0")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        sleeper = await run(client, session, "sleep 30", wait=0.3)
    tether = str(Path(sys.executable).with_name("tether"))
    asked = subprocess.run([tether, "guardians", "restart", "--workspace", str(workspace)],
                           capture_output=True, text=True, timeout=30)
    assert asked.returncode == 2 and sleeper["execution_id"] in asked.stdout
    done = subprocess.run([tether, "guardians", "restart", "--workspace", str(workspace), "--yes"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"protocol {LATEST}" in done.stdout
    listed = subprocess.run([tether, "guardians", "list"], capture_output=True, text=True, timeout=30)
    assert f"protocol {LATEST}" in listed.stdout and "alive" in listed.stdout
