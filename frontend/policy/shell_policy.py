"""Command lines under a restricted mode (docs/security.md#profiles-and-modes): parse with a real shell
parser, check every
segment, and say which segment broke which rule.

The line is parsed by bashlex (a port of bash's own grammar), never by regexes. Every simple
command anywhere in the tree is a *segment*: the parts of pipes, ``&&``, ``||``, ``;``,
subshells, ``{ }`` groups, loops and conditionals, and the commands inside ``$( )``,
backticks and ``<( )``/``>( )``. Whatever the parser cannot read, and every place where bash
would run a command that the parser does not show (a substitution hidden in ``${x:-...}``
or in an unquoted here-document), is refused: a check that cannot see a command must not
let it through.

Rules (the ``rule`` of each violation, stable names):

- ``unparsable``: the parser could not read the line (for example ``[[ ]]``, ``case``,
  ``$(( ))``, ``time``), or reads part of it differently from bash (quotes inside
  ``${x:-...}``, a quoted here-document delimiter, a word across lines).
- ``unchecked_substitution``: a command substitution the parser does not expose.
- ``evaluated_expansion``: an expansion that makes bash evaluate a value as code or
  arithmetic (``${x@P}`` runs the substitutions in ``x``; an offset ``${x:n}``, a subscript
  ``${a[i]}``, an indirection ``${!x}`` or ``$[x]`` evaluates ``n``, ``i`` or what ``x``
  names, array subscripts included): a value set earlier (by a loop, or before the mode
  changed) could carry a command the parser never sees. Integer literals are fine; inside an
  operator's word (``${x:-word}``) only ``$name`` is.
- ``literal_command``: a command name that bash would expand (``$CMD``, ``r?``, ``{a,b}``).
- ``no_assignments``: ``VAR=value`` (alone or before a command), a loop over a variable that
  is not a plain lowercase name (``for PROMPT_COMMAND in ...``) or is one of Tether's own
  (``for __tether_nonce in ...``), a descriptor variable
  (``{PATH}>file``), or an expansion that assigns (``${x=value}``, ``${x:=value}``): it can
  change what later commands run (``PROMPT_COMMAND``, ``LD_PRELOAD``, ``GIT_PAGER``,
  ``PATH``).
- ``no_functions``: a function definition: it can change what a command name runs later
  (``ls() { ...; }``).
- ``allowed_commands`` (code_writer): the command name is not in the allowlist.
- ``allowed_globs`` (code_writer): a redirection writes a file outside the write globs, or
  into /proc or /dev (but /dev/null), where a path names another file in each process, or
  inside ``.git``, whose config and hooks name programs git runs.
- ``read_only_commands`` / ``read_only_options`` (architect): the command, or an option of it,
  can write or run something else.
- ``no_writes`` (architect): a redirection writes a file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ModeSpec
from tether.shared.write_rules import glob_regex, write_refusal

#: Targets a redirection may always write: they store nothing. (Not /dev/stdout or
#: /dev/stderr: opening one reopens whatever fd 1 or 2 is, and `1<file >/dev/stdout`
#: truncates and writes ``file``.)
HARMLESS_TARGETS = frozenset({"/dev/null"})

#: ``architect``: commands that read and print, and cannot write files or run other commands
#: (with the options refused below). Pagers, ``env``, ``xargs``, ``sed``, ``awk``, ``sort``,
#: ``tree`` and ``file`` are absent on purpose: each can run a program or write a file.
READ_ONLY_COMMANDS = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "pwd", "echo", "cd", "diff",
    "cmp", "stat", "du", "df", "basename", "dirname", "realpath", "readlink", "true", "false",
    "test", "[", "cut", "tr", "nl", "rev", "md5sum", "sha1sum", "sha256sum", "whoami", "id",
    "uname", "which", "type", "find", "git",
})
#: Options (prefixes) that make a read-only command write or execute.
READ_ONLY_REFUSED_OPTIONS: dict[str, tuple[str, ...]] = {
    "find": ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fls"),
    # ``-v name[subscript]`` evaluates the subscript, which can run a command.
    "test": ("-v",),
    "[": ("-v",),
    "git": ("-c", "--config-env", "--exec-path", "--output", "--ext-diff", "-O",
            "--open-files-in-pager", "--upload-pack", "--receive-pack"),
}
#: ``architect``: git subcommands that only read the repository.
READ_ONLY_GIT = frozenset({
    "status", "log", "diff", "show", "blame", "ls-files", "ls-tree", "rev-parse", "describe",
    "shortlog", "cat-file",
})
#: Characters that make bash expand a command name into something else.
_EXPANDING = re.compile(r"[*?\[\]{}~$`\\]")
#: Redirection operators that open a file for writing.
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&"})
#: Commands that can move the shell's cwd (directly, or by running shell code).
_CWD_CHANGERS = frozenset({"cd", "pushd", "popd", "eval", "source", ".", "builtin", "command"})
_SUBSTITUTION = re.compile(r"\$\(|`|<\(|>\(")
#: Characters that make bash turn one word into others (globs and braces; a tilde only
#: becomes a directory, never an option, and `HEAD~1` is no expansion at all).
_GLOBBING = re.compile(r"[*?\[\]{}]")
#: A quoted stretch of a word (its characters are taken literally).
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")


def _unquoted(text: str) -> str:
    """``text`` without its quoted stretches: what the shell may still expand."""
    return _QUOTED.sub("", text)
#: Inside ``${...}``: a parameter (name, positional or special), an optional subscript, and
#: the operator part after them.
_PARAMETER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[-*@#?$!])(\[[^\]]*\])?(.*)", re.S)
_LITERAL_SUBSCRIPT = re.compile(r"\[(?:\s*-?\d+\s*|@|\*)\]")
_LITERAL_SUBSTRING = re.compile(r":\s*-?\d+\s*(?::\s*-?\d+\s*)?")
#: A loop variable a restricted mode lets a ``for`` set: lowercase, so never one of the
#: variables bash or programs act on (those are uppercase, but for these two).
_LOOP_VARIABLE = re.compile(r"[a-z_][a-z0-9_]*")
_SPECIAL_LOWERCASE = frozenset({"histchars", "auto_resume"})
#: The prefix of Tether's own shell variables (``__tether_nonce``, ``__tether_cmd``,
#: ``__tether_c``: guardian/runtime/markers.py), which its command tracking reads.
_TETHER_PREFIX = "__tether"
#: A here-document delimiter bash unquotes (bashlex does not), and a body bash expands.
_DELIMITER_QUOTING = re.compile(r"['\"\\$]")
_BODY_EXPANDS = re.compile(r"[$`]")
#: ``{NAME}`` right before a redirection operator: bash stores the new descriptor in NAME.
_FD_VARIABLE = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
_EVALUATED = "evaluated_expansion"
#: Quoting inside an operator's word, which bash and bashlex read differently.
_OPERATOR_QUOTING = re.compile(r"['\"]")
#: A plain ``$name`` or special parameter (``$1``, ``$@``, ``$$``): it only substitutes.
_PLAIN_PARAMETER = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-])")


def expansion_rule(expansion: str) -> tuple[str, str] | None:
    """The rule the parameter expansion ``${expansion}`` breaks in a restricted mode and why:
    it assigns (``no_assignments``), or makes bash evaluate a value as code or arithmetic
    (``evaluated_expansion``). None: it only substitutes text."""
    if expansion.startswith("!"):
        return _EVALUATED, "an indirection `${!x}` expands the name in x, array subscripts included"
    body = expansion[1:] if expansion.startswith("#") and len(expansion) > 1 else expansion
    parts = _PARAMETER.fullmatch(body)
    if parts is None:
        return _EVALUATED, "an expansion the check cannot read"
    name, subscript, rest = parts.groups()
    if _OPERATOR_QUOTING.search(rest):
        # bash 5.2 and bashlex disagree on quotes inside `${x:-...}` (more so inside double
        # quotes): `echo "${x:-'}" '}" ; touch x ; echo "'"` ran touch, which bashlex read as
        # part of a string. Where the word ends cannot be trusted, so nothing after it can.
        return "unparsable", ("quotes inside an expansion's operator word (`${x:-'...'}`, "
                              "`${x:-\"...\"}`, `${x:-$'...'}`) are not read the way bash "
                              "reads them; leave them out or set the text another way")
    if rest.startswith(("=", ":=")):
        # `${PROMPT_COMMAND[1]=touch x}` sets it when unset, and bash runs it at the prompt.
        return "no_assignments", (f"`${{{name}{rest[:rest.index('=') + 1]}...}}` assigns "
                                  f"{name} when it is unset or empty, which can change what "
                                  "later commands run; use `${x:-...}`, which only substitutes")
    if subscript is not None and not _LITERAL_SUBSCRIPT.fullmatch(subscript):
        return _EVALUATED, "an array subscript is arithmetic, which bash evaluates (values included)"
    if rest.startswith("@"):
        return _EVALUATED, "a transformation `${x@...}` (`@P` runs the commands in the value)"
    if rest.startswith(":") and rest[1:2] not in ("-", "+", "?") \
            and not _LITERAL_SUBSTRING.fullmatch(rest):
        return _EVALUATED, "a substring offset or length is arithmetic, which bash evaluates"
    if "$" in _PLAIN_PARAMETER.sub("", rest):
        # bashlex does not parse the operator's word; bash expands it: `${x:-$[y]}`
        # evaluates y, `${x:-${y@P}}` runs what y holds. `$name` there only substitutes.
        return _EVALUATED, ("an expansion other than `$name` inside an operator's word "
                            "(`${x:-$[...]}`, `${x:-${...}}`) cannot be checked")
    return None


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: the segment (as typed), the rule's name and what broke it."""

    segment: str
    rule: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"segment": self.segment, "rule": self.rule, "detail": self.detail}


def check_command(mode: ModeSpec, command: str, *, cwd: str, workspace_root: str) -> None:
    """Refuse (``mode_denied``, nothing typed) a command line that ``mode`` does not allow."""
    violations = violations_of(mode, command, cwd=cwd, workspace_root=workspace_root)
    if violations:
        raise denied(mode, violations)


def denied(mode: ModeSpec, violations: list[Violation]) -> TetherError:
    """The ``mode_denied`` error naming each refused segment and its rule."""
    reasons = "; ".join(
        f"segment `{_short(v.segment)}`: rule {v.rule}: {v.detail}" for v in violations[:5]
    )
    more = f" (and {len(violations) - 5} more)" if len(violations) > 5 else ""
    return TetherError(
        ErrorCode.MODE_DENIED,
        f"mode {mode.name} refused this; nothing was typed. {reasons}{more}. Change the command, "
        "or change the mode with Initialize type=change_mode.",
        {"mode": mode.name, "violations": [v.to_dict() for v in violations[:32]],
         "input_sent": False},
    )


def violations_of(mode: ModeSpec, command: str, *, cwd: str, workspace_root: str) -> list[Violation]:
    """Every rule ``command`` breaks under ``mode`` (empty: it may run)."""
    if mode.name == "wcgw":
        return []
    # Imported here: bashlex builds its parse tables on import (~0.1 s), and only restricted
    # modes need it, so a wcgw front-end starts without paying for it.
    import bashlex  # type: ignore[import-untyped]

    checker = _Checker(mode, command, cwd=cwd, workspace_root=workspace_root)
    try:
        for tree in bashlex.parse(command):
            checker.visit(tree)
        checker.finish()
    except Exception as exc:  # bashlex raises several types: its ParsingError, and others for
        # constructs its grammar does not cover; a restricted mode refuses all of them alike.
        return [Violation(command, "unparsable",
                          f"the shell parser cannot read this ({_first_line(exc)}); a restricted "
                          "mode runs only what it can check")]
    return checker.violations


class _Checker:
    def __init__(self, mode: ModeSpec, source: str, *, cwd: str, workspace_root: str) -> None:
        self.mode = mode
        self.source = source
        self.cwd = cwd
        self.workspace_root = workspace_root
        self.violations: list[Violation] = []
        # Relative write targets are placed against the shell's cwd, which a `cd` earlier in
        # the same line would move: such a pair is refused rather than guessed.
        self.cwd_changed = False
        self.relative_writes: list[Any] = []
        config = mode.code_writer
        self.allowed: frozenset[str] | None = None  # None: any command name
        self.globs: list[re.Pattern[str]] | None = None  # None: any file
        if mode.name == "architect":
            self.allowed = READ_ONLY_COMMANDS
            self.globs = []
        elif config is not None:
            if config.allowed_commands != "all":
                self.allowed = frozenset(config.allowed_commands)
            if config.allowed_globs != "all":
                self.globs = [glob_regex(g, workspace_root) for g in config.allowed_globs]

    def text(self, node: Any) -> str:
        start, end = node.pos
        return str(self.source[start:end])

    def finish(self) -> None:
        if self.cwd_changed:
            for node in self.relative_writes:
                self.refuse(node, "allowed_globs",
                            "a relative write target after a change of directory in the same "
                            "line cannot be placed; use an absolute path")

    def refuse(self, node: Any, rule: str, detail: str) -> None:
        self.violations.append(Violation(self.text(node), rule, detail))

    # -- the walk ------------------------------------------------------------------------

    def visit(self, node: Any) -> None:
        kind = node.kind
        if kind == "command":
            self.command(node)
        elif kind == "redirect":
            self.redirect(node)
        elif kind == "parameter":
            value = getattr(node, "value", "") or ""
            if _SUBSTITUTION.search(value):
                self.refuse(node, "unchecked_substitution",
                            "a command inside a parameter expansion cannot be checked")
            elif self.allowed is not None and (broken := expansion_rule(value)) is not None:
                self.refuse(node, *broken)
        elif kind == "word" and self.allowed is not None:
            self.word(node)
        elif kind == "for":
            self.loop_variable(node)
        elif kind == "function" and self.allowed is not None:
            name = next((p.word for p in node.parts if p.kind == "word"), "?")
            self.refuse(node, "no_functions",
                        f"a function `{name}` can change what a command name runs later")
        elif kind in ("commandsubstitution", "processsubstitution"):
            self.visit(node.command)
        for attr in ("parts", "list", "redirects"):
            if kind == "command" and attr == "parts":
                continue  # command() walked them
            for child in getattr(node, attr, None) or []:
                self.visit(child)

    def word(self, node: Any) -> None:
        text = self.text(node)
        if "\n" in _unquoted(text):
            # A word cannot hold an unquoted newline unless the parser lost track of where a
            # substitution ends (bashlex reads `$(echo a#b) ; touch x` + newline + `)` as one
            # word, bash runs `touch x`): what it swallowed was never checked.
            self.refuse(node, "unparsable",
                        "a word that runs across lines is not read the way bash reads it; "
                        "write the command on one line")
        if "$[" in text:
            # bashlex refuses `$[ ]` where it sees one, but not inside `${x:-...}`, which it
            # does not parse: `${x:-$[y]}` evaluates y, and y='a[$(touch x)]' runs touch.
            self.refuse(node, _EVALUATED,
                        "`$[...]` is arithmetic, which bash evaluates (values included); "
                        "write the number, or leave the computation out")

    def loop_variable(self, node: Any) -> None:
        """A ``for`` sets its variable as an assignment would: only a plain lowercase name
        (an uppercase one could be PROMPT_COMMAND, PATH, IFS, BASH_ENV, ...)."""
        words = [p for p in node.parts if p.kind == "word"]
        if not words or self.allowed is None:  # any command may run: so may any assignment
            return
        name = words[0].word
        if name.startswith(_TETHER_PREFIX):
            # `for __tether_nonce in x` changed the nonce of the end markers: the command
            # never ended for Tether.
            self.refuse(node, "no_assignments",
                        f"a loop over `{name}` overwrites a variable of Tether's command "
                        "tracking; name the loop variable another way")
        elif not _LOOP_VARIABLE.fullmatch(name) or name in _SPECIAL_LOWERCASE:
            self.refuse(node, "no_assignments",
                        f"a loop over `{name}` sets it, and it can change what later commands "
                        "run; name the loop variable in lowercase")

    def command(self, node: Any) -> None:
        words = [p for p in node.parts if p.kind == "word"]
        for part in node.parts:
            if part.kind == "assignment" and self.allowed is not None:
                self.refuse(node, "no_assignments",
                            f"`{part.word.split('=', 1)[0]}=` can change what later commands run")
            elif (part.kind == "word" and self.allowed is not None
                  and _FD_VARIABLE.fullmatch(self.text(part))
                  and self.source[part.pos[1]:part.pos[1] + 1] in ("<", ">")):
                # `{NAME}>file` opens a descriptor and stores its number in NAME (bashlex reads
                # `{NAME}` as a word): `echo {PROMPT_COMMAND}>/dev/null` sets PROMPT_COMMAND.
                self.refuse(node, "no_assignments",
                            f"`{self.text(part)}` before a redirection sets {self.text(part)[1:-1]}")
            self.visit(part)
        if not words:
            return
        name = words[0]
        if name.word in _CWD_CHANGERS or name.parts or _EXPANDING.search(self.text(name)):
            self.cwd_changed = True
        if self.allowed is None:
            return
        if name.parts or _EXPANDING.search(self.text(name)):
            self.refuse(node, "literal_command",
                        f"the command name `{self.text(name)}` is expanded by the shell; "
                        "name the command literally")
            return
        if name.word not in self.allowed:
            if self.mode.name == "architect":
                self.refuse(node, "read_only_commands",
                            f"`{name.word}` is not one of the read-only commands architect mode "
                            "runs")
            else:
                listed = ", ".join(sorted(self.allowed)) or "(none)"
                self.refuse(node, "allowed_commands",
                            f"`{name.word}` is not in allowed_commands [{listed}]")
            return
        if self.mode.name == "architect":
            self.read_only_arguments(node, name.word, words[1:])

    def read_only_arguments(self, node: Any, name: str, words: list[Any]) -> None:
        if name in READ_ONLY_REFUSED_OPTIONS or name == "git":
            # Options are checked as typed: an argument the shell turns into others ($x,
            # *, {a,b}) could become one of the refused ones (`for x in -delete; do find . $x`).
            for word in words:
                if word.parts or _GLOBBING.search(_unquoted(self.text(word))):
                    self.refuse(node, "read_only_options",
                                f"`{name}` takes only literal arguments in architect mode, and "
                                f"`{self.text(word)}` is expanded by the shell; quote it or "
                                "spell it out")
                    return
        args = [word.word for word in words]
        if name == "git" and (not args or args[0] not in READ_ONLY_GIT):
            sub = args[0] if args else "(none)"
            self.refuse(node, "read_only_options",
                        f"git {sub}: architect mode runs only git "
                        f"{', '.join(sorted(READ_ONLY_GIT))}, with no options before the "
                        "subcommand")
            return
        for arg in args:
            option = arg.split("=", 1)[0]
            for refused in READ_ONLY_REFUSED_OPTIONS.get(name, ()):
                # Long options may be abbreviated (`--outp` for `--output`, where a parser
                # takes unique prefixes): a prefix of a refused one is refused too.
                abbreviated = (option.startswith("--") and len(option) > 3
                               and refused.startswith(option))
                if arg == refused or arg.startswith(refused) or abbreviated:
                    self.refuse(node, "read_only_options",
                                f"`{name} {refused}` can write files or run programs")
                    return

    def here_document(self, node: Any, body: str) -> bool:
        """Check a here-document's delimiter and body; False when the delimiter is refused
        (then bashlex's idea of where the document ends cannot be trusted either)."""
        if self.allowed is not None:
            delimiter = self.text(node.output) if hasattr(node.output, "pos") else ""
            if not delimiter or _DELIMITER_QUOTING.search(delimiter):
                # bashlex keeps a quoted or escaped delimiter's quotes, bash removes them:
                # bash ends the document sooner and runs the lines bashlex took for its text.
                self.refuse(node, "unparsable",
                            "a here-document delimiter with quotes, a backslash or `$` is not "
                            "read the way bash reads it; use a plain word")
                return False
        if _SUBSTITUTION.search(body):
            self.refuse(node, "unchecked_substitution",
                        "a here-document that runs commands cannot be checked")
        elif self.allowed is not None and _BODY_EXPANDS.search(body):
            # Bash expands an unquoted here-document's body, and nothing in it is parsed
            # here: every rule on expansions (${x@P}, subscripts, offsets) would be skipped.
            self.refuse(node, "evaluated_expansion",
                        "a here-document whose body expands `$` cannot be checked; write the "
                        "text without `$` or backticks")
        return True

    def redirect(self, node: Any) -> None:
        heredoc = getattr(node, "heredoc", None)
        if heredoc is not None and not self.here_document(node, heredoc.value or ""):
            return
        target = node.output
        if not hasattr(target, "kind"):
            return  # fd duplication or closing: 2>&1, 1>&-
        self.visit(target)  # substitutions in the target run too
        if node.type not in _WRITE_REDIRECTS or target.kind != "word":
            return
        if self.globs is None:
            return
        literal = not target.parts and not _EXPANDING.search(self.text(target))
        if literal and target.word in HARMLESS_TARGETS:
            return
        if self.mode.name == "architect":
            self.refuse(node, "no_writes", "architect mode writes no files; only /dev/null")
            return
        if not literal:
            self.refuse(node, "allowed_globs",
                        f"the write target `{self.text(target)}` is expanded by the shell; name "
                        "the file literally")
            return
        if not target.word.startswith("/"):
            self.relative_writes.append(node)
        # The same rule as EditFiles' (shared/write_rules): symlinks resolved, no .git.
        detail = write_refusal(os.path.join(self.cwd, target.word), self.globs,
                               shown=target.word)
        if detail is not None:
            self.refuse(node, "allowed_globs", detail)


def _short(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return _short(text[0] if text else type(exc).__name__, 80)
