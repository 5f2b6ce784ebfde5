"""Bad input is refused whole, never altered, and starts nothing (issue 12,
docs/security.md#local-permissions-and-limits).

NUL bytes and out-of-range integers are ``invalid_request`` on both sides of the wire; a
workspace too broad to be one (``/``, the home directory) is ``workspace_too_broad``; every
directory and file under both roots is private (0700 / 0600).
"""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from mcp import Client

from tests.helpers import poll, processes_with_env, start_guardian, tether_processes
from tests.mcp_helpers import bash, call, call_error, execution, initialize, run
from tether.frontend.guardians.locator import guardian_command
from tether.frontend.tools.registry import all_tools
from tether.frontend.transport.mcp_server import build_server
from tether.protocol import codec
from tether.protocol.method_table import METHODS
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio


def _bash_args(session: dict[str, Any], action: dict[str, Any]) -> dict[str, Any]:
    return {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": action}


async def test_nul_is_refused_never_dropped(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    marker = workspace / "nulbyte"
    refused = await call_error(client, "BashCommand", _bash_args(
        session, {"type": "command", "command": f"touch {workspace}/nul\x00byte"}))
    assert refused["code"] == "invalid_request"
    offset = len(f"touch {workspace}/nul")
    assert refused["data"] == {"input_sent": False, "field": "action_json.command",
                               "offset": offset}
    assert f"offset {offset}" in refused["message"] and "NUL" in refused["message"]
    text = await call_error(client, "BashCommand", _bash_args(
        session, {"type": "send_text", "text": "a\x00b"}))
    assert (text["code"], text["data"]["field"], text["data"]["offset"]) == (
        "invalid_request", "action_json.text", 1)
    prompt = await call_error(client, "Agent", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action": "prompt", "target": "ex_x", "prompt_id": "p", "text": "\x00"})
    assert (prompt["code"], prompt["data"]["field"]) == ("invalid_request", "text")
    listed = (await execution(client, session, {"type": "list"}))["data"]["executions"]
    assert listed == [] and not marker.exists()
    # NUL can still be typed on purpose, as a key.
    cat = await bash(client, session, {"type": "command", "command": "cat -v", "is_background": True})
    await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-@", "Enter"],
                                 "execution_id": cat["execution_id"]})
    screen = await bash(client, session, {"type": "screen", "execution_id": cat["execution_id"]})
    assert "^@" in screen["screen"]["text"]


@pytest.mark.parametrize(("tool", "where", "value"), [
    ("BashCommand", "generation", 2**64),
    ("BashCommand", "generation", -(2**70)),
    ("Execution", "page_bytes", 2**64),
    ("Execution", "limit", 2**64),
    ("BashCommand", "rows", 2**64),
])
async def test_out_of_range_integers_are_invalid_requests(
    tool: str, where: str, value: int, client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    if tool == "BashCommand":
        action: dict[str, Any] = {"type": "command", "command": "touch big", where: value}
        refused = await call_error(client, tool, _bash_args(session, action))
    elif where == "page_bytes":
        refused = await call_error(client, tool, {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action": {"type": "observe", "items": [{"execution_id": "ex_a", where: value}]}})
    else:
        refused = await call_error(client, tool, {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action": {"type": "list", where: value}})
    assert refused["code"] == "invalid_request", refused
    assert where in refused["message"] and refused["data"]["input_sent"] is False
    assert not (workspace / "big").exists()


def _integer_fields(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every integer-typed subschema of a JSON schema, with a path (``$defs`` resolved)."""
    found: list[tuple[str, dict[str, Any]]] = []
    stack: list[tuple[str, Any]] = [("", schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "integer":
                found.append((path, node))
            stack.extend((f"{path}/{key}", child) for key, child in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}/{i}", child) for i, child in enumerate(node))
    return found


def test_every_integer_on_either_side_has_a_range() -> None:
    schemas = {f"tool {tool.name}": tool.args_model.model_json_schema() for tool in all_tools()}
    schemas.update({f"method {name}": method.params.model_json_schema()
                    for name, method in METHODS.items()})
    checked = 0
    for owner, schema in schemas.items():
        for path, node in _integer_fields(schema):
            checked += 1
            assert "minimum" in node or "exclusiveMinimum" in node, f"{owner} {path}"
            assert "maximum" in node or "exclusiveMaximum" in node, f"{owner} {path}"
            assert node.get("maximum", 0) < 2**63, f"{owner} {path}"
    assert checked > 20  # the walk found the fields (generation, rows, limit, ...)


def test_guardian_refuses_what_the_front_end_refuses(tether_env: Config, workspace: Path) -> None:
    """Both sides of the wire: a raw request with NUL or a huge integer is invalid_request."""
    info = start_guardian(workspace, tether_env)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(info["endpoint"])

    def ask(method: str, params: dict[str, Any]) -> dict[str, Any]:
        sock.send(codec.encode({
            "v": [1, 2], "id": f"r{time.monotonic_ns()}", "method": method, "params": params,
            "deadline_unix_ms": int((time.time() + 30) * 1000),
            "guardian_instance_id": info["instance_id"], "auth": info["auth_token"]}))
        assert sock.poll(10_000), "no reply"
        reply: dict[str, Any] = codec.decode(sock.recv())
        return reply

    try:
        base = {"principal": "local", "workspace_root": str(workspace)}
        thread = ask("thread.open", base)["result"]["thread_id"]
        start = {**base, "thread_id": thread, "idempotency_key": "k1", "background": True}
        nul = ask("exec.start", {**start, "command": "touch x\x00y"})["error"]
        assert nul["code"] == "invalid_request"
        assert nul["data"] == {"input_sent": False, "field": "command", "offset": 7}
        big = ask("exec.start", {**start, "idempotency_key": "k2", "command": "touch z",
                                 "generation": 2**63})["error"]
        assert big["code"] == "invalid_request" and "generation" in big["message"]
        listed = ask("exec.list", {**base, "thread_id": thread})["result"]["executions"]
        assert listed == []
    finally:
        sock.close(0)
        ctx.term()


@pytest.mark.parametrize("where", ["root", "home", "home_parent"])
async def test_too_broad_workspaces_start_nothing(where: str, tether_env: Config) -> None:
    home = Path(os.environ["HOME"]).resolve()
    root = {"root": Path("/"), "home": home, "home_parent": home.parent}[where]
    async with Client(build_server(tether_env)) as client:
        refused = await call_error(client, "Initialize", {"type": "first_call",
                                                          "workspace_root": str(root)})
        assert refused["code"] == "workspace_too_broad"
        assert "TETHER_ALLOW_BROAD_WORKSPACES" in refused["message"]
        other = await call_error(client, "BashCommand", {
            "thread_id": "th_x", "workspace_root": str(root),
            "action_json": {"type": "command", "command": "true"}})
        assert other["code"] == "workspace_too_broad"
    assert tether_processes(tether_env.runtime_dir, "tether-guardian") == []
    # A guardian started by hand refuses such a root too.
    by_hand = subprocess.run([*guardian_command(), str(root)], capture_output=True, text=True,
                             timeout=30)
    assert by_hand.returncode == 2 and "too broad" in by_hand.stderr


async def test_operator_may_allow_a_broad_workspace(
    tether_env: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Path(os.environ["HOME"]).resolve()
    monkeypatch.setenv("TETHER_ALLOW_BROAD_WORKSPACES", f"/nowhere:{home}")
    async with Client(build_server(Config.from_env())) as client:
        session = await initialize(client, home)
        assert session["workspace_root"] == str(home)
        assert (await run(client, session, "pwd"))["output"].strip() == str(home)


async def test_every_dir_and_file_is_private(client: Client, tether_env: Config,
                                             workspace: Path) -> None:
    session = await initialize(client, workspace)
    await run(client, session, "echo journaled")
    await bash(client, session, {"type": "command", "command": "echo bg", "is_background": True})
    await execution(client, session, {"type": "list"})
    seen = {"dir": 0, "file": 0, "socket": 0}
    for root in (tether_env.state_home, tether_env.runtime_dir):
        for path in [root, *root.rglob("*")]:
            mode = path.lstat().st_mode
            perms = stat.S_IMODE(mode)
            if stat.S_ISDIR(mode):
                seen["dir"] += 1
                assert perms == 0o700, f"{path} is {perms:04o}"
            elif stat.S_ISREG(mode):
                seen["file"] += 1
                assert perms == 0o600, f"{path} is {perms:04o}"
            else:
                seen["socket"] += 1
                assert perms & 0o077 == 0, f"{path} is {perms:04o}"
    assert seen["dir"] >= 6 and seen["file"] >= 4 and seen["socket"] >= 1, seen


async def test_unknown_threads_start_no_guardian(tether_env: Config, tmp_path: Path) -> None:
    """Issue 12 case 4: a thread id that no catalog knows is refused before anything starts."""
    roots = [tmp_path / f"dir{i}" for i in range(5)]
    async with Client(build_server(tether_env)) as client:
        for root in roots:
            root.mkdir()
            refused = await call_error(client, "BashCommand", {
                "thread_id": "th_bogus", "workspace_root": str(root),
                "action_json": {"type": "command", "command": f"touch {root}/ran"}})
            assert refused["code"] == "session_mismatch"
            assert refused["data"]["input_sent"] is False
            assert "nothing was started" in refused["message"]
        listed = await call_error(client, "Execution", {
            "thread_id": "th_bogus", "workspace_root": str(roots[0]), "action": {"type": "list"}})
        assert listed["code"] == "session_mismatch"
        reattach = await call_error(client, "Initialize", {
            "type": "first_call", "workspace_root": str(roots[1]), "thread_id": "th_bogus"})
        assert reattach["code"] == "session_mismatch"
        # A real thread of another workspace is not a thread of this one either.
        session = await initialize(client, roots[2])
        other = await call_error(client, "BashCommand", {
            "thread_id": session["thread_id"], "workspace_root": str(roots[3]),
            "action_json": {"type": "command", "command": "true"}})
        assert other["code"] == "session_mismatch"
    guardians = tether_processes(tether_env.runtime_dir, "tether-guardian")
    assert [g.pid for g in guardians] == [session["guardian"]["pid"]]
    assert not any((root / "ran").exists() for root in roots)


def _shells_of(config: Config, thread_id: str) -> list[int]:
    return [p.pid for p in processes_with_env("TETHER_THREAD_ID", thread_id)
            if p.environ().get("TETHER_RUNTIME_DIR") == str(config.runtime_dir)]


async def _ran_then_lost(client: Client, workspace: Path, command: str, *,
                         crash: bool) -> dict[str, Any]:
    """A session that ran ``command``, whose guardian then stopped (SIGTERM) or crashed."""
    session = await initialize(client, workspace)
    await run(client, session, command)
    guardian = psutil.Process(session["guardian"]["pid"])
    if crash:
        guardian.kill()
    else:
        guardian.terminate()
    guardian.wait(timeout=10)
    return session


async def test_status_of_a_crashed_guardians_thread_writes_nothing(
        tether_env: Config, workspace: Path) -> None:
    """Initialize {type: status} changes nothing, also when the thread's guardian crashed:
    its catalog, log and log index keep every byte (before: opening the catalog mode=ro
    rebuilt the crashed guardian's log index, rewriting the -shm file)."""
    async with Client(build_server(tether_env)) as client:
        session = await _ran_then_lost(client, workspace, "echo before-the-crash", crash=True)
        catalog = guardian_paths(tether_env, "local", str(workspace)).catalog
        files = [catalog.with_name(catalog.name + end) for end in ("", "-wal", "-shm")]
        before = [(path.read_bytes(), path.stat().st_mtime_ns) for path in files]
        status = (await call(client, "Initialize", {
            "type": "status", "workspace_root": str(workspace),
            "thread_id": session["thread_id"]}))["data"]
        assert (status["guardian"]["running"], status["shell_running"]) == (False, False)
        assert status["generation"] == session["generation"]
        assert [(path.read_bytes(), path.stat().st_mtime_ns) for path in files] == before
        assert tether_processes(tether_env.runtime_dir, "tether-guardian") == []


async def test_status_and_screen_start_no_shell(tether_env: Config, workspace: Path) -> None:
    """Issue 12 case 9: Initialize {type: status} and BashCommand {type: screen} without an
    execution id look, and start nothing: no shell, so no new generation."""
    async with Client(build_server(tether_env)) as client:
        session = await _ran_then_lost(client, workspace, "cd sub", crash=False)
        poll(lambda: not _shells_of(tether_env, session["thread_id"]), what="shell to end")
        status_args = {"type": "status", "workspace_root": str(workspace),
                       "thread_id": session["thread_id"]}
        offline = (await call(client, "Initialize", status_args))["data"]
        assert offline["guardian"]["running"] is False
        assert (offline["generation"], offline["shell_running"]) == (session["generation"], False)
        assert offline["cwd"] == str(workspace / "sub")
        assert tether_processes(tether_env.runtime_dir, "tether-guardian") == []

        screen = await bash(client, session, {"type": "screen"})  # a guardian serves the read
        assert screen["screen"]["shell_running"] is False and screen["screen"]["text"] == ""
        online = (await call(client, "Initialize", status_args))["data"]
        assert online["guardian"]["running"] is True
        assert (online["generation"], online["shell_running"]) == (session["generation"], False)
        assert _shells_of(tether_env, session["thread_id"]) == []

        ran = await run(client, session, "pwd")  # the next command starts the next shell
        assert ran["generation"] == session["generation"] + 1
        after = (await call(client, "Initialize", status_args))["data"]
        assert (after["generation"], after["shell_running"]) == (session["generation"] + 1, True)
        no_thread = (await call(client, "Initialize", {"type": "status",
                                                       "workspace_root": str(workspace)}))
        assert no_thread["data"]["thread_id"] is None
