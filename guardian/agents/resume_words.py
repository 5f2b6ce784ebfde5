"""Which words of a launch line a resume passes again (claude, codex, opencode).

A resume keeps the launch's arguments (``--model``, ``--mcp-config``, ``--permission-mode``,
...) and replaces only what chooses the conversation: ``--session-id``/``--resume``/
``--continue`` for Claude Code, the ``resume`` subcommand and its session for Codex,
``--session``/``--continue`` for OpenCode. What would send a prompt again goes too: a resume
never re-sends one — Claude Code's and Codex's positional prompt, OpenCode's ``--prompt``.

Positional words are told from option values with each program's options as its ``--help``
lists them. An option not listed here is taken to own the word after it (when that is not an
option): a prompt after an unknown flag is kept rather than an unknown option's value lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Takes = bool | None  # an option's value: always (True), never (False), when one follows (None)


@dataclass(frozen=True, slots=True)
class Options:
    """One program's command-line options, as far as a resume needs them."""

    dropped: dict[str, Takes]  # choose a conversation, or send a prompt: not passed again
    flags: frozenset[str] = frozenset()  # take no value
    valued: frozenset[str] = frozenset()  # take one value
    variadic: frozenset[str] = frozenset()  # take every plain word after them
    positional_prompt: bool = False  # a plain word is the first prompt


OPTIONS = {
    "claude": Options(
        dropped={"--session-id": True, "--resume": None, "-r": None, "--continue": False,
                 "-c": False, "--fork-session": False},
        flags=frozenset({
            "--dangerously-skip-permissions", "--allow-dangerously-skip-permissions", "--ide",
            "--mcp-debug", "--print", "-p", "--strict-mcp-config", "--verbose",
            "--include-partial-messages", "--replay-user-messages", "--disable-slash-commands",
            "--chrome", "--no-chrome", "--no-session-persistence"}),
        valued=frozenset({
            "--model", "--permission-mode", "--append-system-prompt", "--system-prompt",
            "--fallback-model", "--settings", "--setting-sources", "--agent", "--agents",
            "--output-format", "--input-format", "--json-schema", "--max-budget-usd",
            "--permission-prompt-tool", "--max-turns", "--system-prompt-file",
            "--append-system-prompt-file"}),
        variadic=frozenset({
            "--add-dir", "--allowedTools", "--allowed-tools", "--disallowedTools",
            "--disallowed-tools", "--mcp-config", "--betas", "--plugin-dir", "--tools",
            "--file"}),
        positional_prompt=True,
    ),
    "codex": Options(
        dropped={"--last": False, "--all": False},
        flags=frozenset({"--oss", "--search", "--full-auto",
                         "--dangerously-bypass-approvals-and-sandbox", "--no-alt-screen"}),
        valued=frozenset({"-c", "--config", "-m", "--model", "-p", "--profile", "-s",
                          "--sandbox", "-a", "--ask-for-approval", "-C", "--cd", "--add-dir",
                          "--local-provider", "--enable", "--disable"}),
        variadic=frozenset({"-i", "--image"}),
        positional_prompt=True,
    ),
    # A plain word is OpenCode's project directory: kept.
    "opencode": Options(
        dropped={"--session": True, "-s": True, "--continue": False, "-c": False,
                 "--prompt": True},
    ),
}


def resume_arguments(provider: str, words: Sequence[str]) -> list[str]:
    """The arguments of a launch line (program name excluded) that its resume passes again,
    in their order."""
    options = OPTIONS[provider]
    rest = list(words)
    if provider == "codex" and rest[:1] == ["resume"]:
        rest = rest[1:]
        if rest and not rest[0].startswith("-"):
            rest = rest[1:]  # the session id
    kept: list[str] = []
    index, owner_takes_words = 0, False
    while index < len(rest):
        word = rest[index]
        index += 1
        if word == "--":
            if not options.positional_prompt:
                kept += rest[index - 1:]
            break  # only positional words follow: with a prompt among them, none goes again
        if not word.startswith("-") or word == "-":
            if owner_takes_words or not options.positional_prompt:
                kept.append(word)
            continue
        name, has_value = word.split("=", 1)[0], "=" in word
        owner_takes_words = False
        takes_next = not has_value and index < len(rest) and not rest[index].startswith("-")
        if name in options.dropped:
            takes = options.dropped[name]
            if not has_value and (takes is True or (takes is None and takes_next)):
                index += 1
            continue
        kept.append(word)
        if has_value or name in options.flags:
            continue
        if name in options.variadic:
            owner_takes_words = True
        elif (name in options.valued and index < len(rest)) or takes_next:
            kept.append(rest[index])
            index += 1
    return kept
