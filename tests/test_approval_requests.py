"""Reading what a question asks from real screens (docs/tools.md#approvals): the rule files'
``[approval]`` tables against the recorded screens of Claude Code, Codex and OpenCode, and
the operator hook's runner and configuration (docs/tools.md#the-operator-hook)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import fixture_file
from tether.guardian.agents.notify_hook import MAX_HOOK_OUTPUT, run_hook
from tether.guardian.agents.recognize import ScreenView, default_rule_sets, recognize
from tether.guardian.agents.recognize.asking import keys_bytes, read_request
from tether.guardian.agents.recognize.loader import parse_rule_file
from tether.guardian.agents.recognize.model import RuleFileError
from tether.shared.config import Config, notify_argv


def asked(relative: str, recognizer: str) -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    view = ScreenView.from_text(fixture_file(f"agents/{relative}.txt").read_text())
    verdict = recognize(view, recognizer)
    assert verdict.state == "awaiting_approval", verdict.rule
    got = read_request(view, default_rule_sets()[recognizer].approval, verdict.attention)
    return got.request, got.keys


def test_claude_code_bash_permission() -> None:
    request, keys = asked("claude-2.1.332/10_approval", "claude")
    assert (request["what"], request["tool"], request["detail"]) == (
        "command", "Bash command", "touch created_by_agent.txt")
    assert request["question"] == "Do you want to proceed?"
    options = request["options"]
    assert isinstance(options, list)
    assert [(o["key"], o["kind"]) for o in options] == [
        ("1", "approve"), ("2", "other"), ("3", "other"), ("4", "deny")]
    assert options[0]["selected"] and not options[3]["selected"]
    assert keys == {"1": ("1",), "2": ("2",), "3": ("3",), "4": ("4",)}
    moved, _ = asked("claude-2.1.332/11_approval_allow_always_selected", "claude")
    assert [o["selected"] for o in moved["options"]] == [False, True, False, False]


def test_codex_command_approval_keys_are_its_shortcuts() -> None:
    request, keys = asked("codex-0.171.0/10_approval", "codex")
    assert (request["what"], request["detail"]) == ("command", "touch created_by_agent.txt")
    assert request["question"] == "Would you like to run the following command?"
    options = request["options"]
    assert isinstance(options, list)
    assert [(o["key"], o["kind"]) for o in options] == [
        ("y", "approve"), ("p", "other"), ("Escape", "deny")]
    assert keys_bytes(keys["Escape"]) == b"\x1b"


def test_opencode_row_of_answers_takes_arrows_then_enter() -> None:
    request, keys = asked("opencode-1.18.33/04_approval", "opencode")
    assert (request["what"], request["tool"], request["detail"]) == (
        "command", "Shell command", "touch created_by_agent.txt")
    options = request["options"]
    assert isinstance(options, list)
    assert [(o["label"], o["kind"]) for o in options] == [
        ("Allow once", "approve"), ("Allow always", "other"), ("Reject", "deny")]
    assert keys == {"1": ("Enter",), "2": ("Right", "Enter"), "3": ("Right", "Right", "Enter")}


def test_gemini_and_aider_questions() -> None:
    gemini = ScreenView.from_text("\n".join([
        "╭──────────────────────────────────────────╮",
        "│ ? Shell ls -la (List the files)           │",
        "│                                           │",
        "│ Allow execution of: 'ls'?                 │",
        "│ ● 1. Yes, allow once                      │",
        "│   2. Yes, allow always                    │",
        "│   3. No, suggest changes (esc)            │",
        "╰──────────────────────────────────────────╯"]))
    got = read_request(gemini, default_rule_sets()["gemini"].approval, "approval")
    assert (got.request["what"], got.request["tool"], got.request["detail"]) == (
        "command", "Shell", "ls -la")
    assert [(o["key"], o["kind"]) for o in got.request["options"]] == [
        ("1", "approve"), ("2", "other"), ("3", "deny")]
    aider = ScreenView.from_text("\n".join([
        "ls -la", "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:"]))
    got = read_request(aider, default_rule_sets()["aider"].approval, "approval")
    assert (got.request["what"], got.request["detail"]) == ("command", "ls -la")
    assert [(o["key"], o["label"], o["kind"]) for o in got.request["options"]] == [
        ("y", "Yes", "approve"), ("n", "No", "deny"), ("d", "Don't ask again", "other")]
    assert got.keys["n"] == ("n", "Enter")


def test_a_numbered_list_above_the_question_is_not_an_option() -> None:
    view = ScreenView.from_text("\n".join([
        "● Plan:", "  1. Build it", "  2. Ship it", "─" * 40, " Bash command", "╌" * 40,
        " make", "╌" * 40, " Do you want to proceed?", " ❯ 1. Yes", "   2. No"]))
    got = read_request(view, default_rule_sets()["claude"].approval, "approval")
    assert [o["label"] for o in got.request["options"]] == ["Yes", "No"]
    assert got.request["detail"] == "make"
    same = read_request(ScreenView.from_text("\n".join([
        "─" * 40, " Bash command", "╌" * 40, " make", "╌" * 40, " Do you want to proceed?",
        "   1. Yes", " ❯ 2. No"])), default_rule_sets()["claude"].approval, "approval")
    assert same.fingerprint == got.fingerprint  # the selection moving is the same question


def test_a_broken_approval_table_names_the_file() -> None:
    base = 'name = "x"\n[[rule]]\nid = "a"\nstate = "busy"\npriority = 1\ncontains = "x"\n'
    with pytest.raises(RuleFileError, match=r"x\.toml: approval: style"):
        parse_rule_file("x.toml", (base + '[approval]\nstyle = "grid"\noption = "a"\n'
                                          'approve = "y"\ndeny = "n"\n').encode())
    with pytest.raises(RuleFileError, match="keys"):
        parse_rule_file("x.toml", (base + '[approval]\noption = "a"\napprove = "y"\n'
                                          'deny = "n"\nkeys = ["NoSuchKey"]\n').encode())


def test_every_agent_rule_file_reads_its_questions() -> None:
    sets = default_rule_sets()
    assert all(sets[name].approval is not None for name in
               ("claude", "codex", "opencode", "gemini", "aider"))


# -- the operator hook -------------------------------------------------------------------------


def test_hook_gets_stdin_and_its_output_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / "hook.py"
    script.write_text("import sys\nsys.stdout.write(sys.stdin.read() * 1000)\n")
    run = run_hook((sys.executable, str(script)), b'{"kind": "approval"}', 10.0)
    assert run.state == "ok"
    assert len(run.output) == MAX_HOOK_OUTPUT and run.output.startswith(b'{"kind"')


def test_hook_that_hangs_is_killed_with_its_session(tmp_path: Path) -> None:
    started = time.monotonic()
    run = run_hook(("sh", "-c", "sleep 600 & sleep 600"), b"{}", 0.5)
    assert run.state == "timed_out" and "TETHER_NOTIFY_TIMEOUT_S" in run.detail
    assert time.monotonic() - started < 5


def test_hook_that_fails_or_is_missing_says_so(tmp_path: Path) -> None:
    assert run_hook(("sh", "-c", "exit 3"), b"{}", 5.0).detail == "exit code 3"
    missing = run_hook((str(tmp_path / "nothing-here"),), b"{}", 5.0)
    assert missing.state == "failed" and "could not start" in missing.detail


def test_notify_command_is_an_argv_never_a_shell() -> None:
    assert notify_argv('["notify-send", "a b"]') == ("notify-send", "a b")
    assert notify_argv("notify-send 'a b' $HOME") == ("notify-send", "a b", "$HOME")
    assert notify_argv("") == ()
    for bad in ("[]", '["x", 1]', "[not json", "'unbalanced"):
        with pytest.raises(ValueError, match="TETHER_NOTIFY_COMMAND"):
            notify_argv(bad)
    with pytest.raises(ValueError, match="TETHER_NOTIFY_TIMEOUT_S"):
        Config.from_env({"HOME": "/tmp", "TETHER_NOTIFY_TIMEOUT_S": "0"})


# -- the usage log and its report --------------------------------------------------------------


def test_usage_counts_approvals_without_their_text() -> None:
    import mcp_types as types

    from tether.frontend.person.report import build_report
    from tether.frontend.usage import workflow_fields

    approval = {"approval_id": "ap_1", "status": "resolved", "request": {
        "what": "command", "detail": "rm -rf secret-dir", "options": []},
        "resolved": {"how": "denied"}}
    listed = types.CallToolResult(content=[], structured_content={
        "ok": True, "status": "ok", "data": {"approvals": [approval, {**approval,
                                                                       "status": "pending"}]}})
    answered = types.CallToolResult(content=[], structured_content={
        "ok": True, "status": "ok", "data": {"approval": approval, "replayed": False,
                                             "response": {"left_approval": True}}})
    stale = types.CallToolResult(content=[], is_error=True, structured_content={
        "ok": False, "status": "error", "code": "approval_stale", "data": {}})
    fields = [workflow_fields("Agent", {"action": "approvals"}, listed),
              workflow_fields("Agent", {"action": "respond"}, answered),
              workflow_fields("Agent", {"action": "respond"}, stale)]
    assert fields[0]["approvals_listed"] == 2 and fields[0]["approvals_pending"] == 1
    assert fields[1]["approval_outcome"] == "denied" and fields[1]["approval_left"] is True
    assert fields[2]["approval_stale"] is True
    assert "secret-dir" not in str(fields)
    lines = [json.dumps({"event": "tool_call", "usage_schema": 1, "tool": "Agent",
                         "action": action, "backend": "native", "duration_ms": 1.0,
                         "outcome": "ok", "code": None, "ts_unix_ms": 1, **extra})
             for action, extra in zip(("approvals", "respond", "respond"), fields, strict=True)]
    groups = build_report(lines, last=None, since_minutes=0, now_ms=0).to_dict()["workflows"]
    counts = {g["action"]: g.get("approvals") for g in groups}
    assert counts == {"approvals": {"listed": 2}, "respond": {"denied": 1, "stale": 1}}
