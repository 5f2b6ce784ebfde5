"""An architect shell's ``git``: the real one, made to run no program that configuration or
attributes name.

git runs programs its configuration names: pagers (``core.pager``, ``pager.<cmd>``), diff
drivers (``diff.external``, ``diff.<driver>.command`` and ``.textconv``, picked by
``.gitattributes``), filters (``filter.<driver>.clean``, ``.smudge``, ``.process``), the
fsmonitor, hooks, ``gpg.program`` for ``--show-signature``, credential helpers, ssh commands,
editors... A repository's own ``.git/config`` (and what it includes) is as much an agent's
writing as any file: with it, a "read-only" ``git log`` runs what the repository says. No
environment variable turns the repository's config or its ``.gitattributes`` off, and driver
names are the repository's to choose, so a fixed environment cannot name them all.

This file, run as a script (``python -I -S``, no Tether import), stands first on an architect
shell's PATH as ``git`` (:func:`install`) and, each time git is run:

- drops every ``GIT_*`` variable of the shell and sets its own: no system or global config
  (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), no pager, no optional index
  writes, no prompts, no protocol but local files;
- reads the configuration the repository has (includes followed, as git would) and overrides,
  at the highest precedence (``GIT_CONFIG_COUNT``), every key that names a program: a fixed
  list (:data:`FIXED`) and every key whose last part says it is one (:data:`PROGRAM_KEYS`:
  ``.command``, ``.textconv``, ``.program``, ``.helper``, ... so a key a newer git adds in
  one of these shapes is covered too);
- adds ``--no-pager``, and ``--no-ext-diff --no-textconv`` to the commands that take them;
  refuses ``cat-file --textconv`` and ``--filters`` (they ask for the drivers by name).

The command check (``frontend/policy/shell_policy.py``) lets architect run only a few read-only
git commands with literal arguments and no options before the subcommand; the kernel sandbox,
where there is one, stops writes besides. This holds without either.
"""

from __future__ import annotations

import os
import sys

#: Keys overridden whatever the repository's config says, with their harmless values.
FIXED: dict[str, str] = {
    "core.pager": "cat",
    "core.fsmonitor": "false",
    "core.hooksPath": "/dev/null",
    "core.editor": "false",
    "sequence.editor": "false",
    "core.askPass": "",
    "core.sshCommand": "false",
    "core.gitProxy": "",
    "core.alternateRefsCommand": "",
    "diff.external": "",
    "gpg.program": "false",
    "gpg.openpgp.program": "false",
    "gpg.x509.program": "false",
    "gpg.ssh.program": "false",
    "gpg.ssh.defaultKeyCommand": "false",
    "log.showSignature": "false",
    "credential.helper": "",
    "protocol.allow": "never",
    "protocol.file.allow": "always",
    "protocol.ext.allow": "never",
    "uploadpack.packObjectsHook": "",
    "submodule.recurse": "false",
    "diff.ignoreSubmodules": "all",
    "status.submoduleSummary": "false",
    "fetch.recurseSubmodules": "false",
    "core.untrackedCache": "false",
}
#: The last part of a key that names a program to run (``diff.<driver>.textconv``,
#: ``filter.<driver>.process``, ``hook.<name>.command``, ``pager.<cmd>``, ...): every key of
#: the repository's config that ends so is overridden with an empty value (or the harmless
#: value below), whatever section it is in.
PROGRAM_KEYS = ("command", "cmd", "textconv", "clean", "smudge", "process", "driver",
                "program", "helper", "sshcommand", "askpass", "editor", "pager", "proxy",
                "gitproxy", "fsmonitor", "hookspath", "uploadpack", "receivepack", "vcs",
                "packobjectshook", "alternaterefscommand", "defaultkeycommand")
#: Sections whose every key names a program (``pager.log = touch x``).
PROGRAM_SECTIONS = ("pager",)
#: Values other than empty for some keys: an empty textconv makes git fail ("cannot run"),
#: where ``cat`` shows the file as it is; a required filter with no command is an error.
NEUTRAL_LAST = {"textconv": "cat", "required": "false", "pager": "cat"}
#: Commands that take the diff options turning external diffs and textconv off.
DIFF_COMMANDS = frozenset({"diff", "log", "show", "whatchanged", "diff-tree", "diff-files",
                           "diff-index"})
TEXTCONV_COMMANDS = frozenset({"blame", "annotate"})
#: Options that ask git to run the drivers: refused (there is nothing to neutralise them to).
REFUSED = {"cat-file": ("--textconv", "--filters")}
#: The variables set for every run (all other ``GIT_*`` ones are dropped).
SAFE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PROTOCOL_FROM_USER": "0",
    "GIT_ALLOW_PROTOCOL": "file",
    "GIT_NO_LAZY_FETCH": "1",
}
#: Configuration read by this many bytes at most (a repository's config is a few KiB).
MAX_CONFIG_BYTES = 4 * 1024 * 1024


def neutral(key: str) -> str | None:
    """The value ``key`` is overridden with, or None when it names no program."""
    lowered = key.lower()
    section, _, rest = lowered.partition(".")
    last = lowered.rsplit(".", 1)[-1]
    if section in PROGRAM_SECTIONS and rest:
        return "cat"
    if last == "required" and section == "filter":
        return "false"
    if last in PROGRAM_KEYS:
        return NEUTRAL_LAST.get(last, "")
    if section in ("include", "includeif"):
        return None  # what an include brings in is listed (and overridden) with the rest
    return None


def configured_keys(real_git: str, env: dict[str, str]) -> list[str]:
    """Every key of the configuration git would read here (includes followed)."""
    import subprocess

    try:
        done = subprocess.run([real_git, "config", "--list", "--name-only", "-z"], env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    raw = done.stdout[:MAX_CONFIG_BYTES]
    return [key.decode(errors="replace") for key in raw.split(b"\0") if key]


def overrides(keys: list[str]) -> dict[str, str]:
    """Each key to override and its value. Keys stay as git listed them: a subsection is
    case-sensitive (``diff.TC.textconv`` is not ``diff.tc.textconv``)."""
    found = dict(FIXED)
    for key in keys:
        value = neutral(key)
        if value is not None:
            found.setdefault(key, value)
    return found


def arguments(args: list[str]) -> list[str] | str:
    """``args`` with the safe options added, or why they are refused."""
    if not args:
        return ["--no-pager"]
    sub, rest = args[0], args[1:]
    for option in REFUSED.get(sub, ()):
        if any(arg == option or arg.startswith(option + "=") for arg in rest):
            return (f"git {sub} {option} runs the programs a repository's config names; "
                    "architect mode does not")
    added: list[str] = []
    if sub in DIFF_COMMANDS:
        added = ["--no-ext-diff", "--no-textconv"]
    elif sub in TEXTCONV_COMMANDS:
        added = ["--no-textconv"]
    return ["--no-pager", sub, *added, *rest]


def environment(base: dict[str, str], keys: list[str]) -> dict[str, str]:
    env = {name: value for name, value in base.items() if not name.startswith("GIT_")}
    env.update(SAFE_ENV)
    chosen = overrides(keys)
    env["GIT_CONFIG_COUNT"] = str(len(chosen))
    for i, (key, value) in enumerate(chosen.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def install(directory: str, real_git: str) -> str:
    """Write ``directory/git``, which runs this file for ``real_git``; the directory to put
    first on PATH. Rewritten every time (a changed interpreter or git path is picked up)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    script = os.path.join(directory, "git")
    quoted = [_sh_quote(part) for part in (sys.executable, os.path.abspath(__file__), real_git)]
    text = f'#!/bin/sh\nexec {quoted[0]} -I -S {quoted[1]} {quoted[2]} "$@"\n'
    temporary = f"{script}.{os.getpid()}"
    with open(temporary, "w") as out:
        out.write(text)
    os.chmod(temporary, 0o755)
    os.replace(temporary, script)
    return directory


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _main(argv: list[str]) -> int:
    real_git, args = argv[0], argv[1:]
    final = arguments(args)
    if isinstance(final, str):
        print(f"tether: {final}", file=sys.stderr)
        return 2
    base = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    base.update(SAFE_ENV)
    base["GIT_CONFIG_COUNT"] = "0"
    env = environment(dict(os.environ), configured_keys(real_git, base))
    os.execve(real_git, [real_git, *final], env)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
