"""A person's commands as a person's shell runs them, against real guardians: what they print
when agents name things with control characters, into a closed pipe, without a terminal, when
a guardian is stopped or gone, and the exit status of ``attach``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.agent_helpers import launch
from tests.helpers import (
    kill_tree,
    poll,
    processes_with_env,
    sigstop,
    start_guardian,
    tether_processes,
)
from tests.mcp_helpers import bash, execution, initialize, run
from tests.person_terminal import TETHER, PersonTerminal
from tether.frontend.guardians.locator import HELLO_TIMEOUT_S, read_info, spawn_guardian
from tether.frontend.transport.mcp_server import build_server
from tether.protocol.limits import RPC_SLACK_S
from tether.shared.config import Config
from tether.shared.paths import guardian_key, guardian_paths
from tether.shared.store.view import peek_execution

pytestmark = pytest.mark.anyio

#: What an agent could put in a command or a title to take over a person's terminal: colour
#: (CSI), a window title (OSC ended by BEL), a C1 CSI (0x9b) that clears the screen, and DEL.
HOSTILE = "\x1b[41mREDBG\x1b]2;pwned\x07 \x9b2J\x7f x"
SHOWN = r"\x1b[41mREDBG\x1b]2;pwned\x07 \x9b2J\x7f x"
#: Anything a terminal would act on rather than draw (newline is the line end of the output).
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def tether(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=60, cwd=cwd)


async def _wait_for_output(client: Client, session: dict[str, Any], eid: str, text: str) -> None:
    """Poll an execution's status until its output shows ``text`` (15 s at most)."""
    deadline = time.monotonic() + 15
    while True:
        status = await bash(client, session, {"type": "status_check", "execution_id": eid},
                            wait=0.2)
        if text in status["output"]:
            return
        assert time.monotonic() < deadline, f"{text!r} not in {status['output']!r} after 15s"


async def _background(client: Client, session: dict[str, Any], command: str) -> str:
    started = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": command})
    return str(started["execution_id"])


@contextlib.contextmanager
def _stopped(pid: int) -> Iterator[None]:
    """The guardian ``pid`` stopped (SIGSTOP: alive, silent) for the block's length."""
    sigstop(pid)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@pytest.fixture
def hostile_workspace(tmp_path: Path) -> Path:
    """A workspace whose very path sets the window title (directory names are an agent's)."""
    root = tmp_path / "w\x1b]2;ws-title\x07s"
    root.mkdir()
    return root.resolve()


async def test_control_characters_are_shown_not_obeyed(
    client: Client, hostile_workspace: Path, tmp_path: Path
) -> None:
    session = await initialize(client, hostile_workspace)
    eid = (await run(client, session, f"echo '{HOSTILE}'"))["execution_id"]
    await launch(client, session, tmp_path / "agent.log", title=f"agent {HOSTILE}")
    shown_root = r"w\x1b]2;ws-title\x07s"
    views = {
        "ls": tether("ls"),
        "show": tether("show", eid),
        "agents list": tether("agents", "list", "--workspace", str(hostile_workspace)),
        "guardians list": tether("guardians", "list"),
        "doctor": tether("doctor"),
    }
    for name, done in views.items():
        assert done.returncode == 0, (name, done.stderr)
        assert not CONTROLS.search(done.stdout + done.stderr), (name, done.stdout)
        assert shown_root in done.stdout or name in ("show", "agents list"), (name, done.stdout)
    assert f"echo '{SHOWN}'" in views["ls"].stdout and f"agent {SHOWN}" in views["ls"].stdout
    assert f"command: echo '{SHOWN}'" in views["show"].stdout
    assert f"agent {SHOWN[:30]}" in views["agents list"].stdout  # cut to 80 columns
    # --json keeps the text exact: JSON escapes control characters itself.
    listed = tether("ls", "--json")
    assert not CONTROLS.search(listed.stdout)
    [item] = json.loads(listed.stdout)
    assert {r["command"] for r in item["executions"]} >= {f"echo '{HOSTILE}'"}
    assert item["guardian"]["workspace_root"] == str(hostile_workspace)
    shown = json.loads(tether("show", eid, "--json").stdout)
    assert shown["execution"]["command"] == f"echo '{HOSTILE}'"


def into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``tether <args> | head -0``, deterministically: the reader is gone before the first
    write."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([TETHER, *args], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=60)
    finally:
        os.close(write)


async def test_a_closed_pipe_ends_quietly(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    eid = (await run(client, session, "seq 1 20000"))["execution_id"]
    for args in (["ls"], ["ls", "--json"], ["show", eid], ["tail", eid], ["tail", "-f", eid],
                 ["guardians", "list"], ["agents", "list", "--workspace", str(workspace)],
                 ["doctor"], ["--help"]):
        done = into_closed_pipe(*args)
        # 141 = 128 + SIGPIPE, as a shell reports for coreutils in the same place.
        assert (done.returncode, done.stderr) == (141, ""), args


async def test_attach_ends_with_the_status_it_saw(client: Client, workspace: Path) -> None:
    """An ended program's exit code; 255 for an end whose code nobody saw (its guardian was
    lost); 0 for a detach (tests/test_person.py)."""
    session = await initialize(client, workspace)
    ended = (await run(client, session, "(exit 7)"))["execution_id"]
    running = await _background(client, session, "echo waiting; sleep 60")
    for eid, status, farewell in ((ended, 7, b"exited with exit code 7"),
                                  (running, 255, b"unknown (guardian_lost)")):
        if eid == running:  # a lost guardian: its records' ends were never seen
            guardian = psutil.Process(session["guardian"]["pid"])
            guardian.kill()
            guardian.wait(timeout=10)
            got = await execution(client, session, {"type": "get", "execution_id": eid})
            assert got["data"]["execution"]["reason"] == "guardian_lost"  # a new guardian
        viewer = PersonTerminal(["attach", eid])
        try:
            assert viewer.wait_exit() == status
            assert farewell in viewer.output()
        finally:
            viewer.close()


async def test_a_stopped_guardian_is_reported_not_a_missing_execution(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    eid = await _background(client, session, "echo here; sleep 60")
    pid = session["guardian"]["pid"]
    with _stopped(pid):
        for args in (["show", eid], ["tail", eid]):
            refused = tether(*args)
            assert refused.returncode == 2, (args, refused.stderr)
            assert "[guardian_unresponsive]" in refused.stderr, (args, refused.stderr)
            assert f"kill -CONT {pid}" in refused.stderr and eid in refused.stderr
        viewer = PersonTerminal(["attach", eid])
        try:
            assert viewer.wait_exit() == 2
            assert b"[guardian_unresponsive]" in viewer.output()
        finally:
            viewer.close()
    # An id no guardian holds is still not_found once every guardian answers.
    missing = tether("show", "ex_0000000000000000")
    assert missing.returncode == 2 and "[not_found]" in missing.stderr


async def test_attach_without_a_terminal_says_what_to_use(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    eid = await _background(client, session, "echo here; sleep 60")
    piped = subprocess.run([TETHER, "attach", eid], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=60)
    assert piped.returncode == 2, piped.stderr
    assert piped.stdout == ""  # no "detached" farewell: it never attached
    assert "neither stdin nor stdout is one" in piped.stderr and "[invalid_request]" in piped.stderr
    assert f"tether tail -f {eid}" in piped.stderr
    keyboard, terminal = os.openpty()  # typing at a terminal, printing into a pipe
    try:
        redirected = subprocess.run([TETHER, "attach", eid], stdin=terminal,
                                    capture_output=True, text=True, timeout=60)
    finally:
        os.close(keyboard)
        os.close(terminal)
    assert redirected.returncode == 2 and redirected.stdout == ""
    assert "stdout is not one" in redirected.stderr, redirected.stderr


async def test_guardians_stop_says_what_it_found_and_clears_a_dead_guardians_record(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    never = tmp_path / "never"
    never.mkdir()
    nothing = tether("guardians", "stop", "--workspace", str(never), "--yes")
    assert nothing.returncode == 0, nothing.stderr
    assert f"no guardian was ever started for {never}" in nothing.stdout
    key = guardian_key("local", str(never))  # looking created nothing
    assert not (tether_env.runtime_dir / key).exists()
    assert not (tether_env.state_home / "guardians" / key).exists()

    session = await initialize(client, workspace)
    await _background(client, session, "sleep 60")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    paths = guardian_paths(tether_env, "local", str(workspace))
    assert paths.info.exists()  # what a SIGKILLed guardian leaves behind
    stopped = tether("guardians", "stop", "--workspace", str(workspace), "--yes")
    assert stopped.returncode == 0, stopped.stderr
    assert f"no guardian is running for {workspace}: pid {guardian.pid}" in stopped.stdout
    assert "removed its stale record" in stopped.stdout
    assert ("1 of its executions it left running become unknown (guardian_lost) when the next "
            "guardian starts") in stopped.stdout
    assert not paths.info.exists()
    assert str(workspace) not in tether("guardians", "list").stdout
    again = tether("guardians", "stop", "--workspace", str(workspace))
    assert again.returncode == 0 and f"no guardian is running for {workspace}" in again.stdout

    # A dead guardian's record while something holds guardian.lock (a guardian starting):
    # left alone.
    paths.info.write_text(json.dumps({**session["guardian"], "endpoint": "ipc:///nowhere",
                                      "auth_token": "t", "create_time": 1.0, "boot_id": "x"}))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(paths.lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        kept = tether("guardians", "stop", "--workspace", str(workspace), "--yes")
        assert kept.returncode == 2 and f"pid {holder.pid} holds" in kept.stdout, kept.stdout
        assert paths.info.exists()
    finally:
        holder.kill()
        holder.wait()


async def test_doctor_and_show_on_a_stopped_guardian_say_continue_it_at_once(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    eid = await _background(client, session, "sleep 60")
    pid = session["guardian"]["pid"]
    runs: dict[str, tuple[subprocess.CompletedProcess[str], float]] = {}
    with _stopped(pid):
        for args in (["doctor"], ["show", eid]):
            started = time.monotonic()
            done = tether(*args)
            runs[args[0]] = done, time.monotonic() - started
    doctor = runs["doctor"][0]
    assert doctor.returncode == 1, doctor.stdout
    lines = doctor.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if f"guardian pid {pid} of" in line)
    assert lines[at].startswith("ACTION") and f"`kill -CONT {pid}`" in lines[at]
    assert lines[at + 1].strip().startswith(f"fix: kill -CONT {pid}  # then, if it stays "
                                            "unresponsive: tether guardians restart")
    for name, (done, elapsed) in runs.items():
        # Seen stopped before anything is sent: no handshake waited out, no wait claimed.
        said = done.stdout + done.stderr
        assert f"(guardian pid {pid}) is stopped (SIGSTOP" in said, (name, said)
        assert "did not answer within" not in said, (name, said)
        assert elapsed < 2 * HELLO_TIMEOUT_S, (name, elapsed)


async def test_relative_workspaces_a_version_and_no_python_none(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    eid = (await run(client, session, "echo plain"))["execution_id"]
    for args in (["ls", "--json"], ["show", eid], ["tail", eid], ["guardians", "status"],
                 ["agents", "list", "--json"]):
        for where, cwd in ((".", workspace), (workspace.name, workspace.parent)):
            done = tether(*args, "--workspace", where, cwd=cwd)
            assert done.returncode == 0, (args, where, done.stderr)
    [item] = json.loads(tether("ls", "--json", "--workspace", ".", cwd=workspace).stdout)
    assert item["guardian"]["workspace_root"] == str(workspace)
    assert "plain" in tether("tail", eid, "--workspace", ".", cwd=workspace).stdout
    # A shell command's recognition has no rule priority, its observation no byte counts:
    # a dash, never Python's None.
    shown = tether("show", eid)
    assert "recognition:" in shown.stdout and "—" in shown.stdout
    assert "None" not in shown.stdout, shown.stdout
    version = tether("--version")
    assert version.returncode == 0
    assert version.stdout == f"tether {metadata.version('tether')}\n"


async def test_guardians_stop_all_reaches_every_principals_guardians(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    """``stop --workspace`` reaches the local principal's guardian only; ``--principal``
    names another, and ``stop --all`` stops every guardian, an HTTP principal's too."""
    session = await initialize(client, workspace)
    sleeper = await _background(client, session, "sleep 60")
    other = tmp_path / "other"
    other.mkdir()
    paths = guardian_paths(tether_env, "alice", str(other))
    child = spawn_guardian(paths, "alice", str(other))
    try:
        alice = poll(lambda: read_info(paths), what="alice's guardian.json")
        status = tether("guardians", "status", "--workspace", str(other), "--principal", "alice",
                        "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["answering"] is True
        listed = tether("guardians", "list")
        assert f"{other}  protocol" in listed.stdout and "principal alice" in listed.stdout
        asked = tether("guardians", "stop", "--all")
        assert asked.returncode == 2, asked.stdout + asked.stderr
        assert sleeper in asked.stdout and str(other) in asked.stdout, asked.stdout
        assert "Run again with --yes" in asked.stdout
        assert psutil.pid_exists(alice["pid"]) and psutil.pid_exists(session["guardian"]["pid"])
        done = tether("guardians", "stop", "--all", "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        for stopped in (alice, session["guardian"]):
            assert stopped["instance_id"] in done.stdout, done.stdout
        assert child.wait(timeout=15) == 0
        guardian = psutil.Process(session["guardian"]["pid"])
        poll(lambda: guardian.status() == psutil.STATUS_ZOMBIE if guardian.is_running() else True,
             what="the local guardian to exit")
        assert "no guardian has announced itself" in tether("guardians", "list").stdout
        again = tether("guardians", "stop", "--all")
        assert again.returncode == 0 and "no guardian is running" in again.stdout
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def test_a_guardian_too_old_to_look_into_is_named_with_its_upgrade(
    tether_env: Config, workspace: Path
) -> None:
    """Before 1.3 (person_view) a guardian cannot be looked into: show, tail and attach say
    so with the exact restart command, never not_found; ls and agents name the real path,
    and ls says in its status that it could not look inside."""
    start_guardian(workspace, tether_env, "1.2")
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        eid = await _background(client, session, "echo here; sleep 60")
    restart = f"tether guardians restart --workspace {workspace} --yes"
    for args in (["show", eid], ["tail", eid]):
        refused = tether(*args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert "[capability_missing]" in refused.stderr, (args, refused.stderr)
        assert "person_view" in refused.stderr and "protocol 1.2" in refused.stderr
        assert restart in refused.stderr, refused.stderr
    viewer = PersonTerminal(["attach", eid])
    try:
        assert viewer.wait_exit() == 2
        assert b"[capability_missing]" in viewer.output()
    finally:
        viewer.close()
    listed = tether("ls", "--workspace", str(workspace))
    assert listed.returncode == 1, listed.stdout  # it could not look inside
    assert restart in listed.stdout and "<root>" not in listed.stdout, listed.stdout
    agents = tether("agents", "list", "--workspace", str(workspace))
    assert agents.returncode == 2 and "capability_missing" in agents.stderr, agents.stderr
    assert restart in agents.stderr and "<root>" not in agents.stderr, agents.stderr


async def test_tail_and_attach_stop_at_once_when_the_guardian_is_stopped(
    client: Client, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    eid = await _background(client, session, "echo here; sleep 60")
    await _wait_for_output(client, session, eid, "here")
    pid = session["guardian"]["pid"]
    viewer = PersonTerminal(["attach", eid])
    follower = subprocess.Popen([TETHER, "tail", "-f", eid], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        viewer.wait_for("here")
        assert follower.stdout is not None and follower.stdout.readline() == "here\n"
        with _stopped(pid):
            # Within moments, not when a long poll (10 s) and its slack run out.
            assert viewer.wait_exit(timeout=RPC_SLACK_S / 2) == 2
            _, stderr = follower.communicate(timeout=RPC_SLACK_S / 2)
        for said in (viewer.output().decode(), stderr):
            assert "is stopped (SIGSTOP" in said, said
            assert f"`kill -CONT {pid}` resumes it" in said, said
        assert follower.returncode == 2 and "[guardian_unresponsive]" in stderr, stderr
    finally:
        viewer.close()
        follower.kill()
        follower.wait()


async def test_show_tail_and_attach_read_a_lost_guardians_record_from_disk(
    tether_env: Config, workspace: Path
) -> None:
    """A crashed guardian's records stay on disk: show, tail and attach read them there
    (read-only: nothing started, nothing written), never not_found."""
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        finished = (await run(client, session, "echo finished-before; (exit 3)"))["execution_id"]
        running = await _background(client, session, "echo still-here; sleep 60")
        await _wait_for_output(client, session, running, "still-here")
    guardian = psutil.Process(session["guardian"]["pid"])
    guardian.kill()
    guardian.wait(timeout=10)
    catalog = guardian_paths(tether_env, "local", str(workspace)).catalog

    shown = tether("show", running)
    assert shown.returncode == 0, shown.stderr
    assert "status: unknown" in shown.stdout and "reason: guardian_lost" in shown.stdout
    assert "read from disk" in shown.stdout and "still says running" in shown.stdout
    assert "echo still-here; sleep 60" in shown.stdout
    as_json = json.loads(tether("show", running, "--json").stdout)
    assert as_json["execution"]["status"] == "unknown" and as_json["live"] is False
    assert as_json["from_disk"]["status_in_catalog"] == "running"
    ended = tether("show", finished)
    assert ended.returncode == 0 and "exit_code: 3" in ended.stdout, ended.stderr
    assert "still says" not in ended.stdout
    tailed = tether("tail", running)
    assert tailed.returncode == 0 and "still-here" in tailed.stdout, tailed.stderr
    followed = tether("tail", "-f", running, "--workspace", str(workspace))
    assert followed.returncode == 0 and "still-here" in followed.stdout, followed.stderr
    assert f"[tether: {running} unknown (guardian_lost)]" in followed.stderr
    viewer = PersonTerminal(["attach", running])
    try:
        assert viewer.wait_exit() == 255  # its end was not seen
        assert b"unknown (guardian_lost)" in viewer.output()
    finally:
        viewer.close()
    # Looking changed nothing: no guardian started, the record is as the crash left it.
    assert tether_processes(tether_env.runtime_dir, "tether-guardian") == []
    found = peek_execution(catalog, running)
    assert found is not None and found["execution"]["status"] == "running"
    missing = tether("show", "ex_0000000000000000")
    assert missing.returncode == 2 and "[not_found]" in missing.stderr


def _files_of(catalog: Path) -> dict[str, tuple[bytes, int]]:
    """The bytes and mtime of a catalog, its write-ahead log and its log index."""
    found = {}
    for path in (catalog, *(catalog.with_name(catalog.name + end) for end in ("-wal", "-shm"))):
        with contextlib.suppress(FileNotFoundError):
            found[path.name] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found


async def test_ls_lists_a_lost_guardians_threads_and_records_from_disk(
    tether_env: Config, workspace: Path
) -> None:
    """A crashed guardian's block in ``tether ls`` lists its threads and records as its
    catalog has them (a finished command exited, one it left running unknown
    (guardian_lost)), in the order and shape a live guardian's listing has, read-only:
    nothing started, and no byte of the catalog, its log or its log's index changed."""
    async with Client(build_server(tether_env)) as client:
        session = await initialize(client, workspace)
        finished = (await run(client, session, "echo finished-before; (exit 3)"))["execution_id"]
        running = await _background(client, session, "echo still-here; sleep 300")
        await _wait_for_output(client, session, running, "still-here")
    try:
        live = json.loads(tether("ls", "--json").stdout)[0]
        guardian = psutil.Process(session["guardian"]["pid"])
        guardian.kill()
        guardian.wait(timeout=10)
        catalog = guardian_paths(tether_env, "local", str(workspace)).catalog
        before = _files_of(catalog)
        # The case that matters: a crash leaves the log and its index, which opening the
        # catalog even with mode=ro would rebuild (rewriting the -shm file).
        assert set(before) == {catalog.name, f"{catalog.name}-wal", f"{catalog.name}-shm"}

        listed = tether("ls")
        assert listed.returncode == 1, listed.stderr  # EXIT_INCOMPLETE: it is gone all the same
        assert "Traceback" not in listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0] == (f"{workspace}  pid {guardian.pid}  GONE: read from its files on "
                            "disk; `tether doctor` says how to clear it")
        assert f"{session['thread_id']} (no shell)" in lines[1], lines[1]
        assert "running" not in lines[1] and "shell idle" not in lines[1]
        cells = {row[0]: row for row in (re.split(r"\s{2,}", line.strip()) for line in lines[2:])}
        assert cells[finished][2:4] == ["exited", "3"], cells[finished]
        assert cells[running][2:4] == ["unknown (guardian_lost)", "-"], cells[running]
        assert cells[running][-1] == "echo still-here; sleep 300"
        assert list(cells)[1:] == [r["execution_id"] for r in live["executions"]]  # newest first

        as_json = tether("ls", "--json")
        assert as_json.returncode == 1, as_json.stderr
        item = json.loads(as_json.stdout)[0]
        assert item["source"] == "disk" and item["error"]["code"] == "guardian_gone"
        assert item["guardian"]["alive"] is False
        assert set(item) == {*live, "source", "error"}  # a live guardian's item, and whence
        records = {r["execution_id"]: r for r in item["executions"]}
        assert list(records) == [r["execution_id"] for r in live["executions"]]
        for was in live["executions"]:
            assert set(records[was["execution_id"]]) == set(was)
        assert records[finished]["status"] == "exited" and records[finished]["exit_code"] == 3
        assert records[running]["status"] == "unknown" and records[running]["exit_code"] is None
        assert records[running]["reason"] == "guardian_lost"
        assert "running" not in item["counts"]
        assert sum(item["counts"].values()) == sum(live["counts"].values())
        assert [t["thread_id"] for t in item["threads"]] == [
            t["thread_id"] for t in live["threads"]]
        assert all(t["shell_alive"] is False for t in item["threads"])
        every = json.loads(tether("ls", "--all", "--json", "--workspace", str(workspace)).stdout)
        assert [r["execution_id"] for r in every[0]["executions"]] == list(records)
        shown = json.loads(tether("show", running, "--json").stdout)  # read the same way
        assert records[running]["output_end"] == shown["execution"]["output_end"] > 0

        # Looking changed nothing: no guardian started, the files are as the crash left them.
        assert tether_processes(tether_env.runtime_dir, "tether-guardian") == []
        assert _files_of(catalog) == before
        found = peek_execution(catalog, running)
        assert found is not None and found["execution"]["status"] == "running"
    finally:
        kill_tree(tether_env.runtime_dir)  # the shells and the sleep the guardian left
        poll(lambda: not processes_with_env("TETHER_RUNTIME_DIR", str(tether_env.runtime_dir)),
             what="every process the test started to end")


async def test_ls_says_why_a_lost_guardians_catalog_cannot_be_read(
    tether_env: Config, tmp_path: Path
) -> None:
    """A gone guardian whose catalog is missing, not a catalog, or has a log that only a
    guardian may recover is one GONE line with the reason: no traceback, nothing written."""
    gone = subprocess.Popen(["true"])  # a pid that no longer runs
    gone.wait()
    ensure = tether("ls")  # makes the runtime dir as tether makes it
    assert ensure.returncode == 0, ensure.stderr
    cases = {"missing": None, "corrupt": b"not a catalog" * 400, "log": b""}
    for name, content in cases.items():
        key = f"{name:0<20}"
        (tether_env.runtime_dir / key).mkdir(mode=0o700)
        (tether_env.runtime_dir / key / "guardian.json").write_text(json.dumps({
            "instance_id": name, "pid": gone.pid, "create_time": 1.0, "boot_id": "x",
            "endpoint": "ipc:///nowhere", "auth_token": "t", "protocol": "1.3",
            "principal": "local", "workspace_root": str(tmp_path / name)}))
        if content is None:
            continue
        state = tether_env.state_home / "guardians" / key
        state.mkdir(parents=True)
        (state / "catalog.sqlite3").write_bytes(content)
        if name == "log":  # a log left by a crash whose index (-shm) is gone
            (state / "catalog.sqlite3-wal").write_bytes(b"frames" * 100)
    looked = sorted(p.name for p in tether_env.state_home.rglob("*"))

    listed = tether("ls")
    assert listed.returncode == 1 and "Traceback" not in listed.stderr, listed.stderr
    blocks = {block.split("  ")[0]: block for block in listed.stdout.split("\n\n")}
    for name in cases:
        head, why = blocks[str(tmp_path / name)].splitlines()
        assert head.endswith("  GONE"), head
        assert why.startswith("  guardian.json names a process that is gone; ")
        assert why.endswith("; `tether doctor` says how to clear it")
    assert "it left no catalog" in blocks[str(tmp_path / "missing")]
    assert "could not be read (file is not a database)" in blocks[str(tmp_path / "corrupt")]
    assert "log left to recover" in blocks[str(tmp_path / "log")]
    items = json.loads(tether("ls", "--json").stdout)
    assert {i["error"]["code"] for i in items} == {"guardian_gone"}
    assert not any("source" in i or "executions" in i for i in items)
    assert sorted(p.name for p in tether_env.state_home.rglob("*")) == looked
