"""Real programs in real PTYs, through the MCP client: screens are right (issue 5, docs/tools.md#screens)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.helpers import AGENT_SCREEN_STATES, fixture_file
from tests.mcp_helpers import bash, execution, initialize, run

pytestmark = pytest.mark.anyio

PROGRAMS = Path(__file__).resolve().parent / "programs"


async def _screen(client: Client, session: dict[str, Any], execution_id: str | None = None,
                  ) -> dict[str, Any]:
    action: dict[str, Any] = {"type": "screen"}
    if execution_id:
        action["execution_id"] = execution_id
    return dict((await bash(client, session, action))["screen"])


async def _screen_until(client: Client, session: dict[str, Any], predicate: Any,
                        execution_id: str | None = None, timeout: float = 10) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            screen = await _screen(client, session, execution_id)
            if predicate(screen):
                return screen
            await anyio.sleep(0.05)


@pytest.mark.parametrize("name", sorted(AGENT_SCREEN_STATES))
async def test_agent_fixture_screens(name: str, client: Client, workspace: Path) -> None:
    expected = fixture_file(f"agent-screens/{name}.txt").read_text().rstrip("\n")
    ansi = fixture_file(f"agent-screens/{name}.ansi")
    session = await initialize(client, workspace)
    started = await bash(client, session, {
        "type": "command", "command": f"cat {ansi}; sleep 30",
        "is_background": True, "rows": 40, "cols": 120})
    screen = await _screen_until(client, session, lambda s: s["text"] == expected,
                                 started["execution_id"])
    assert screen["rows"] == 40 and screen["cols"] == 120


async def test_alternate_screen_enter_and_leave(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    await run(client, session, "echo before-the-app")
    app = await run(client, session, f"{sys.executable} {PROGRAMS / 'fullscreen.py'}", wait=0)
    inside = await _screen_until(client, session, lambda s: "FULLSCREEN-APP" in s["text"])
    assert inside["alternate"] is True
    assert "before-the-app" not in inside["text"]
    await bash(client, session, {"type": "send_text", "text": "q"})
    done = await bash(client, session, {"type": "status_check", "execution_id": app["execution_id"]},
                      wait=10)
    assert done["status"] == "exited" and done["exit_code"] == 0
    after = await _screen(client, session)
    assert after["alternate"] is False
    assert "before-the-app" in after["text"]
    assert "FULLSCREEN-APP" not in after["text"]


async def test_emoji_joiners_and_keyboard_protocol(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    ran = await run(client, session,
                    r"printf 'ok ❤️ done\n'; printf '\e[<1u\e[=1u\e[>1u'; echo tail-mark")
    assert ran["status"] == "exited", ran
    screen = await _screen_until(client, session, lambda s: "tail-mark" in s["text"])
    text = screen["text"]
    assert "ok ❤" in text and "done" in text, text
    # What the program printed: the rows from its first line on (the typed command line
    # above them shows the command's own text, escapes and all).
    printed = text[text.rindex("\nok ❤") :]
    assert "1u" not in printed, text


async def test_cursor_position_query_is_answered(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    asked = await bash(client, session, {
        "type": "command", "command": f"{sys.executable} {PROGRAMS / 'ask_cursor.py'}",
        "is_background": True})
    done = await bash(client, session, {"type": "status_check",
                                        "execution_id": asked["execution_id"]}, wait=10)
    assert done["status"] == "exited" and done["exit_code"] == 0
    assert "reply [1;4R" in done["output"]  # row 1, column 4: just after "abc"


async def test_main_shell_answers_only_a_terminal_query_someone_still_reads(
        client: Client, workspace: Path) -> None:
    """A program in front gets its answer; the shell's own ``read`` gets it; a query left by
    a program that has already exited is not typed into the prompt (it made the next command
    line start with ``1R``: "1R: command not found", exit 127)."""
    session = await initialize(client, workspace)
    asked = await run(client, session, f"{sys.executable} {PROGRAMS / 'ask_cursor.py'}")
    assert asked["exit_code"] == 0 and "reply [" in asked["output"]
    # The last: answered to `sleep` in front, which never reads it; the next line's kill-line
    # key clears it from the prompt.
    for question in (r"printf '\033[6n'", r"printf 'x\033[c'", r"printf '\033[5n'",
                     r"printf '\033[6n'; sleep 0.3"):
        await run(client, session, question)
        after = await run(client, session, "echo ok")
        assert (after["exit_code"], after["output"]) == (0, "ok\n"), (question, after)
    builtin = await run(client, session,
                        r"IFS=';' read -s -t 5 -d R -p $'\033[6n' row col; echo got ${row#*[} $col")
    row, col = builtin["output"].split()[1:]
    assert row.isdigit() and col.isdigit(), builtin
    assert (await run(client, session, "echo still"))["output"] == "still\n"


async def test_stray_input_left_at_the_prompt_does_not_start_the_next_command(
        client: Client, workspace: Path) -> None:
    """Bytes a command left in its terminal's input (here pushed there with TIOCSTI) reach the
    prompt's line editor; the kill-line key each typed line starts with throws them away."""
    session = await initialize(client, workspace)
    push = ("import fcntl, termios\n"
            "for c in b'junk': fcntl.ioctl(0, termios.TIOCSTI, bytes([c]))")
    pushed = await run(client, session, f"{sys.executable} -c \"{push}\"")
    if pushed["exit_code"] != 0:
        pytest.skip(f"TIOCSTI is not allowed here: {pushed['output'][-200:]}")
    after = await run(client, session, "echo ok")
    assert (after["exit_code"], after["output"]) == (0, "ok\n"), after


async def test_window_size_per_execution(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    default = await run(client, session, "stty size")
    assert default["output"].strip() == "40 120"
    resized = await bash(client, session, {"type": "command", "command": "stty size",
                                           "rows": 30, "cols": 100}, wait=10)
    assert resized["output"].split() == ["30", "100"]
    # The shell itself saw SIGWINCH: bash updated $COLUMNS.
    columns = await bash(client, session, {"type": "command", "command": "echo $COLUMNS",
                                           "rows": 30, "cols": 100}, wait=10)
    assert columns["output"].strip() == "100"
    bg = await bash(client, session, {"type": "command", "command": "stty size",
                                      "is_background": True, "rows": 12, "cols": 50})
    done = await bash(client, session, {"type": "status_check", "execution_id": bg["execution_id"]},
                      wait=10)
    assert done["output"].strip() == "12 50"


async def test_keys_sent_before_the_program_reads_them_are_reported_lost(
    client: Client, workspace: Path
) -> None:
    """A program that draws its question while the terminal is still in line mode, then
    switches to raw mode with a flush (as Claude Code does for ~0.3 s at start-up): the keys
    sent in that window never reach it, and send_keys says so instead of reporting success."""
    session = await initialize(client, workspace)
    app = await bash(client, session, {
        "type": "command", "command": f"{sys.executable} {PROGRAMS / 'flush_on_start.py'}",
        "is_background": True})
    eid = app["execution_id"]
    await _screen_until(client, session, lambda s: "Continue?" in s["text"], eid)
    early = await bash(client, session, {"type": "send_keys", "execution_id": eid, "keys": ["Enter"]},
                       wait=5)
    assert early["input_sent"] is True
    assert early["terminal_mode"] == "cooked" and early["reads_keys"] is False
    assert early["terminal_mode_after"] == "raw"
    assert early["delivery"] == "discarded_likely" and "raw mode" in early["warning"]
    # The program really did not get it: it is still waiting for a key.
    await _screen_until(client, session, lambda s: "ready" in s["text"], eid)
    assert "got" not in (await _screen(client, session, eid))["text"]
    late = await bash(client, session, {"type": "send_keys", "execution_id": eid, "keys": ["Tab"]},
                      wait=5)
    assert late["terminal_mode"] == "raw" and late["reads_keys"] is True
    assert late["delivery"] == "observed" and late["screen_changed"] is True
    assert "warning" not in late
    done = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=10)
    assert done["status"] == "exited" and "got b'\\t'" in done["output"]
    assert "got b'\\r'" not in done["output"]


async def test_text_echo_and_line_mode_are_reported(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    reader = await bash(client, session, {"type": "command",
                                          "command": "read -r line; echo got:$line; sleep 1",
                                          "is_background": True})
    eid = reader["execution_id"]
    draft = await bash(client, session, {"type": "send_text", "execution_id": eid,
                                         "text": "hello-line"}, wait=5)
    assert draft["terminal_mode"] == "cooked" and draft["echo_seen"] is True
    assert draft["screen_changed"] is True and draft["delivery"] == "line_buffered"
    sent = await bash(client, session, {"type": "send_text", "execution_id": eid, "text": "",
                                        "submit": True}, wait=5)
    assert sent["delivery"] == "observed" and "warning" not in sent
    done = await bash(client, session, {"type": "status_check", "execution_id": eid}, wait=10)
    assert "got:hello-line" in done["output"]


async def test_an_exit_right_after_a_flood_keeps_the_drawn_screen(
    client: Client, workspace: Path
) -> None:
    """A program that ends right after a lot of unskippable output: its end is persisted
    once the screen is drawn (off the loop), with the last frame as the screen text."""
    frames = b"".join(
        b"".join(b"\x1b[%d;1Hframe %d row %d" % (row, n, row) for row in range(1, 41))
        for n in range(600)
    )
    assert len(frames) > 200_000  # more than a screen catches up synchronously
    (workspace / "frames.bin").write_bytes(frames)
    session = await initialize(client, workspace)
    started = await bash(client, session, {"type": "command", "is_background": True,
                                           "command": "cat frames.bin; exit 3"})
    waited = await execution(client, session, {
        "type": "wait", "execution_ids": [started["execution_id"]], "events": ["exited"],
        "timeout_seconds": 20})
    assert waited["data"]["outcome"] == "changed"
    record = (await execution(client, session, {
        "type": "get", "execution_id": started["execution_id"]}))["data"]["execution"]
    assert (record["status"], record["exit_code"]) == ("exited", 3)
    assert "frame 599 row 40" in record["screen_text"]
    assert "frame 598" not in record["screen_text"]
