"""One writer per database, and the store as one room.

Only a guardian writes its catalog: a person's commands, ``Initialize {type: status}`` and
``tether doctor`` read a dead guardian's catalog without changing a byte of it (nor of its
log and index), and the guardian that replaces a dead one reconciles what it left before it
answers anything. Every SQL statement of the project lives in ``shared/store/``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.agent_helpers import get, launch, wait_state
from tests.helpers import poll
from tests.mcp_helpers import bash, call, execution, initialize
from tests.person_terminal import TETHER
from tether.frontend.guardians.locator import read_info, spawn_guardian
from tether.protocol.transport import GuardianClient
from tether.protocol.versions import MAJOR, Version, known_minor_versions
from tether.shared.config import Config
from tether.shared.paths import GuardianPaths, guardian_paths

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
#: The project's Python source, and the one folder of it that may speak SQL.
SOURCE = ("protocol", "guardian", "frontend", "shared", "scripts")
STORE = ROOT / "shared" / "store"
#: A statement of SQL, as this project writes them (keywords in capitals).
SQL = re.compile(
    r"\b(SELECT\s.+?\sFROM|SELECT\s+(1|count\(|changes\(|value\b)|INSERT\s+(OR\s+\w+\s+)?INTO"
    r"|UPDATE\s+\w+\s+SET|DELETE\s+FROM|REPLACE\s+INTO|(CREATE|DROP)\s+(UNIQUE\s+)?"
    r"(TABLE|INDEX|VIEW|TRIGGER)|ALTER\s+TABLE|PRAGMA\s+\w+|BEGIN(\s+IMMEDIATE|\s+EXCLUSIVE)?\b"
    r"(?=[\"'\s]*$)|VACUUM\b|ATTACH\s+DATABASE)", re.S)
#: Modules that speak SQL (or open a database file) themselves.
DRIVERS = frozenset({"sqlite3", "_sqlite3", "apsw", "sqlalchemy", "aiosqlite"})


def _python_files() -> list[Path]:
    files: list[Path] = []
    for folder in SOURCE:
        base = ROOT / folder
        files += sorted(base.rglob("*.py")) if base.is_dir() else []
    return [p for p in files if STORE not in p.parents and ".venv" not in p.parts]


def _text_of(node: ast.JoinedStr) -> str:
    """An f-string's text with its replacement fields as ``?`` (``f"SELECT {cols} FROM t"``)."""
    return "".join(part.value if isinstance(part, ast.Constant) and isinstance(part.value, str)
                   else "?" for part in node.values)


def sql_outside_the_store() -> list[str]:
    """``file:line: what`` for every SQL driver imported and every SQL statement written in
    the project's Python source outside ``shared/store/``."""
    found: list[str] = []
    for path in _python_files():
        where = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in DRIVERS:
                    found.append(f"{where}:{line}: imports {name}")
            text = None
            if isinstance(node, ast.JoinedStr):
                text = _text_of(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            if text is not None and (match := SQL.search(text)):
                found.append(f"{where}:{line}: SQL {match.group(0)[:60]!r}")
    return sorted(set(found))


def test_no_sql_outside_the_store() -> None:
    assert _python_files(), "no source found: the scan looks in the wrong place"
    found = sql_outside_the_store()
    assert not found, ("SQL belongs in shared/store/ (a table family, or view.py for reads "
                       "without a guardian):\n" + "\n".join(found))


#: What of the store a front-end may use: the read-only view, and what describes rows.
FRONT_END_MAY_IMPORT = frozenset({"view", "rows", "schema", "store_errors"})


def test_the_front_end_never_imports_a_writer_of_the_catalog() -> None:
    """Opening ``Catalog`` creates, migrates and chmods the file: the guardian's alone."""
    found = []
    for path in sorted((ROOT / "frontend").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                           if node.module == "tether.shared.store" else [])
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            else:
                continue
            for module in modules:
                parts = module.split(".")
                if parts[:3] == ["tether", "shared", "store"] and len(parts) > 3 and (
                        parts[3] not in FRONT_END_MAY_IMPORT):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module}")
    assert not found, "the front-end reads catalogs through shared/store/view only:\n" + (
        "\n".join(found))


def test_the_scan_finds_what_it_is_meant_to_find() -> None:
    """The patterns themselves: each kind of statement this project writes is seen."""
    for text in ("SELECT * FROM executions WHERE seq > ?", "SELECT 1", "select me",
                 "INSERT OR IGNORE INTO meta (key) VALUES (?)", "UPDATE meta SET value = 1",
                 "DELETE FROM receipts", "CREATE INDEX IF NOT EXISTS x ON t (a)",
                 "PRAGMA journal_mode=WAL", "ALTER TABLE executions ADD COLUMN x", "BEGIN"):
        assert (SQL.search(text) is not None) == (text != "select me"), text
    for prose in ("Select the thread", "the UPDATE of a record", "begin typing",
                  "BEGIN: the first line"):
        assert SQL.search(prose) is None, prose


# -- a dead guardian's state -----------------------------------------------------------------

def _files(paths: GuardianPaths) -> dict[str, tuple[bytes, int] | None]:
    """The catalog's files (database, log, index; and any rollback journal): bytes and
    modification time, None where there is none."""
    state: dict[str, tuple[bytes, int] | None] = {}
    for end in ("", "-wal", "-shm", "-journal"):
        path = paths.catalog.with_name(paths.catalog.name + end)
        try:
            state[path.name] = (path.read_bytes(), path.stat().st_mtime_ns)
        except FileNotFoundError:
            state[path.name] = None
    return state


def _tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


async def _dead_guardian(client: Client, workspace: Path, tmp_path: Path) -> dict[str, Any]:
    """A guardian with a finished command, a running one and a managed agent, killed
    (SIGKILL: nothing of it finalised). Returns the session and the ids."""
    session = await initialize(client, workspace)
    done = await bash(client, session, {"type": "command", "command": "echo finished-before"},
                      wait=10)
    assert done["status"] == "exited", done
    running = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": "sleep 60"})
    agent = await launch(client, session, tmp_path / "agent.log")
    await wait_state(client, session, agent["execution_id"], "idle")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    return {"session": session, "done": done["execution_id"],
            "running": running["execution_id"], "agent": agent["execution_id"]}


async def test_looking_at_a_dead_guardian_changes_none_of_its_catalog(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    dead = await _dead_guardian(client, workspace, tmp_path)
    paths = guardian_paths(tether_env, "local", str(workspace))
    before = _files(paths)
    assert before[paths.catalog.name] is not None and before[paths.catalog.name + "-wal"]
    ws = str(workspace)
    commands: list[tuple[str, ...]] = [
        ("ls",), ("ls", "--all", "--json"), ("ls", "--workspace", ws),
        *[("show", dead[k]) for k in ("done", "running", "agent")],
        ("show", "--json", dead["running"]),
        *[("tail", dead[k]) for k in ("done", "running")],
        ("attach", dead["running"]),
        ("agents", "list", "--workspace", ws), ("agents", "list", "--all", "--json",
                                                "--workspace", ws),
        ("guardians", "list"), ("guardians", "status", "--workspace", ws),
        ("doctor",),
    ]
    seen: dict[tuple[str, ...], subprocess.CompletedProcess[str]] = {}
    for command in commands:
        seen[command] = _tether(*command)
        assert _files(paths) == before, f"`tether {' '.join(command)}` changed the catalog"
    # They did look (read from disk), rather than fail before reading anything.
    assert "read from disk" in seen[("show", dead["running"])].stdout
    assert "unknown" in seen[("show", dead["running"])].stdout
    assert "finished-before" in seen[("tail", dead["done"])].stdout
    assert dead["agent"] in seen[("agents", "list", "--all", "--json", "--workspace", ws)].stdout
    assert dead["running"] in seen[("ls", "--all", "--json")].stdout
    status = await call(client, "Initialize", {"type": "status", "workspace_root": ws,
                                               "thread_id": dead["session"]["thread_id"]})
    assert status["data"]["guardian"]["running"] is False
    assert _files(paths) == before, "Initialize {type: status} changed the catalog"
    # A dead guardian's stale record cleared (what `guardians stop` does when nothing runs):
    # the catalog stays as it is all the same.
    cleared = _tether("guardians", "stop", "--workspace", ws)
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "2 of its executions it left running become unknown" in cleared.stdout, cleared.stdout
    assert not paths.info.exists()
    assert _files(paths) == before, "`tether guardians stop` changed the catalog"


async def test_the_guardian_that_replaces_a_dead_one_reconciles_before_it_answers(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    dead = await _dead_guardian(client, workspace, tmp_path)
    paths = guardian_paths(tether_env, "local", str(workspace))
    # Started by hand, not by a front-end: whatever is reconciled, the guardian did it.
    child = spawn_guardian(paths, "local", str(workspace))
    try:
        info = poll(lambda: (i := read_info(paths)) is not None
                    and i["instance_id"] != dead["session"]["guardian"]["instance_id"] and i,
                    timeout=15, what="the new guardian's guardian.json")
        assert isinstance(info, dict)
        latest = known_minor_versions()[-1]
        guardian = GuardianClient(info["endpoint"], info["auth_token"],
                                  version=Version(MAJOR, latest.minor),
                                  instance_id=info["instance_id"])
        try:
            hello = await guardian.call("hello", {"client_min": [MAJOR, 0],
                                                  "client_max": [MAJOR, latest.minor]},
                                        timeout_s=5)
        finally:
            guardian.close()
        # Its first answer already says what it reconciled: the command it did not see end,
        # and the agent whose runtime went with the dead guardian.
        lost = {entry["execution_id"] for entry in hello.get("lost_records") or []}
        assert {dead["running"], dead["agent"]} <= lost, hello
        assert dead["done"] not in lost
        session = dead["session"]
        record = (await execution(client, session, {
            "type": "get", "execution_id": dead["running"]}))["data"]["execution"]
        assert (record["status"], record["reason"], record["exit_code"]) == (
            "unknown", "guardian_lost", None)
        finished = (await execution(client, session, {
            "type": "get", "execution_id": dead["done"]}))["data"]["execution"]
        assert finished["status"] == "exited"
        agent = (await get(client, session, dead["agent"]))["agent"]
        assert (agent["agent_state"], agent["status"]) == ("error", "unknown"), agent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
