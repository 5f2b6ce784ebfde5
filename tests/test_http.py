"""``tether serve --http`` as a real process, driven by the SDK's streamable HTTP client
(docs/security.md#profiles-and-modes, docs/security.md#principals): bearer tokens, principals kept apart,
profiles, workspaces, Host checks, and
tokens that never leak."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.helpers import processes_with_env
from tests.mcp_helpers import (
    call,
    call_error,
    execution,
    http_client,
    http_server,
    initialize,
    run,
    write_principals,
)
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

ALICE, BOB, READER, WATCHER = (secrets.token_urlsafe(32) for _ in range(4))
INIT_REQUEST = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


@pytest.fixture
def principals(tmp_path: Path, workspace: Path) -> Path:
    other = tmp_path / "elsewhere"
    other.mkdir()
    return write_principals(tmp_path / "principals.toml", [
        {"id": "alice", "token": ALICE, "profile": "full"},
        {"id": "bob", "token_sha256": hashlib.sha256(BOB.encode()).hexdigest(),
         "profile": "coding"},
        {"id": "reader", "token": READER, "profile": "read-only", "workspaces": [str(other)]},
        {"id": "watcher", "token": WATCHER, "profile": "read-only",
         "allow_tools": ["Execution", "Agent"]},
    ])


def _scoped(session: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            **extra}


async def test_principals_cannot_see_each_other(tether_env: Config, principals: Path,
                                                workspace: Path) -> None:
    with http_server(principals) as url:
        async with http_client(url, ALICE) as alice, http_client(url, BOB) as bob:
            a = await initialize(alice, workspace)
            b = await initialize(bob, workspace)
            assert (a["principal"], b["principal"]) == ("http:alice", "http:bob")
            assert a["guardian"]["instance_id"] != b["guardian"]["instance_id"]
            secret = await run(alice, a, "printf 'alice-secret-%s\\n' 1 2 3 4 5 6 7 8 9")
            mine = await run(bob, b, "echo bob-own")
            a_id, b_id = secret["execution_id"], mine["execution_id"]
            page = (await execution(alice, a, {"type": "read", "execution_id": a_id,
                                               "page_bytes": 16}))["data"]
            assert page["has_more"] and page["next_cursor"]

            listed = (await execution(bob, b, {"type": "list"}))["data"]["executions"]
            assert [r["execution_id"] for r in listed] == [b_id]
            # Each refusal is exactly what an id that never existed gets: nothing leaks.
            for target in (a_id, "ex_doesnotexist0000"):
                for action in ({"type": "get", "execution_id": target},
                               {"type": "read", "execution_id": target},
                               {"type": "explain", "execution_id": target},
                               {"type": "wait", "execution_ids": [target], "timeout_seconds": 0}):
                    err = await execution(bob, b, action, expect_error=True)
                    assert err["code"] == "not_found", (action, err)
                    assert "alice" not in json.dumps(err)
                observed = await execution(bob, b, {"type": "observe", "timeout_seconds": 0,
                                                    "items": [{"execution_id": target}]})
                assert observed["code"] == "execution_observation_issues"
                assert [e["code"] for e in observed["data"]["items"][0]["errors"]] == ["not_found"]
                agent = await call_error(bob, "Agent", _scoped(b, action="get", target=target))
                assert agent["code"] == "not_found"
            stolen = await execution(bob, b, {"type": "read", "execution_id": b_id,
                                              "cursor": page["next_cursor"]}, expect_error=True)
            assert stolen["code"] == "invalid_cursor"
            for thread in (a["thread_id"], "th_doesnotexist00"):
                foreign = await call_error(bob, "BashCommand", {
                    "thread_id": thread, "workspace_root": str(workspace),
                    "action_json": {"type": "command", "command": "echo hijack"}})
                assert foreign["code"] == "session_mismatch"
                reattach = await call_error(bob, "Initialize", {
                    "workspace_root": str(workspace), "thread_id": thread})
                assert reattach["code"] == "session_mismatch"
            # Alice still sees her own, untouched.
            again = (await execution(alice, a, {"type": "list"}))["data"]["executions"]
            assert [r["execution_id"] for r in again] == [a_id]


async def test_a_bad_token_is_401_and_runs_nothing(tether_env: Config, principals: Path,
                                                   workspace: Path) -> None:
    call_args = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "BashCommand", "arguments": {"thread_id": "th_x", "workspace_root": str(workspace),
                                             "action_json": {"type": "command",
                                                             "command": "touch pwned"}}}}
    headers = {"Accept": "application/json, text/event-stream"}
    with http_server(principals) as url:
        async with httpx2.AsyncClient() as raw:
            for auth in ({}, {"Authorization": "Bearer " + "x" * 43},
                         {"Authorization": f"Bearer {ALICE[:-1]}"}, {"Authorization": ALICE}):
                for body in (INIT_REQUEST, call_args):
                    reply = await raw.post(url, json=body, headers={**headers, **auth})
                    assert reply.status_code == 401, (auth, reply.text)
                    assert "invalid_token" in reply.text
        statuses: list[int] = []
        with pytest.raises(Exception):  # noqa: B017 - the SDK reports the 401 as an MCPError group
            async with http_client(url, "not-a-token", statuses) as client:
                await client.list_tools()
        assert statuses and set(statuses) == {401}
    assert not (workspace / "pwned").exists()
    assert list(tether_env.runtime_dir.glob("*/guardian.json")) == []  # no guardian was started


async def test_host_and_origin_are_checked(tether_env: Config, principals: Path) -> None:
    headers = {"Accept": "application/json, text/event-stream",
               "Authorization": f"Bearer {ALICE}"}
    with http_server(principals, "--allowed-host", "tether.test") as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        async with httpx2.AsyncClient() as raw:
            ok = await raw.post(url, json=INIT_REQUEST, headers=headers)
            assert ok.status_code == 200, ok.text
            named = await raw.post(url, json=INIT_REQUEST, headers={
                **headers, "Host": f"tether.test:{port}", "Origin": f"https://tether.test:{port}"})
            assert named.status_code == 200, named.text
            rebound = await raw.post(url, json=INIT_REQUEST,
                                     headers={**headers, "Host": "evil.example:80"})
            assert rebound.status_code == 421
            page = await raw.post(url, json=INIT_REQUEST,
                                  headers={**headers, "Origin": "http://evil.example"})
            assert page.status_code == 403


async def test_profiles_decide_listed_and_callable_tools(tether_env: Config, principals: Path,
                                                         workspace: Path, tmp_path: Path) -> None:
    with http_server(principals) as url:
        async with http_client(url, ALICE) as alice:
            tools = {t.name: t for t in (await alice.list_tools()).tools}
            assert sorted(tools) == ["Agent", "BashCommand", "EditFiles", "Execution",
                                     "Initialize", "ReadFiles"]
            # The server tells the SDK there are no Mcp-Param headers to check: keep it true.
            assert "x-mcp-header" not in json.dumps([t.input_schema for t in tools.values()])
            hints = {name: (t.annotations.read_only_hint, t.annotations.destructive_hint,
                            t.annotations.open_world_hint)
                     for name, t in tools.items() if t.annotations and name != "Initialize"}
            assert hints == {"Execution": (True, False, False), "Agent": (False, True, True),
                             "BashCommand": (False, True, True),
                             "ReadFiles": (True, False, False), "EditFiles": (False, True, False)}
        async with http_client(url, READER) as reader:
            assert sorted(t.name for t in (await reader.list_tools()).tools) == [
                "Execution", "Initialize"]
            for tool, args in (("BashCommand", {"action_json": {"type": "command",
                                                                "command": "touch pwned"}}),
                               ("Agent", {"action": "list"})):
                err = await call_error(reader, tool, {"thread_id": "th_x",
                                                      "workspace_root": str(workspace), **args})
                assert err["code"] == "tool_denied" and "read-only" in err["message"], err
            denied = await call_error(reader, "Initialize", {"workspace_root": str(workspace)})
            assert denied["code"] == "workspace_denied"
            assert str(tmp_path / "elsewhere") in denied["message"]
            allowed = await initialize(reader, tmp_path / "elsewhere")
            assert allowed["profile"] == "read-only"
            reset = await call_error(reader, "Initialize", {
                "type": "reset_shell", "workspace_root": str(tmp_path / "elsewhere"),
                "thread_id": allowed["thread_id"]})
            assert reset["code"] == "tool_denied"
        async with http_client(url, WATCHER) as watcher:
            assert sorted(t.name for t in (await watcher.list_tools()).tools) == [
                "Agent", "Execution", "Initialize"]
            session = await initialize(watcher, workspace)
            listed = await call(watcher, "Agent", _scoped(session, action="list"))
            assert listed["data"]["agents"] == []
            err = await call_error(watcher, "Agent", _scoped(
                session, action="prompt", target="ex_anything", prompt_id="p1", text="rm -rf /"))
            assert err["code"] == "tool_denied" and "observation only" in err["message"], err
            assert err["data"] == {"action": "prompt", "rule": "bash_authority",
                                   "input_sent": False}
    assert not (workspace / "pwned").exists()


async def test_tokens_never_leak(tether_env: Config, principals: Path, workspace: Path,
                                 tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with http_server(principals, log=log) as url:
        async with http_client(url, ALICE) as alice:
            session = await initialize(alice, workspace)
            env = await run(alice, session, "env; ps -eo args")
            assert env["exit_code"] == 0 and "TETHER_THREAD_ID" in env["output"]
        with pytest.raises(Exception):  # noqa: B017 - a refused token (401) is logged, if at all,
            async with http_client(url, "wrong" * 10) as bad:  # without the token
                await bad.list_tools()
        places: dict[str, str] = {"command output": env["output"], "serve log": log.read_text()}
        for path in [*tether_env.runtime_dir.rglob("*"), *tether_env.state_home.rglob("*")]:
            if path.is_file() and not path.is_socket():
                places[str(path)] = path.read_bytes().decode(errors="replace")
        for proc in processes_with_env("TETHER_RUNTIME_DIR", str(tether_env.runtime_dir)):
            places[f"pid {proc.pid} argv"] = " ".join(proc.cmdline())
            places[f"pid {proc.pid} env"] = json.dumps(proc.environ())
        assert any("guardian.json" in where for where in places)
        assert any("argv" in where and "serve" in text for where, text in places.items())
        for token in (ALICE, BOB, READER, WATCHER):
            leaks = [where for where, text in places.items() if token in text]
            assert leaks == [], leaks


@pytest.mark.parametrize(("change", "rule"), [
    ({"mode": 0o644}, "mode 0644"),
    ({"token": "short-token-of-31-bytes-xxxxxxx"}, "at least 32 bytes"),
    ({"extra": {"colour": "blue"}}, "unknown keys ['colour']"),
    ({"extra": {"profile": "admin"}}, "profile must be one of"),
    ({"extra": {"profile": "read-only", "allow_tools": ["BashCommand"]}},
     "cannot grant BashCommand"),
    ({"twice": True}, "used twice"),
])
def test_bad_principals_files_are_refused_at_start(tether_env: Config, tmp_path: Path,
                                                   change: dict[str, Any], rule: str) -> None:
    entry: dict[str, Any] = {"id": "alice", "token": change.get("token", ALICE),
                             "profile": "full"}
    entry.update(change.get("extra", {}))
    entries = [entry, {**entry, "token": BOB}] if change.get("twice") else [entry]
    path = write_principals(tmp_path / "p.toml", entries, mode=change.get("mode", 0o600))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tether")), "serve", "--http", "--port", "0",
         "--principals", str(path)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done
    assert rule in done.stderr and str(path) in done.stderr, done.stderr
    assert ALICE not in done.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_principals_file_of_another_user_is_refused(tether_env: Config, principals: Path) -> None:
    os.chown(principals, 65534, 65534)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("tether")), "serve", "--http", "--port", "0",
         "--principals", str(principals)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "owned by uid 65534, not by you" in done.stderr, done.stderr


def test_a_remote_host_needs_a_flag_and_says_so(tether_env: Config, principals: Path) -> None:
    tether = str(Path(sys.executable).with_name("tether"))
    refused = subprocess.run([tether, "serve", "--http", "--host", "0.0.0.0", "--port", "0",
                              "--principals", str(principals)],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "--allow-remote" in refused.stderr
    with http_server(principals, "--host", "0.0.0.0", "--allow-remote") as url:
        assert "reachable from other machines" in principals.with_suffix(".log").read_text()
        assert url.startswith("http://0.0.0.0:")


async def test_a_long_wait_streams_over_http(tether_env: Config, principals: Path,
                                            workspace: Path) -> None:
    """A command that outlasts a progress interval finishes over the same HTTP session."""
    with http_server(principals) as url:
        async with http_client(url, ALICE) as alice:
            session = await initialize(alice, workspace)
            slow = await run(alice, session, "sleep 1.5; echo done", wait=10)
            assert slow["exit_code"] == 0 and slow["output"].strip() == "done"

