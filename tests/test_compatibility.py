"""Protocol versions and capability negotiation against real older guardians (issue 7)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from mcp import Client

from tests.helpers import apoll, start_guardian
from tests.mcp_helpers import bash, call, call_error, execution, initialize, prompt_log, run
from tether.frontend.transport.mcp_server import build_server
from tether.protocol import codec
from tether.protocol.limits import MAX_CANONICAL_LINE_BYTES
from tether.protocol.versions import Version, capabilities_for, known_minor_versions
from tether.shared.config import Config
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import guardian_paths, write_private_file

pytestmark = pytest.mark.anyio

LATEST = str(known_minor_versions()[-1])
FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"


@pytest.mark.parametrize("protocol", ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", None])
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
            # The command to run, with this workspace's real path (not a placeholder).
            assert (f"`tether guardians restart --workspace {workspace} --yes`"
                    in missing["message"]), missing["message"]
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


def raw_replies(info: dict[str, Any], version: list[int],
                requests: list[tuple[str, dict[str, Any]]],
                **envelope: Any) -> list[dict[str, Any]]:
    """Send each ``(method, params)`` to the guardian of ``info`` over a bare DEALER socket
    speaking ``version`` (a client other than this front-end), and return the replies."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(info["endpoint"])
    replies = []
    try:
        for n, (method, params) in enumerate(requests):
            sock.send(codec.encode({
                "v": version, "id": f"r{n}", "method": method, "params": params,
                "deadline_unix_ms": int((time.time() + 30) * 1000),
                "guardian_instance_id": info["instance_id"], "auth": info["auth_token"],
                **envelope}))
            assert sock.poll(5000)
            replies.append(codec.decode(sock.recv()))
    finally:
        sock.close(0)
        ctx.term()
    return replies


async def test_guardian_refuses_methods_outside_its_version(
    tether_env: Config, workspace: Path
) -> None:
    info = start_guardian(workspace, tether_env, "1.0")
    [reply] = raw_replies(info, [1, 2], [("exec.observe", {
        "principal": "local", "workspace_root": str(workspace), "thread_id": "th_x",
        "items": []})], extra_envelope_key=True)
    assert reply["error"]["code"] == "capability_missing"
    assert reply["error"]["data"]["capability"] == "observe"


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


async def _output_shows(client: Client, session: dict[str, Any], text: str) -> None:
    """Poll the main shell's command until its output shows ``text``."""
    async def shown() -> bool:
        status = await bash(client, session, {"type": "status_check"}, wait=0.2)
        return text in status["output"]

    deadline = time.monotonic() + 15
    while not await shown():
        assert time.monotonic() < deadline, f"{text!r} not shown within 15s"


async def test_a_long_line_is_refused_by_a_front_end_whose_guardian_lacks_line_limits(
    tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    """Before 1.6 a guardian cannot say whether a terminal reads whole lines, where the
    kernel cuts a line at 4095 bytes without a trace: the front-end refuses any such line,
    whatever the terminal's mode (docs/protocol.md#versions-and-capabilities), and shorter lines go through
    as before."""
    start_guardian(workspace, tether_env, "1.5")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        args = {"thread_id": session["thread_id"], "workspace_root": str(workspace)}
        await bash(client, session, {"type": "command", "command": "echo $((6*7)); wc -c"},
                   wait=0)
        await _output_shows(client, session, "42")
        refused = await call_error(client, "BashCommand", {**args, "action_json": {
            "type": "send_text", "text": "short\n" + "a" * 5000, "submit": True}})
        assert refused["code"] == "capability_missing", refused
        assert refused["data"] == {
            "capability": "line_limits", "guardian_protocol": "1.5", "input_sent": False,
            "operator_action_required": True, "limit": MAX_CANONICAL_LINE_BYTES, "size": 5000,
            "line": 2}
        assert f"`tether guardians restart --workspace {workspace} --yes`" in refused["message"]
        assert "<root>" not in refused["message"]
        fits = "a" * MAX_CANONICAL_LINE_BYTES + "\n" + "b" * MAX_CANONICAL_LINE_BYTES
        sent = await bash(client, session, {"type": "send_text", "text": fits, "submit": True})
        assert sent["input_sent"] is True
        await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-d"]})
        await _output_shows(client, session, str(2 * (MAX_CANONICAL_LINE_BYTES + 1)))
        done = await bash(client, session, {"type": "status_check"}, wait=5)
        # wc counted both whole lines: nothing of the refused text was typed.
        assert done["output"].split()[-1] == str(2 * (MAX_CANONICAL_LINE_BYTES + 1)), done

        # A prompt is refused the same way, even to a program that reads keys (raw mode).
        log = tmp_path / "agent.log"
        fake = await bash(client, session, {
            "type": "command", "is_background": True,
            "command": f"{sys.executable} {FAKE_AGENT} --log {log}"})
        turn = await bash(client, session, {"type": "wait_for_turn", "recognizer": "claude",
                                            "execution_id": fake["execution_id"]})
        assert turn["outcome"] == "turn_ready", turn
        prompt = {**args, "action": "prompt", "target": fake["execution_id"],
                  "recognizer": "claude", "timeout_seconds": 5}
        long_prompt = await call_error(client, "Agent", {**prompt, "prompt_id": "long",
                                                         "text": "b" * 5000})
        assert long_prompt["code"] == "capability_missing", long_prompt
        assert long_prompt["data"]["capability"] == "line_limits"
        assert long_prompt["data"]["input_sent"] is False
        short = await call(client, "Agent", {**prompt, "prompt_id": "short", "text": "hello"})
        assert short["data"]["receipt"]["delivered"] is True
        assert await apoll(lambda: prompt_log(log), what="the prompt in the agent's log") == [
            "hello"]  # the refused prompt was never typed


async def test_recognition_is_refused_at_once_by_guardians_without_it(
    tether_env: Config, workspace: Path
) -> None:
    """A 1.1 guardian has exec.read, observe and wait, but no recognition: a detection page,
    a recognizer's wait event and an Agent wait (whose answer is a verdict) are refused,
    before anything is asked (an Agent wait used to block its whole timeout first)."""
    start_guardian(workspace, tether_env, "1.1")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        args = {"thread_id": session["thread_id"], "workspace_root": str(workspace)}
        hi = await run(client, session, "echo hi")
        sleeper = await bash(client, session, {"type": "command", "is_background": True,
                                               "command": "sleep 60"})
        started = time.monotonic()
        waited = await call_error(client, "Agent", {**args, "action": "wait",
                                                    "target": sleeper["execution_id"],
                                                    "timeout_seconds": 20})
        assert time.monotonic() - started < 5  # not after its 20 s timeout
        assert waited["code"] == "capability_missing", waited
        assert waited["data"]["capability"] == "recognition"
        assert waited["data"]["guardian_protocol"] == "1.1"
        for tool, extra in (
                ("Execution", {"action": {"type": "read", "execution_id": hi["execution_id"],
                                          "source": "detection"}}),
                ("Agent", {"action": "read", "target": hi["execution_id"],
                           "source": "detection"}),
                ("Execution", {"action": {"type": "observe", "items": [
                    {"execution_id": hi["execution_id"], "source": "detection"}]}}),
                ("Execution", {"action": {"type": "wait", "execution_ids": [
                    sleeper["execution_id"]], "events": ["awaiting_input"],
                    "timeout_seconds": 20}})):
            started = time.monotonic()
            refused = await call_error(client, tool, {**args, **extra})
            assert time.monotonic() - started < 5, extra
            assert refused["code"] == "capability_missing", (extra, refused)
            assert refused["data"]["capability"] == "recognition", extra
            assert f"--workspace {workspace} --yes" in refused["message"]
        # In an observe, only the detection item fails; the others are read.
        observed = await call(client, "Execution", {**args, "action": {
            "type": "observe", "items": [
                {"execution_id": hi["execution_id"]},
                {"execution_id": hi["execution_id"], "source": "detection"},
                {"execution_id": hi["execution_id"], "source": "screen"}]}})
        assert observed["status"] == "completed_with_issues", observed
        assert observed["code"] == "execution_observation_issues"
        first, detection, screen = observed["data"]["items"]
        assert first["status"] == "ok" and "hi" in first["page"]["text"]
        assert screen["status"] == "ok" and "hi" in screen["page"]["text"]
        assert detection["status"] == "error" and "page" not in detection
        [error] = detection["errors"]
        assert (error["code"], error["capability"], error["guardian_protocol"]) == (
            "capability_missing", "recognition", "1.1")
        await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                     "execution_id": sleeper["execution_id"]})


async def test_a_guardian_honours_exactly_the_version_it_speaks_for_detection(
    tether_env: Config, workspace: Path
) -> None:
    """A guardian started as 1.1 refuses a detection page itself (a client other than this
    front-end may ask): it does not hand out what its version does not advertise."""
    info = start_guardian(workspace, tether_env, "1.1")
    scope = {"principal": "local", "workspace_root": str(workspace), "thread_id": "th_x"}
    requests: list[tuple[str, dict[str, Any]]] = [
        ("exec.read", {**scope, "execution_id": "ex_x", "source": "detection"}),
        ("exec.observe", {**scope, "items": [
            {"execution_id": "ex_x"}, {"execution_id": "ex_x", "source": "detection"}]}),
        ("exec.wait", {**scope, "execution_ids": ["ex_x"], "events": ["busy"]})]
    for (method, _), reply in zip(requests, raw_replies(info, [1, 1], requests), strict=True):
        assert reply["error"]["code"] == "capability_missing", (method, reply)
        assert reply["error"]["data"]["capability"] == "recognition"


async def test_a_guardian_without_list_pages_refuses_before_itself(
    tether_env: Config, workspace: Path
) -> None:
    """A 1.6 guardian would ignore a listing's ``before`` and answer with the newest page
    again: it refuses it itself, for a client other than this front-end."""
    info = start_guardian(workspace, tether_env, "1.6")
    [reply] = raw_replies(info, [1, 6], [("exec.list", {
        "principal": "local", "workspace_root": str(workspace), "thread_id": "th_x",
        "before": 5})])
    assert reply["error"]["code"] == "capability_missing", reply
    assert reply["error"]["data"]["capability"] == "list_pages"


async def test_doctor_asks_to_restart_a_guardian_older_than_this_front_end(
    tether_env: Config, workspace: Path
) -> None:
    start_guardian(workspace, tether_env, "1.5")
    tether = str(Path(sys.executable).with_name("tether"))
    done = subprocess.run([tether, "doctor"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout  # something needs action
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "speaks protocol 1.5" in line)
    assert lines[at].startswith("ACTION"), lines[at]
    lacks = capabilities_for(known_minor_versions()[-1]) - capabilities_for(Version(1, 5))
    assert f"lacks {', '.join(sorted(lacks))}," in lines[at], lines[at]
    # A guardian of this build, told to speak 1.5, can hand itself over to the installed
    # code (docs/protocol.md#live-upgrade): upgrade, which keeps its terminals, is the fix.
    assert lines[at + 1].strip().startswith(
        f"fix: tether guardians upgrade --workspace {workspace}"), lines[at + 1]
    assert "nothing needs action" not in done.stdout
