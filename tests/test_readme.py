"""README.md runs as written: its first session through a real ``tether serve`` over stdio,
and every ``./scripts/...`` and ``tether ...`` command line it shows.

The session's code blocks are lines ``→ Tool {json arguments}`` and ``← {json reply}``. A
reply is shown trimmed: a bare ``…`` stands for the members (or list items) left out, and a
``…`` inside a string for text left out. An object without a bare ``…`` must show every key
of the real reply, and a list without one every item. ``"<name>"`` is an id Tether chose: the
first reply that shows it binds it, later arguments and replies use it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import REPO, stdio_params
from tether.shared.config import Config

README = REPO / "README.md"
#: The workspace the README's session names; the test's own stands in for it.
README_WORKSPACE = "/home/you/project"
#: Stands in for a bare ``…`` once parsed: a key in an object, an item in a list.
TRIMMED = "\x00trimmed"
PLACEHOLDER = re.compile(r"<([a-z_]+)>")


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)


def session_calls(text: str) -> list[tuple[str, str, str]]:
    """``(tool, arguments text, reply text)`` of every call in the README, in order."""
    calls: list[tuple[str, str, str]] = []
    for block in code_blocks(text):
        if not block.startswith("→ "):
            continue
        for chunk in re.split(r"^→ ", block, flags=re.M)[1:]:
            call, _, reply = chunk.partition("\n← ")
            tool, _, args = call.partition(" ")
            assert reply, f"a call to {tool} in README.md has no reply under it"
            calls.append((tool, args, reply))
    return calls


def parse_shown(text: str) -> Any:
    """A reply as shown: JSON in which a bare ``…`` marks what was trimmed."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            stack.pop()
        elif ch == "…":
            marker = json.dumps(TRIMMED)
            out.append(f"{marker}: null" if stack and stack[-1] == "{" else marker)
            continue
        out.append(ch)
    return json.loads("".join(out))


def substitute(value: Any, bound: dict[str, str], workspace: str) -> Any:
    """Arguments as the test sends them: placeholders and the workspace replaced."""
    if isinstance(value, str):
        name = PLACEHOLDER.fullmatch(value)
        if name:
            assert name[1] in bound, f"{value} is used before a reply showed it"
            return bound[name[1]]
        return value.replace(README_WORKSPACE, workspace)
    if isinstance(value, list):
        return [substitute(v, bound, workspace) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, bound, workspace) for k, v in value.items()}
    return value


def match(shown: Any, real: Any, bound: dict[str, str], workspace: str, where: str) -> None:
    """Fail unless ``real`` is what ``shown`` shows (binding placeholders on the way)."""
    if isinstance(shown, dict):
        assert isinstance(real, dict), f"{where}: README shows an object, Tether sent {real!r}"
        keys = set(shown) - {TRIMMED}
        if TRIMMED not in shown:
            assert set(real) == keys, (f"{where}: README shows keys {sorted(keys)} with no '…', "
                                       f"Tether sent {sorted(real)}")
        for key in keys:
            assert key in real, f"{where}: README shows {key!r}, Tether sent {sorted(real)}"
            match(shown[key], real[key], bound, workspace, f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(real, list), f"{where}: README shows a list, Tether sent {real!r}"
        items = [item for item in shown if item != TRIMMED]
        if len(items) == len(shown):
            assert len(real) == len(items), f"{where}: README shows {shown!r}, Tether sent {real!r}"
        assert len(real) >= len(items), f"{where}: README shows {shown!r}, Tether sent {real!r}"
        for i, item in enumerate(items):
            match(item, real[i], bound, workspace, f"{where}[{i}]")
    elif isinstance(shown, str) and PLACEHOLDER.fullmatch(shown):
        name = shown[1:-1]
        assert isinstance(real, str) and real, f"{where}: expected an id for {shown}, got {real!r}"
        if name in bound:
            assert real == bound[name], f"{where}: {shown} was {bound[name]!r}, now {real!r}"
        bound[name] = real
    elif isinstance(shown, str) and "…" in shown:
        expected = shown.replace(README_WORKSPACE, workspace)
        pattern = ".*".join(re.escape(part) for part in expected.split("…"))
        assert isinstance(real, str) and re.fullmatch(pattern, real, re.S), (
            f"{where}: README shows {shown!r}, Tether sent {real!r}")
    elif isinstance(shown, str):
        expected = shown.replace(README_WORKSPACE, workspace)
        assert real == expected, f"{where}: README shows {shown!r}, Tether sent {real!r}"
    else:
        assert real == shown and type(real) is type(shown), (
            f"{where}: README shows {shown!r}, Tether sent {real!r}")


async def run_session(text: str, workspace: Path) -> int:
    """Run every call of the README's session; the number of calls run. A mismatch is
    raised after the client has closed (inside it, anyio would wrap it in a group)."""
    calls = session_calls(text)
    bound: dict[str, str] = {}
    failure: AssertionError | None = None
    async with Client(stdio_params()) as client:
        for number, (tool, args_text, reply_text) in enumerate(calls, start=1):
            args = substitute(json.loads(args_text), bound, str(workspace))
            result = await client.call_tool(tool, args)
            real = result.structured_content
            try:
                assert real is not None, f"call {number} ({tool}) has no structured content"
                match(parse_shown(reply_text), real, bound, str(workspace),
                      f"call {number} ({tool})")
            except AssertionError as error:
                failure = error
                break
    if failure is not None:
        raise failure
    return len(calls)


@pytest.mark.anyio
async def test_first_session_runs_as_written(tether_env: Config, workspace: Path) -> None:
    ran = await run_session(README.read_text(), workspace)
    assert ran >= 8  # Initialize, commands, Execution wait/read, an agent launched and prompted


@pytest.mark.anyio
@pytest.mark.parametrize(("shown", "wrong"), [
    ('"output": "hello\\n', '"output": "hullo\\n'),          # a value Tether does not send
    ('"exit_code": 0, "fired"', '"exit_code": 0, "exit": 1, "fired"'),  # a key it does not send
    ('"end": 24, "has_more": false, …}', '"end": 24, "has_more": false}'),  # trimmed, no "…"
])
async def test_a_wrong_readme_fails(tether_env: Config, workspace: Path, shown: str,
                                    wrong: str) -> None:
    """The check is not vacuous: a README showing a reply Tether does not give fails."""
    text = README.read_text()
    assert shown in text
    with pytest.raises(AssertionError):
        await run_session(text.replace(shown, wrong, 1), workspace)


def test_trimmed_replies_parse() -> None:
    shown = parse_shown('{"a": 1, "b": ["x", …], "s": "he…o", …}')
    assert shown == {"a": 1, "b": ["x", TRIMMED], "s": "he…o", TRIMMED: None}
    bound: dict[str, str] = {}
    match(shown, {"a": 1, "b": ["x", "y"], "s": "hello", "c": 2}, bound, "/w", "r")
    with pytest.raises(AssertionError):
        match(parse_shown('{"a": 1}'), {"a": 1, "c": 2}, bound, "/w", "r")  # no '…': whole
    with pytest.raises(AssertionError):
        match(parse_shown('["x"]'), ["x", "y"], bound, "/w", "r")


def command_lines(text: str) -> list[list[str]]:
    """Every ``./scripts/...`` and ``tether ...`` command line of the README's shell blocks."""
    found: list[list[str]] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and (words[0].startswith("./scripts/") or words[0] == "tether"):
                found.append(words)
    return found


def test_every_command_line_exists() -> None:
    lines = command_lines(README.read_text())
    assert any(w[0] == "./scripts/serve" for w in lines)
    assert any(w[0] == "./scripts/test" for w in lines)
    assert sum(w[0] == "tether" for w in lines) >= 5
    tether = Path(sys.executable).with_name("tether")
    for words in lines:
        if words[0].startswith("./scripts/"):
            script = REPO / words[0]
            assert script.is_file() and script.stat().st_mode & 0o111, f"{words[0]} missing"
            if words[0] != "./scripts/serve":
                continue
            words = ["tether", "serve", *words[1:]]  # scripts/serve runs `tether serve`
        # The subcommand (and sub-subcommand) with --help: it must exist, and every option
        # the README gives it must be one its help names.
        sub = words[1:2]
        if words[1] in ("guardians", "agents") and len(words) > 2 and words[2].isalpha():
            sub = words[1:3]
        helped = subprocess.run([str(tether), *sub, "--help"], capture_output=True,
                                text=True, timeout=60)
        assert helped.returncode == 0, f"{' '.join(words)}: {helped.stderr}"
        for word in words:
            if word.startswith("-"):
                assert word in helped.stdout, f"README: {' '.join(words)}: {word} is not an option"
