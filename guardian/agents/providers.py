"""What a managed agent's provider runs at launch and at resume (docs/tools.md#managed-agents,
docs/tools.md#close-resume-archive).

``command`` runs its ``argv`` (no shell) and reruns it on resume. ``claude``, ``codex`` and
``opencode`` know their command lines: Claude Code gets ``--session-id <uuid>`` (a fresh one
Tether chooses) so the conversation can be resumed with ``claude --resume <uuid>``; Codex
resumes with ``codex resume <uuid>``. A resume keeps every other argument of the launch
(``--model``, ``--mcp-config``, ``--permission-mode``, ...) and replaces only the words that
choose the conversation; a prompt given on the launch line is not sent again
(``resume_words``). When only the launch line names the conversation, the docs/tools.md#recovery-advice
recovery-advice parser reads it from there.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tether.guardian.agents.recognize import pick_recognizer
from tether.guardian.agents.resume_words import resume_arguments
from tether.guardian.runtime.recovery import recovery_advice
from tether.protocol.errors import ErrorCode, TetherError

_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
#: argv words that already choose Claude Code's conversation: Tether adds none then.
_CLAUDE_SELECTORS = frozenset({"--session-id", "--resume", "-r", "--continue", "-c"})

#: How each provider's resume line names the conversation, before the launch's arguments.
_RESUME_WORDS = {"claude": ["--resume"], "codex": ["resume"], "opencode": ["--session"]}


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    argv: list[str]
    recognizer: str
    conversation_id: str | None
    recovery: dict[str, Any] | None


def _refuse(message: str) -> TetherError:
    return TetherError(ErrorCode.INVALID_REQUEST, message, {"input_sent": False})


def launch_plan(
    provider: str, argv: Sequence[str] | None, *, recognizer: str = "auto",
    conversation_id: str | None = None, new_uuid: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> LaunchPlan:
    """The command line, recognizer and conversation id of a launch."""
    extra = list(argv or [])
    if provider == "command":
        if not extra or not extra[0]:
            raise _refuse("provider 'command' needs argv: the program and its arguments as a "
                          "list, e.g. [\"python\", \"agent.py\"] (no shell is involved)")
        line = extra
    elif provider == "claude":
        if conversation_id is not None and not _UUID.match(conversation_id):
            raise _refuse("a Claude Code conversation_id must be a UUID")
        if conversation_id is not None:
            line = ["claude", "--resume", conversation_id.lower(), *extra]
        elif _CLAUDE_SELECTORS & set(extra):
            line = ["claude", *extra]
        else:
            conversation_id = new_uuid()
            line = ["claude", "--session-id", conversation_id, *extra]
    elif provider == "codex":
        line = ["codex", "resume", conversation_id, *extra] if conversation_id else ["codex", *extra]
    elif provider == "opencode":
        line = (["opencode", "--session", conversation_id, *extra] if conversation_id
                else ["opencode", *extra])
    else:
        raise _refuse(f"unknown provider {provider!r}; use command, claude, codex or opencode")
    command = shlex.join(line)
    if recognizer == "auto":
        recognizer = provider if provider != "command" else pick_recognizer(command)
    return LaunchPlan(line, recognizer, conversation_id, recovery_advice(command))


def resume_argv(record: dict[str, Any]) -> list[str]:
    """The command line that resumes ``record``'s conversation (never re-sends a prompt)."""
    provider = record["provider"]
    launched = list(record.get("argv") or [])
    if provider == "command":
        return launched
    conversation = record.get("conversation_id")
    if conversation:
        program = launched[0] if launched else provider
        return [program, *_RESUME_WORDS[provider], conversation,
                *resume_arguments(provider, launched[1:])]
    advice = recovery_advice(shlex.join(launched)) if launched else None
    if advice is not None and advice["advice"] == "explicit_target" and advice["command"]:
        return shlex.split(str(advice["command"]))
    raise TetherError(
        ErrorCode.INVALID_STATE,
        f"no conversation of this {provider} agent is known (it was launched without one and "
        "its launch line names none), so it cannot be resumed; launch a new agent instead",
        {"input_sent": False},
    )
