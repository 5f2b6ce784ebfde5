"""Tests for ``guardian.recognize``: shipped rules on real and varied screens, the rule-file
loader, regions, ``pick_recognizer``, and the fake agent TUI seen through a real PTY."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest
from ptyprocess import PtyProcess

from tests.helpers import fixture_file
from tether.guardian.agents.recognize import (
    Recognition,
    RuleFileError,
    ScreenView,
    UnknownRecognizerError,
    available_recognizers,
    default_rule_sets,
    load_rule_dir,
    parse_rule_file,
    pick_recognizer,
    recognize,
)
from tether.guardian.agents.recognize.regions import SCREEN, Region, extract, input_box_lines, is_border_row

FAKE_AGENT = Path(__file__).resolve().parent / "fakes" / "fake_agent.py"
COLS, ROWS = 120, 40
RULE = "─" * COLS


def fixture_text(name: str, suffix: str = ".txt") -> bytes:
    return fixture_file(f"agent-screens/{name}{suffix}").read_bytes()


def fixture_view(name: str) -> ScreenView:
    return ScreenView.from_text(fixture_text(name).decode("utf-8"))


def screen(*rows: str, height: int = ROWS, title: str = "") -> ScreenView:
    """A ``height``-row view with ``rows`` at the bottom, as a full-screen TUI draws them."""
    padded = [""] * max(0, height - len(rows)) + [row.rstrip() for row in rows]
    return ScreenView(lines=tuple(padded), title=title)


def claude_box(draft: str = "") -> tuple[str, ...]:
    return (RULE, f"❯ {draft}".rstrip(), RULE)


def rounded_box(*content: str, width: int = 80) -> tuple[str, ...]:
    inner = width - 2
    return (
        "╭" + "─" * inner + "╮",
        *("│ " + text.ljust(inner - 2) + " │" for text in content),
        "╰" + "─" * inner + "╯",
    )


# --- the real Claude Code screens -----------------------------------------------------------

CLAUDE_FIXTURES = [
    ("claude_03_idle_empty", "awaiting_input", "prompt_in_input_box"),
    ("claude_05_idle_after_reply", "awaiting_input", "prompt_in_input_box"),
    ("claude_06_approval_bash", "awaiting_approval", "approval_numbered_choices"),
    ("claude_08_busy_early", "busy", "busy_interrupt_hint"),
]


@pytest.mark.parametrize(("name", "state", "rule"), CLAUDE_FIXTURES)
def test_claude_fixture_screens(name: str, state: str, rule: str) -> None:
    view = fixture_view(name)
    for result in (recognize(view, "claude"), recognize(view, "auto", command="claude")):
        assert (result.state, result.rule, result.source) == (state, rule, "rule")
        assert result.recognizer == "claude"
        assert result.reason is None
        winner = next(entry for entry in result.evaluated if entry["rule"] == rule)
        assert winner["matched"] is True
        assert winner["priority"] == result.priority
        assert winner["evidence"]


@pytest.mark.parametrize(("name", "state", "rule"), CLAUDE_FIXTURES)
def test_claude_fixture_raw_bytes_through_pyte(name: str, state: str, rule: str) -> None:
    """The recorded PTY bytes, rendered by the emulator the guardian uses, read the same."""
    emulated = pyte.Screen(COLS, ROWS)
    pyte.ByteStream(emulated).feed(fixture_text(name, ".ansi"))
    view = ScreenView(tuple(row.rstrip() for row in emulated.display), emulated.title)
    result = recognize(view, "auto", command="claude")
    assert (result.state, result.rule) == (state, rule)


# --- variants: rules describe the programs, not the fixture bytes ----------------------------


def test_claude_busy_with_another_spinner_word_and_no_hint() -> None:
    text = fixture_text("claude_08_busy_early").decode("utf-8")
    changed = text.replace("Mustering…", "Flibbertigibbeting…").replace(" · esc to interrupt", "")
    assert "esc to interrupt" not in changed
    result = recognize(ScreenView.from_text(changed), "claude")
    assert (result.state, result.rule) == ("busy", "busy_spinner")


def test_claude_busy_older_layout_with_hint_in_spinner_line() -> None:
    view = screen(
        "> fix the tests",
        "",
        "✻ Thinking… (12s · ↑ 1.2k tokens · esc to interrupt)",
        "",
        *rounded_box(">"),
        "  ? for shortcuts",
    )
    assert recognize(view, "claude").state == "busy"


def test_claude_idle_older_rounded_box_with_draft() -> None:
    view = screen("● Done.", "", *rounded_box("> half-typed draft"), "  ? for shortcuts")
    result = recognize(view, "claude")
    assert (result.state, result.rule) == ("awaiting_input", "prompt_with_draft")


def test_claude_idle_without_any_box_is_unknown() -> None:
    result = recognize(screen("● Done.", "", "❯", "  ? for shortcuts"), "claude")
    assert (result.state, result.source, result.reason) == ("unknown", "none", "no_rule_matched")


@pytest.mark.parametrize(
    "dialog",
    [
        (
            " Edit file",
            " Do you want to make this edit to hello.py?",
            " ❯ 1. Yes",
            "   2. Yes, allow all edits during this session (shift+tab)",
            "   3. No, and tell Claude what to do differently (esc)",
        ),
        (
            " Fetch",
            " Would you like to allow Claude to fetch this content?",
            " › 1) Allow",
            "   2) Deny",
        ),
    ],
)
def test_claude_approval_other_wordings(dialog: tuple[str, ...]) -> None:
    result = recognize(screen("❯ go", "", RULE, *dialog), "claude")
    assert (result.state, result.rule) == ("awaiting_approval", "approval_numbered_choices")


def test_questions_name_what_they_ask_about() -> None:
    """Trust, sign-in and plain choices are told apart from approvals of an action (attention)."""
    trust = screen("❯ go", "", RULE, " Do you trust the files in this folder?", "   1. Yes, proceed",
                   " ❯ 2. No, exit", "", " Enter to confirm · Esc to exit")
    login = screen(" Select login method:", "", " ❯ 1. Claude account with subscription",
                   "   2. Anthropic Console account", "", " Enter to confirm · Esc to go back")
    choice = screen(" Ready to code? Here is Claude's plan:", " Pick a model for this session",
                    " ❯ 1. Sonnet", "   2. Opus", "", " Enter to select · Esc to cancel")
    approval = screen(RULE, " Do you want to proceed?", " ❯ 1. Yes", "   2. No", "", " Esc to cancel")
    for view, rule, attention in ((trust, "trust_folder", "trust"),
                                  (login, "login_or_api_key", "login"),
                                  (choice, "choice_numbered", "choice"),
                                  (approval, "approval_numbered_choices", "approval")):
        got = recognize(view, "claude")
        assert (got.state, got.rule, got.attention) == ("awaiting_approval", rule, attention)
        assert got.to_dict()["attention"] == attention
    idle = recognize(screen(*claude_box()), "claude")
    assert idle.attention is None and idle.to_dict()["attention"] is None


def test_attention_is_checked_when_rules_load(tmp_path: Path) -> None:
    bad_state = ('name = "x"\n[[rule]]\nid = "a"\nstate = "busy"\nattention = "trust"\n'
                 'priority = 1\ncontains = "z"\n')
    with pytest.raises(RuleFileError, match="only with state awaiting_approval"):
        parse_rule_file("x.toml", bad_state.encode())
    bad_kind = bad_state.replace('"busy"', '"awaiting_approval"').replace('"trust"', '"payment"')
    with pytest.raises(RuleFileError, match="attention 'payment' is not one of trust, login"):
        parse_rule_file("x.toml", bad_kind.encode())
    default = bad_kind.replace('attention = "payment"\n', "")
    assert parse_rule_file("x.toml", default.encode()).rules[0].attention == "approval"


def test_interrupt_presses_is_checked_when_rules_load() -> None:
    base = 'name = "x"\n{}[[rule]]\nid = "a"\nstate = "busy"\npriority = 1\ncontains = "z"\n'
    assert parse_rule_file("x.toml", base.format("").encode()).interrupt_presses == 1
    assert parse_rule_file("x.toml", base.format("interrupt_presses = 2\n").encode()) \
        .interrupt_presses == 2
    for bad in ("0", "4", '"2"', "true"):
        with pytest.raises(RuleFileError, match="interrupt_presses must be an integer from 1 to 3"):
            parse_rule_file("x.toml", base.format(f"interrupt_presses = {bad}\n").encode())
    assert default_rule_sets()["opencode"].interrupt_presses == 2
    assert default_rule_sets()["claude"].interrupt_presses == 1


def test_claude_approval_drawn_in_a_box_is_not_mistaken_for_the_prompt() -> None:
    view = screen(*rounded_box("Bash command", "Do you want to proceed?", "❯ 1. Yes", "  2. No"))
    assert recognize(view, "claude").state == "awaiting_approval"
    unworded = screen(*rounded_box("Pick one", "❯ 1. Yes", "  2. No"))
    assert recognize(unworded, "claude").state == "unknown"


def test_claude_reply_listing_options_is_not_an_approval() -> None:
    view = screen(
        "● Do you want me to proceed? Options:",
        "  1. Yes, refactor it",
        "  2. No",
        "",
        *claude_box(),
        "  ? for shortcuts",
    )
    assert recognize(view, "claude").state == "awaiting_input"


def test_claude_exited_to_shell_is_authoritatively_unknown() -> None:
    view = screen(
        *claude_box(),
        "  ? for shortcuts",
        "",
        "Resume this session with:",
        "claude --resume 0b5c3d9e-1111-2222-3333-444455556666",
        "dev@box:~/demo$",
    )
    result = recognize(view, "claude")
    assert (result.state, result.rule, result.reason) == (
        "unknown",
        "exited_to_shell",
        "rule_declared_unknown",
    )
    idle = next(entry for entry in result.evaluated if entry["rule"] == "prompt_in_input_box")
    assert idle["matched"] is True  # it matched, and still lost


def test_codex_screens() -> None:
    busy = screen(
        "› explain this repo",
        "",
        "• Working (12s • esc to interrupt)",
        "",
        "› Ask Codex to do anything",
        "",
        "  ⏎ send   ⌃J newline   ⌃T transcript   ⌃C quit",
    )
    idle = screen(
        "• The repo holds one script.",
        "",
        "› Ask Codex to do anything",
        "",
        "  100% context left · ? for shortcuts",
    )
    approval = screen(
        "  Would you like to run the following command?",
        "",
        "  $ touch x.txt",
        "",
        "› 1. Yes, proceed (y)",
        "  2. Yes, and don't ask again for this command (a)",
        "  3. No, and tell Codex what to do differently (esc)",
        "",
        "  Press enter to confirm or esc to cancel",
    )
    old_approval = screen(
        "  $ rm -rf build", "", "Allow command?", "", "▌ Yes   Always   No, provide feedback"
    )
    for command in ("codex", "npx -y @openai/codex@latest"):
        assert recognize(busy, "auto", command=command).state == "busy"
    assert recognize(busy, "codex").rule == "busy_interrupt_hint"
    assert recognize(idle, "codex").state == "awaiting_input"
    assert recognize(approval, "codex").state == "awaiting_approval"
    assert recognize(old_approval, "codex").state == "awaiting_approval"
    working = screen("• Working (3s)", "", "› ")
    assert recognize(working, "codex").rule == "busy_working_timer"


def test_gemini_screens() -> None:
    box = rounded_box(">   Type your message or @path/to/file")
    busy = screen("✦ Let me look.", "", "⠏ Thinking about the layout (esc to cancel, 5s)", "", *box)
    idle = screen("✦ Done.", "", *box, "~/demo (main*)     no sandbox     gemini-2.5-pro")
    approval = screen(
        *rounded_box(
            "? Shell ls -la",
            "Allow execution of: 'ls'?",
            "● 1. Yes, allow once",
            "  2. Yes, allow always ...",
            "  3. No, suggest changes (esc)",
        ),
        "⠏ Waiting for user confirmation...",
    )
    assert recognize(busy, "gemini").state == "busy"
    assert recognize(idle, "auto", command="gemini --yolo").state == "awaiting_input"
    assert recognize(approval, "gemini").state == "awaiting_approval"


def test_opencode_screens() -> None:
    idle = screen(*rounded_box("> "), "  enter send   ctrl+p commands")
    busy = screen("  working…", *rounded_box("> "), "  esc interrupt")
    approval = screen("△ Permission required", "  $ rm -rf dist", "", "  Allow once   Allow always   Reject")
    assert recognize(idle, "opencode").state == "awaiting_input"
    assert recognize(busy, "opencode").state == "busy"
    assert recognize(approval, "opencode").state == "awaiting_approval"


def test_aider_screens() -> None:
    question = screen("hello.py", "Add hello.py to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:")
    answered = screen("Add hello.py to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y", "")
    idle = screen("Tokens: 2.1k sent, 120 received.", "", "─" * 80, "architect> ")
    busy = screen("> refactor it", "", "░█        Waiting for anthropic/claude-sonnet")
    assert recognize(question, "aider").state == "awaiting_approval"
    assert recognize(answered, "aider").state == "unknown"
    assert recognize(idle, "auto", command="aider --model sonnet").state == "awaiting_input"
    assert recognize(busy, "aider").state == "busy"
    assert recognize(screen("> add tests"), "aider").state == "awaiting_input"


@pytest.mark.parametrize(
    "last_line",
    [
        "dev@box:~/project$",
        "root@3f2a:/#",
        "bash-5.2$",
        "$",
        "host%",
        ">>>",
        "mysql>",
        "PS C:\\Users\\dev>",
        "❯",
        "➜  demo git:(main) ✗",
    ],
)
def test_shell_prompts(last_line: str) -> None:
    result = recognize(screen("total 0", last_line), "shell")
    assert result.state == "awaiting_input", last_line


@pytest.mark.parametrize(
    "last_line",
    [
        "dev@box:~/project$ sleep 10",
        "Downloading ... 45%",
        "##########",
        "</html>",
        "compiling foo v0.1.0",
        "a -> b",
    ],
)
def test_shell_without_a_prompt_is_unknown_not_busy(last_line: str) -> None:
    result = recognize(screen("$ make", last_line), "shell")
    assert (result.state, result.source, result.reason) == ("unknown", "none", "no_prompt_seen")


def test_rows_padded_with_spaces_are_right_stripped_first() -> None:
    padded = ScreenView(lines=("total 0".ljust(COLS), "dev@box:~$ ".ljust(COLS)))
    assert recognize(padded, "shell").state == "awaiting_input"


def test_blank_screen_is_unknown_with_a_reason() -> None:
    for recognizer in available_recognizers():
        result = recognize(screen(), recognizer)
        assert (result.state, result.rule, result.priority, result.source, result.reason) == (
            "unknown",
            None,
            None,
            "none",
            "blank_screen",
        )
        assert all(entry["matched"] is False for entry in result.evaluated)


def test_auto_falls_back_to_shell_and_says_why() -> None:
    prompt = screen("dev@box:~$")
    vim = recognize(prompt, "auto", command="vim notes.txt")
    assert (vim.recognizer, vim.state, vim.source, vim.reason) == (
        "shell",
        "awaiting_input",
        "fallback",
        "program_not_recognized",
    )
    nothing = recognize(prompt, "auto")
    assert (nothing.source, nothing.reason) == ("fallback", "no_command")
    bash = recognize(prompt, "auto", command="bash --login")
    assert (bash.recognizer, bash.source, bash.reason) == ("shell", "rule", None)


def test_unknown_recognizer_lists_the_known_ones() -> None:
    with pytest.raises(UnknownRecognizerError) as caught:
        recognize(screen("$"), "vim")
    assert isinstance(caught.value, ValueError)
    for name in ("claude", "codex", "opencode", "gemini", "aider", "shell", "auto"):
        assert name in str(caught.value)


def test_shipped_recognizers_and_json_safe_explain() -> None:
    assert available_recognizers() == ("aider", "claude", "codex", "gemini", "opencode", "shell")
    result = recognize(fixture_view("claude_08_busy_early"), "claude")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["state"] == "busy"
    assert data["rule"] == "busy_interrupt_hint"
    assert [entry["rule"] for entry in data["evaluated"]] == [entry["rule"] for entry in result.evaluated]
    priorities = [entry["priority"] for entry in data["evaluated"]]
    assert priorities == sorted(priorities, reverse=True)


# --- regions --------------------------------------------------------------------------------


def test_input_box_is_the_last_box_with_side_bars_stripped() -> None:
    rows = (*rounded_box("> old"), "text", *rounded_box("> new draft", "  second line"), "hint")
    assert input_box_lines(rows) == ("> new draft", "second line")
    assert input_box_lines(("──────", "❯", "──────")) == ("❯",)
    assert input_box_lines(("╭─ Title ───────╮", "│ > x │", "╰───────────────╯")) == ("> x",)
    assert input_box_lines(("only one rule", "──────", "> x")) == ()


def test_border_rows() -> None:
    assert is_border_row("  ────────  ")
    assert is_border_row("╌╌╌╌╌")
    assert not is_border_row("──")
    assert not is_border_row("-----")  # ASCII dashes are markdown, not a TUI frame
    assert not is_border_row("── a long heading in prose ──")


def test_bottom_region_counts_rows_from_the_last_non_empty_one() -> None:
    view = ScreenView(("a", "", "b", "c", "", ""), title="t")
    assert extract(Region("bottom", 3), view) == ("", "b", "c")
    assert extract(SCREEN, view) == ("a", "", "b", "c")
    assert extract(Region("title"), view) == ("t",)
    assert extract(Region("title"), ScreenView(("a",))) == ()


# --- the rule-file loader -------------------------------------------------------------------

DEMO_RULES = """
name = "demo"

[[rule]]
id = "idle"
state = "awaiting_input"
priority = 50
line_regex = '^>( |$)'
region = { bottom = 1 }

[[rule]]
id = "exited"
state = "unknown"
priority = 60
contains = "SESSION ENDED"
ignore_case = true

[[rule]]
id = "first_of_tie"
state = "busy"
priority = 40
all = [{ contains = "work" }, { not = { contains = "done" } }]

[[rule]]
id = "second_of_tie"
state = "awaiting_approval"
priority = 40
any = [{ regex = 'work.*\\n.*ing', region = "screen" }, { contains = "x", region = "title" }]
"""


def write_rules(directory: Path, body: str, name: str = "demo") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.toml").write_text(body, encoding="utf-8")
    return directory


def test_explicit_unknown_rule_is_authoritative(tmp_path: Path) -> None:
    sets = load_rule_dir(write_rules(tmp_path, DEMO_RULES))
    result = recognize(screen("session ended", "> "), "demo", rule_sets=sets)
    assert (result.state, result.rule, result.priority, result.source, result.reason) == (
        "unknown",
        "exited",
        60,
        "rule",
        "rule_declared_unknown",
    )
    matched = [entry["rule"] for entry in result.evaluated if entry["matched"]]
    assert matched == ["exited", "idle"]
    assert recognize(screen("> "), "demo", rule_sets=sets).state == "awaiting_input"


def test_priority_ties_go_to_file_order_and_not_negates(tmp_path: Path) -> None:
    sets = load_rule_dir(write_rules(tmp_path, DEMO_RULES))
    both = recognize(screen("work", "ing"), "demo", rule_sets=sets)
    assert both.rule == "first_of_tie"
    assert recognize(screen("work done", "ing"), "demo", rule_sets=sets).rule == "second_of_tie"
    titled = recognize(screen("nothing"), "demo", rule_sets=sets)
    assert titled.reason == "no_rule_matched"
    assert recognize(screen("nothing", title="x"), "demo", rule_sets=sets).rule == "second_of_tie"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (DEMO_RULES.replace("'^>( |$)'", "'^(> '"), ["demo.toml", "'idle'", "bad line_regex"]),
        (
            DEMO_RULES.replace("priority = 60", "priority = 60\ncolour = 'red'"),
            ["demo.toml", "'exited'", "unknown key(s) colour"],
        ),
        (
            DEMO_RULES.replace('state = "busy"', 'state = "sleeping"'),
            ["demo.toml", "'first_of_tie'", "'sleeping'"],
        ),
        (
            DEMO_RULES.replace("region = { bottom = 1 }", "region = { top = 1 }"),
            ["demo.toml", "'idle'", "region"],
        ),
        (
            DEMO_RULES.replace('{ contains = "done" }', "{ contains = \"done\", regex = 'x' }"),
            ["demo.toml", "'first_of_tie'", "one leaf per table"],
        ),
        (DEMO_RULES.replace('id = "exited"', 'id = "idle"'), ["demo.toml", "duplicate"]),
        (DEMO_RULES.replace('name = "demo"', 'name = "other"'), ["demo.toml", "'other'"]),
        (DEMO_RULES.replace("priority = 50", "priority = 'high'"), ["'idle'", "priority"]),
        ("name = 'demo'\n", ["demo.toml", "[[rule]]"]),
        ("name = 'demo'\n[[rule]\n", ["demo.toml", "TOML"]),
    ],
)
def test_malformed_rule_files_fail_to_load_with_a_clear_message(
    tmp_path: Path, body: str, expected: list[str]
) -> None:
    write_rules(tmp_path, DEMO_RULES, name="fine")  # a good neighbour does not hide the bad one
    with pytest.raises(RuleFileError) as caught:
        load_rule_dir(write_rules(tmp_path, body))
    for fragment in expected:
        assert fragment in str(caught.value)


# --- pick_recognizer ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("claude", "claude"),
        ("/usr/local/bin/claude --resume abc", "claude"),
        ("FOO=1 BAR='a b' claude", "claude"),
        ("env -u DEBUG claude", "claude"),
        ("npx @anthropic-ai/claude-code", "claude"),
        ("npx -y @anthropic-ai/claude-code@latest --model opus", "claude"),
        ("node /home/u/.npm/_npx/1/node_modules/@anthropic-ai/claude-code/cli.js", "claude"),
        ("codex resume 1234", "codex"),
        ("pnpm dlx @openai/codex", "codex"),
        ("opencode", "opencode"),
        ("bunx opencode-ai@latest", "opencode"),
        ("gemini -m gemini-2.5-pro", "gemini"),
        ("npx @google/gemini-cli", "gemini"),
        ("aider --model sonnet", "aider"),
        ("python -m aider", "aider"),
        ("pipx run aider-chat", "aider"),
        ("uvx --from aider-chat aider", "aider"),
        ("cd repo && claude", "claude"),
        ("bash -lc 'codex --full-auto'", "codex"),
        ("timeout 600 gemini", "gemini"),
        ("CLAUDE.EXE", "claude"),
        ("bash", "shell"),
        ("vim notes.txt", "shell"),
        ("echo claude", "shell"),
        ("", "shell"),
        (None, "shell"),
        ("claude 'unbalanced", "claude"),
        # Quotes and escapes that shlex removes still name the program (the fast check
        # that skips shlex for lines naming no program must not miss these).
        ("cl'au'de", "claude"),
        ('"C"ODEX', "codex"),
        ("c\\odex", "codex"),
        ("bash -c \"g'emi'ni\"", "gemini"),
        ("x=1 " + "y" * 70_000, "shell"),
    ],
)
def test_pick_recognizer(command: str | None, expected: str) -> None:
    assert pick_recognizer(command) == expected


# --- the fake agent in a real PTY -----------------------------------------------------------


class AgentTerminal:
    """A fake agent in a PTY, rendered by pyte, observed through the claude recognizer."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.eof = False

    def view(self) -> ScreenView:
        return ScreenView(tuple(row.rstrip() for row in self.screen.display), self.screen.title)

    def recognize(self) -> Recognition:
        return recognize(self.view(), "claude")

    def pump(self, timeout: float) -> None:
        """Feed pyte whatever the program writes within ``timeout``."""
        if self.eof:
            return
        ready, _, _ = select.select([self.process.fd], [], [], timeout)
        if ready:
            try:
                data = os.read(self.process.fd, 65536)
            except OSError:  # EIO: the child is gone
                data = b""
            if data:
                self.stream.feed(data)
            else:
                self.eof = True

    def wait_until(self, check: Callable[[AgentTerminal], bool], what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check(self):
            if time.monotonic() > deadline:
                shown = "\n".join(row for row in self.view().lines if row)
                raise AssertionError(f"timed out waiting for {what}; screen:\n{shown}")
            self.pump(0.05)

    def wait_state(self, state: str, timeout: float = 10.0) -> None:
        self.wait_until(lambda term: term.recognize().state == state, state, timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        self.wait_until(lambda term: not term.process.isalive(), "exit", timeout)
        return int(self.process.exitstatus)


@pytest.fixture
def spawn_agent(tmp_path: Path) -> Iterator[Callable[..., tuple[AgentTerminal, Path]]]:
    processes: list[Any] = []

    def spawn(*args: str) -> tuple[AgentTerminal, Path]:
        log = tmp_path / f"received-{len(processes)}.jsonl"
        process = PtyProcess.spawn(
            [sys.executable, str(FAKE_AGENT), "--log", str(log), *args],
            dimensions=(ROWS, COLS),
            env={**os.environ, "TERM": "xterm-256color"},
        )
        processes.append(process)
        return AgentTerminal(process), log

    yield spawn
    for process in processes:
        if process.isalive():
            process.kill(signal.SIGKILL)
        process.close(force=True)


def log_lines(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_fake_agent_idle_busy_idle(spawn_agent: Callable[..., tuple[AgentTerminal, Path]]) -> None:
    term, log = spawn_agent("--busy-seconds", "1.5")
    term.wait_state("awaiting_input")
    term.process.write(b"hel\x1b[Dlo")  # an arrow key mid-typing is swallowed, not echoed
    term.wait_until(lambda t: "│ > hello" in "\n".join(t.view().lines), "the echoed draft")
    assert term.recognize().state == "awaiting_input"
    assert log_lines(log) == []
    term.process.write(b"\r")
    term.wait_state("busy")
    assert term.recognize().rule == "busy_interrupt_hint"
    term.wait_state("awaiting_input")
    assert any(row.startswith("● Done: hello") for row in term.view().lines)
    assert log_lines(log) == [{"received": "hello"}]
    term.process.write(b"\x04")
    assert term.wait_exit() == 0


def test_fake_agent_approval_then_work(
    spawn_agent: Callable[..., tuple[AgentTerminal, Path]],
) -> None:
    term, log = spawn_agent("--approval", "--busy-seconds", "1")
    term.wait_state("awaiting_input")
    term.process.write(b"delete build\r")
    term.wait_state("awaiting_approval")
    assert term.recognize().rule == "approval_numbered_choices"
    term.process.write(b"1")
    term.wait_state("busy")
    term.wait_state("awaiting_input")
    assert log_lines(log) == [{"received": "delete build"}]
    term.process.write(b"again\r")
    term.wait_state("awaiting_approval")
    term.process.write(b"2")
    term.wait_state("awaiting_input")
    assert any(row.startswith("● Declined: again") for row in term.view().lines)


def test_fake_agent_escape_interrupts_a_long_turn(
    spawn_agent: Callable[..., tuple[AgentTerminal, Path]],
) -> None:
    term, log = spawn_agent("--busy-seconds", "600")
    term.wait_state("awaiting_input")
    term.process.write(b"slow\r")
    term.wait_state("busy")
    term.process.write(b"\x1b")
    term.wait_state("awaiting_input", timeout=5)
    assert any(row.startswith("● Interrupted") for row in term.view().lines)
    assert log_lines(log) == [{"received": "slow"}]


def test_fake_agent_keeps_newlines_of_a_bracketed_paste(
    spawn_agent: Callable[..., tuple[AgentTerminal, Path]],
) -> None:
    term, log = spawn_agent("--busy-seconds", "0.2")
    term.wait_state("awaiting_input")
    term.process.write(b"\x1b[200~line one\r\nline two\x1b[201~")
    term.wait_until(lambda t: "│ > line one⏎line two" in "\n".join(t.view().lines), "the paste")
    assert log_lines(log) == []
    term.process.write(b"\r")
    term.wait_until(lambda t: bool(log_lines(log)), "the delivery")
    assert log_lines(log) == [{"received": "line one\nline two"}]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP])
def test_fake_agent_exits_cleanly_on_signals(
    spawn_agent: Callable[..., tuple[AgentTerminal, Path]], stop: signal.Signals
) -> None:
    term, _ = spawn_agent()
    term.wait_state("awaiting_input")
    term.process.kill(stop)
    assert term.wait_exit() == 0
