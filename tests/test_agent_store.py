"""Unit tests of the agent rules and store: the state machine, notifications exactly once,
the cascade in one transaction, the schema migration, and provider command lines."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tether.guardian.agents.providers import launch_plan, resume_argv
from tether.protocol.errors import TetherError
from tether.shared.agent_states import step
from tether.shared.store.agent_table import AgentStore
from tether.shared.store.catalog import Catalog
from tether.shared.store.schema import SCHEMA

UUID = "0b6f2a54-6a0e-4a4b-9a55-3f5f1b6c2d10"


def agent_record(execution_id: str, parent: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"execution_id": execution_id, "principal": "local", "workspace_root": "/ws",
            "thread_id": "th_1", "command": "fake", "cwd": "/ws", "status": "running",
            "started_unix_ms": 1, "guardian_instance_id": "g1", "parent_execution_id": parent,
            "parent_workspace": "/ws" if parent else None, "notify_on_finish": parent is not None,
            **extra}


@pytest.fixture
def store(tmp_path: Path) -> AgentStore:
    return AgentStore(Catalog(tmp_path / "catalog.sqlite3"))


def test_rules_of_the_state_machine() -> None:
    assert step(None, "initializing", None, None).notification is None
    finished = step("running", "idle", None, None)
    assert (finished.notification, finished.terminal_turn) == ("finished", True)
    assert step("idle", "running", None, None).turn_started
    assert step("running", "running", None, "approval").notification == "approval"
    assert step("idle", "error", None, None).notification == "error"
    assert step("idle", "error", None, None).terminal_turn  # death between turns ends it too
    assert step("running", "closed", None, None).notification == "closed"
    assert step("idle", "closed", None, None).notification is None  # nothing unfinished


def test_one_notification_per_event_in_the_same_transaction(store: AgentStore) -> None:
    store.create(agent_record("ag_p"))
    store.create(agent_record("ag_c", parent="ag_p"))
    for state in ("idle", "running", "running", "idle"):
        store.transition("ag_c", state, reason="recognized")
    store.transition("ag_c", "running", reason="recognized", attention="approval")
    notes = store.notifications("ag_p")
    assert [(n["kind"], n["turn_seq"]) for n in notes] == [("finished", 1), ("approval", 2)]
    events = store.events("ag_c")
    assert [e["to_state"] for e in events] == ["initializing", "idle", "running", "idle", "running"]
    # A failing transaction leaves neither the state, nor the event, nor the notification.
    with pytest.raises(sqlite3.Error), store.catalog.transaction():
        store.transition("ag_c", "error", reason="boom")
        store.catalog.connection.execute("INSERT INTO no_such_table VALUES (1)")
    assert store.get("ag_c")["agent_state"] == "running"  # type: ignore[index]
    assert len(store.events("ag_c")) == 5 and len(store.notifications("ag_p")) == 2


def test_cascade_detaches_open_and_foreign_children(store: AgentStore) -> None:
    store.create(agent_record("ag_r"))
    store.create(agent_record("ag_a", parent="ag_r"))
    store.create(agent_record("ag_g", parent="ag_a"))
    store.create(agent_record("ag_open", parent="ag_r", labels={"tether.open.c1": "true", "x": "1"}))
    store.create(agent_record("ag_closedtab", parent="ag_r", labels={"tether.open.c1": "false"}))
    store.create(agent_record("ag_far", parent="ag_r") | {"parent_workspace": "/elsewhere"})
    cascade = store.archive_tree("ag_r", live={"ag_a"})
    assert cascade.archived == ["ag_r", "ag_a", "ag_closedtab", "ag_g"]
    assert sorted(cascade.detached) == ["ag_far", "ag_open"]
    assert store.get("ag_open")["labels"] == {"x": "1"}  # type: ignore[index]
    assert store.get("ag_open")["parent_execution_id"] is None  # type: ignore[index]
    assert store.get("ag_a")["agent_state"] == "initializing"  # type: ignore[index]  # still live
    assert store.get("ag_g")["agent_state"] == "closed"  # type: ignore[index]
    assert store.detach_children_of("/ws", ["ag_r"]) == []


def test_schema_1_catalog_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    db.executescript("DROP TABLE agent_events; DROP TABLE notifications;")
    db.execute("INSERT INTO meta VALUES ('schema', 1), ('change_seq', 7)")
    db.execute("INSERT INTO executions (execution_id, principal, workspace_root, thread_id, kind,"
               " command, status, started_unix_ms, observed_at_unix_ms, guardian_instance_id)"
               " VALUES ('ex_old', 'local', '/ws', 'th_1', 'command', 'echo hi', 'exited', 1, 1, 'g0')")
    db.commit()
    db.close()
    catalog = Catalog(path)
    old = catalog.get_execution("ex_old")
    assert old is not None and old["command"] == "echo hi" and old["agent_state"] is None
    assert catalog.change_seq() == 7
    store = AgentStore(catalog)
    store.create(agent_record("ag_new"))
    assert store.get("ag_new")["agent_state"] == "initializing"  # type: ignore[index]
    assert Catalog(path).get_execution("ex_old") is not None  # opening again changes nothing


def test_a_catalog_with_the_old_indexes_gets_the_lean_ones(tmp_path: Path) -> None:
    # The layout catalogs had before a command's commit was trimmed to the pages it needs.
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        SCHEMA.replace("seq INTEGER PRIMARY KEY,", "seq INTEGER PRIMARY KEY AUTOINCREMENT,", 1)
        .replace(") WITHOUT ROWID;", ");")
        + "CREATE INDEX executions_change ON executions (change_seq);")
    db.close()
    Catalog(path).close()  # schema 2 columns and the agents index of that time
    db = sqlite3.connect(path)
    db.execute("CREATE INDEX IF NOT EXISTS executions_agents ON executions (kind, parent_execution_id)")
    db.commit()
    db.close()
    catalog = Catalog(path)
    indexes = {row[0] for row in catalog._db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'executions_%'")}
    assert indexes == {"executions_thread", "executions_agent_parents", "executions_agents_newest"}
    store = AgentStore(catalog)
    store.create(agent_record("ag_p"))
    store.create(agent_record("ag_c", parent="ag_p"))
    assert [a["execution_id"] for a in store.list_agents("local", "/ws")] == ["ag_c", "ag_p"]
    assert [a["execution_id"] for a in store.list_agents("local", "/ws", parent="ag_p")] == ["ag_c"]
    assert store.archive_tree("ag_p").archived == ["ag_p", "ag_c"]


def test_provider_command_lines() -> None:
    claude = launch_plan("claude", None, new_uuid=lambda: UUID)
    assert claude.argv == ["claude", "--session-id", UUID] and claude.conversation_id == UUID
    assert claude.recognizer == "claude"
    assert claude.recovery is not None and claude.recovery["command"] == f"claude --resume {UUID}"
    assert resume_argv({"provider": "claude", "argv": claude.argv,
                        "conversation_id": UUID}) == ["claude", "--resume", UUID]
    given = launch_plan("claude", ["--session-id", UUID])
    assert given.conversation_id is None
    assert resume_argv({"provider": "claude", "argv": given.argv,
                        # docs/tools.md#recovery-advice parser
                        "conversation_id": None}) == ["claude", "--resume", UUID]
    codex = launch_plan("codex", None, conversation_id=UUID)
    assert codex.argv == ["codex", "resume", UUID]
    assert resume_argv({"provider": "codex", "argv": codex.argv,
                        "conversation_id": UUID}) == ["codex", "resume", UUID]
    with pytest.raises(TetherError) as bare:
        resume_argv({"provider": "codex", "argv": ["codex"], "conversation_id": None})
    assert bare.value.code == "invalid_state"
    command = launch_plan("command", ["python3", "agent.py"])
    assert command.recognizer == "shell" and resume_argv(
        {"provider": "command", "argv": command.argv}) == ["python3", "agent.py"]
    with pytest.raises(TetherError):
        launch_plan("command", [])
    with pytest.raises(TetherError):
        launch_plan("claude", None, conversation_id="not-a-uuid")
