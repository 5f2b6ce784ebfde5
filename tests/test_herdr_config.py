"""The operator's Herdr configuration (docs/security.md#herdr-configuration): every rule is
refused with a message naming it and nothing else (no path, no target), and Initialize's
hint reads no file and runs nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.herdr_helpers import FakeHerdr, agent_info, config_for, write_config
from tests.mcp_helpers import call, call_error, initialize
from tether.frontend.herdr.operator_config import MAX_HERDR_CONFIG_BYTES, HerdrSettings
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


@pytest.fixture
def fake(tmp_path: Path) -> FakeHerdr:
    herdr = FakeHerdr.install(tmp_path / "herdr-bin")
    herdr.write({"agents": [agent_info("w1:p1", "term_1")]})
    return herdr


def _valid(fake: FakeHerdr, workspace: Path) -> dict[str, Any]:
    return config_for(fake, [{"principal_key": "local", "workspace_root": str(workspace),
                              "targets": {"writer": "term_1"}}])


def _refusal(path: Path) -> TetherError:
    with pytest.raises(TetherError) as refused:
        HerdrSettings(str(path)).load()
    err = refused.value
    assert err.code == ErrorCode.HERDR_DISABLED
    assert err.data["operator_action_required"] is True and err.data["input_sent"] is False
    assert err.data["reason"] == "configuration_invalid"
    # The message names the rule, never the file, the executable, a workspace or a target.
    for secret in (str(path), str(path.parent), "term_1"):
        assert secret not in err.message, err.message
    return err


def _edit(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(config: dict[str, Any]) -> dict[str, Any]:
        change(config)
        return config
    return apply


CASES: list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]], str, str]] = [
    ("unknown field", _edit(lambda c: c.update(sockets="/x")), "unknown_field",
     "unknown field 'sockets' in the top level"),
    ("unknown binding field", _edit(lambda c: c["bindings"][0].update(token="t")),
     "unknown_field", "unknown field 'token' in bindings[0]"),
    ("relative socket", _edit(lambda c: c.update(socket_path="run/herdr.sock")), "socket_path",
     "socket_path must be an absolute path"),
    ("deadline 0", _edit(lambda c: c.update(deadline_ms=0)), "deadline_ms",
     "deadline_ms is 0; it must be between 1 and 30000"),
    ("deadline 30001", _edit(lambda c: c.update(deadline_ms=30001)), "deadline_ms",
     "deadline_ms is 30001; it must be between 1 and 30000"),
    ("deadline as text", _edit(lambda c: c.update(deadline_ms="5000")), "field_type",
     "deadline_ms must be an integer"),
    ("missing executable", _edit(lambda c: c.update(executable="/nonexistent/herdr")),
     "executable", "the executable does not exist"),
    ("relative executable", _edit(lambda c: c.update(executable="herdr")), "executable",
     "executable must be an absolute path"),
    ("a token for a principal key", _edit(lambda c: c["bindings"][0].update(
        principal_key="Bearer abc")), "principal_key", "must be 'local' or 'http:<principal id>'"),
    ("a thread id for a principal key", _edit(lambda c: c["bindings"][0].update(
        principal_key="th_0123456789")), "principal_key", "must be 'local'"),
    ("workspace not canonical", _edit(lambda c: c["bindings"][0].update(
        workspace_root=c["bindings"][0]["workspace_root"] + "/sub/..")), "workspace_root",
     "must be a canonical absolute path"),
    ("33 targets", _edit(lambda c: c["bindings"][0].update(
        targets={f"t{i}": f"term_{i}" for i in range(33)})), "targets",
     "has 33 targets; it needs 1 to 32"),
    ("a terminal id that is an option", _edit(lambda c: c["bindings"][0].update(
        targets={"writer": "--takeover"})), "targets", "not starting with -"),
    ("twice the same binding", _edit(lambda c: c["bindings"].append(dict(c["bindings"][0]))),
     "duplicate_binding", "bindings[1] repeats the principal_key and workspace_root"),
]


@pytest.mark.parametrize(("name", "change", "rule", "message"), CASES, ids=[c[0] for c in CASES])
def test_each_rule_of_the_file_is_refused_by_name(
        tmp_path: Path, workspace: Path, fake: FakeHerdr, name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]], rule: str, message: str) -> None:
    path = write_config(tmp_path / "herdr.json", change(_valid(fake, workspace)))
    err = _refusal(path)
    assert err.data["rule"] == rule and message in err.message, (err.data, err.message)


def test_the_file_itself_must_be_private_small_and_plain(tmp_path: Path, workspace: Path,
                                                         fake: FakeHerdr) -> None:
    config = _valid(fake, workspace)
    good = write_config(tmp_path / "herdr.json", config)
    loaded = HerdrSettings(str(good)).load()
    assert loaded.deadline_ms == 5000  # the default
    assert loaded.binding("local", str(workspace)) is not None

    readable = write_config(tmp_path / "group.json", config, mode=0o640)
    err = _refusal(readable)
    assert err.data["rule"] == "file_mode" and "mode 0640" in err.message
    assert "must be private" in err.message

    text = json.dumps(config)
    padded = text[:-1] + " " * (MAX_HERDR_CONFIG_BYTES + 1 - len(text)) + "}"
    assert len(padded) == MAX_HERDR_CONFIG_BYTES + 1
    err = _refusal(write_config(tmp_path / "big.json", padded))
    assert err.data["rule"] == "file_size" and "larger than 256 KiB" in err.message
    # Exactly at the limit it is read (and valid).
    at_limit = padded[:-2] + "}"
    assert HerdrSettings(str(write_config(tmp_path / "limit.json", at_limit))).load()

    err = _refusal(write_config(tmp_path / "dup.json", '{"executable": "a", "executable": "b"}'))
    assert err.data["rule"] == "json" and "appears twice" in err.message

    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert _refusal(link).data["rule"] == "not_regular_file"
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo, 0o600)  # refused at once, not waited on
    assert _refusal(fifo).data["rule"] == "not_regular_file"
    assert _refusal(tmp_path / "absent.json").data["rule"] == "unreadable"

    fake.executable.chmod(0o644)
    err = _refusal(good)
    assert err.data["rule"] == "executable" and "not executable" in err.message
    fake.executable.chmod(0o755)
    config["executable"] = str(fake.executable.parent)
    assert "not a regular file" in _refusal(write_config(good, config)).message


def test_a_binding_serves_its_principal_and_workspace_only(tmp_path: Path, workspace: Path,
                                                           fake: FakeHerdr) -> None:
    config = config_for(fake, [{"principal_key": "http:alice", "workspace_root": str(workspace),
                                "targets": {"writer": "term_1"}}])
    loaded = HerdrSettings(str(write_config(tmp_path / "herdr.json", config))).load()
    assert loaded.binding("http:alice", str(workspace)) is not None
    assert loaded.binding("local", str(workspace)) is None
    assert loaded.binding("http:bob", str(workspace)) is None
    assert loaded.binding("http:alice", str(workspace / "sub")) is None


def test_the_hint_says_only_whether_the_variable_is_set() -> None:
    assert HerdrSettings.from_env({}).hint() == {
        "configuration_present": False, "availability": "disabled",
        "reason": "configuration_missing"}
    settings = HerdrSettings.from_env({"TETHER_HERDR_CONFIG": "/nowhere.json",
                                       "HERDR_PANE_ID": "w9:p9", "PATH": "/bin"})
    assert settings.hint() == {"configuration_present": True, "availability": "unknown",
                               "reason": "configuration_not_validated"}
    assert settings.base_env == {"TETHER_HERDR_CONFIG": "/nowhere.json", "PATH": "/bin"}


async def test_initialize_reads_nothing_and_a_bad_file_is_refused_with_its_rule(
        tether_env: Config, tmp_path: Path, workspace: Path, fake: FakeHerdr,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A FIFO: opening it to read would block the call. Initialize never does.
    fifo = tmp_path / "herdr.json"
    os.mkfifo(fifo, 0o600)
    monkeypatch.setenv("TETHER_HERDR_CONFIG", str(fifo))
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        status = (await call(client, "Initialize", {
            "type": "status", "workspace_root": str(workspace),
            "thread_id": session["thread_id"]}))["data"]
        for data in (session, status):
            assert data["agent_backends"]["herdr"] == {
                "configuration_present": True, "availability": "unknown",
                "reason": "configuration_not_validated"}
        assert str(fifo) not in json.dumps(status)
        assert fake.log() == []  # no subprocess
        scoped = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
                  "backend": "herdr"}
        refused = await call_error(client, "Agent", {**scoped, "action": "list"})
        assert refused["code"] == "herdr_disabled"
        assert refused["data"]["rule"] == "not_regular_file"
        fifo.unlink()
        # Group-readable: refused on the call, with its rule; fixed, the next call works.
        write_config(fifo, _valid(fake, workspace), mode=0o644)
        refused = await call_error(client, "Agent", {**scoped, "action": "list"})
        assert refused["data"] == {"operator_action_required": True, "input_sent": False,
                                   "reason": "configuration_invalid", "rule": "file_mode"}
        assert "mode 0644" in refused["message"] and str(fifo) not in refused["message"]
        fifo.chmod(0o600)
        listed = await call(client, "Agent", {**scoped, "action": "list"})
        assert listed["data"]["targets"][0]["target"] == "writer"
        # A binding for another principal only: this one has none here.
        write_config(fifo, config_for(fake, [{"principal_key": "http:alice",
                                              "workspace_root": str(workspace),
                                              "targets": {"writer": "term_1"}}]))
        unbound = await call_error(client, "Agent", {**scoped, "action": "get",
                                                     "target": "writer"})
        assert unbound["code"] == "herdr_disabled"
        assert unbound["data"] == {"operator_action_required": True, "input_sent": False,
                                   "reason": "binding_missing"}
        assert "principal local" in unbound["message"]
        assert len(fake.runs("agent")) == 1  # the one list that was allowed
