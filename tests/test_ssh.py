"""Workspaces on other hosts over SSH (docs/hosts.md), through ``tether serve`` over stdio and
a real OpenSSH server on 127.0.0.1 whose "remote" side shares nothing with the local one but
the SSH link (``tests/ssh_host.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.helpers import kill_tree, poll
from tests.mcp_helpers import (
    agent,
    bash,
    call,
    call_error,
    execution,
    initialize,
    kill_front_end,
    prompt_log,
    run,
    write_principals,
)
from tests.ssh_host import SshHost
from tether.frontend.guardians.health import restart_command
from tether.frontend.guardians.ssh_link import SshSettings
from tether.frontend.policy.principals import load_principals
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.errors import TetherError
from tether.shared.config import Config
from tether.shared.ssh_target import RemoteWorkspace
from tether.shared.ssh_target import SshHost as Target

pytestmark = pytest.mark.anyio

FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"
TETHER = str(Path(sys.executable).with_name("tether"))


@pytest.fixture
def ssh_host(tether_env: Config, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshHost]:
    """A running sshd, the front-end's environment pointed at it; everything either side
    started is stopped afterwards."""
    host = SshHost(tether_env.state_home.parent)
    for name, value in host.env().items():
        monkeypatch.setenv(name, value)
    host.start()
    try:
        yield host
    finally:
        for master in host.masters(tether_env.runtime_dir):
            with contextlib.suppress(psutil.Error):
                master.kill()
        host.stop()
        kill_tree(host.remote_runtime)


async def initialize_remote(client: Client, url: str,
                            thread_id: str | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"type": "first_call", "workspace_root": url}
    if thread_id:
        args["thread_id"] = thread_id
    data: dict[str, Any] = (await call(client, "Initialize", args))["data"]
    return data


def remote_workspace(host: SshHost) -> Path:
    root = host.base / "rws"
    (root / "sub").mkdir(parents=True, exist_ok=True)
    return root


def kill_masters(host: SshHost, config: Config) -> list[int]:
    masters = poll(lambda: host.masters(config.runtime_dir), what="an ssh master")
    for master in masters:
        master.kill()
    psutil.wait_procs(masters, timeout=5)
    return [m.pid for m in masters]


def remote_guardians(host: SshHost) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in host.remote_runtime.glob("*/guardian.json")]


def test_ssh_urls_are_parsed_and_checked() -> None:
    parsed = RemoteWorkspace.parse("ssh://me@build-box:2222/srv/./app/")
    assert parsed.host == Target(host="build-box", user="me", port=2222)
    assert parsed.path == "/srv/app" and parsed.url == "ssh://me@build-box:2222/srv/app"
    assert RemoteWorkspace.parse("ssh://[::1]/x").host.destination() == ["::1"]
    assert restart_command("ssh://me@box:2222/srv/app") == (
        "tether guardians restart --host me@box:2222 --workspace /srv/app --yes")
    for bad in ("ssh://-oProxyCommand=x/tmp", "ssh://host", "ssh://host:0/x", "ssh://a b/x",
                "ssh://u;rm@host/x", "ssh:///x"):
        with pytest.raises(TetherError) as refused:
            RemoteWorkspace.parse(bad)
        assert refused.value.code == "invalid_request", bad
        assert refused.value.data["input_sent"] is False


def test_ssh_settings_come_from_the_environment(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.toml"
    hosts.write_text('[hosts."build-box"]\ntether = "/opt/tether/bin/tether"\n')
    settings = SshSettings.from_env({"TETHER_HOSTS_FILE": str(hosts), "TETHER_SSH": "/x/ssh",
                                     "TETHER_SSH_IDLE_S": "30"})
    assert (settings.program, settings.idle_s) == ("/x/ssh", 30)
    assert settings.tether_paths == {"build-box": "/opt/tether/bin/tether"}
    for bad in ("0", "soon"):
        with pytest.raises(TetherError) as refused:
            SshSettings.from_env({"TETHER_SSH_IDLE_S": bad, "HOME": str(tmp_path)})
        assert refused.value.code == "config_invalid" and "TETHER_SSH_IDLE_S" in \
            refused.value.message


def test_a_principal_may_be_given_workspaces_on_a_host(tmp_path: Path) -> None:
    path = write_principals(tmp_path / "principals.toml", [{
        "id": "ci", "token": "t" * 32, "profile": "full",
        "workspaces": ["ssh://build-box/srv/./ci/"]}])
    caller = load_principals(path).callers()["ci"]
    caller.check_workspace("ssh://build-box/srv/ci/app")
    for elsewhere in ("ssh://build-box/srv/other", "ssh://other-box/srv/ci/app", "/srv/ci/app"):
        with pytest.raises(TetherError) as denied:
            caller.check_workspace(elsewhere)
        assert denied.value.code == "workspace_denied", elsewhere


async def test_a_missing_ssh_program_is_host_unreachable(
        tether_env: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_SSH", str(tether_env.state_home / "no-ssh-here"))
    async with Client(build_server(Config.from_env())) as client:
        refused = await call_error(client, "Initialize", {
            "type": "first_call", "workspace_root": "ssh://build-box/srv/app"})
    assert refused["code"] == "host_unreachable", refused
    assert refused["data"]["input_sent"] is False and refused["data"]["host"] == "build-box"
    assert "cannot run" in refused["data"]["ssh_error"]


async def test_remote_workspace_end_to_end(ssh_host: SshHost, tether_env: Config,
                                           tmp_path: Path) -> None:
    root = remote_workspace(ssh_host)
    url = ssh_host.url(root)
    client = Client(stdio_params())
    await client.__aenter__()
    try:
        session = await initialize_remote(client, url)
        assert session["workspace_root"] == url
        # The guardian runs on the "remote" side: its files are there, none are here.
        (info,) = remote_guardians(ssh_host)
        assert info["workspace_root"] == str(root)
        assert session["guardian"]["instance_id"] == info["instance_id"]
        assert not list(tether_env.runtime_dir.glob("*/guardian.json"))
        assert session["cwd"] == str(root)

        first = await run(client, session, "cd sub && export LEFT=$((6*7)) && echo $HOME")
        assert first["exit_code"] == 0 and first["cwd"] == str(root / "sub")
        assert first["output"].strip() == str(ssh_host.remote_home)
        failed = await run(client, session, "(exit 3)")
        assert failed["exit_code"] == 3

        server = await bash(client, session, {
            "type": "command", "is_background": True,
            "command": f"{sys.executable} -u -m http.server 0 --bind 127.0.0.1"})
        serving = server["execution_id"]

        async def announced() -> bool:
            status = await bash(client, session, {"type": "status_check",
                                                  "execution_id": serving})
            return "Serving HTTP" in status["output"]

        await apoll_async(announced, what="the background server's banner")

        listed = (await execution(client, session, {"type": "list"}))["data"]["executions"]
        commands = [r["command"] for r in listed]  # newest first
        assert commands[1:3] == ["(exit 3)", "cd sub && export LEFT=$((6*7)) && echo $HOME"]
        page = (await execution(client, session, {"type": "read", "execution_id":
                                                  first["execution_id"],
                                                  "source": "output"}))["data"]
        assert str(ssh_host.remote_home) in page["text"]

        # The fake agent, prompted once, on the host.
        log = root / "agent.log"
        started = await bash(client, session, {
            "type": "command", "is_background": True, "rows": 40, "cols": 120,
            "command": f"{sys.executable} {FAKE_AGENT} --log {log}"})
        eid = started["execution_id"]
        turn = await bash(client, session, {"type": "wait_for_turn", "execution_id": eid,
                                            "recognizer": "claude", "timeout_seconds": 15})
        assert turn["outcome"] == "turn_ready", turn
        prompt = {"action": "prompt", "target": eid, "prompt_id": "p1", "text": "hello there",
                  "recognizer": "claude", "timeout_seconds": 15}
        receipt = (await agent(client, session, prompt))["data"]["receipt"]
        assert receipt["delivered"] is True
        assert prompt_log(log) == ["hello there"]

        # The master connection dies mid-command: the call's answer is lost (delivery
        # unknown, never typed again); the command runs on and its true end is seen next.
        pending = asyncio.ensure_future(client.call_tool("BashCommand", {
            "thread_id": session["thread_id"], "workspace_root": url, "wait_for_seconds": 10,
            "action_json": {"type": "command", "command": "sleep 1; (exit 7)"}}))
        await asyncio.sleep(0.4)
        kill_masters(ssh_host, tether_env)
        lost = await pending
        said = lost.structured_content
        assert said is not None
        if lost.is_error:  # the repeat met the first delivery still under way
            assert said["code"] == "delivery_unknown", said
            assert said["data"]["input_sent"] == "unknown" and said["data"]["host"] == "tether-test"
        else:  # repeated with the same key: the first delivery's outcome, waited on to its end
            assert said["data"]["exit_code"] == 7, said
        ended = await bash(client, session, {"type": "status_check"}, wait=10)
        assert (ended["status"], ended["exit_code"]) == ("exited", 7), ended
        again = [r for r in (await execution(client, session, {"type": "list"}))["data"][
            "executions"] if r["command"] == "sleep 1; (exit 7)"]
        assert len(again) == 1

        # A read waiting when the link drops is asked again on the new one, unseen.
        late = await bash(client, session, {"type": "command", "is_background": True,
                                            "command": "sleep 1; echo late"})
        waiting = asyncio.ensure_future(bash(client, session, {
            "type": "status_check", "execution_id": late["execution_id"]}, wait=10))
        await asyncio.sleep(0.4)
        kill_masters(ssh_host, tether_env)
        seen = await waiting
        assert (seen["status"], seen["exit_code"]) == ("exited", 0), seen
        assert "late" in seen["output"]

        # The host goes away: calls are host_unreachable, naming it and ssh's error. (A call
        # sent in the instant before the master sees its connection gone went out on it:
        # that one is honestly delivery_unknown. So the master's end is waited for first.)
        ssh_host.stop()
        poll(lambda: not ssh_host.masters(tether_env.runtime_dir), timeout=15,
             what="the ssh master to see its host gone")
        args = {"thread_id": session["thread_id"], "workspace_root": url,
                "action_json": {"type": "command", "command": "echo never-typed"}}
        refused = await call_error(client, "BashCommand", args)
        assert refused["code"] == "host_unreachable", refused
        assert refused["data"]["input_sent"] is False
        assert refused["data"]["host"] == ssh_host.alias
        assert "refused" in refused["data"]["ssh_error"].lower(), refused

        # It comes back: everything is there, the shell as it was, the server still serving.
        ssh_host.start()
        back = await run(client, session, 'echo "$PWD $LEFT"')
        assert back["output"].strip() == f"{root / 'sub'} 42"
        status = await bash(client, session, {"type": "status_check", "execution_id": serving})
        assert status["status"] == "running"
        commands = [r["command"] for r in (await execution(client, session, {
            "type": "list", "limit": 50}))["data"]["executions"]]
        assert "echo never-typed" not in commands
        (still,) = remote_guardians(ssh_host)
        assert still["instance_id"] == info["instance_id"]
        await run(client, session, "KEPT=over-$((20+2))")
    except BaseException:
        with contextlib.suppress(BaseException):
            await client.__aexit__(None, None, None)
        raise

    # The local front-end and the SSH link die together: a new front-end reattaches to the
    # thread on the host, with its cwd and variables.
    await kill_front_end(client, tether_env)
    kill_masters(ssh_host, tether_env)
    async with Client(stdio_params()) as second:
        reattached = await initialize_remote(second, url, session["thread_id"])
        assert reattached["guardian"]["instance_id"] == info["instance_id"]
        out = await run(second, reattached, 'echo "$PWD $KEPT $LEFT"')
        assert out["output"].strip() == f"{root / 'sub'} over-22 42"


async def apoll_async(check: Any, what: str, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_hosts_check_and_ls_across_hosts(ssh_host: SshHost, tether_env: Config,
                                         workspace: Path) -> None:
    root = remote_workspace(ssh_host)

    async def open_one() -> None:
        async with Client(stdio_params()) as client:
            down = f"{ssh_host.alias}-down"
            nowhere = await call_error(client, "Initialize", {
                "type": "first_call", "workspace_root": f"ssh://{down}{root}"})
            assert nowhere["code"] == "host_unreachable", nowhere
            assert nowhere["data"]["host"] == down and down in nowhere["message"]
            assert nowhere["data"]["input_sent"] is False
            assert "refused" in nowhere["data"]["ssh_error"].lower(), nowhere
            broad = await call_error(client, "Initialize", {
                "type": "first_call", "workspace_root": ssh_host.url(ssh_host.remote_home)})
            assert broad["code"] == "workspace_too_broad", broad  # the host's own home
            assert not remote_guardians(ssh_host)
            session = await initialize_remote(client, ssh_host.url(root))
            await run(client, session, "echo from-the-host")
            # The same path here is another workspace: its own guardian, threads, records.
            same_path = await initialize(client, root)
            assert same_path["guardian"]["instance_id"] != session["guardian"]["instance_id"]
            crossed = await call_error(client, "BashCommand", {
                "thread_id": session["thread_id"], "workspace_root": str(root),
                "action_json": {"type": "command", "command": "echo crossed"}})
            assert crossed["code"] == "session_mismatch", crossed
            here = await initialize(client, workspace)
            parent = (await agent(client, here, {"action": "launch", "provider": "command",
                                                 "argv": ["sleep", "60"]}))["data"]["agent"]

        # A front-end inside that agent launches a child on the host; archiving the parent
        # here detaches the child there (a child elsewhere is never archived with it).
        inside = {"TETHER_EXECUTION_ID": parent["execution_id"],
                  "TETHER_WORKSPACE": str(workspace)}
        async with Client(stdio_params(inside)) as client:
            there = await initialize_remote(client, ssh_host.url(root))
            child = (await agent(client, there, {"action": "launch", "provider": "command",
                                                 "argv": ["sleep", "60"]}))["data"]["agent"]
            assert child["parent_execution_id"] == parent["execution_id"]
            here = await initialize(client, workspace)
            archived = (await agent(client, here, {"action": "archive",
                                                   "target": parent["execution_id"]}))["data"]
            assert archived["archived"] == [parent["execution_id"]]
            assert archived["detached"] == [child["execution_id"]], archived
            kept = (await agent(client, there, {"action": "get",
                                                "target": child["execution_id"]}))["data"]
            assert kept["agent"]["archived_at"] is None, kept

    asyncio.run(open_one())
    env = dict(os.environ)
    checked = subprocess.run([TETHER, "hosts", "check", ssh_host.alias, "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["ssh"]["ok"] and report["python"]["ok"] and report["tether"]["ok"]
    assert report["tether"]["state_home"] == str(ssh_host.remote_state)

    known = subprocess.run([TETHER, "hosts", "ls", "--json"], env=env, capture_output=True,
                           text=True, timeout=30)
    assert json.loads(known.stdout) == [ssh_host.alias]
    on_host = subprocess.run([TETHER, "ls", "--host", ssh_host.alias], env=env,
                             capture_output=True, text=True, timeout=60)
    assert on_host.returncode == 0, on_host.stderr
    assert "echo from-the-host" in on_host.stdout and str(root) in on_host.stdout
    everywhere = subprocess.run([TETHER, "ls", "--all-hosts", "--json"], env=env,
                                capture_output=True, text=True, timeout=60)
    items = json.loads(everywhere.stdout)  # this machine's first, then each host's
    assert sorted(i["guardian"]["workspace_root"] for i in items) == sorted(
        [str(workspace), str(root), ssh_host.url(root)])
    (on_the_host,) = [i for i in items if i["guardian"]["workspace_root"] == ssh_host.url(root)]
    commands = [r["command"] for r in on_the_host["executions"]]
    assert "echo from-the-host" in commands

    eid = on_the_host["executions"][0]["execution_id"]
    shown = subprocess.run([TETHER, "show", eid, "--host", ssh_host.alias, "--json"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert eid in shown.stdout
