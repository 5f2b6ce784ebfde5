"""Naming the program behind a command line, for the ``auto`` recognizer.

Launch lines in the wild wrap the program in many ways: ``/usr/local/bin/claude``,
``FOO=1 claude``, ``env -u X codex``, ``npx -y @anthropic-ai/claude-code@latest``,
``pipx run aider-chat``, ``python -m aider``, ``cd repo && gemini``, ``bash -lc "opencode"``.
``identify_program`` peels those layers off; anything it cannot name is left to the caller.
"""

from __future__ import annotations

import re
import shlex

# Executable or package name → recognizer. Package names are the ones the vendors publish
# (npm, PyPI); a version suffix (``@latest``, ``==1.2``) is removed before the lookup.
PROGRAM_NAMES: dict[str, str] = {
    "claude": "claude",
    "claude-code": "claude",
    "@anthropic-ai/claude-code": "claude",
    "codex": "codex",
    "@openai/codex": "codex",
    "opencode": "opencode",
    "opencode-ai": "opencode",
    "gemini": "gemini",
    "gemini-cli": "gemini",
    "@google/gemini-cli": "gemini",
    "aider": "aider",
    "aider-chat": "aider",
    "aider-install": "aider",
}

SHELLS = frozenset(
    {
        "sh",
        "bash",
        "zsh",
        "dash",
        "ksh",
        "mksh",
        "fish",
        "tcsh",
        "csh",
        "ash",
        "busybox",
        "nu",
        "xonsh",
        "pwsh",
        "powershell",
    }
)

# Wrappers that run their first non-option argument; the value is the set of their options
# that take a separate argument (so that argument is not mistaken for the program).
_RUNNERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "exec": frozenset({"-a"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "nohup": frozenset(),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "--user", "-g", "--group", "-C", "-D", "-h", "-p", "-r", "-t"}),
    "doas": frozenset({"-u", "-C"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "npx": frozenset({"-p", "--package", "-c", "--call"}),
    "bunx": frozenset({"-p", "--package"}),
    "uvx": frozenset({"--from", "--with", "-p", "--python"}),
    "node": frozenset({"-r", "--require", "--import", "--loader"}),
    "bun": frozenset(),
    "deno": frozenset(),
    "dotenv": frozenset({"-e", "-f"}),
}
# Two-word runners: ``pipx run X``, ``pnpm dlx X``, ``uv tool run X``, ...
_SUBCOMMAND_RUNNERS: dict[str, tuple[str, ...]] = {
    "pipx": ("run",),
    "pnpm": ("dlx", "exec"),
    "yarn": ("dlx", "exec"),
    "npm": ("exec", "x"),
    "uv": ("tool", "run"),
    "bun": ("x", "run"),
    "deno": ("run",),
    "mise": ("exec", "x"),
}
_RUNNERS_WITH_DURATION = frozenset({"timeout"})  # takes a duration before the program
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")

#: Every name above contains its recognizer's name, so a command line whose text (quotes and
#: backslashes removed: shlex joins a word's quoted parts and drops escapes) holds none of
#: them names no known program: the fast answer for the many lines that launch none, which
#: ``Agent.list`` asks about for every record of a thread (a 64 KiB line takes shlex ~50 ms).
_STEMS = tuple(sorted(set(PROGRAM_NAMES.values())))
assert all(program in name for name, program in PROGRAM_NAMES.items())
_UNQUOTE = str.maketrans("", "", "'\"\\")
_VERSION_SUFFIX = re.compile(r"(?<=.)(@[^/@]*|[=<>~!]=.*)$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "|&", ";;", "(", ")"})
_MAX_DEPTH = 4


def identify_program(command: str | None) -> str | None:
    """The agent recognizer a command line launches, or ``None`` if it names no known agent.

    The first simple command of a list (``a && b; c``) that names a known program wins,
    because that program's screen is what the terminal will show while it runs.
    """
    if not command:
        return None
    text = command.translate(_UNQUOTE).lower()
    if not any(stem in text for stem in _STEMS):
        return None
    return _identify(command, 0)


def is_known_shell(command: str | None) -> bool:
    """Whether ``command`` starts a plain shell (then ``shell`` is the right recognizer)."""
    words = _words(command or "")
    if not words:
        return False
    program = _program_word(words)
    return program is not None and _basename(program) in SHELLS


def _identify(command: str, depth: int) -> str | None:
    words = _words(command)
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in _SEPARATORS:
            segment.append(word)
            continue
        found = _identify_simple(segment, depth) if segment else None
        if found is not None:
            return found
        segment = []
    return None


def _identify_simple(words: list[str], depth: int) -> str | None:
    program_index = _program_index(words)
    if program_index is None:
        return None
    program = words[program_index]
    name = _lookup(program)
    if name is not None:
        return name
    base = _basename(program)
    rest = words[program_index + 1 :]
    if base in SHELLS and depth < _MAX_DEPTH:
        # ``bash -lc "claude --resume x"``: look inside the -c string.
        for i, word in enumerate(rest):
            if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
                return _identify(rest[i + 1], depth + 1) if i + 1 < len(rest) else None
        return None
    if re.fullmatch(r"python[0-9.]*", base):
        # ``python -m aider``: the module names the program.
        for i, word in enumerate(rest[:-1]):
            if word == "-m":
                return _lookup(rest[i + 1])
        return None
    return None


def _program_word(words: list[str]) -> str | None:
    index = _program_index(words)
    return words[index] if index is not None else None


def _program_index(words: list[str]) -> int | None:
    """Index of the word that names the program, after env assignments and runners."""
    i = 0
    while i < len(words):
        word = words[i]
        base = _basename(word)
        if _ENV_ASSIGNMENT.match(word):
            i += 1
        elif (
            base in _SUBCOMMAND_RUNNERS and i + 1 < len(words) and (words[i + 1] in _SUBCOMMAND_RUNNERS[base])
        ):
            i += 2
            while i < len(words) and words[i] in _SUBCOMMAND_RUNNERS[base]:
                i += 1  # ``uv tool run``
            i = _skip_options(
                words, i, frozenset({"--spec", "--from", "--with", "-p", "--package", "--python"})
            )
        elif base in _RUNNERS and _lookup(word) is None:
            i = _skip_options(words, i + 1, _RUNNERS[base])
            if base in _RUNNERS_WITH_DURATION and i < len(words):
                i += 1
        else:
            return i
    return None


def _skip_options(words: list[str], i: int, with_value: frozenset[str]) -> int:
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        if words[i] == "--":
            return i + 1
        i += 2 if words[i] in with_value else 1
    return i


def _lookup(word: str) -> str | None:
    name = _VERSION_SUFFIX.sub("", word.strip().lower())
    if name in PROGRAM_NAMES:
        return PROGRAM_NAMES[name]
    base = _basename(name)
    if base in PROGRAM_NAMES:
        return PROGRAM_NAMES[base]
    # ``node ~/.npm/.../@anthropic-ai/claude-code/cli.js``: a package directory in the path.
    for package, program in PROGRAM_NAMES.items():
        if package.startswith("@") and f"/{package}/" in name:
            return program
    return None


def _basename(word: str) -> str:
    base = word.replace("\\", "/").rsplit("/", 1)[-1].lower()
    for suffix in (".exe", ".cmd", ".bat", ".ps1"):
        base = base.removesuffix(suffix)
    return base


def _words(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: a rough split beats no answer
        return command.split()
