"""A person's commands against a real guardian: ls, show, tail (-f), attach (in a PTY)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.helpers import poll, start_guardian
from tests.mcp_helpers import bash, execution, initialize, run
from tests.person_terminal import TETHER, PersonTerminal
from tether.shared.config import Config

pytestmark = pytest.mark.anyio

ECHO_LINES = Path(__file__).resolve().parent / "programs" / "echo_lines.py"
GAP = re.compile(r"^\[tether: (\d+) bytes of output were dropped by retention")


def tether(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, *args], capture_output=True, text=True, timeout=timeout)


async def _start(client: Client, session: dict[str, Any], command: str) -> str:
    started = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": command})
    return str(started["execution_id"])


async def test_ls_lists_running_and_exited(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    done = await run(client, session, "echo finished-here")
    running = await _start(client, session, "sleep 60")
    listed = tether("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    [item] = json.loads(listed.stdout)
    assert item["guardian"]["workspace_root"] == str(workspace)
    assert item["guardian"]["alive"] and item["guardian"]["rss_bytes"] > 0
    assert "auth_token" not in listed.stdout
    states = {r["execution_id"]: (r["status"], r["exit_code"]) for r in item["executions"]}
    assert states[done["execution_id"]] == ("exited", 0)
    assert states[running] == ("running", None)
    text = tether("ls", "--workspace", str(workspace)).stdout
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:] if line.strip()}
    assert rows[running][1:4] == ["background", "running", "-"]
    assert rows[done["execution_id"]][1:4] == ["command", "exited", "0"]
    assert "sleep 60" in text and "echo finished-here" in text
    other = workspace / "sub"
    assert json.loads(tether("ls", "--json", "--workspace", str(other)).stdout) == []


async def test_ls_and_show_against_an_older_guardian(tether_env: Config, workspace: Path) -> None:
    start_guardian(workspace, tether_env, "1.2")
    listed = tether("ls", "--json")
    [item] = json.loads(listed.stdout)
    assert item["guardian"]["protocol"] == "1.2"
    assert item["error"]["code"] == "capability_missing"
    assert item["error"]["data"]["capability"] == "person_view"
    shown = tether("show", "ex_whatever")
    assert shown.returncode == 2 and "too old" in shown.stderr and "1.2" in shown.stderr


async def test_show_has_record_recognition_and_events(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    eid = await _start(client, session, "echo show-me; sleep 60")
    shown = tether("show", eid, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["execution"]["execution_id"] == eid and data["execution"]["status"] == "running"
    assert data["live"] is True
    assert data["recognition"]["recognizer"] == "shell"
    assert data["receipts"] == [] and data["person_events"] == [] and data["agent_events"] == []
    text = tether("show", eid).stdout
    assert f"execution_id: {eid}" in text and "recognition:" in text
    missing = tether("show", "ex_0000000000000000")
    assert missing.returncode == 2 and "not_found" in missing.stderr


def _check_lines(stdout: str, last: int) -> tuple[int, int]:
    """Every printed line of ``seq`` once, in order; returns (lines, bytes dropped).

    After a gap (or at the start) the first line may be the tail of a number whose head was
    dropped: it must be a suffix of the number before the next whole line.
    """
    expected: int | None = None
    partial: str | None = ""
    count = dropped = 0
    for line in stdout.splitlines():
        gap = GAP.match(line)
        if gap:
            dropped += int(gap.group(1))
            expected, partial = None, None
            continue
        if expected is None and partial is None:
            partial = line
            continue
        if expected is None:
            expected = int(line)
            assert str(expected - 1).endswith(partial or ""), (partial, line)
        assert int(line) == expected, f"line {line!r}, expected {expected}"
        expected += 1
        count += 1
    assert expected == last + 1
    return count, dropped


async def test_tail_follows_until_exit(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    go = workspace / "go"
    eid = await _start(client, session,
                       f"while [ ! -e {go} ]; do sleep 0.05; done; seq 1 200000")
    follower = subprocess.Popen([TETHER, "tail", "-f", eid], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        # tail -f is following once it has found the execution; then the output starts.
        poll(lambda: tether("show", eid, "--json").returncode == 0, what="execution visible")
        go.touch()
        stdout, stderr = follower.communicate(timeout=60)
    finally:
        follower.kill()
    assert follower.returncode == 0, stderr
    assert f"{eid} exited, exit code 0" in stderr
    total = sum(len(f"{i}\r\n") for i in range(1, 200001))
    lines, dropped = _check_lines(stdout, 200000)
    assert lines >= 1024 * 1024 // len("200000\r\n")  # at least the retained MiB
    printed = len(stdout.encode()) + stdout.count("\n")  # CRLF became LF in the pipe
    gaps = [line for line in stdout.splitlines() if GAP.match(line)]
    gap_lines = sum(len(line) + 2 for line in gaps)
    # A gap may fall between a line's CR and LF: the LF after it reads as a whole line end
    # (two bytes by the count above), one byte more than it was, once per gap at most.
    assert 0 <= printed - gap_lines + dropped - total <= len(gaps)


async def test_tail_marks_the_retention_gap(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    seq = await run(client, session, "seq 1 200000", wait=30)
    shown = tether("tail", seq["execution_id"])
    assert shown.returncode == 0, shown.stderr
    # The first 64 KiB, then the gap, then the last 1 MiB (issue 31: the head is kept).
    assert shown.stdout.startswith("1\n2\n3\n"), shown.stdout[:40]
    [gap] = [line for line in shown.stdout.splitlines() if GAP.match(line)]
    total = sum(len(f"{i}\r\n") for i in range(1, 200001))
    assert int(GAP.match(gap).group(1)) == total - 1024 * 1024 - 64 * 1024  # type: ignore[union-attr]
    head, rest = shown.stdout.split(gap + "\n", 1)
    kept = head.splitlines()  # whole lines, and the one the head's end cut
    assert kept[:-1] == [str(i) for i in range(1, len(kept))]
    assert str(len(kept)).startswith(kept[-1])
    _check_lines(gap + "\n" + rest, 200000)
    last = tether("tail", seq["execution_id"], "--bytes", "16").stdout  # raw bytes: CRLF
    assert last == "199999\n200000\n"


async def test_attach_mirrors_and_types_only_with_write(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    eid = await _start(client, session, f"{sys.executable} {ECHO_LINES}")
    await _wait_output(client, session, eid, "ready: echo program")

    viewer = PersonTerminal(["attach", eid])
    try:
        screen = viewer.wait_for("ready: echo program")
        assert "Ctrl-\\ detaches" in screen and "read-only" in screen
        assert viewer.cursor() == (1, 0)  # below the line the program printed
        await bash(client, session, {"type": "send_text", "text": "from-agent", "submit": True,
                                     "execution_id": eid}, 0)
        viewer.wait_for("echo:from-agent")  # new output streams in after the paint
        viewer.type(b"typed-readonly\r")
        await bash(client, session, {"type": "send_text", "text": "sync", "submit": True,
                                     "execution_id": eid}, 0)
        viewer.wait_for("echo:sync")
        assert "typed-readonly" not in viewer.display()
        viewer.type(b"\x1c")
        assert viewer.wait_exit() == 0
        assert b"detached from " + eid.encode() in viewer.output()
    finally:
        viewer.close()
    output = await _output(client, session, eid)
    assert "typed-readonly" not in output
    assert json.loads(tether("show", eid, "--json").stdout)["person_events"] == []

    writer = PersonTerminal(["attach", eid, "--write"])
    try:
        writer.wait_for("echo:sync")
        assert "writing: keys go to it" in writer.display()
        writer.type(b"from-person\r")
        writer.wait_for("echo:from-person")
        writer.type(b"\x1c")
        assert writer.wait_exit() == 0
    finally:
        writer.close()
    got = await execution(client, session, {"type": "get", "execution_id": eid})
    assert got["data"]["execution"]["status"] == "running"  # detaching left it running
    events = json.loads(tether("show", eid, "--json").stdout)["person_events"]
    assert [e["kind"] for e in events] == ["person_typed"]
    assert "from-person" not in json.dumps(events)


async def test_attach_redraws_when_the_person_resizes(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    eid = await _start(client, session, f"{sys.executable} {ECHO_LINES}")
    await _wait_output(client, session, eid, "ready: echo program")
    viewer = PersonTerminal(["attach", eid], rows=40, cols=120)  # the execution's own size
    try:
        viewer.wait_for("ready: echo program")
        assert "sizes differ" not in viewer.title()
        viewer.resize(30, 100)
        poll(lambda: "sizes differ: execution 40x120, terminal 30x100" in viewer.title(),
             what="the title to say the sizes differ")
        viewer.wait_for("ready: echo program")  # repainted into the smaller terminal
        viewer.resize(60, 120)
        screen = viewer.wait_for("terminal 60x120")  # now a status line under the mirror
        assert screen.splitlines()[59].startswith("tether: attached to")
        viewer.type(b"\x1c")
        assert viewer.wait_exit() == 0
    finally:
        viewer.close()


async def test_attach_and_tail_stop_when_the_guardian_dies(
    client: Client, tether_env: Config, workspace: Path
) -> None:
    session = await initialize(client, workspace)
    eid = await _start(client, session, "echo alive; sleep 60")
    await _wait_output(client, session, eid, "alive")
    viewer = PersonTerminal(["attach", eid])
    follower = subprocess.Popen([TETHER, "tail", "-f", eid], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        viewer.wait_for("alive")
        assert follower.stdout is not None and follower.stdout.readline() == "alive\n"
        [info] = [json.loads(p.read_text()) for p in tether_env.runtime_dir.glob("*/guardian.json")]
        os.kill(info["pid"], signal.SIGKILL)
        # Promptly, not when a long poll times out; 255: the program's end was not seen.
        assert viewer.wait_exit(timeout=10) == 255
        assert b"stopped watching " + eid.encode() in viewer.output()
        assert b"has exited" in viewer.output()
        _, stderr = follower.communicate(timeout=10)
        assert follower.returncode == 2 and "has exited" in stderr, stderr
    finally:
        viewer.close()
        follower.kill()


async def test_attach_to_a_command_in_the_main_shell(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    started = await run(client, session, f"{sys.executable} {ECHO_LINES}", wait=0.5)
    assert started["status"] == "running" and started["kind"] == "command"
    eid = started["execution_id"]
    await _wait_output(client, session, eid, "ready: echo program")
    viewer = PersonTerminal(["attach", eid, "--write"])
    try:
        viewer.wait_for("ready: echo program")  # the shell's screen, prompt line included
        viewer.type(b"via-shell\r")
        viewer.wait_for("echo:via-shell")
        viewer.type(b"\x04")  # Ctrl-D: end of input, the program exits
        assert viewer.wait_exit() == 0
        assert f"{eid} exited with exit code 0".encode() in viewer.output()
    finally:
        viewer.close()


async def test_attach_ends_with_the_execution(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    go = workspace / "go"
    eid = await _start(client, session, f"echo waiting; while [ ! -e {go} ]; do sleep 0.05; "
                                        "done; echo last-words; exit 3")
    await _wait_output(client, session, eid, "waiting")
    viewer = PersonTerminal(["attach", eid], rows=20, cols=60)
    try:
        viewer.wait_for("waiting")
        go.touch()
        assert viewer.wait_exit() == 3  # the program's exit status, as the README promises
        assert f"{eid} exited with exit code 3".encode() in viewer.output()
        assert b"last-words" in viewer.output()
    finally:
        viewer.close()


async def test_attach_shows_every_byte_once_in_order(client: Client, workspace: Path) -> None:
    """Output poured after the paint (less than retention keeps, so nothing may be dropped)
    reaches the person's terminal whole: no chunk lost, doubled or reordered."""
    session = await initialize(client, workspace)
    go = workspace / "go"
    eid = await _start(client, session, f"echo waiting; while [ ! -e {go} ]; do sleep 0.05; "
                                        "done; seq 1 100000")
    await _wait_output(client, session, eid, "waiting")
    viewer = PersonTerminal(["attach", eid])
    try:
        viewer.wait_for("waiting")
        go.touch()
        assert viewer.wait_exit(timeout=60) == 0
        raw = viewer.output()
    finally:
        viewer.close()
    assert raw.count(b"\x1b[2J") == 1  # painted once: never fell behind
    poured = raw.split(b"\x1b[2J")[-1].split(b"[tether: ")[0]
    numbers = [int(n) for n in re.findall(rb"(?<![\d;])(\d+)\r\n", poured)]
    assert numbers == list(range(1, 100001))


async def _output(client: Client, session: dict[str, Any], eid: str) -> str:
    page = await execution(client, session, {"type": "read", "execution_id": eid,
                                             "page_bytes": 65536})
    return str(page["data"]["text"])


async def _wait_output(client: Client, session: dict[str, Any], eid: str, text: str) -> None:
    for _ in range(200):
        if text in await _output(client, session, eid):
            return
        await execution(client, session, {"type": "wait", "execution_ids": [eid],
                                          "events": ["output"], "timeout_seconds": 0.2})
    raise AssertionError(f"{text!r} never appeared in {eid}")


async def test_doctor_reports_stale_guardian_and_open_runtime_dir(
    client: Client, tether_env: Config, workspace: Path, tmp_path: Path
) -> None:
    await initialize(client, workspace)  # a real, healthy guardian
    healthy = tether("doctor")
    assert healthy.returncode == 0, healthy.stdout
    assert f"guardian of {workspace}: pid" in healthy.stdout and "alive, protocol" in healthy.stdout
    # A guardian.json left by a guardian that died (pid reused by nobody: a finished child).
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale_dir = tether_env.runtime_dir / "0123456789abcdef0123"
    stale_dir.mkdir(mode=0o700)
    stale = stale_dir / "guardian.json"
    stale.write_text(json.dumps({
        "instance_id": "dead", "pid": gone.pid, "create_time": 1.0, "boot_id": "x",
        "endpoint": "ipc:///nowhere", "auth_token": "t", "protocol": "1.3",
        "workspace_root": str(tmp_path / "gone-ws")}))
    gone_item = [i for i in json.loads(tether("ls", "--json").stdout)
                 if i["guardian"]["instance_id"] == "dead"]
    assert gone_item[0]["guardian"]["alive"] is False
    assert gone_item[0]["error"]["code"] == "guardian_gone"
    tether_env.runtime_dir.chmod(0o755)
    try:
        refused = tether("ls")
        assert refused.returncode == 2 and "chmod 700" in refused.stderr
        sick = tether("doctor")
    finally:
        tether_env.runtime_dir.chmod(0o700)
    assert sick.returncode == 1, sick.stdout
    lines = sick.stdout.splitlines()
    stale_at = next(i for i, line in enumerate(lines) if f"stale {stale}" in line)
    assert lines[stale_at].startswith("ACTION") and f"rm {stale}" in lines[stale_at + 1]
    mode_at = next(i for i, line in enumerate(lines) if "has mode 0755" in line)
    assert lines[mode_at].startswith("ACTION")
    assert f"chmod 700 {tether_env.runtime_dir}" in lines[mode_at + 1]
    assert "2 finding(s) need action" in sick.stdout
    report = json.loads(tether("doctor", "--json").stdout)
    assert report["needs_action"] == 1  # the mode is fixed; the stale file is not
