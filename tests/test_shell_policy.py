"""Restricted modes decide on the parsed command line (bashlex), segment by segment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tether.frontend.policy.shell_policy import check_command, violations_of
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import ModeSpec

WS = "/w"
CODE_WRITER = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
    "allowed_commands": ["ls", "cat", "git"], "allowed_globs": ["src/**", "*.md"]}})
ARCHITECT = ModeSpec(name="architect")


def refusals(mode: ModeSpec, command: str, cwd: str = WS) -> list[tuple[str, str]]:
    return [(v.segment, v.rule) for v in violations_of(mode, command, cwd=cwd, workspace_root=WS)]


def rules(mode: ModeSpec, command: str, cwd: str = WS) -> list[str]:
    return [rule for _, rule in refusals(mode, command, cwd)]


def bash_leaves(command: str, where: Path, *, interactive: bool = False) -> list[str]:
    """The files real bash leaves in the new directory ``where`` after running ``command``
    (``interactive``: typed into ``bash -i``, which also runs PROMPT_COMMAND at its next
    prompt, as Tether's shell does). The proof that a refused line does what the report says."""
    where.mkdir()
    argv = ["bash", "--norc", "--noprofile", *(["-i"] if interactive else ["-c", command])]
    subprocess.run(argv, cwd=where, input=f"{command}\n" if interactive else None,
                   capture_output=True, text=True, timeout=20,
                   env={"PATH": os.environ["PATH"], "HOME": str(where.parent), "HISTFILE": ""})
    return sorted(os.listdir(where))


@pytest.mark.parametrize("command", [
    "ls | cat", "ls -la && cat README.md", "git status; git log -1", "(ls; cat x) | cat",
    "ls 2>/dev/null", "ls 2>&1 | cat", "ls > src/a/b.py", "cat x > notes.md", "ls 1>&-",
    '"ls" -l', "if ls; then cat x; fi", "for f in a b; do cat $f; done", "ls # $(rm x)",
])
def test_code_writer_lets_allowed_lines_through(command: str) -> None:
    assert refusals(CODE_WRITER, command) == []


@pytest.mark.parametrize(("command", "segment", "rule"), [
    ("ls; rm x", "rm x", "allowed_commands"),
    ("ls && $(rm x)", "rm x", "allowed_commands"),
    ("ls || rm x", "rm x", "allowed_commands"),
    ("echo `rm x`", "rm x", "allowed_commands"),
    ("cat `rm x`", "rm x", "allowed_commands"),
    ("cat <(rm x)", "rm x", "allowed_commands"),
    ("cat >(rm x)", "rm x", "allowed_commands"),
    ("ls | sh", "sh", "allowed_commands"),
    ("(rm x)", "rm x", "allowed_commands"),
    ("{ rm x; }", "rm x", "allowed_commands"),
    ("if ls; then rm x; fi", "rm x", "allowed_commands"),
    ("for f in $(rm x); do ls; done", "rm x", "allowed_commands"),
    ("f() { rm x; }", "rm x", "allowed_commands"),
    ("ls\nrm x", "rm x", "allowed_commands"),
    ("! rm x", "rm x", "allowed_commands"),
    ("ls > out.txt", "> out.txt", "allowed_globs"),
    ("ls > src/../out.txt", "> src/../out.txt", "allowed_globs"),
    ("ls > $HOME/x.md", "> $HOME/x.md", "allowed_globs"),
    ("cd src && ls > a.md", "> a.md", "allowed_globs"),
    ("FOO=1 ls", "FOO=1 ls", "no_assignments"),
    ("PROMPT_COMMAND='rm x'", "PROMPT_COMMAND='rm x'", "no_assignments"),
    ("$CMD x", "$CMD x", "literal_command"),
    ("r? x", "r? x", "literal_command"),
    ("{rm,x}", "{rm,x}", "literal_command"),
    ("cat ${x:-$(rm y)}", "${x:-$(rm y)}", "unchecked_substitution"),
    ("cat <<EOF\n$(rm x)\nEOF\n", "<<EOF\n$(rm x)\nEOF", "unchecked_substitution"),
    ("[[ -f x ]] && rm x", "[[ -f x ]] && rm x", "unparsable"),
    ("case a in a) rm x;; esac", "case a in a) rm x;; esac", "unparsable"),
    ("echo $((1 + $(rm x)))", "echo $((1 + $(rm x)))", "unparsable"),
    ("ls 'unterminated", "ls 'unterminated", "unparsable"),
])
def test_code_writer_refuses_naming_segment_and_rule(command: str, segment: str, rule: str) -> None:
    assert (segment, rule) in refusals(CODE_WRITER, command)


def test_a_symlink_inside_an_allowed_directory_does_not_lead_writes_out(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "out").symlink_to("/tmp")
    mode = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": ["src/**"]}})
    found = violations_of(mode, "echo > src/out/x", cwd=str(tmp_path), workspace_root=str(tmp_path))
    assert [v.rule for v in found] == ["allowed_globs"]
    assert violations_of(mode, "echo > src/y", cwd=str(tmp_path), workspace_root=str(tmp_path)) == []


def test_all_means_no_limit_on_that_axis() -> None:
    anything = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": ["*.md"]}})
    assert refusals(anything, "rm -rf build; FOO=1 make") == []
    assert refusals(anything, "make > log.txt") == [("> log.txt", "allowed_globs")]


@pytest.mark.parametrize("command", [
    "ls -la", "cat a | grep b | wc -l", "git log --oneline -5", "git diff HEAD~1",
    "find . -name '*.py'", "ls 2>/dev/null", "head -5 x 2>&1", "cd sub && ls",
])
def test_architect_runs_read_only_lines(command: str) -> None:
    assert refusals(ARCHITECT, command) == []


@pytest.mark.parametrize(("command", "segment", "rule"), [
    ("ls > out.txt", "> out.txt", "no_writes"),
    ("ls >> out.txt", ">> out.txt", "no_writes"),
    ("ls &> out.txt", "&> out.txt", "no_writes"),
    ("ls >| out.txt", ">| out.txt", "no_writes"),
    ("{ ls; } > out.txt", "> out.txt", "no_writes"),
    ("echo hi | tee out.txt", "tee out.txt", "read_only_commands"),
    ("rm x", "rm x", "read_only_commands"),
    ("sed -i s/a/b/ x", "sed -i s/a/b/ x", "read_only_commands"),
    ("find . -delete", "find . -delete", "read_only_options"),
    ("find . -exec rm {} +", "find . -exec rm {} +", "read_only_options"),
    ("git commit -m x", "git commit -m x", "read_only_options"),
    ("git -c core.pager=sh log", "git -c core.pager=sh log", "read_only_options"),
    ("git log --output=x", "git log --output=x", "read_only_options"),
])
def test_architect_refuses_writes(command: str, segment: str, rule: str) -> None:
    assert (segment, rule) in refusals(ARCHITECT, command)


def test_wcgw_checks_nothing() -> None:
    assert refusals(ModeSpec(), "[[ -f x ]] && rm -rf / > /etc/passwd") == []


def test_the_error_names_mode_segment_and_rule_and_says_nothing_was_typed() -> None:
    with pytest.raises(TetherError) as caught:
        check_command(CODE_WRITER, "ls; rm x", cwd=WS, workspace_root=WS)
    err = caught.value
    assert err.code == ErrorCode.MODE_DENIED
    assert "code_writer" in err.message and "`rm x`" in err.message
    assert "allowed_commands" in err.message and "nothing was typed" in err.message
    assert err.data["violations"] == [{"segment": "rm x", "rule": "allowed_commands",
                                       "detail": "`rm` is not in allowed_commands [cat, git, ls]"}]
    assert err.data["input_sent"] is False


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize(("command", "rule"), [
    # The reviewer's bypasses: a loop sets x, then an expansion evaluates it as code.
    ("for x in '$(touch p)'; do ls ${x@P}; done", "evaluated_expansion"),
    ("for x in 'a[$(touch p)]'; do ls ${HOME:x}; done", "evaluated_expansion"),
    ('ls "${x@P}"', "evaluated_expansion"),  # x set before the mode changed, say
    ("ls ${HOME:x:1}", "evaluated_expansion"),
    ("ls ${a[i]}", "evaluated_expansion"),
    ("ls ${!x}", "evaluated_expansion"),
    ("ls ${x:-${y@P}}", "evaluated_expansion"),
    ("for PROMPT_COMMAND in x; do ls; done", "no_assignments"),
    ("for PATH in /tmp; do ls; done", "no_assignments"),
])
def test_expansions_that_evaluate_values_are_refused(mode: ModeSpec, command: str,
                                                      rule: str) -> None:
    assert rule in [r for _, r in refusals(mode, command)], refusals(mode, command)


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize("command", [
    "ls ${HOME:1:2} ${HOME: -1} ${a[1]} ${a[@]} ${#x} ${#} ${x:-d} ${x/a/b} $1 ${10} ${#a[@]}",
    "for f in a b; do ls $f; done",
])
def test_expansions_that_only_substitute_pass(mode: ModeSpec, command: str) -> None:
    assert refusals(mode, command) == []


def test_architect_refuses_test_v_which_evaluates_a_subscript() -> None:
    assert ("test -v 'a[$(touch p)]'", "read_only_options") in refusals(
        ARCHITECT, "test -v 'a[$(touch p)]'")
    assert refusals(ARCHITECT, "[ -v x ]")  # (`[` as a name is refused before that)


@pytest.mark.parametrize("command", [
    "for x in -delete; do find . $x; done",  # $x becomes the refused -delete
    "find . -{delete,name}",  # so does a brace expansion
    "find . -name *.py",  # a glob could match a file named -delete
    "git log $opt",  # --output=FILE writes
    'git log "$range"',
])
def test_architect_takes_only_literal_arguments_for_find_and_git(command: str) -> None:
    assert [rule for _, rule in refusals(ARCHITECT, command)] == ["read_only_options"]


@pytest.mark.parametrize("command", [
    "find . -name '*.py'", 'find . -name "*.py" -type f', "git log -1", "ls $x *", "cat ${f}",
])
def test_architect_lets_literal_find_and_git_and_expanding_reads_through(command: str) -> None:
    assert refusals(ARCHITECT, command) == []


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize(("command", "rule"), [
    # A here-document's body is expanded by bash and parsed by nobody here.
    ("for x in '$(touch p)'; do cat <<E; done\n${x@P}\nE", "evaluated_expansion"),
    ("cat <<E\n${a[x]}\nE", "evaluated_expansion"),
    # /dev/stdout reopens whatever fd 1 is: here a file opened for reading.
    ("ls 1<a.txt >/dev/stdout", None),
    ("{ ls >/dev/stdout; } 3<a.txt 1<&3", None),
    ("ls >/dev/stderr", None),
    # A function changes what an allowed name runs from then on.
    ("ls() { cat a.txt; }", "no_functions"),
])
def test_heredocs_reopened_outputs_and_functions_are_refused(
        mode: ModeSpec, command: str, rule: str | None) -> None:
    rules = [r for _, r in refusals(mode, command)]
    assert rules and (rule is None or rule in rules), rules


def test_plain_heredocs_and_dev_null_still_pass() -> None:
    for mode in (ARCHITECT, CODE_WRITER):
        assert refusals(mode, "cat <<E\nplain text\nE") == []
        assert refusals(mode, "ls 2>/dev/null") == []


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize("delimiter", ["'E'", '"E"', "E'F'", "'E'\"F\"", "\\E", "E\\F", '\\"E',
                                       '""E'])
def test_a_quoted_heredoc_delimiter_is_refused(mode: ModeSpec, delimiter: str) -> None:
    # bash ends this document at `E`/`EF` and runs the next line; bashlex read it as text.
    command = f"cat <<{delimiter}\nEF\nE\nrm -f victim\n{delimiter}\n"
    assert "unparsable" in [rule for _, rule in refusals(mode, command)]


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize("command", [
    # bashlex takes `#b) ; touch ...` for a comment inside $( ) and the `)` on the next line
    # for its end; bash ends $( ) at the first `)` and runs touch.
    "echo $(echo a#b) ; touch /tmp/x\n)",
    "echo $(echo a#b) ; touch /tmp/x #\n)",
])
def test_a_word_the_parser_stretched_across_lines_is_refused(mode: ModeSpec, command: str) -> None:
    assert "unparsable" in [rule for _, rule in refusals(mode, command)]


def test_abbreviated_refused_git_options_are_refused() -> None:
    assert [r for _, r in refusals(ARCHITECT, "git log --outp=f")] == ["read_only_options"]
    assert refusals(ARCHITECT, "git log --oneline") == []
    assert refusals(ARCHITECT, "ls\nls") == [] and refusals(ARCHITECT, "echo 'a\nb'") == []


@pytest.mark.parametrize("mode", [ARCHITECT, CODE_WRITER], ids=["architect", "code_writer"])
@pytest.mark.parametrize("command", [
    "ls {PROMPT_COMMAND}>/dev/null", "ls {PATH}>/dev/null; ls", "ls {HOME}</dev/null",
])
def test_a_descriptor_variable_redirection_is_an_assignment(mode: ModeSpec, command: str) -> None:
    # `{NAME}>file` stores the new descriptor's number in NAME (PROMPT_COMMAND=11).
    assert "no_assignments" in [rule for _, rule in refusals(mode, command)]
    assert refusals(mode, "ls {a} >/dev/null {x}") == []  # a brace word with a space is text


@pytest.mark.parametrize("command", [
    "echo ${PROMPT_COMMAND[1]=touch made}",
    'echo "${PROMPT_COMMAND=touch made}"',
    "ls ${PROMPT_COMMAND:=touch made}",
    "echo ${PROMPT_COMMAND[0]:=touch made}",
])
def test_an_expansion_that_assigns_is_an_assignment(command: str, tmp_path: Path) -> None:
    # `${x=value}` and `${x:=value}` set x (here PROMPT_COMMAND, which bash runs at the prompt).
    assert bash_leaves(command, tmp_path / "bash", interactive=True) == ["made"]
    for mode in (ARCHITECT, CODE_WRITER):
        assert "no_assignments" in rules(mode, command), (mode.name, refusals(mode, command))
    assert rules(ARCHITECT, "echo ${x:-a=b} ${x/a=/b} ${x:+=}") == []  # `=` only as text


#: A loop value that runs `touch made` when bash evaluates it as arithmetic.
EVALUATES_TO_TOUCH = "for y in 'a[$(touch made)]'; do"


@pytest.mark.parametrize("command", [
    f"{EVALUATES_TO_TOUCH} echo ${{x:-$[y]}}; done",
    f'{EVALUATES_TO_TOUCH} echo "${{x-$[y]}}"; done',
    f"for x in 1; do {EVALUATES_TO_TOUCH} echo ${{x/#/$[y]}}; done; done",
    f"{EVALUATES_TO_TOUCH} echo ${{x:-${{y:+$[y]}}}}; done",
])
def test_arithmetic_inside_an_operator_word_is_refused(command: str, tmp_path: Path) -> None:
    # bashlex refuses `$[y]` on its own, but does not parse inside `${x:-...}`; bash does.
    assert bash_leaves(command, tmp_path / "bash") == ["made"]
    for mode in (ARCHITECT, CODE_WRITER):
        assert "evaluated_expansion" in rules(mode, command), (mode.name, refusals(mode, command))


def test_only_plain_parameters_pass_inside_an_operator_word() -> None:
    assert rules(ARCHITECT, "echo ${x:-$HOME/a} ${x:-$1} ${x:+$@} ${x/a/$y} ${x:-$$}") == []
    for word in ("${x:-$}", "'$[1]'", "${x:-$$$[1]}"):
        assert "evaluated_expansion" in rules(ARCHITECT, f"echo {word}"), word


@pytest.mark.parametrize("command", [
    *(f'''echo "${{x{op}'}}" '}}" ; touch made ; echo "'" #"''' for op in (":-", "-", ":+", "+",
                                                                       ":=", "=")),
    *(f'''echo "${{x{op}$'}}" '}}" ; touch made ; echo "'" #"''' for op in (":-", ":+")),
])
def test_quotes_inside_an_operator_word_are_refused(command: str, tmp_path: Path) -> None:
    # bash 5.2 runs `touch made`; bashlex reads it as part of the string `'}" ; touch ... "'`.
    assert bash_leaves(command, tmp_path / "bash") == ["made"]
    for mode in (ARCHITECT, CODE_WRITER):
        assert "unparsable" in rules(mode, command), (mode.name, refusals(mode, command))
    for fine in ("echo \"${x:-a}\" '}' \"b\"", "echo ${x:-a} \"'\""):
        assert rules(ARCHITECT, fine) == [], fine
    assert "unparsable" in rules(ARCHITECT, 'echo ${x:-$"a"}')


@pytest.mark.parametrize("name", ["__tether_nonce", "__tether_cmd", "__tether_c", "__tether_x"])
def test_a_loop_over_tethers_own_variables_is_refused(name: str, tmp_path: Path) -> None:
    # The loop leaves its last value in the variable: Tether's end markers then carry another
    # nonce (or its command flag is lost), and the command never ends for Tether.
    command = f'__tether_nonce=n1; for {name} in x; do true; done; echo "${name}" > seen'
    assert bash_leaves(command, tmp_path / "bash") == ["seen"]
    assert (tmp_path / "bash" / "seen").read_text() == "x\n"
    loop = f"for {name} in x; do ls; done"
    for mode in (ARCHITECT, CODE_WRITER):
        assert rules(mode, loop) == ["no_assignments"], (mode.name, refusals(mode, loop))
    assert rules(ARCHITECT, "for tether_x in a; do ls; done") == []


@pytest.mark.parametrize("target", [
    "/proc/self/cwd/NOTES.md", "/proc/thread-self/cwd/NOTES.md", "/dev/fd/../cwd/NOTES.md",
    "{ws}/src/here/NOTES.md",  # a symlink to /proc/self/cwd inside an allowed directory
])
def test_a_write_target_that_depends_on_the_process_is_refused(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "here").symlink_to("/proc/self/cwd")
    command = f"echo pwned > {target.format(ws=ws)}"
    # bash opens it in the shell, whose directory is `outside`: the file lands there.
    assert bash_leaves(command, outside) == ["NOTES.md"] and not (ws / "NOTES.md").exists()
    monkeypatch.chdir(ws)  # the checker's own /proc/self/cwd: the workspace, where *.md may go
    mode = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": ["*.md", "src/**"]}})
    found = violations_of(mode, command, cwd=str(outside), workspace_root=str(ws))
    assert [v.rule for v in found] == ["allowed_globs"], found
    assert "/proc or /dev" in found[0].detail


def test_proc_and_dev_are_refused_even_under_a_glob_that_covers_them() -> None:
    anywhere = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": ["/**"]}})
    for target in ("/dev/stdout", "/dev/stderr", "/proc/self/fd/1", "/dev/tcp/127.0.0.1/9",
                   "/dev/shm/x", "/tmp/../proc/self/environ"):
        assert rules(anywhere, f"echo > {target}") == ["allowed_globs"], target
    assert rules(anywhere, "echo > /dev/null; echo > /tmp/x; echo > /dev/../tmp/y") == []


def test_write_globs_never_match_inside_git(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    config = "echo '[core]' >> .git/config; echo 'fsmonitor = touch made; false' >> .git/config"
    # git runs the programs its config names: this one at `git status` (core.pager, at a
    # `git log` on a terminal, is the same).
    assert "made" in bash_leaves(f"git init -q; {config}; git status", ws)
    (ws / "src").mkdir()
    (ws / "src" / "cfg").symlink_to("../.git/config")
    (ws / "src" / "repo").symlink_to("../.git")
    everything = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": ["**", ".git/**"]}})

    def refused(command: str) -> list[str]:
        return [v.rule for v in violations_of(everything, command, cwd=str(ws),
                                              workspace_root=str(ws))]

    for target in (".git/config", ".git/hooks/pre-commit", ".git", "sub/.git/config",
                   "src/cfg", "src/repo/config", f"{ws}/.git/info/../config"):
        assert refused(f"echo x >> {target}") == ["allowed_globs"], target
    assert refused(config) == ["allowed_globs", "allowed_globs"]
    assert refused("echo x > .gitignore; echo x > src/a.git; echo > git/config") == []
    anything = ModeSpec.model_validate({"name": "code_writer", "code_writer": {
        "allowed_commands": "all", "allowed_globs": "all"}})
    assert violations_of(anything, config, cwd=str(ws), workspace_root=str(ws)) == []
