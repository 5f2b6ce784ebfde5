"""docs/tools.md#recovery-advice recovery advice for agent launches."""

from __future__ import annotations

import pytest

from tether.guardian.runtime.recovery import recovery_advice

U = "123e4567-e89b-12d3-a456-426614174000"


@pytest.mark.parametrize(("command", "resume"), [
    (f"claude --session-id {U}", f"claude --resume {U}"),
    (f"claude --resume {U}", f"claude --resume {U}"),
    (f"claude -r {U}", f"claude --resume {U}"),
    (f"codex resume {U}", f"codex resume {U}"),
])
def test_explicit_targets(command: str, resume: str) -> None:
    advice = recovery_advice(command)
    assert advice == {"advice": "explicit_target", "source": "launch_argument",
                      "command": resume, "current_conversation_verified": False}


@pytest.mark.parametrize("command", ["claude", "codex"])
def test_bare_launch_is_best_effort(command: str) -> None:
    advice = recovery_advice(command)
    assert advice is not None
    assert advice["advice"] == "best_effort" and advice["command"] is None


@pytest.mark.parametrize("command", [
    "claude --resume x --model y",
    f"claude --resume {U} --model y",
    f"FOO=1 claude -r {U}",
    "claude --resume not-a-uuid",
    f"echo hi | claude -r {U}",
    f"claude -r {U} | tee log",
    "claude -r $(cat id)",
    f"claude --session-id {U} --resume {U}",
    f"/usr/bin/claude -r {U}",
    f"codex resume {U} extra",
    f"cd x && claude -r {U}",
])
def test_everything_else_is_unavailable(command: str) -> None:
    advice = recovery_advice(command)
    assert advice is not None
    assert advice["advice"] == "unavailable" and advice["command"] is None


@pytest.mark.parametrize("command", ["ls -la", "echo claude-is-a-word", "git status"])
def test_non_agent_commands_get_no_advice(command: str) -> None:
    assert recovery_advice(command) is None
