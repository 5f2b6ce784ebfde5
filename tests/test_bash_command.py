"""BashCommand through the real MCP client, in-process and over stdio (issue 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import stdio_params
from tests.mcp_helpers import bash, call_error, execution, initialize, run
from tether.frontend.transport.mcp_server import build_server
from tether.shared.config import Config

pytestmark = pytest.mark.anyio


async def _basic_session(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    assert session["workspace_root"] == str(workspace)
    assert session["guardian"]["instance_id"]
    assert "exec" in session["guardian"]["capabilities"]

    hi = await run(client, session, "echo hi")
    assert (hi["status"], hi["exit_code"], hi["output"].strip()) == ("exited", 0, "hi")

    false = await run(client, session, "false")
    assert (false["status"], false["exit_code"]) == ("exited", 1)

    await run(client, session, "cd sub")
    pwd = await run(client, session, "pwd")
    assert pwd["output"].strip() == str(workspace / "sub")
    assert pwd["cwd"] == str(workspace / "sub")

    late = await run(client, session, "sleep 2; echo late", wait=0.2)
    assert late["status"] == "running" and late["exit_code"] is None
    done = await bash(client, session, {"type": "status_check"}, wait=10)
    assert done["execution_id"] == late["execution_id"]
    assert (done["status"], done["exit_code"], done["output"].strip()) == ("exited", 0, "late")


async def test_in_process(client: Client, workspace: Path) -> None:
    await _basic_session(client, workspace)


async def test_over_stdio(tether_env: Config, workspace: Path) -> None:
    async with Client(stdio_params()) as client:
        await _basic_session(client, workspace)


async def test_multiline_and_unbalanced_quotes(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    out = await run(client, session, "for i in 1 2 3; do\n  echo n$i\ndone")
    assert out["output"].split() == ["n1", "n2", "n3"]
    bad = await run(client, session, 'echo "unterminated')
    assert bad["status"] == "exited" and bad["exit_code"] != 0
    after = await run(client, session, "echo still-alive")
    assert after["output"].strip() == "still-alive"


async def test_shell_busy(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    first = await run(client, session, "sleep 5", wait=0.5)
    busy = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "echo no"}})
    assert busy["code"] == "shell_busy"
    assert busy["data"]["running_execution_id"] == first["execution_id"]
    assert busy["data"]["input_sent"] is False
    interrupted = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"]}, wait=5)
    assert interrupted["execution_id"] == first["execution_id"]
    final = await bash(client, session, {"type": "status_check"}, wait=5)
    assert final["status"] == "exited" and final["exit_code"] == 130


async def test_session_mismatch_and_bad_input(client: Client, workspace: Path, tmp_path: Path) -> None:
    session = await initialize(client, workspace)
    other = tmp_path / "other"
    other.mkdir()
    await initialize(client, other)
    wrong = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": str(other),
        "action_json": {"type": "command", "command": "echo x"}})
    assert wrong["code"] == "session_mismatch"
    bad = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "explode"}})
    assert bad["code"] == "invalid_request"
    too_long = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "wait_for_seconds": 61, "action_json": {"type": "status_check"}})
    assert too_long["code"] == "invalid_request" and "60" in too_long["message"]
    keys = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "send_keys", "keys": ["Enter", "NoSuchKey"]}})
    assert keys["code"] in ("invalid_key", "not_running")


async def test_quotes_history_marks_and_non_ascii_reach_the_shell_intact(
    client: Client, workspace: Path
) -> None:
    """Short commands are typed inline (``eval $'...'``): nothing in them may be changed by
    quoting, readline or history expansion on the way."""
    session = await initialize(client, workspace)
    command = """printf '%s|' "it's" '!!' "a\\\\b" 'tab\there' é✓; echo"""
    out = await run(client, session, command)
    assert out["output"].strip() == "it's|!!|a\\b|tab\there|é✓|"
    heredoc = await run(client, session, "cat <<'EOF'\n$HOME !$\nEOF")
    assert heredoc["output"].strip() == "$HOME !$"
    long = await run(client, session, "echo " + "x" * 2000)  # typed through a command file
    assert long["output"].strip() == "x" * 2000


async def test_line_editing_switches_and_lines_bash_refuses_end_truly(
        client: Client, workspace: Path) -> None:
    """A command that switches line editing off (set +o emacs, set +o vi) no longer leaves
    the shell at its continuation prompt, as it did typed through eval (the next command was
    called discarded though it ran, and later ones were shell_busy); lines bash refuses
    (a reserved word out of place, a construct left open) end at once with status 2."""
    session = await initialize(client, workspace)
    for command, status, output in (("set +o emacs", 0, ""), ("false", 1, ""),
                                    ("echo  no-editing  here", 0, "no-editing here\n"),
                                    ("set -o vi", 0, ""), ("set +o vi", 0, ""), ("true", 0, ""),
                                    ("set -o emacs", 0, ""), ("if true", 2, None), ("fi", 2, None),
                                    ("echo back", 0, "back\n")):
        ended = await run(client, session, command, wait=5)
        assert (ended["status"], ended["exit_code"]) == ("exited", status), (command, ended)
        if output is not None:
            assert ended["output"] == output, (command, ended)


@pytest.mark.parametrize("over", ["in-process", "stdio"])
async def test_a_long_command_reports_progress_each_second(
    tether_env: Config, workspace: Path, over: str
) -> None:
    # Over stdio a call with a progress token goes through the SDK's dispatcher, not the
    # direct path (frontend/transport/direct.py): this is the test that it still gets its progress.
    server = build_server(tether_env) if over == "in-process" else stdio_params()
    async with Client(server) as client:
        await _reports_progress(client, workspace)


async def _reports_progress(client: Client, workspace: Path) -> None:
    session = await initialize(client, workspace)
    ticks: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        ticks.append((progress, total, message))

    result = await client.call_tool("BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "sleep 2.5; echo done"},
        "wait_for_seconds": 10}, progress_callback=on_progress)
    assert result.structured_content is not None
    assert result.structured_content["data"]["output"].strip() == "done"
    assert [done for done, _, _ in ticks[:2]] == [1.0, 2.0]
    assert ticks[0][1:] == (10.0, "waiting (1s)")
    sent = len(ticks)
    quick = await client.call_tool("BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "command", "command": "echo quick"}}, progress_callback=on_progress)
    assert not quick.is_error
    assert len(ticks) == sent  # a quick command sends none


async def test_commands_that_change_the_prompt_hooks_keep_true_ends(
        client: Client, workspace: Path) -> None:
    """A command may assign PROMPT_COMMAND (a sourced rc file), put a hook in front of it (as
    prompt hooks install themselves) or empty PS0: later commands still end, with their own
    exit status (before: the shell stayed busy for good, or every status read 0)."""
    session = await initialize(client, workspace)
    rc = workspace / "rc"
    rc.write_text("PROMPT_COMMAND='history -a'\n")
    steps = [
        # Under set -u a hook that prepends itself reads "$PROMPT_COMMAND" (element 0).
        ('set -u; PROMPT_COMMAND="true;$PROMPT_COMMAND"', 0), ("(exit 9)", 9), ("set +u", 0),
        ('PROMPT_COMMAND="_hook${PROMPT_COMMAND:+;$PROMPT_COMMAND}"; _hook() { :; }', 0),
        ("false", 1), ("(exit 7)", 7),
        (f". {rc}", 0), ("(exit 5)", 5),
        ("export PROMPT_COMMAND=true", 0), ("(exit 6)", 6),
        ("PS0=''", 0), ("(exit 4)", 4),
    ]
    for command, status in steps:
        ended = await run(client, session, command, wait=5)
        assert (ended["status"], ended["exit_code"]) == ("exited", status), (command, ended)
    assert (await run(client, session, "echo still"))["output"] == "still\n"
    # A PS0 of the user's own prints before the start marker: not part of the output.
    await run(client, session, "PS0='[ps0] '")
    assert (await run(client, session, "echo mine"))["output"] == "mine\n"


async def test_commands_that_redirect_the_shells_own_output_keep_true_ends(
        client: Client, workspace: Path) -> None:
    """exec >file and exec 2>/dev/null send the shell's stdout or stderr (where PS0 prints a
    command's start) away from its terminal: later commands still end with their own status
    (before: the shell stayed busy for good, or they were called discarded though they ran),
    and a command whose start could not be seen says so in its events."""
    session = await initialize(client, workspace)
    for command, status in ((f"exec >{workspace / 'log'}", 0), ("echo to-the-log", 0),
                            ("(exit 3)", 3), ("exec >/dev/tty 2>/dev/null", 0),
                            ("echo unseen", 0), ("(exit 4)", 4),
                            # The prompt hook runs with stderr closed: a D read while it still
                            # runs (held here by a DEBUG trap inside it) is decided once the
                            # shell waits at its prompt (before: called discarded).
                            ("set -T; trap 'sleep 0.3' DEBUG", 0), ("(exit 6)", 6)):
        ended = await run(client, session, command, wait=5)
        assert (ended["status"], ended["exit_code"]) == ("exited", status), (command, ended)
    assert (workspace / "log").read_text() == "to-the-log\n"
    got = (await execution(client, session, {
        "type": "get", "execution_id": ended["execution_id"]}))["data"]
    assert [e["kind"] for e in got["events"]] == ["marker_ignored"], got["events"]
    assert "start marker not seen" in got["events"][0]["detail"], got["events"]


async def test_commands_that_restore_or_close_the_shells_stderr_keep_true_ends(
        client: Client, workspace: Path) -> None:
    """The command that gives the shell its stderr back (exec 2>&1 after exec 2>/dev/null)
    ran although its C went to /dev/null: it is judged by where stderr went when it
    started, not where it goes at its end; after exec 2>&- (no stderr at all) commands keep
    their statuses (before: both were called discarded_before_start)."""
    session = await initialize(client, workspace)
    for command, status in (("exec 2>/dev/null", 0), ("exec 2>&1", 0), ("(exit 7)", 7),
                            ("exec 2>&-", 0), ("false", 1), ("(exit 5)", 5),
                            ("exec 2>/dev/tty", 0), ("echo seen", 0)):
        ended = await run(client, session, command, wait=5)
        assert (ended["status"], ended["exit_code"]) == ("exited", status), (command, ended)
    assert ended["output"] == "seen\n"  # its C seen again: output captured


async def test_a_line_typed_ahead_that_reads_and_moves_stderr_leaves_true_statuses(
        client: Client, workspace: Path) -> None:
    """A line typed ahead into a command may wait in `read` (which looks like a prompt to the
    kernel) and move the shell's stderr: where stderr went is then not trusted, and the next
    command is judged at a real prompt. A command swallowed by that `read` did not run
    (before: exited with the typed-ahead line's status), and one whose first byte the `read`
    took did run (before: discarded)."""
    session = await initialize(client, workspace)

    async def type_ahead(text: str) -> None:
        started = await bash(client, session, {"type": "command", "command": "sleep 1"},
                             wait=0.2)
        assert started["status"] == "running", started
        await bash(client, session, {"type": "send_text", "text": text, "submit": True,
                                     "execution_id": started["execution_id"]}, wait=0.2)
        ended = await bash(client, session, {"type": "status_check",
                                             "execution_id": started["execution_id"]}, wait=10)
        assert (ended["status"], ended["exit_code"]) == ("exited", 0), ended

    await type_ahead("exec 2>/dev/null; read x; exec 2>&1; (exit 3)")
    swallowed = await run(client, session, f"touch {workspace / 'swallowed'}", wait=5)
    assert (swallowed["status"], swallowed["reason"]) == ("unknown", "discarded_before_start")
    assert not (workspace / "swallowed").exists()
    await type_ahead("read -n1 x; exec 2>/dev/null")  # takes only the line's Ctrl-u
    ran = await run(client, session, f"touch {workspace / 'ran'}; (exit 3)", wait=5)
    assert (ran["status"], ran["exit_code"]) == ("exited", 3), ran
    assert (workspace / "ran").exists()
    assert (await run(client, session, "exec 2>&1"))["exit_code"] == 0
    assert (await run(client, session, "echo back"))["output"] == "back\n"


async def test_a_process_substitution_left_open_does_not_keep_the_command_running(
        client: Client, workspace: Path) -> None:
    """exec 3> >(cat) leaves a child of the shell in its process group for the shell's whole
    life; the shell is back at its prompt, reading its terminal, so the command has ended
    (before: running for good, and every later command was shell_busy)."""
    session = await initialize(client, workspace)
    opened = await run(client, session, "exec 3> >(cat >/dev/null); echo fd3-open", wait=5)
    assert (opened["status"], opened["exit_code"], opened["output"]) == ("exited", 0,
                                                                          "fd3-open\n"), opened
    for command, status in (("false", 1), ("x=$(sleep 0.2; echo y); echo $x", 0)):
        ended = await run(client, session, command, wait=5)
        assert (ended["status"], ended["exit_code"]) == ("exited", status), (command, ended)
    assert ended["output"] == "y\n"


async def test_a_line_typed_ahead_into_a_command_does_not_take_its_end(
        client: Client, workspace: Path) -> None:
    """Text sent to a command that never reads it waits in the terminal's queue, and the shell
    runs it once the command ends: the input reply says so, and the command keeps its own
    exit status (before: the typed line's, 1, and the real end was called forged)."""
    session = await initialize(client, workspace)
    started = await bash(client, session, {"type": "command", "command": "sleep 1; true"},
                         wait=0.2)
    assert started["status"] == "running", started
    typed = await bash(client, session, {"type": "send_text", "text": "false",
                                         "submit": True,
                                         "execution_id": started["execution_id"]}, wait=0.2)
    assert typed["delivery"] == "unread" and "shell reads it" in typed["warning"], typed
    ended = await bash(client, session, {"type": "status_check",
                                         "execution_id": started["execution_id"]}, wait=10)
    assert (ended["status"], ended["exit_code"]) == ("exited", 0), ended
    got = (await execution(client, session, {
        "type": "get", "execution_id": started["execution_id"]}))["data"]
    assert [e["kind"] for e in got["events"]] == ["marker_ignored"], got["events"]
    assert "typed ahead" in got["events"][0]["detail"]
    assert (await run(client, session, "echo next"))["output"] == "next\n"


async def test_input_read_by_a_program_that_then_ends_says_program_exited_without_a_warning(
        client: Client, workspace: Path) -> None:
    """A reply the program read and then ended on (a "y" to its last question) is
    ``program_exited``: its screen is gone, its status and output tell what it did with the
    input, and nothing was wrong, so no warning (README's list of deliveries)."""
    session = await initialize(client, workspace)
    started = await bash(client, session, {"type": "command", "command": "read x; echo got $x"},
                         wait=0.2)
    assert started["status"] == "running", started
    typed = await bash(client, session, {"type": "send_text", "text": "yes", "submit": True,
                                         "execution_id": started["execution_id"]}, wait=5)
    assert typed["delivery"] == "program_exited" and "warning" not in typed, typed
    assert (typed["status"], typed["exit_code"]) == ("exited", 0), typed
    assert "got yes" in typed["output"], typed


async def test_ctrl_c_is_reported_as_a_signal_and_a_printable_key_is_typed_as_itself(
        client: Client, workspace: Path) -> None:
    """Ctrl-c in line mode becomes SIGINT, not input that waits for Enter (before:
    line_buffered, "wait for Enter", which would have queued a line for the shell). A
    printable key is typed as itself: in line mode it waits for Enter (line_buffered)."""
    session = await initialize(client, workspace)
    ignoring = ("python3 -c 'import signal, time; signal.signal(signal.SIGINT, "
                "signal.SIG_IGN); print(\"ready\", flush=True); time.sleep(30)'")
    started = await bash(client, session, {"type": "command", "command": ignoring}, wait=1)
    assert started["status"] == "running" and "ready" in started["output"], started
    sent = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-c"],
                                        "execution_id": started["execution_id"]}, wait=0.5)
    assert sent["delivery"] == "signal" and "warning" not in sent, sent
    typed = await bash(client, session, {"type": "send_keys", "keys": ["q"],
                                         "execution_id": started["execution_id"]}, wait=0.5)
    assert typed["input_sent"] is True and typed["delivery"] == "line_buffered", typed
    refused = await call_error(client, "BashCommand", {
        "thread_id": session["thread_id"], "workspace_root": session["workspace_root"],
        "action_json": {"type": "send_keys", "keys": ["qq"],
                        "execution_id": started["execution_id"]}})
    assert refused["code"] == "invalid_key" and "send_text" in refused["message"], refused
    quit_ = await bash(client, session, {"type": "send_keys", "keys": ["Ctrl-\\"],
                                         "execution_id": started["execution_id"]}, wait=5)
    assert (quit_["status"], quit_.get("exit_code")) == ("exited", 131), quit_


async def test_a_printable_key_answers_a_program_that_reads_keys(
        client: Client, workspace: Path) -> None:
    """``send_keys ["y"]`` answers a one-key question (``read -n 1``: the terminal out of
    line mode), as a pager's ``q`` would; before, it was ``invalid_key``."""
    session = await initialize(client, workspace)
    started = await bash(client, session, {
        "type": "command", "command": "read -r -n 1 -p 'go? ' x; echo; echo got-$x"}, wait=0.5)
    assert started["status"] == "running", started
    typed = await bash(client, session, {"type": "send_keys", "keys": ["y"],
                                         "execution_id": started["execution_id"]}, wait=5)
    assert (typed["status"], typed["exit_code"]) == ("exited", 0), typed
    assert "got-y" in typed["output"], typed


async def test_set_x_traces_the_command_not_the_shell_integration(
        client: Client, workspace: Path) -> None:
    """After set -x, a command's output holds its own trace, not the prompt hooks' (which
    printed a dozen lines, the shell's marker nonce among them, into every output)."""
    session = await initialize(client, workspace)
    await run(client, session, "set -x")
    traced = await run(client, session, "echo next")
    assert "next\n" in traced["output"] and "__tether" not in traced["output"], traced
    assert traced["exit_code"] == 0
    await run(client, session, "set +x")


async def test_review_regressions_kill_char_dev_tty_cmdsubst_answers_and_swallowed_lines(
        client: Client, workspace: Path) -> None:
    """Four cases a review found broken by this session's first fixes: a changed stty kill
    character (each command failed: "$'\\025': command not found"), stdin reopened on
    /dev/tty (commands never ended), a terminal query from inside a command substitution
    (never answered: hung), and a typed line swallowed by a typed-ahead `read` (called
    exited 0 with "the command ran")."""
    session = await initialize(client, workspace)
    for kill in ("^X", "undef", "^U"):
        await run(client, session, f"stty kill {kill}")
        ran = await run(client, session, f"echo kill-{kill}")
        assert (ran["exit_code"], ran["output"]) == (0, f"kill-{kill}\n"), ran
    asked = r"x=$(read -s -t 5 -d R -p $'\033[6n' a; echo ${a#*[}); echo got:$x"
    answered = await run(client, session, asked)
    assert answered["output"].startswith("got:") and ";" in answered["output"], answered
    await run(client, session, "exec 0</dev/tty")
    after = await run(client, session, "echo after-dev-tty", wait=5)
    assert (after["status"], after["output"]) == ("exited", "after-dev-tty\n"), after
    started = await bash(client, session, {"type": "command", "command": "sleep 1"}, wait=0.2)
    await bash(client, session, {"type": "send_text", "text": "read v", "submit": True,
                                 "execution_id": started["execution_id"]}, wait=0.2)
    await bash(client, session, {"type": "status_check",
                                 "execution_id": started["execution_id"]}, wait=10)
    swallowed = await run(client, session, f"touch {workspace / 'Y'}", wait=3)
    assert swallowed["status"] != "exited" or swallowed["exit_code"] is None, swallowed
    assert not (workspace / "Y").exists()
