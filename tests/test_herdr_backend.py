"""``Agent`` with ``backend: herdr`` (docs/tools.md#herdr-backend) through a real ``tether
serve``, over stdio and over HTTP with two principals, against the scripted fake ``herdr``
(tests/fakes/fake_herdr.py): the bound target works for every action, another principal's
alias does not exist, a hanging prompt is uncertain and never sent twice, and the CLI runs
with literal arguments and no inherited ``HERDR_*`` but the configured socket."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client
from pydantic import TypeAdapter

from tests.conftest import stdio_params
from tests.helpers import apoll
from tests.herdr_helpers import FakeHerdr, agent_info, config_for, write_config
from tests.mcp_helpers import call, call_error, http_client, http_server, initialize, run, write_principals
from tether.frontend.tools.outputs import SHAPES
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio
TETHER = Path(sys.executable).with_name("tether")
ALICE, BOB, CAROL = (secrets.token_urlsafe(32) for _ in range(3))
SCREEN = "\n".join(f"line {i}" for i in range(1, 11))
#: Text a shell would act on, which must reach Herdr as one literal argument.
TRICKY = "fix it; touch {ws}/pwned $(touch {ws}/pwned2) `id` | cat > {ws}/pwned3 &"


def _world() -> dict[str, Any]:
    return {"agents": [agent_info("w1:p1", "term_1"),
                       agent_info("w1:p2", "term_2", "working", agent="codex"),
                       agent_info("w2:p1", "term_9", name="stranger")],
            "screens": {"w1:p1": SCREEN, "w1:p2": "bob's screen"},
            "explain": {"agent": "claude", "state": "idle", "manifest_version": "2026.01.01",
                        "matched_rule": {"id": "idle_prompt", "priority": 10,
                                         "region": "bottom", "state": "idle"}}}


@pytest.fixture
def fake(tmp_path: Path) -> FakeHerdr:
    herdr = FakeHerdr.install(tmp_path / "herdr-bin")
    herdr.write(_world())
    return herdr


def _scoped(session: dict[str, Any], **args: Any) -> dict[str, Any]:
    return {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "backend": "herdr", **args}


def _shaped(data: dict[str, Any]) -> None:
    """Each result's data is one of the Agent tool's published shapes."""
    for shape in SHAPES["Agent"]:
        if shape.__name__.startswith("Herdr"):
            try:
                TypeAdapter(shape).validate_python(data, strict=True)
                return
            except ValueError:
                continue
    raise AssertionError(f"no Herdr shape fits {data}")


def _check_runs(fake: FakeHerdr, socket: Path) -> None:
    """Every run: literal argv, the server itself as its parent (no shell between), and of
    all HERDR_* variables only the configured socket."""
    runs = fake.log()
    assert runs
    for entry in runs:
        assert entry["herdr_env"] == {"HERDR_SOCKET_PATH": str(socket)}, entry
        assert "serve" in entry["parent"] and not entry["parent"][0].endswith("sh"), entry
        assert entry["argv"][0] == "agent"
        assert entry["argv"][1] in ("list", "get", "read", "explain", "wait", "prompt"), entry
        assert not psutil.pid_exists(entry["pid"]) or psutil.Process(entry["pid"]).status() \
            == psutil.STATUS_ZOMBIE, entry  # every run ended (a hung one was killed)


async def test_stdio_every_action_on_a_bound_target(tether_env: Config, tmp_path: Path,
                                                    workspace: Path, fake: FakeHerdr) -> None:
    config = write_config(tmp_path / "herdr.json", config_for(fake, [{
        "principal_key": "local", "workspace_root": str(workspace),
        "targets": {"writer": "term_1", "gone": "term_404"}}], deadline_ms=3000))
    usage = tmp_path / "usage.jsonl"
    env = {"TETHER_HERDR_CONFIG": str(config), "TETHER_USAGE_LOG": str(usage),
           # Inherited HERDR_* never reach the CLI; the configured socket does.
           "HERDR_SOCKET_PATH": "/wrong/socket", "HERDR_PANE_ID": "w7:p7", "HERDR_ENV": "1"}
    async with Client(stdio_params(env)) as client:
        session = await initialize(client, workspace)
        assert session["agent_backends"]["herdr"] == {
            "configuration_present": True, "availability": "unknown",
            "reason": "configuration_not_validated"}
        assert fake.log() == []  # Initialize runs nothing

        listed = (await call(client, "Agent", _scoped(session, action="list")))["data"]
        _shaped(listed)
        # Only this binding's targets; the other terminals Herdr has are not shown.
        assert [(t["target"], t["present"]) for t in listed["targets"]] == [
            ("gone", False), ("writer", True)]
        assert listed["targets"][1]["status"] == "idle"
        assert "term_" not in json.dumps(listed) and "w1:p1" not in json.dumps(listed)

        got = (await call(client, "Agent", _scoped(session, action="get", target="writer")))
        _shaped(got["data"])
        assert got["data"]["agent"]["status"] == "idle" and got["data"]["agent"]["agent"] == "claude"
        absent = await call_error(client, "Agent", _scoped(session, action="get", target="gone"))
        assert absent["code"] == "not_running" and absent["data"]["input_sent"] is False

        read = (await call(client, "Agent", _scoped(session, action="read", target="writer",
                                                    lines=3)))["data"]
        _shaped(read)
        assert read["text"] == "line 8\nline 9\nline 10" and read["lines"] == 3
        assert fake.runs("agent", "read")[-1]["argv"] == [
            "agent", "read", "w1:p1", "--source", "recent", "--lines", "3"]
        await call(client, "Agent", _scoped(session, action="read", target="writer"))
        assert fake.runs("agent", "read")[-1]["argv"][-1] == "100"  # the default
        over = await call_error(client, "Agent", _scoped(session, action="read",
                                                         target="writer", lines=1001))
        assert over["code"] == "invalid_request" and "1000" in over["message"]

        explained = (await call(client, "Agent", _scoped(session, action="explain",
                                                         target="writer")))["data"]
        _shaped(explained)
        assert explained["explain"]["matched_rule"]["id"] == "idle_prompt"

        # A wait that Herdr answers once the state moves (the test moves it).
        fake.write({**_world(), "agents": [agent_info("w1:p1", "term_1", "working")]})

        async def finish_turn() -> None:
            await apoll(lambda: fake.runs("agent", "wait"), what="the wait to start")
            fake.write(_world())

        mover = asyncio.ensure_future(finish_turn())
        waited = (await call(client, "Agent", _scoped(session, action="wait", target="writer",
                                                      until="idle", timeout_seconds=5)))["data"]
        await mover
        _shaped(waited)
        assert waited["outcome"] == "matched" and waited["agent"]["status"] == "idle"
        # deadline_ms caps the wait: 30 s asked, the call ends within the 3 s deadline.
        started = time.monotonic()
        capped = (await call(client, "Agent", _scoped(session, action="wait", target="writer",
                                                      until=["blocked", "working"],
                                                      timeout_seconds=30)))["data"]
        assert capped["outcome"] == "timeout" and capped["timeout_ms"] <= 3000 - 750
        assert time.monotonic() - started < 5  # not the 30 s asked for
        assert fake.runs("agent", "wait")[-1]["argv"][3:7] == [
            "--until", "blocked", "--until", "working"]

        text = TRICKY.format(ws=workspace)
        prompted = (await call(client, "Agent", _scoped(session, action="prompt",
                                                        target="writer", text=text)))["data"]
        _shaped(prompted)
        assert prompted["acknowledged"] is True and prompted["completion_observed"] is False
        assert fake.runs("agent", "prompt")[-1]["argv"] == ["agent", "prompt", "w1:p1", text]
        assert not any((workspace / name).exists() for name in ("pwned", "pwned2", "pwned3"))

        before = len(fake.log())
        refused = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                            target="writer", text="again",
                                                            prompt_id="p1"))
        assert refused["code"] == "invalid_request" and refused["data"]["field"] == "prompt_id"
        assert refused["data"]["input_sent"] is False and len(fake.log()) == before
        for action, extra in (("launch", {}), ("notifications", {}),
                              ("get", {"page_bytes": 100})):
            wrong = await call_error(client, "Agent", _scoped(session, action=action,
                                                              target="writer", **extra))
            assert wrong["code"] == "invalid_request", wrong

        # Herdr aliases are not execution ids, nor the reverse.
        native = await call_error(client, "Agent", {**_scoped(session, action="get",
                                                              target="writer"),
                                                    "backend": "native"})
        assert native["code"] == "not_found"
        ran = await run(client, session, "echo native")
        crossed = await call_error(client, "Agent", _scoped(session, action="get",
                                                            target=ran["execution_id"]))
        assert crossed["code"] == "not_found"

        # A prompt whose CLI hangs: ended at the deadline, input uncertain, never resent.
        fake.switch(hang=["agent prompt"])
        started = time.monotonic()
        hung = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                         target="writer", text="hang here"))
        assert time.monotonic() - started < 6
        assert hung["code"] == "herdr_unavailable", hung
        assert hung["data"]["input_sent"] == "unknown" and hung["data"]["reason"] == "timeout"
        assert "not sent again" in hung["message"]
        sent = [e for e in fake.runs("agent", "prompt") if e["argv"][3] == "hang here"]
        assert len(sent) == 1
        _check_runs(fake, fake.socket)

    report = subprocess.run([str(TETHER), "report", "--log", str(usage), "--json"],
                            capture_output=True, text=True, timeout=30, check=True)
    groups = {(g["tool"], g["action"], g["backend"]): g
              for g in json.loads(report.stdout)["workflows"]}
    prompts = groups[("Agent", "prompt", "herdr")]
    assert prompts["herdr"]["submissions"] == {"acknowledged": 1, "uncertain": 1, "not_sent": 1}
    assert "receipts" not in prompts  # no native receipt is claimed
    assert groups[("Agent", "wait", "herdr")]["herdr"]["waits"] == {"matched": 1, "timeout": 1}
    text_report = subprocess.run([str(TETHER), "report", "--log", str(usage)],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    assert "herdr submissions: acknowledged×1, not_sent×1, uncertain×1" in text_report
    logged = usage.read_text()
    assert "herdr_adapter" in logged and "hang here" not in logged and "term_1" not in logged


async def test_http_principals_see_only_their_own_targets(
        tether_env: Config, tmp_path: Path, workspace: Path, fake: FakeHerdr,
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(workspace)
    config = write_config(tmp_path / "herdr.json", config_for(fake, [
        {"principal_key": "http:alice", "workspace_root": root, "targets": {"writer": "term_1"}},
        {"principal_key": "http:bob", "workspace_root": root, "targets": {"reviewer": "term_2"}},
    ], deadline_ms=2500))
    monkeypatch.setenv("TETHER_HERDR_CONFIG", str(config))
    principals = write_principals(tmp_path / "principals.toml", [
        {"id": "alice", "token": ALICE, "profile": "full"},
        {"id": "bob", "token": BOB, "profile": "full"},
        {"id": "carol", "token": CAROL, "profile": "full"},
    ])
    with http_server(principals) as url:
        async with http_client(url, ALICE) as alice, http_client(url, BOB) as bob:
            a = await initialize(alice, workspace)
            b = await initialize(bob, workspace)
            mine = (await call(alice, "Agent", _scoped(a, action="list")))["data"]["targets"]
            theirs = (await call(bob, "Agent", _scoped(b, action="list")))["data"]["targets"]
            assert [t["target"] for t in mine] == ["writer"]
            assert [(t["target"], t["status"]) for t in theirs] == [("reviewer", "working")]

            for action, extra in (("get", {}), ("read", {"lines": 2}), ("explain", {}),
                                  ("wait", {"until": "idle", "timeout_seconds": 1}),
                                  ("prompt", {"text": "from alice"})):
                done = await call(alice, "Agent", _scoped(a, action=action, target="writer",
                                                          **extra))
                _shaped(done["data"])
            assert [e["argv"][3] for e in fake.runs("agent", "prompt")] == ["from alice"]

            # Alice's alias, to Bob, is exactly an alias nobody configured.
            for action, extra in (("get", {}), ("read", {}), ("explain", {}),
                                  ("wait", {"timeout_seconds": 0}), ("prompt", {"text": "x"})):
                stolen = await call_error(bob, "Agent", _scoped(b, action=action,
                                                                target="writer", **extra))
                never = await call_error(bob, "Agent", _scoped(b, action=action,
                                                               target="ghost", **extra))
                assert stolen["code"] == never["code"] == "not_found", (stolen, never)
                assert stolen["message"].replace("writer", "?") == \
                    never["message"].replace("ghost", "?")
                assert {**stolen["data"], "target": "?"} == {**never["data"], "target": "?"}
            assert [e["argv"][3] for e in fake.runs("agent", "prompt")] == ["from alice"]
            refused = await call_error(alice, "Agent", _scoped(a, action="prompt",
                                                               target="writer", text="again",
                                                               prompt_id="p1"))
            assert refused["code"] == "invalid_request" and refused["data"]["field"] == "prompt_id"
            fake.switch(hang=["agent prompt"])
            hung = await call_error(alice, "Agent", _scoped(a, action="prompt",
                                                            target="writer", text="stuck"))
            assert hung["code"] == "herdr_unavailable" and hung["data"]["input_sent"] == "unknown"
            assert [e["argv"][3] for e in fake.runs("agent", "prompt")] == ["from alice", "stuck"]
            _check_runs(fake, fake.socket)
        async with http_client(url, CAROL) as carol:
            c = await initialize(carol, workspace)
            unbound = await call_error(carol, "Agent", _scoped(c, action="list"))
            assert unbound["code"] == "herdr_disabled"
            assert unbound["data"]["operator_action_required"] is True
            assert unbound["data"]["reason"] == "binding_missing"


async def test_what_the_cli_answers_wrongly_is_refused(tether_env: Config, tmp_path: Path,
                                                      workspace: Path, fake: FakeHerdr,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path / "herdr.json", config_for(fake, [{
        "principal_key": "local", "workspace_root": str(workspace),
        "targets": {"writer": "term_1"}}], deadline_ms=2000))
    monkeypatch.setenv("TETHER_HERDR_CONFIG", str(config))
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        get = _scoped(session, action="get", target="writer")

        fake.switch(flood=["agent get"])
        over = await call_error(client, "Agent", get)
        assert over["code"] == "herdr_unavailable"
        assert over["data"] == {"reason": "output_limit", "input_sent": False,
                                "stream": "stdout", "limit": 65536}
        fake.switch(flood_stderr=["agent list"])
        over = await call_error(client, "Agent", get)
        assert over["data"]["stream"] == "stderr" and over["data"]["limit"] == 16384

        # The pane's occupant changed: its answer is about another terminal.
        fake.switch(other_terminal=["agent get"])
        moved = await call_error(client, "Agent", get)
        assert moved["code"] == "herdr_target_mismatch" and moved["data"]["input_sent"] is False
        read = await call_error(client, "Agent", _scoped(session, action="read",
                                                         target="writer"))
        assert read["code"] == "herdr_target_mismatch"  # checked after the text, not shown
        assert "line" not in json.dumps(read)
        fake.switch(other_terminal=["agent prompt"])
        misplaced = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                              target="writer", text="hi"))
        assert misplaced["code"] == "herdr_target_mismatch"
        assert misplaced["data"]["input_sent"] == "unknown"
        fake.switch(other_terminal=["agent list"])
        hidden = await call_error(client, "Agent", get)
        assert hidden["code"] == "not_running"

        fake.switch(fail={"agent get": 3})
        failed = await call_error(client, "Agent", get)
        assert failed["code"] == "herdr_unavailable"
        assert failed["data"] == {"reason": "exit_status", "input_sent": False,
                                  "exit_status": 3, "herdr_code": "internal"}
        fake.switch(fail={"agent prompt": 1})
        failed = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                           target="writer", text="hi"))
        assert failed["data"]["input_sent"] == "unknown"  # Herdr's failure may follow input
        fake.switch(fail={"agent prompt": 2})
        usage = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                          target="writer", text="hi"))
        assert usage["data"]["reason"] == "usage_error" and usage["data"]["input_sent"] is False

        # An older Herdr (0.7.4: agent send, wait --status) refuses the arguments: nothing is
        # sent, and no other command is tried in its place.
        fake.write({**_world(), "cli": "0.7.4"})
        old_cli = await call_error(client, "Agent", _scoped(session, action="prompt",
                                                            target="writer", text="hi"))
        assert old_cli["code"] == "herdr_unavailable"
        assert old_cli["data"] == {"reason": "usage_error", "input_sent": False,
                                   "exit_status": 2}
        assert "Herdr 0.7.5 or later" in old_cli["message"]
        old_wait = await call_error(client, "Agent", _scoped(session, action="wait",
                                                             target="writer", until="idle"))
        assert old_wait["data"]["reason"] == "usage_error"
        assert not fake.runs("agent", "send") and not fake.runs("pane")

        fake.write({**_world(), "agents": [{"terminal_id": "term_1"}]})
        odd = await call_error(client, "Agent", get)
        assert odd["code"] == "herdr_unavailable" and odd["data"]["reason"] == "malformed_answer"
        fake.socket.unlink()  # no server: Herdr's own error, nothing sent
        down = await call_error(client, "Agent", get)
        assert down["data"]["herdr_code"] == "server_not_running"
        fake.executable.unlink()
        gone = await call_error(client, "Agent", get)
        assert gone["code"] == "herdr_disabled" and gone["data"]["rule"] == "executable"
    assert all(e["argv"][:2] != ["agent", "prompt"] or e["argv"][3] == "hi"
               for e in fake.log())
