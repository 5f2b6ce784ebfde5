"""How a command ended is reported truthfully (issue 11; docs/tools.md#unknown-is-not-success,
docs/tools.md#threads-and-workspaces, docs/tools.md#retention).

Each test is one of the issue's reproductions, run through the real MCP client against a real
guardian with real PTYs: forged end and cwd markers, a full disk, resets that left processes
behind, output written just before the end, lost wake-ups, lost records' output figures and
retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.helpers import poll, processes_with_env, small_tmpfs
from tests.mcp_helpers import bash, call, call_error, execution, initialize, read_pages, run
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024


#: The issue's forgery: read the nonce from $PS1, print an end marker (exit 0) and a cwd
#: marker, then really end 2 s later with exit 1.
FORGE_FROM_PS1 = (
    "n=$(printf %s \"$PS1\"|sed -n 's/.*aid=\\([0-9a-f]*\\).*/\\1/p'); "
    "printf '\\033]133;D;0;aid=%s\\007\\033]7;file://x/forged\\007' \"$n\"; "
)
#: A forger that runs inside the shell can read every shell variable and function (`set`):
#: try every 16-hex-digit word as a nonce, with an end and a prompt marker for each.
FORGE_FROM_SET = (
    "for n in $(set | grep -o '[0-9a-f]\\{16\\}' | sort -u); do "
    "printf '\\033]133;D;0;aid=%s\\007\\033]133;A;aid=%s\\007\\033]7;file://x/forged\\007' "
    "\"$n\" \"$n\"; done; "
)


@pytest.mark.parametrize("forger, then", [
    (FORGE_FROM_PS1, "sleep 2"),
    (FORGE_FROM_SET, "sleep 2"),
    # The shell itself stays in the foreground, waiting for a background job.
    (FORGE_FROM_SET, "sleep 2 & wait"),
], ids=["ps1", "set", "set-bg-wait"])
async def test_forged_end_marker_changes_nothing(
    client: Client, workspace: Path, forger: str, then: str
) -> None:
    session = await initialize(client, workspace)
    started = time.monotonic()
    forged = await run(client, session, f"{forger}{then}; echo real-end; false", wait=0.5)
    assert forged["status"] == "running", forged
    assert forged["cwd"] == str(workspace)
    busy = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "echo accepted-too-early"}})
    assert busy["code"] == "shell_busy"
    assert busy["data"]["running_execution_id"] == forged["execution_id"]
    done = await bash(client, session, {"type": "status_check"}, wait=10)
    assert done["execution_id"] == forged["execution_id"]
    assert (done["status"], done["exit_code"]) == ("exited", 1), done
    assert time.monotonic() - started >= 1.5  # it really ran its 2 s
    assert "real-end" in done["output"]
    assert done["cwd"] == str(workspace)
    after = await run(client, session, "pwd")
    assert after["output"].split() == [str(workspace)]
    if forger == FORGE_FROM_SET:  # it found the nonce: its marker was seen, and ignored
        got = (await execution(client, session, {
            "type": "get", "execution_id": forged["execution_id"]}))["data"]
        assert [e["kind"] for e in got["events"]] == ["marker_ignored"], got["events"]


@pytest.mark.parametrize("printed", [
    "printf '\\033]0;a title without its end'",  # the reviewer's reproduction
    "printf 'x\\033'",  # a lone ESC right before the shell's markers
    "printf '\\033]8;;x\\033]7;\\033]'",  # one unfinished sequence after another
])
async def test_an_unfinished_escape_sequence_does_not_hide_the_end(
    client: Client, workspace: Path, printed: str
) -> None:
    session = await initialize(client, workspace)
    out = await run(client, session, f"{printed}; exit_with() {{ return $1; }}; exit_with 3",
                    wait=10)
    assert (out["status"], out["exit_code"]) == ("exited", 3)
    after = await run(client, session, "echo next")
    assert (after["status"], after["output"].strip()) == ("exited", "next")


async def test_nonce_is_not_visible_to_child_processes(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    # What a child process can see: the prompt strings, its environment, the shell's
    # environment and command line, and the rc file the shell was started with.
    probe = await run(client, session, (
        "printf '%s|%s\\n' \"$PS1\" \"$PS0\"; env; tr '\\0' '\\n' </proc/$$/environ; "
        "rc=$(tr '\\0' '\\n' </proc/$$/cmdline | sed -n 3p); echo \"rc=$rc\"; "
        "cat \"$rc\" 2>&1; bash -c 'set' | grep -c aid= ; true"))
    assert probe["exit_code"] == 0
    text = "".join(p["text"] for p in await read_pages(client, session, probe["execution_id"]))
    assert "rc=/" in text  # the probe did look at the rc file's path
    assert "aid=" not in text, text


async def test_forged_cwd_marker_changes_no_cwd(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    forged = await run(client, session, "printf '\\033]7;file://x/etc\\007'; sleep 2", wait=0.5)
    assert forged["status"] == "running"
    status = await bash(client, session, {"type": "status_check"}, wait=0)
    assert status["status"] == "running" and status["cwd"] == str(workspace)
    bg = await bash(client, session, {"type": "command", "command": "pwd", "is_background": True})
    waited = await bash(client, session, {"type": "status_check",
                                          "execution_id": bg["execution_id"]}, wait=10)
    assert waited["output"].strip() == str(workspace)
    done = await bash(client, session, {"type": "status_check"}, wait=10)
    assert (done["status"], done["exit_code"], done["cwd"]) == ("exited", 0, str(workspace))
    moved = await run(client, session, "cd sub")
    assert moved["cwd"] == str(workspace / "sub")


# -- a full disk --------------------------------------------------------------------------


@pytest.fixture
def small_state_disk(tether_env: Config) -> Iterator[Path]:
    """TETHER_HOME on an 8 MiB tmpfs (needs root; CI runs as root)."""
    home = tether_env.state_home
    home.mkdir(parents=True, exist_ok=True)
    with small_tmpfs(home, "size=8m,mode=0700") as mount:
        yield mount


def _fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it."""
    filler = directory / "filler"
    chunk = b"\0" * (64 * 1024)
    with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(chunk)
    return filler


async def poll_record(client: Client, session: dict[str, Any], execution_id: str,
                      done: Any, timeout: float = 10.0) -> dict[str, Any]:
    """The record once ``done(record)`` holds (polled through the guardian)."""
    deadline = time.monotonic() + timeout
    while True:
        record = (await execution(client, session, {
            "type": "get", "execution_id": execution_id}))["data"]["execution"]
        if done(record):
            return dict(record)
        assert time.monotonic() < deadline, record
        await asyncio.sleep(0.05)


def _catalog_rows(catalog: Path, ids: list[str]) -> dict[str, tuple[str, int | None]]:
    """Status and exit code straight from the catalog file (not through the guardian)."""
    db = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    try:
        marks = ",".join("?" for _ in ids)
        rows = db.execute(f"SELECT execution_id, status, exit_code FROM executions"
                          f" WHERE execution_id IN ({marks})", ids).fetchall()
    finally:
        db.close()
    return {row[0]: (row[1], row[2]) for row in rows}


async def test_full_disk_loses_no_exit(
    client: Client, workspace: Path, tether_env: Config, small_state_disk: Path
) -> None:
    session = await initialize(client, workspace)
    guardian_pid = session["guardian"]["pid"]
    expected = {}
    fg = await run(client, session, "echo fg-start; sleep 1.5; echo fg-end; (exit 3)", wait=0)
    expected[fg["execution_id"]] = 3
    for code in (4, 5):
        bg = await bash(client, session, {"type": "command", "is_background": True,
                                          "command": f"echo bg{code}; sleep 1.5; exit {code}"})
        expected[bg["execution_id"]] = code
    filler = _fill(small_state_disk)
    try:
        refused = await call_error(client, "BashCommand", {
            "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
            "action_json": {"type": "command", "command": "echo on-a-full-disk",
                            "is_background": True}})
        assert refused["code"] == "storage_unavailable", refused
        assert str(small_state_disk) in refused["message"]
        assert "free_bytes" in refused["data"]
        # Every command ends while the disk is full.
        catalog = guardian_paths(tether_env, "local", str(workspace)).catalog
        procs = processes_with_env("TETHER_THREAD_ID", session["thread_id"])

        def sleeping(proc: psutil.Process) -> bool:
            try:
                return proc.is_running() and "sleep" in proc.name()
            except psutil.Error:  # it ended between the two questions
                return False

        poll(lambda: not [p for p in procs if sleeping(p)], what="the commands to end")
        assert psutil.pid_exists(guardian_pid)
        # The guardian tells the truth from memory while the file cannot take it yet.
        for eid, code in expected.items():
            record = await poll_record(client, session, eid, lambda r: r["status"] != "running")
            assert (record["status"], record["exit_code"]) == ("exited", code)
        assert any(status == "running" for status, _ in _catalog_rows(catalog, list(expected)).values())
    finally:
        filler.unlink()
    # Space is back: the records become true by themselves (read from the file, not asked).
    ids = list(expected)
    truth = {eid: ("exited", code) for eid, code in expected.items()}
    poll(lambda: _catalog_rows(catalog, ids) == truth, timeout=15,
         what=f"catalog to hold {truth}")
    after = await run(client, session, "echo after")
    assert after["output"].strip() == "after"
    again = await initialize(client, workspace, session["thread_id"])
    assert again["guardian"]["pid"] == guardian_pid  # the guardian never died
    assert again["generation"] == session["generation"]  # nor did the shell
    texts = {eid: "".join(p["text"] for p in await read_pages(client, session, eid))
             for eid in ids}
    assert texts[fg["execution_id"]].split() == ["fg-start", "fg-end"]


# -- reset_shell --------------------------------------------------------------------------


def _shell_family(thread_id: str) -> list[psutil.Process]:
    """The main shell and everything it started (they carry the thread id, not an execution id)."""
    found = []
    for proc in processes_with_env("TETHER_THREAD_ID", thread_id):
        with contextlib.suppress(psutil.Error):
            if "TETHER_EXECUTION_ID" not in proc.environ():
                found.append(proc)
    return found


async def test_resets_leave_no_zombies_and_no_survivors(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    guardian = psutil.Process(session["guardian"]["pid"])
    scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    sleepers: list[dict[str, Any]] = []
    for i in range(20):
        if i % 2 == 0:
            sleeper = await run(client, session, "sleep 31", wait=0)
            thread_id = session["thread_id"]
            poll(lambda: any(p.name() == "sleep" for p in _shell_family(thread_id)),  # noqa: B023
                 what="the foreground sleep to start")
            sleepers.append(sleeper)
        reset = await call(client, "Initialize", {"type": "reset_shell", **scope})
        session = {**session, "generation": reset["data"]["generation"]}
    def zombies() -> list[psutil.Process]:
        found = []
        for child in guardian.children():
            with contextlib.suppress(psutil.NoSuchProcess):  # a child may end as we look
                if child.status() == psutil.STATUS_ZOMBIE:
                    found.append(child)
        return found

    # A child that has just ended is a zombie until the guardian reaps it, a moment later;
    # one left behind per reset stays one.
    poll(lambda: not zombies(), timeout=5, what="no zombie children of the guardian")
    # The new shell may still be running its rc file's own short-lived children (rm -f);
    # those go away by themselves, a survivor of an old session would not.
    thread_id = session["thread_id"]

    def only_the_new_shell() -> list[psutil.Process] | None:
        family = _shell_family(thread_id)
        return family if [p.name() for p in family] == ["bash"] else None

    family = poll(only_the_new_shell, timeout=5, what="only the new shell left")
    assert family[0].ppid() == guardian.pid
    for sleeper in sleepers:
        record = (await execution(client, session, {
            "type": "get", "execution_id": sleeper["execution_id"]}))["data"]["execution"]
        assert (record["status"], record["reason"]) == ("unknown", "shell_reset")
        assert "orphans" not in (record["runtime"] or {})
    works = await run(client, session, "echo fresh")
    assert works["output"].strip() == "fresh"


async def test_reset_reports_a_process_that_escaped_the_session(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    scope = {"thread_id": session["thread_id"], "workspace_root": session["workspace_root"]}
    await run(client, session, "setsid sleep 33 </dev/null >/dev/null 2>&1 &")
    running = await run(client, session, "sleep 34", wait=0)
    escaped = poll(lambda: [p for p in _shell_family(session["thread_id"])
                            if p.cmdline() == ["sleep", "33"]], what="the escaped sleep")
    reset = await call(client, "Initialize", {"type": "reset_shell", **scope})
    record = (await execution(client, {**session, "generation": reset["data"]["generation"]}, {
        "type": "get", "execution_id": running["execution_id"]}))["data"]["execution"]
    assert (record["status"], record["reason"]) == ("unknown", "shell_reset")
    orphans = record["runtime"]["orphans"]
    assert [o["pid"] for o in orphans] == [escaped[0].pid]
    assert escaped[0].is_running()  # reported, never adopted or killed


# -- output written just before the end ---------------------------------------------------


async def test_background_output_after_the_leader_exits(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    bg = await bash(client, session, {
        "type": "command", "is_background": True,
        "command": "bash -c '(sleep 0.2; echo late-child) & echo parent'"})
    done = await bash(client, session, {"type": "status_check",
                                        "execution_id": bg["execution_id"]}, wait=10)
    assert (done["status"], done["exit_code"]) == ("exited", 0)
    text = "".join(p["text"] for p in await read_pages(client, session, bg["execution_id"]))
    assert text.split() == ["parent", "late-child"]


# -- wake-ups -----------------------------------------------------------------------------


async def test_a_thousand_waits_wake_at_the_exit(client: Client, workspace: Path) -> None:
    """1,000 waits on commands that end right after the wait starts: none sleeps to its
    deadline (10 s); each returns within 1 s of the recorded end."""
    threads = [await initialize(client, workspace) for _ in range(10)]
    late: list[float] = []

    async def one_thread(k: int, session: dict[str, Any]) -> None:
        fifo = workspace / f"go-{k}"
        os.mkfifo(fifo)
        for _ in range(100):
            # The command blocks until the test lets it go, after the wait was sent.
            started = await run(client, session, f"read -r x < {fifo.name}", wait=0)
            watch = {"type": "wait", "execution_ids": [started["execution_id"]],
                     "events": ["exited", "unknown"]}
            base = await execution(client, session, {**watch, "timeout_seconds": 0})
            waiting = asyncio.ensure_future(execution(client, session, {
                **watch, "timeout_seconds": 10, "after": base["data"]["cursor"]}))
            await asyncio.to_thread(fifo.write_text, "go\n")
            waited = await waiting
            returned_ms = time.time() * 1000
            assert waited["data"]["outcome"] == "changed", waited
            record = waited["data"]["changed"][0]
            assert (record["status"], record["exit_code"]) == ("exited", 0), record
            late.append((returned_ms - record["ended_unix_ms"]) / 1000)

    await asyncio.gather(*(one_thread(k, s) for k, s in enumerate(threads)))
    assert len(late) == 1000
    assert max(late) < 1.0, sorted(late)[-5:]


# -- lost records and retention -----------------------------------------------------------


async def test_lost_record_carries_its_output_figures(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    big = await run(client, session, "head -c 9000000 /dev/zero | tr '\\0' x; sleep 30", wait=0)

    async def output_end() -> int:
        record = (await execution(client, session, {
            "type": "get", "execution_id": big["execution_id"]}))["data"]["execution"]
        return int(record["output_end"])

    deadline = time.monotonic() + 20
    while await output_end() < 9_000_000:
        assert time.monotonic() < deadline, "the output did not arrive"
        await asyncio.sleep(0.05)
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    lost = (await execution(client, session, {
        "type": "get", "execution_id": big["execution_id"]}))["data"]["execution"]
    assert (lost["status"], lost["reason"]) == ("unknown", "guardian_lost")
    assert lost["output_end"] == 9_000_000
    assert lost["output_start"] == 9_000_000 - MIB
    page = (await execution(client, session, {"type": "read", "execution_id": big["execution_id"],
                                              "page_bytes": 1000}))["data"]
    assert page["start"] == 0 and "gap" not in page  # the head is kept too (issue 31)
    assert page["text"] == "x" * 1000


async def test_retention_keeps_the_last_mib(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    out = await run(client, session, "head -c 2000000 /dev/zero | tr '\\0' y", wait=20)
    record = (await execution(client, session, {
        "type": "get", "execution_id": out["execution_id"]}))["data"]["execution"]
    assert record["output_end"] == 2_000_000
    assert record["output_end"] - record["output_start"] >= MIB
    pages = await read_pages(client, session, out["execution_id"], 65536)
    # The first 64 KiB and the last MiB (issue 31), the gap between them reported.
    assert pages[0]["start"] == 0
    assert [(p["start"], p["gap"]) for p in pages if "gap" in p] == [
        (2_000_000 - MIB, 2_000_000 - MIB - 64 * 1024)]
    assert sum(len(p["text"]) for p in pages) == MIB + 64 * 1024
