"""Conversation recovery advice for agent launches (docs/tools.md#recovery-advice).

Only a literal, direct foreground launch that names one conversation by UUID is an
``explicit_target``; a bare launch is ``best_effort``; everything else (extra flags,
wrappers, env prefixes, pipes, substitutions, lists, conflicting selectors, non-UUID names)
is ``unavailable``. The advice is data for a person or client: nothing here ever runs it.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
#: Shell syntax that makes a command line more than one direct launch.
_SHELL_SYNTAX = re.compile(r"[|;&<>`$(){}\n\\]|\*|\?")
_PROGRAMS = ("claude", "codex")


def _advice(kind: str, command: str | None = None, reason: str | None = None) -> dict[str, Any]:
    advice: dict[str, Any] = {
        "advice": kind,
        "source": "launch_argument" if kind == "explicit_target" else None,
        "command": command,
        "current_conversation_verified": False,
    }
    if reason:
        advice["reason"] = reason
    return advice


#: Quotes and backslashes: what shlex removes when it joins a word from its pieces.
_UNQUOTE = str.maketrans("", "", "'\"\\")


def recovery_advice(command: str) -> dict[str, Any] | None:
    """Advice for ``command``, or None when it does not launch a supported agent at all."""
    unquoted = command.translate(_UNQUOTE)
    if not any(program in unquoted for program in _PROGRAMS):
        # No word can be a program's name (a word's letters stand together once quotes and
        # escapes are gone): every command that is not an agent launch skips shlex.
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if not words:
        return None
    program = words[0]
    launches_agent = program in _PROGRAMS or any(
        w in _PROGRAMS or w.rsplit("/", 1)[-1] in _PROGRAMS for w in words
    )
    if not launches_agent:
        return None
    if _SHELL_SYNTAX.search(command):
        return _advice("unavailable", reason="not a single literal launch (pipes, lists, "
                                             "substitutions or redirections)")
    if program not in _PROGRAMS:
        return _advice("unavailable", reason="wrapped or prefixed launch (env assignments, "
                                             "wrappers or paths)")
    args = words[1:]
    if not args:
        return _advice("best_effort", reason="no conversation selected at launch")
    if program == "claude":
        if len(args) == 2 and args[0] in ("--session-id", "--resume", "-r"):
            if _UUID.match(args[1]):
                return _advice("explicit_target", f"claude --resume {args[1].lower()}")
            return _advice("unavailable", reason="conversation selector is not a UUID")
        return _advice("unavailable", reason="extra flags or conflicting selectors")
    if len(args) == 2 and args[0] == "resume":
        if _UUID.match(args[1]):
            return _advice("explicit_target", f"codex resume {args[1].lower()}")
        return _advice("unavailable", reason="conversation selector is not a UUID")
    return _advice("unavailable", reason="extra arguments")
