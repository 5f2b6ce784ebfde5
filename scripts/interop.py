"""Real agent CLIs against Tether, both ways (driven by ``scripts/interop``).

For each of Claude Code, Codex and OpenCode, pinned and installed from the npm registry into
a cache outside the checkout, against the scripted model APIs of ``interop_models``:

1. *Inside Tether*: the CLI runs as a managed agent (``Agent.launch`` with its provider's own
   command line; the guardian, and so the agent, inherits the program's environment from the
   driver's ``tether serve``). The driver answers its first-run dialogs, prompts it once
   through ``Agent.prompt`` and checks the receipt (and that the model saw the prompt exactly
   once, and a repeat typed nothing), has it ask for approval and denies it (the file it
   wanted to create must not exist), cancels a slow turn with ``Agent.cancel`` (which must be
   acknowledged), and exits it or closes it with ``Agent.close`` (no process may keep its environment
   stamp). At every checkpoint the screen is labelled by what the driver did (ground truth,
   from the screen text), recognition is compared with the label, the agent's state
   (``Agent.get``) must follow the recognition, and a screen not yet among the fixtures is
   saved: ``tests/fixtures/agents/<program>-<version>/NN_name.ansi`` (every byte the program
   wrote, from its start) with ``NN_name.json`` (the expected state, attention and rule) and
   ``NN_name.txt`` (the screen, for review). A screen is new when its key is
   (``screen_key``: the text without what changes from run to run by itself), so a run over
   unchanged programs adds no file. Then a fresh agent of the program takes three checks of
   turns (``turn_checks``; their screens are not saved): a cursor, a prompt not waited for
   and a fast turn, then a wait after the cursor reports the turn; a prompt sent with
   ``timeout_seconds: 0`` whose turn ended, then ``wait {prompt_id}`` is reached at once;
   cancel, then a prompt with ``replace_draft`` reaches the model exactly as sent.
2. *As Tether's MCP client*: ``claude -p --mcp-config``, ``codex exec`` and ``opencode run``
   with Tether configured as an MCP server; the scripted model makes the client call
   ``Initialize`` and a ``BashCommand`` and checks the output came back. The tool schemas the
   client handed to the model are compared with Tether's own.

Prints a summary per program and exits non-zero when a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interop_models

from tether.guardian.agents.recognize import ScreenView, recognize
from tether.guardian.history.journal import Journal
from tether.guardian.terminal.screen import TerminalScreen
from tether.shared.agent_states import from_recognition
from tether.shared.config import Config
from tether.shared.paths import guardian_paths

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "agents"
NODE_VERSION = "22.23.5"
PINS = {
    "claude": ("@anthropic-ai/claude-code", "2.1.332", "claude"),
    "codex": ("@openai/codex", "0.171.0", "codex"),
    "opencode": ("opencode-ai", "1.18.33", "opencode"),
}
COLS, ROWS = 120, 40
FAKE_ANTHROPIC_KEY = "sk-ant-api03-" + "fake" * 8 + "-AAAAAA"


# -- installing ------------------------------------------------------------------------------


def npm_install(prefix: Path, specs: list[str]) -> None:
    prefix.mkdir(parents=True, exist_ok=True)
    print(f"interop: npm install {' '.join(specs)} into {prefix}", flush=True)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
                    str(prefix), *specs], check=True, stdout=subprocess.DEVNULL)


def installed_version(prefix: Path, package: str) -> str | None:
    manifest = prefix / "node_modules" / package / "package.json"
    if not manifest.exists():
        return None
    return str(json.loads(manifest.read_text()).get("version"))


def install(cache: Path) -> dict[str, Path]:
    """Pinned Node and CLIs under ``cache``; returns the ``bin`` directories to put on PATH."""
    arch = {"x86_64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "x64")
    node_pkg = f"node-linux-{arch}"
    node_prefix = cache / f"node-{NODE_VERSION}"
    if installed_version(node_prefix, node_pkg) != NODE_VERSION:
        npm_install(node_prefix, [f"{node_pkg}@{NODE_VERSION}"])
    cli_prefix = cache / "cli"
    wanted = [f"{pkg}@{version}" for pkg, version, _ in PINS.values()
              if installed_version(cli_prefix, pkg) != version]
    if wanted:
        npm_install(cli_prefix, wanted)
    return {"node": node_prefix / "node_modules" / node_pkg / "bin",
            "cli": cli_prefix / "node_modules" / ".bin"}


# -- results ---------------------------------------------------------------------------------


@dataclass
class Report:
    program: str
    version: str
    states: list[str] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    client: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    screens: int = 0
    saved: bool = True
    new: int = 0
    agent_states: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.failures.append(what)
            print(f"  FAIL {self.program}: {what}", flush=True)
        return ok


# -- Tether through MCP ----------------------------------------------------------------------


class Tether:
    """One MCP client session with ``tether serve`` over stdio, and one thread."""

    def __init__(self, client: Client, session: dict[str, Any], config: Config) -> None:
        self.client = client
        self.session = session
        self.config = config

    async def call(self, tool: str, args: dict[str, Any], *, allow_error: bool = False) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        content = result.structured_content or {}
        if result.is_error and not allow_error:
            raise RuntimeError(f"{tool} failed: {content or result.content}")
        return content

    def scoped(self, **kw: Any) -> dict[str, Any]:
        return {"thread_id": self.session["thread_id"],
                "workspace_root": self.session["workspace_root"], **kw}

    async def bash(self, action: dict[str, Any], wait: float | None = None) -> dict[str, Any]:
        args = self.scoped(action_json=action)
        if wait is not None:
            args["wait_for_seconds"] = wait
        return dict((await self.call("BashCommand", args))["data"])

    async def screen(self, eid: str) -> dict[str, Any]:
        return dict((await self.bash({"type": "screen", "execution_id": eid}))["screen"])

    async def explain(self, eid: str) -> dict[str, Any]:
        data = await self.call("Execution", self.scoped(action={"type": "explain", "execution_id": eid}))
        return dict(data["data"]["recognition"])

    async def keys(self, eid: str, *keys: str) -> dict[str, Any]:
        return await self.bash({"type": "send_keys", "execution_id": eid, "keys": list(keys)}, wait=0.3)

    async def text(self, eid: str, text: str) -> dict[str, Any]:
        return await self.bash({"type": "send_text", "execution_id": eid, "text": text}, wait=0.3)

    async def agent(self, action: str, **kw: Any) -> dict[str, Any]:
        return await self.call("Agent", self.scoped(action=action, **kw), allow_error=True)

    async def launch(self, provider: str, argv: list[str] | None = None,
                     recognizer: str | None = None, title: str | None = None) -> str:
        """A managed agent (``Agent.launch``); its execution id."""
        args: dict[str, Any] = {"provider": provider, "rows": ROWS, "cols": COLS}
        if argv is not None:
            args["argv"] = argv
        if recognizer is not None:
            args["recognizer"] = recognizer
        if title is not None:
            args["title"] = title
        launched = await self.call("Agent", self.scoped(action="launch", **args))
        return str(launched["data"]["agent"]["execution_id"])

    async def agent_view(self, eid: str) -> dict[str, Any]:
        """The managed agent's record (``Agent.get``): agent_state, attention, status, ..."""
        return dict((await self.call("Agent", self.scoped(action="get", target=eid)))["data"]["agent"])

    def raw(self, eid: str) -> bytes:
        paths = guardian_paths(self.config, "local", self.session["workspace_root"])
        journal = Journal(paths.journals, eid)
        return journal.read(journal.start, journal.end - journal.start)


def replay(raw: bytes) -> tuple[str, str]:
    """Screen text and title after feeding ``raw`` to the guardian's emulator."""
    screen = TerminalScreen(COLS, ROWS)
    screen.feed(raw)
    snap = screen.snapshot()
    return snap.text, snap.title


# -- checkpoints: label, compare, save ------------------------------------------------------


# What changes on a screen from one run to the next by itself, over the same program doing the
# same thing: a screen differing from a saved one only in these is not new (no fixture added).
_RUN_DIR = re.compile(r"(?:/[^\s/]+)*/runs/\d{8}-\d{6}")  # the run's directory, in paths
_IDS = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\bses_\w+")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp]\.?[Mm]\.?)?(?![\w:])")
# Logo art (Claude Code's mascot, OpenCode's banner) is drawn in block elements, and moves:
# the mascot lifts a foot ("▝▝   ▝▝" or "▝▝     "), so a stretch of them and the spaces
# between them is one piece of art.
_ART = re.compile(r"[\u2580-\u259f](?:[\u2580-\u259f ]*[\u2580-\u259f])?")
# Claude Code's turn summary picks a random verb ("✻ Baked for 3s", "✻ Sautéed for 1m 2s") ...
_SPINNER_VERB = re.compile(r"^(\W*)\w[\w-]*( for \d)")
# ... and so does its working line, behind a spinner glyph that turns ("· Harmonizing… (3s").
_SPINNER = re.compile(r"^(\s*)\S\s+\w[\w-]*…")
# A bullet that blinks while a tool call is pending (Claude Code's ●, Codex's •/◦).
_BLINK = re.compile(r"^[●•◦](?= )")
# OpenCode's knight-rider progress bar (⬝⬝■■■■■■); OpenCode's input placeholder picks an
# example at random (Ask anything… "Fix broken tests").
_PROGRESS = re.compile(r"[⬝■▪▫◼◻]{3,}")
_EXAMPLE = re.compile(r"(Ask anything… )\"[^\"]*\"")
# Hints a program shows some runs and not others ("← for agents" comes and goes), and tips
# picked from a list ("⎿  Tip: Use /memory to ...").
_HINTS = re.compile(r"\s*·?\s*← for agents\s*·?")
_TIP = re.compile(r"(\bTip: ).*")
# The scripted model's slow answer grows a dot a second: how many is a matter of timing.
_DOTS = re.compile(r"\.{3,}")
_NUMBERS = re.compile(r"\d+")
_SPACES = re.compile(r"[ \t]{2,}")


def screen_key(text: str) -> str:
    """What makes a screen new: its text without what changes from run to run by itself —
    the run directory in paths, session ids, clocks, counters, timers and version numbers,
    logo art, spinner glyphs and verbs, blinking bullets, progress bars, random examples,
    hints and tips, and the padding that shifts with them."""
    text = _IDS.sub("<id>", _RUN_DIR.sub("<run>", text))
    lines = []
    for line in text.splitlines():
        line = _SPINNER.sub(r"\1<spinner>…", _SPINNER_VERB.sub(r"\1<verb>\2", line))
        line = _BLINK.sub(" ", _CLOCK.sub("<time>", line))
        line = _PROGRESS.sub("<progress>", _EXAMPLE.sub(r'\1"<example>"', line))
        line = _HINTS.sub(" ", _DOTS.sub("...", _ART.sub("<art>", _TIP.sub(r"\1<tip>", line))))
        lines.append(_SPACES.sub(" ", _NUMBERS.sub("0", line)).strip())
    return "\n".join(lines).strip("\n")


@dataclass
class Recorder:
    report: Report
    out_dir: Path | None
    recognizer: str
    seen_texts: set[str] = field(default_factory=set)
    saved_texts: set[str] = field(default_factory=set)
    count: int = 0

    def load_saved(self) -> None:
        """The screens already among the fixtures: only new ones are added (numbered on)."""
        if self.out_dir is None:
            return
        for txt in self.out_dir.glob("*.txt"):
            self.saved_texts.add(screen_key(txt.read_text().removesuffix("\n")))
            with contextlib.suppress(ValueError):
                self.count = max(self.count, int(txt.name.split("_", 1)[0]))

    def save(self, name: str, raw: bytes, expected: dict[str, Any], got: dict[str, Any]) -> None:
        text, title = replay(raw)
        if text in self.seen_texts:
            return
        self.seen_texts.add(text)
        self.report.screens += 1
        if self.out_dir is None or screen_key(text) in self.saved_texts:
            return
        self.saved_texts.add(screen_key(text))
        self.count += 1
        self.report.new += 1
        stem = self.out_dir / f"{self.count:02d}_{name}"
        stem.with_suffix(".ansi").write_bytes(raw)
        stem.with_suffix(".txt").write_text(text + "\n")
        view = ScreenView.from_text(text, title)
        offline = recognize(view, self.recognizer)
        meta = {"program": self.report.program, "version": self.report.version,
                "cols": COLS, "rows": ROWS, "recognizer": self.recognizer,
                "state": expected["state"], "attention": expected.get("attention"),
                "rule": offline.rule if offline.state == expected["state"] else None,
                "note": expected.get("note", ""), "live_rule": got.get("rule")}
        stem.with_suffix(".json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


async def checkpoint(t: Tether, rec: Recorder, eid: str, name: str, until: str, state: str,
                     attention: str | None = None, timeout: float = 25.0, stable: bool = True,
                     note: str = "") -> dict[str, Any] | None:
    """Wait until the screen shows ``until`` (the ground truth of what the driver did), then
    compare recognition with ``state``/``attention`` and save the screen."""
    pattern = re.compile(until, re.MULTILINE)
    deadline = time.monotonic() + timeout
    last_text = None
    got: dict[str, Any] = {}
    text = ""
    while time.monotonic() < deadline:
        screen = await t.screen(eid)
        text = screen.get("text") or ""
        if pattern.search(text) and (not stable or text == last_text):
            got = await t.explain(eid)
            raw = t.raw(eid)
            again = await t.screen(eid)
            if (again.get("text") or "") == text and replay(raw)[0] == text:
                break
        last_text = text
        await asyncio.sleep(0.3)
    else:
        rec.report.check(False, f"{name}: the screen never showed /{until}/; last screen:\n{text}")
        return None
    ok = got.get("state") == state and (attention is None or got.get("attention") == attention)
    label = f"{name}={got.get('state')}" + (f"/{got.get('attention')}" if got.get("attention") else "")
    agent = await agent_state_for(t, rec, eid, name, got)
    rec.report.states.append(label + ("" if ok else f" (expected {state}/{attention})")
                             + f" [{got.get('rule')}]" + agent)
    rec.report.check(ok, f"{name}: recognised {got.get('state')}/{got.get('attention')} by "
                         f"{got.get('rule')}, expected {state}/{attention}")
    rec.save(name, raw, {"state": state, "attention": attention, "note": note}, got)
    return got


def agent_text(view: dict[str, Any]) -> str:
    return str(view.get("agent_state")) + (f"/{view['attention']}" if view.get("attention") else "")


async def agent_state_for(t: Tether, rec: Recorder, eid: str, name: str,
                          got: dict[str, Any]) -> str:
    """The managed agent's state at a checkpoint: it must follow the screen's recognition
    (the guardian's watch moves it when output settles, so allow it a moment)."""
    expected = from_recognition(got.get("state") or "unknown", got.get("attention"))
    deadline = time.monotonic() + 3.0
    while True:
        view = await t.agent_view(eid)
        if expected[0] is None or (view.get("agent_state"), view.get("attention")) == expected:
            break
        if time.monotonic() >= deadline:
            rec.report.check(False, f"{name}: agent_state {agent_text(view)} does not follow the "
                                    f"recognition {got.get('state')}/{got.get('attention')}")
            break
        await asyncio.sleep(0.2)
    rec.report.agent_states.append(agent_text(view))
    return f" agent={agent_text(view)}"


async def wait_exit(t: Tether, eid: str, timeout: float = 15.0) -> dict[str, Any]:
    """Until the managed agent's runtime has ended (``closed`` or ``error``); its record."""
    deadline = time.monotonic() + timeout
    while True:
        view = await t.agent_view(eid)
        if view.get("agent_state") in ("closed", "error") or time.monotonic() >= deadline:
            return view
        await asyncio.sleep(0.3)


def leftover_processes(eid: str) -> list[int]:
    """Processes still carrying the agent's environment stamp (docs/tools.md#trees-and-parents): none once
    it ended."""
    stamp = f"TETHER_EXECUTION_ID={eid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if stamp in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


async def ended(t: Tether, rec: Recorder, eid: str, how: str, view: dict[str, Any]) -> None:
    """Record how the agent ended and check that nothing of it is left running."""
    gone = time.monotonic() + 5.0
    while (left := leftover_processes(eid)) and time.monotonic() < gone:
        await asyncio.sleep(0.2)
    rec.report.check(view.get("agent_state") in ("closed", "error"),
                     f"{how}: the agent did not end: {agent_text(view)}")
    rec.report.check(not left, f"{how}: processes left behind: {left}")
    rec.report.states.append(f"{how} -> agent={agent_text(view)} status={view.get('status')} "
                             f"exit_code={view.get('exit_code')} reason={view.get('reason')!r}"
                             f"{'' if not left else f' LEAKED {left}'}")
    rec.report.agent_states.append(agent_text(view))


async def close(t: Tether, rec: Recorder, eid: str) -> None:
    closed = await t.agent("close", target=eid)
    view = (closed.get("data") or {}).get("agent") or await t.agent_view(eid)
    await ended(t, rec, eid, "Agent.close", view)


async def cancel(t: Tether, rec: Recorder, eid: str) -> dict[str, Any]:
    """``Agent.cancel``: the program's interrupt, acknowledged when its turn ends."""
    done = await t.agent("cancel", target=eid, timeout_seconds=10)
    data = done.get("data") or {}
    acknowledged = data.get("acknowledged") is True
    rec.report.receipts.append(
        f"Agent.cancel: acknowledged={data.get('acknowledged')} interrupt={data.get('interrupt')} "
        f"-> agent={agent_text(data.get('agent') or {})}"
        + ("" if acknowledged else f" ({done.get('error') or done})"))
    rec.report.check(acknowledged, f"Agent.cancel not acknowledged: {done}")
    if acknowledged:
        rec.report.agent_states.append(agent_text(data["agent"]))
    return data


def model_requests(log: Path, marker: str, since: float) -> list[dict[str, Any]]:
    """Main-model requests (the ones that offer tools) whose latest user text has ``marker``
    and that are not follow-ups to a tool result."""
    if not log.exists():
        return []
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in entries if marker in e["markers"] and e["tools"] and not e["tool_result"]
            and e["t"] >= since]


async def prompt_once(t: Tether, rec: Recorder, eid: str, log: Path, text: str, marker: str) -> None:
    """``Agent.prompt`` with a receipt; a repeat of the same prompt id types nothing."""
    report = rec.report
    prompt_id = f"p-{marker.lower()}-{secrets.token_hex(3)}"
    sent = await t.agent("prompt", target=eid, prompt_id=prompt_id, text=text, timeout_seconds=20)
    receipt = (sent.get("data") or {}).get("receipt") or {}
    if not report.check(bool(receipt.get("delivered")), f"prompt {marker} not delivered: {sent}"):
        return
    waited = await t.agent("wait", target=eid, prompt_id=prompt_id, timeout_seconds=25)
    receipt = (waited.get("data") or {}).get("receipt") or receipt
    again = await t.agent("prompt", target=eid, prompt_id=prompt_id, text=text, timeout_seconds=5)
    repeat = (again.get("data") or {}).get("receipt") or {}
    await asyncio.sleep(1.0)
    reached = len(model_requests(log, marker, report.started))
    report.receipts.append(
        f"{marker}: delivered={receipt.get('delivered')} "
        f"activity_observed={receipt.get('activity_observed')} "
        f"wait_reached={receipt.get('wait_reached')}; repeat typed nothing "
        f"(same receipt: {repeat.get('prompt_id') == prompt_id}); reached the model {reached}x")
    report.check(bool(receipt.get("activity_observed")) and bool(receipt.get("wait_reached")),
                 f"receipt for {marker} incomplete: {receipt}")
    report.check(reached == 1, f"{marker} reached the model {reached} times, expected once")


async def clear_draft(t: Tether, eid: str, draft: str, timeout: float = 5.0) -> None:
    """Backspace over ``draft`` and wait until the box shows it gone (one copy fewer on the
    screen) or, where that cannot be told (the text also stands in the history above, or
    the box held nothing), until the screen has stood still for a second. A prompt sent
    while the program is still erasing would meet a draft (``input_not_empty``)."""
    before = ((await t.screen(eid)).get("text") or "").count(draft)
    await t.keys(eid, *(["Backspace"] * len(draft)))
    deadline = time.monotonic() + timeout
    last, still = "", 0
    while time.monotonic() < deadline:
        text = (await t.screen(eid)).get("text") or ""
        if text.count(draft) < before:
            return
        still = still + 1 if text == last else 0
        if still >= 4:
            return
        last = text
        await asyncio.sleep(0.25)


# -- the programs inside Tether ---------------------------------------------------------------


@dataclass
class Env:
    cache: Path
    bins: dict[str, Path]
    port: int
    log: Path
    tether_env: dict[str, str]
    work: Path
    workspaces: list[Path] = field(default_factory=list)

    def path(self) -> str:
        return f"{self.bins['node']}:{self.bins['cli']}:{os.environ.get('PATH', '/usr/bin:/bin')}"

    def bin(self, name: str) -> str:
        return str(self.bins["cli"] / name)

    def fresh(self, name: str) -> Path:
        path = self.work / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        self.workspaces.append(path)
        return path


def claude_env(env: Env) -> dict[str, str]:
    """The guardian's environment for Claude Code (its managed agents inherit it): a fresh
    home, the scripted Anthropic API, no updater or other traffic."""
    home = env.fresh("claude-home")
    # Onboarding done (its first step calls api.anthropic.com, unreachable here); the folder
    # trust and API key questions still come, as on any new machine.
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True, "theme": "dark"}))
    # ENABLE_TOOL_SEARCH=false: otherwise plan mode's ExitPlanMode is deferred behind ToolSearch.
    return {"HOME": str(home), "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{env.port}",
            "ANTHROPIC_API_KEY": FAKE_ANTHROPIC_KEY, "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "ENABLE_TOOL_SEARCH": "false"}


async def claude_inside(t: Tether, env: Env, rec: Recorder, project: Path) -> None:
    # The provider's own command line: ``claude --session-id <uuid> --permission-mode manual``.
    eid = await t.launch("claude", ["--permission-mode", "manual"], title="interop claude")
    await early_key(t, rec, eid, r"trust this folder")
    await run_claude_like(t, env, rec, eid, project)
    # Again in plan mode (folder and key are trusted now): a plan to confirm; Agent.close ends it.
    eid = await t.launch("claude", ["--permission-mode", "plan"], title="interop claude plan")
    await checkpoint(t, rec, eid, "plan_mode_idle", r"(?m)^❯\s*$", "awaiting_input")
    await t.agent("prompt", target=eid, prompt_id=f"plan-{secrets.token_hex(3)}",
                  text="make a plan TETHER-PLAN", timeout_seconds=10)
    await checkpoint(t, rec, eid, "plan_confirmation", r"(?i)exit plan mode\?|proceed|keep planning",
                     "awaiting_approval", "approval")
    await t.keys(eid, "Escape")
    await checkpoint(t, rec, eid, "plan_declined", r"(?m)^❯\s*$", "awaiting_input")
    await close(t, rec, eid)
    eid = await t.launch("claude", ["--permission-mode", "manual"], title="interop claude turns")
    await turn_checks(t, env, rec, eid, TURNS["claude"])
    await close(t, rec, eid)


async def early_key(t: Tether, rec: Recorder, eid: str, dialog: str) -> None:
    """A key sent the moment the first dialog is drawn: Claude Code draws it ~0.3 s before it
    reads input, so the key may be lost; send_keys must say which it was."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if re.search(dialog, (await t.screen(eid)).get("text") or ""):
            break
        await asyncio.sleep(0.02)
    sent = await t.keys(eid, "Down")
    rec.report.receipts.append(
        f"key sent as the first dialog appeared: delivery={sent.get('delivery')} "
        f"terminal_mode={sent.get('terminal_mode')}->{sent.get('terminal_mode_after')} "
        f"screen_changed={sent.get('screen_changed')}")
    rec.report.check(sent.get("delivery") is not None, f"send_keys said nothing about delivery: {sent}")


async def run_claude_like(t: Tether, env: Env, rec: Recorder, eid: str, project: Path) -> None:
    await checkpoint(t, rec, eid, "trust_folder", r"trust this folder", "awaiting_approval", "trust")
    if "❯ Yes, I trust" not in ((await t.screen(eid)).get("text") or ""):
        await t.keys(eid, "Down")  # the early key was lost (or moved nothing)
    await checkpoint(t, rec, eid, "trust_folder_yes_selected", r"❯ Yes, I trust", "awaiting_approval",
                     "trust")
    await t.keys(eid, "Enter")
    await checkpoint(t, rec, eid, "api_key", r"use this API key", "awaiting_approval", "login")
    await t.keys(eid, "Up")
    await checkpoint(t, rec, eid, "api_key_yes_selected", r"❯ Yes", "awaiting_approval", "login")
    await t.keys(eid, "Enter")
    await checkpoint(t, rec, eid, "idle_empty", r"(?m)^❯\s*$", "awaiting_input")
    await drafts_and_turns(t, env, rec, eid, project, idle_after=r"Hello from the scripted model",
                           approval=r"Do you want to proceed\?", deny=("Down", "Down"),
                           always=r"❯ 2\. Yes, and", picker=("/model", r"/model",
                                                              r"(?i)select model|switch between"),
                           deny_selected=r"❯ \d+\. No", deny_key="Enter",
                           denied=r"(?i)rejected|denied|declined|No, and tell|interrupted",
                           busy=r"esc to interrupt", interrupted=r"(?i)interrupted")
    await t.keys(eid, "Ctrl-c")
    await checkpoint(t, rec, eid, "ctrl_c_once", r"(?i)again to exit", "awaiting_input")
    await t.keys(eid, "Ctrl-c")
    await ended(t, rec, eid, "exit by Ctrl-c Ctrl-c", await wait_exit(t, eid))
    await checkpoint(t, rec, eid, "exited", r"(?s).", "unknown", stable=False,
                     note="the program has exited; its last frame is still on the screen")


async def drafts_and_turns(t: Tether, env: Env, rec: Recorder, eid: str, project: Path, *,
                           idle_after: str, approval: str, deny: tuple[str, ...], deny_selected: str,
                           deny_key: str, denied: str, busy: str,
                           interrupted: str, approval_attention: str = "approval",
                           always: str | None = None,
                           picker: tuple[str, str, str] | None = None) -> None:
    """The part every program shares: a draft, a prompt, an approval denied, a cancel.

    ``always``: the screen with the approval's "allow always" answer selected (one Down from
    the first answer). ``picker``: ``(slash command, menu regex, picker regex)`` — the slash
    menu while typing it, then the list it opens (a ``choice``), closed with Escape."""
    draft = "a draft not sent"
    await t.text(eid, draft)
    await checkpoint(t, rec, eid, "typed_draft", re.escape(draft), "awaiting_input")
    await clear_draft(t, eid, draft)
    if picker is not None:
        command, menu, chooser = picker
        await t.text(eid, command)
        await checkpoint(t, rec, eid, "slash_menu", menu, "awaiting_input", timeout=10)
        await t.keys(eid, "Enter")
        await checkpoint(t, rec, eid, "picker", chooser, "awaiting_approval", "choice", timeout=10)
        await t.keys(eid, "Escape")
        await asyncio.sleep(0.5)
        await clear_draft(t, eid, command)
    await prompt_once(t, rec, eid, env.log, "say hi TETHER-HELLO", "TETHER-HELLO")
    await checkpoint(t, rec, eid, "idle_after_reply", idle_after, "awaiting_input")
    await t.agent("prompt", target=eid, prompt_id=f"run-{secrets.token_hex(3)}",
                  text="please TETHER-RUN", timeout_seconds=10)
    await checkpoint(t, rec, eid, "approval", approval, "awaiting_approval", approval_attention)
    if always is not None:
        await t.keys(eid, "Down")
        await checkpoint(t, rec, eid, "approval_allow_always_selected", always, "awaiting_approval",
                         approval_attention)
    if deny:
        await t.keys(eid, *deny)
        await checkpoint(t, rec, eid, "approval_no_selected", deny_selected, "awaiting_approval",
                         approval_attention)
    await t.keys(eid, deny_key)
    await checkpoint(t, rec, eid, "approval_denied", denied, "awaiting_input")
    await asyncio.sleep(1.0)
    rec.report.check(not (project / "created_by_agent.txt").exists(),
                     "the denied command ran: created_by_agent.txt exists")
    rec.report.receipts.append("approval denied: created_by_agent.txt "
                               + ("exists (FAIL)" if (project / "created_by_agent.txt").exists()
                                  else "was not created"))
    await t.agent("prompt", target=eid, prompt_id=f"slow-{secrets.token_hex(3)}",
                  text="take your time TETHER-SLOW", timeout_seconds=10)
    await checkpoint(t, rec, eid, "busy", busy, "busy", stable=False)
    await cancel(t, rec, eid)
    await checkpoint(t, rec, eid, "interrupted", interrupted, "awaiting_input")


@dataclass(frozen=True)
class TurnScreens:
    """How a program's screen shows that it waits for input and that it works on a turn."""

    idle: str
    busy: str


def last_request(log: Path, marker: str, since: float) -> dict[str, Any] | None:
    found = model_requests(log, marker, since)
    return found[-1] if found else None


def typed(entry: dict[str, Any] | None, marker: str) -> list[str]:
    """The parts of a request's latest user message that carry ``marker``, as typed."""
    return [part for part in (entry or {}).get("user_parts") or [] if marker in part]


async def until(probe: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    """Poll ``probe`` (sync or async) until it returns something true; ``None`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if asyncio.iscoroutine(got):
            got = await got
        if got or time.monotonic() >= deadline:
            return got or None
        await asyncio.sleep(every)


async def turn_done(t: Tether, eid: str, screens: TurnScreens, answer: str,
                    timeout: float = 25.0) -> str | None:
    """The turn that gives ``answer`` has ended, judged from the screen alone (the driver's
    ground truth; no recognition is asked, so nothing a check waits for is nudged): the
    answer shown, the program waiting for input and not working, twice in a row. ``None``
    when it has; else the last screen, for the failure."""
    last = ""
    text = ""

    async def probe() -> bool:
        nonlocal last, text
        text = (await t.screen(eid)).get("text") or ""
        done = (answer in text and re.search(screens.idle, text, re.MULTILINE) is not None
                and re.search(screens.busy, text) is None)
        settled = done and text == last
        last = text if done else ""
        return settled

    return None if await until(probe, timeout, every=0.2) else text


def error_text(reply: dict[str, Any]) -> str:
    return f"{reply.get('code')}: {str(reply.get('message') or reply)[:160]}"


async def turn_checks(t: Tether, env: Env, rec: Recorder, eid: str, screens: TurnScreens) -> None:
    """Three promises about turns, on a fresh agent waiting for input (no screen of these is
    saved: what they show depends on the Tether under test, not only on the program):

    - a cursor taken while the agent waits, a prompt not waited for and a fast turn that ends
      before anyone waits: a wait after the cursor reports the turn (not ``timeout``);
    - a prompt sent with ``timeout_seconds: 0`` whose turn has ended: ``wait {prompt_id}``
      says ``wait_reached: true`` at once, well under its timeout;
    - cancel, then prompt with ``replace_draft: true``: the model receives exactly the new
      text (Claude Code puts a cancelled prompt back into its input box; typing after it
      would merge the two)."""
    report = rec.report
    if not await until(lambda: _screen_matches(t, eid, screens.idle), 40):
        report.check(False, "turn checks: the fresh agent never showed its input box")
        return
    # A first turn to warm up: OpenCode's first request after a start can take half a minute
    # (seen: 33 s), which would make the checks' turns slow, not fast.
    marker = f"TETHER-WARM-{secrets.token_hex(3)}"
    sent = await t.agent("prompt", target=eid, prompt_id=f"warm-{secrets.token_hex(3)}",
                         text=f"say hi {marker}", timeout_seconds=0)
    screen = await turn_done(t, eid, screens, f"Received {marker}", timeout=90)
    if not report.check(sent.get("ok") is True and screen is None,
                        f"turn checks: the warm-up turn never ended ({error_text(sent)}); "
                        f"last screen:\n{screen}"):
        return
    await cursor_then_fast_turn(t, env, rec, eid, screens)
    await receipt_without_waiting(t, env, rec, eid, screens)
    await cancel_then_prompt(t, env, rec, eid, screens)
    frames_marked(t, rec, eid)


#: Fewest synchronized-update starts a program that marks its redraws writes over the turn
#: checks' five turns (each draws a spinner for a while: dozens of frames).
MARKED_FRAMES_MIN = 10


def frames_marked(t: Tether, rec: Recorder, eid: str) -> None:
    """The program begins its redraws with a synchronized update (``CSI ? 2026 h``): where
    two frames arrive in one read, the turn watch can only see them apart at such a mark
    (guardian/terminal/frames; Claude Code writes them when Tether's environment asks)."""
    raw = t.raw(eid)
    marks = raw.count(b"\x1b[?2026h")
    rec.report.receipts.append(f"frame marks: {marks} synchronized-update starts in "
                               f"{len(raw)} bytes of output")
    rec.report.check(marks >= MARKED_FRAMES_MIN,
                     f"frames: only {marks} synchronized-update starts in {len(raw)} bytes; "
                     f"the turn watch cannot tell this program's frames apart in one read")


async def _screen_matches(t: Tether, eid: str, pattern: str) -> bool:
    return re.search(pattern, (await t.screen(eid)).get("text") or "", re.MULTILINE) is not None


CURSOR_WAIT_S = 5.0
RECEIPT_WAIT_S = 4.0
#: "At once": a reply the guardian already knows comes back in well under its timeout.
AT_ONCE_S = 1.5


async def cursor_then_fast_turn(t: Tether, env: Env, rec: Recorder, eid: str,
                                screens: TurnScreens) -> None:
    what = "cursor, prompt, fast turn, wait"
    events = ["awaiting_input", "busy"]
    taken = await t.agent("wait", target=eid, events=events, timeout_seconds=0)
    cursor = (taken.get("data") or {}).get("cursor")
    if not rec.report.check(cursor is not None, f"{what}: no cursor from Agent.wait "
                                                f"({error_text(taken)})"):
        return
    marker = f"TETHER-FAST-{secrets.token_hex(3)}"
    sent = await t.agent("prompt", target=eid, prompt_id=f"fast-{secrets.token_hex(3)}",
                         text=f"say hi {marker}", timeout_seconds=0)
    if not rec.report.check(sent.get("ok") is True, f"{what}: prompt refused ({error_text(sent)})"):
        return
    screen = await turn_done(t, eid, screens, f"Received {marker}")
    if not rec.report.check(screen is None, f"{what}: the fast turn never ended on screen; "
                                            f"last screen:\n{screen}"):
        return
    started = time.monotonic()
    waited = await t.agent("wait", target=eid, after=cursor, events=events,
                           timeout_seconds=CURSOR_WAIT_S)
    took = time.monotonic() - started
    data = waited.get("data") or {}
    outcome = data.get("outcome") if waited.get("ok") else error_text(waited)
    fired = sorted({e for item in data.get("changed") or [] for e in item.get("fired") or []})
    rec.report.receipts.append(f"{what}: outcome={outcome} in {took:.2f}s"
                               + (f" fired={','.join(fired)}" if fired else ""))
    rec.report.check(outcome == "changed",
                     f"{what}: Agent.wait after the cursor said {outcome} after {took:.1f}s, "
                     f"not the turn that ran in between")


async def receipt_without_waiting(t: Tether, env: Env, rec: Recorder, eid: str,
                                  screens: TurnScreens) -> None:
    what = "prompt without waiting, then wait {prompt_id}"
    marker = f"TETHER-QUICK-{secrets.token_hex(3)}"
    prompt_id = f"quick-{secrets.token_hex(3)}"
    sent = await t.agent("prompt", target=eid, prompt_id=prompt_id, text=f"say hi {marker}",
                         timeout_seconds=0)
    if not rec.report.check(sent.get("ok") is True, f"{what}: prompt refused ({error_text(sent)})"):
        return
    # What the prompt's own reply saw: a Tether that looks once after typing may already
    # have caught the turn busy, and then the wait below is easy; the line says which it was.
    first = (sent.get("data") or {}).get("receipt") or {}
    screen = await turn_done(t, eid, screens, f"Received {marker}")
    if not rec.report.check(screen is None, f"{what}: the turn never ended on screen; "
                                            f"last screen:\n{screen}"):
        return
    started = time.monotonic()
    waited = await t.agent("wait", target=eid, prompt_id=prompt_id, timeout_seconds=RECEIPT_WAIT_S)
    took = time.monotonic() - started
    receipt = (waited.get("data") or {}).get("receipt") or {}
    rec.report.receipts.append(
        f"{what}: (prompt reply: activity_observed={first.get('activity_observed')}) "
        f"delivered={receipt.get('delivered')} "
        f"activity_observed={receipt.get('activity_observed')} "
        f"wait_reached={receipt.get('wait_reached')} in {took:.2f}s")
    if not rec.report.check(waited.get("ok") is True, f"{what}: {error_text(waited)}"):
        return
    rec.report.check(receipt.get("wait_reached") is True and took < AT_ONCE_S,
                     f"{what}: wait_reached={receipt.get('wait_reached')} "
                     f"activity_observed={receipt.get('activity_observed')} after {took:.1f}s "
                     f"(timeout {RECEIPT_WAIT_S:g}s) for a turn that had ended")


async def cancel_then_prompt(t: Tether, env: Env, rec: Recorder, eid: str,
                             screens: TurnScreens) -> None:
    what = "cancel, then prompt"
    since = time.time()
    stalled = "go slow TETHER-STALL"
    sent = await t.agent("prompt", target=eid, prompt_id=f"stall-{secrets.token_hex(3)}",
                         text=stalled, timeout_seconds=0)
    if not rec.report.check(sent.get("ok") is True, f"{what}: prompt refused ({error_text(sent)})"):
        return
    # Cancel while the model has the request and has said nothing yet.
    arrived = await until(lambda: last_request(env.log, "TETHER-STALL", since), 20)
    busy = await until(lambda: _screen_matches(t, eid, screens.busy), 10)
    if not rec.report.check(bool(arrived and busy), f"{what}: the stalled turn never started "
                                                    f"(request {bool(arrived)}, busy {bool(busy)})"):
        return
    # The agent's own state too: a cancel is refused unless Tether sees the turn running.
    running = await until(lambda: _agent_state_is(t, eid, "running"), 10, every=0.2)
    if not running:
        seen = await t.explain(eid)
        rec.report.check(False, f"{what}: the screen shows the stalled turn busy but the agent "
                                f"never became running (recognition {seen.get('state')} "
                                f"[{seen.get('rule')}]); last screen:\n"
                                f"{(await t.screen(eid)).get('text')}")
        return
    done = await t.agent("cancel", target=eid, timeout_seconds=10)
    acknowledged = (done.get("data") or {}).get("acknowledged") is True
    if not rec.report.check(acknowledged, f"{what}: Agent.cancel not acknowledged "
                                          f"({error_text(done)})"):
        return
    await until(_settled(t, eid, screens), 10, every=0.3)
    after_cancel = await t.explain(eid)
    marker = f"TETHER-AFTER-{secrets.token_hex(3)}"
    text = f"say hello {marker}"
    sent = await t.agent("prompt", target=eid, prompt_id=f"after-{secrets.token_hex(3)}",
                         text=text, replace_draft=True, timeout_seconds=20)
    box = f"box after the cancel: {after_cancel.get('state')} [{after_cancel.get('rule')}]"
    if not sent.get("ok"):
        # What a prompt without it does to the draft (the bug replace_draft is there for).
        await t.agent("prompt", target=eid, prompt_id=f"plain-{secrets.token_hex(3)}", text=text,
                      timeout_seconds=20)
        entry = await until(lambda: last_request(env.log, marker, since), 15)
        arrived_as = typed(entry, marker)
        reached = "never" if entry is None else f"as {' + '.join(map(repr, arrived_as))}"
        rec.report.receipts.append(f"{what}: {box}; replace_draft refused; a plain prompt "
                                   f"reached the model {reached}")
        plain = "as sent" if arrived_as == [text] else f"{reached}, not {text!r}"
        rec.report.check(False, f"{what}: replace_draft refused ({error_text(sent)}); a plain "
                                f"prompt reached the model {plain}")
        return
    entry = await until(lambda: last_request(env.log, marker, since), 20)
    got = typed(entry, marker)
    receipt = (sent.get("data") or {}).get("receipt") or {}
    rec.report.receipts.append(f"{what}: {box}; replace_draft delivered={receipt.get('delivered')}; "
                               f"the model received {got!r}")
    rec.report.check(got == [text], f"{what}: the model received {got!r}, not exactly {text!r}"
                     if entry else f"{what}: the prompt never reached the model")


async def _agent_state_is(t: Tether, eid: str, state: str) -> bool:
    return (await t.agent_view(eid)).get("agent_state") == state


def _settled(t: Tether, eid: str, screens: TurnScreens) -> Callable[[], Any]:
    """A probe: the program no longer works (whatever its input box holds), and its screen
    stands still between two polls."""
    last = ""

    async def probe() -> bool:
        nonlocal last
        text = (await t.screen(eid)).get("text") or ""
        settled = re.search(screens.busy, text) is None and text == last
        last = text
        return settled

    return probe


def codex_env(env: Env) -> dict[str, str]:
    """The guardian's environment for Codex: a home whose config names the scripted
    Responses API and asks before running commands."""
    home = env.fresh("codex-home")
    (home / "config.toml").write_text(
        'model = "scripted-model"\nmodel_provider = "scripted"\napproval_policy = "on-request"\n'
        "[model_providers.scripted]\nname = \"Scripted\"\n"
        f'base_url = "http://127.0.0.1:{env.port}/v1"\nwire_api = "responses"\n')
    return {"HOME": str(home), "CODEX_HOME": str(home)}


async def codex_inside(t: Tether, env: Env, rec: Recorder, project: Path) -> None:
    # First a Codex with no provider and no login: its sign-in screen. The provider's command
    # line cannot give one launch a home of its own (agents inherit the guardian's
    # environment), so this one is ``provider: command`` through env(1).
    bare = env.fresh("codex-home-bare")
    eid = await t.launch("command", ["env", f"HOME={bare}", f"CODEX_HOME={bare}", env.bin("codex"),
                                     "--no-daemon"], recognizer="codex", title="interop codex login")
    await checkpoint(t, rec, eid, "login", r"(?i)sign in|api key", "awaiting_approval", "login")
    await t.keys(eid, "Down")
    await checkpoint(t, rec, eid, "login_option_2", r"[›>] 2\.", "awaiting_approval", "login")
    await close(t, rec, eid)
    # The provider's own command line: ``codex --no-daemon``, with the configured home.
    eid = await t.launch("codex", ["--no-daemon"], title="interop codex")
    await checkpoint(t, rec, eid, "trust_folder", r"(?i)trust this folder", "awaiting_approval", "trust")
    await t.keys(eid, "Down")
    await checkpoint(t, rec, eid, "trust_folder_option_2", r"[›>] 2\.", "awaiting_approval", "trust")
    await t.keys(eid, "Up")
    await asyncio.sleep(0.3)
    await t.keys(eid, "Enter")
    await checkpoint(t, rec, eid, "idle_empty", r"Ask Codex to do anything", "awaiting_input")
    await drafts_and_turns(t, env, rec, eid, project, idle_after=r"Hello from the scripted model",
                           approval=r"Would you like to run", deny=("Down",),
                           always=r"[›>] 2\. Yes, and", picker=("/model", r"/model",
                                                                 r"(?i)select model"),
                           deny_selected=r"[›>] 3\. No", deny_key="Enter",
                           denied=r"(?i)canceled|cancelled|denied|rejected|did not run",
                           # While the answer streams Codex hides its status line; only the
                           # title's spinner says it is working.
                           busy=r"Working slowly", interrupted=r"(?i)interrupted")
    await t.keys(eid, "Ctrl-c")
    view = await wait_exit(t, eid, 5)
    if view.get("agent_state") not in ("closed", "error"):
        await checkpoint(t, rec, eid, "ctrl_c_once", r"(?i)again to (quit|exit)", "awaiting_input",
                         timeout=5)
        await t.keys(eid, "Ctrl-c")
        view = await wait_exit(t, eid)
    await ended(t, rec, eid, "exit by Ctrl-c", view)
    await checkpoint(t, rec, eid, "exited", r"(?s).", "unknown", stable=False,
                     note="the program has exited; its last frame is still on the screen")
    eid = await t.launch("codex", ["--no-daemon"], title="interop codex turns")
    await turn_checks(t, env, rec, eid, TURNS["codex"])
    await close(t, rec, eid)


def opencode_config(port: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"scripted": {
            "npm": "@ai-sdk/openai-compatible", "name": "Scripted",
            "options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": "sk-scripted"},
            "models": {"scripted-model": {"name": "Scripted Model"}}}},
        "model": "scripted/scripted-model", "small_model": "scripted/scripted-model",
        "autoupdate": False, "share": "disabled",
        "permission": {"bash": "ask", "edit": "ask"},
        **(extra or {}),
    }


def opencode_env(env: Env) -> dict[str, str]:
    """The guardian's environment for OpenCode: a home whose config names the scripted
    OpenAI-compatible API and asks before bash and edits."""
    home = env.fresh("opencode-home")
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(opencode_config(env.port)))
    return {"HOME": str(home)}


async def opencode_inside(t: Tether, env: Env, rec: Recorder, project: Path) -> None:
    # The provider's own command line: ``opencode``, in the thread's directory (the project).
    eid = await t.launch("opencode", title="interop opencode")
    await checkpoint(t, rec, eid, "idle_home", r"Ask anything", "awaiting_input", timeout=40)
    await drafts_and_turns(t, env, rec, eid, project, idle_after=r"Hello from the scripted model",
                           approval=r"(?i)permission required|allow once", deny=("Right", "Right"),
                           deny_selected=r"(?i)reject", deny_key="Enter",
                           # Rejecting leaves no message: the question is gone, the input back.
                           denied=r"(?s)\A(?!.*Permission required).*ctrl\+p commands",
                           busy=r"esc interrupt", interrupted=r"(?i)interrupted")
    await t.keys(eid, "Ctrl-c")
    await ended(t, rec, eid, "exit by Ctrl-c", await wait_exit(t, eid))
    await checkpoint(t, rec, eid, "exited", r"(?s).", "unknown", stable=False,
                     note="the program has exited; its last frame is still on the screen")
    eid = await t.launch("opencode", title="interop opencode turns")
    await turn_checks(t, env, rec, eid, TURNS["opencode"])
    await close(t, rec, eid)


# -- approvals through Agent approvals / respond (--checks approvals) --------------------------

#: What a denial looks like in the tool result a program sends its model next.
DENIAL = re.compile(r"(?i)reject|denied|declin|abort|cancel|doesn't want|did not|not allowed")


async def _screen_until(t: Tether, eid: str, pattern: str, timeout: float = 40.0) -> bool:
    return bool(await until(lambda: _screen_matches(t, eid, pattern), timeout))


async def _pending_command(t: Tether, eid: str, timeout: float = 30.0) -> dict[str, Any] | None:
    """The agent's pending approval of a command, once the guardian lists it."""
    async def probe() -> dict[str, Any] | None:
        listed = await t.agent("approvals", target=eid)
        found = [a for a in (listed.get("data") or {}).get("approvals", [])
                 if a["request"]["what"] == "command"]
        return found[0] if found else None

    found: dict[str, Any] | None = await until(probe, timeout, every=0.1)
    return found


async def _claude_ready(t: Tether, eid: str) -> bool:
    """Past Claude Code's first dialogs (folder trust, the API key), as ``run_claude_like``."""
    if not await _screen_until(t, eid, r"trust this folder"):
        return False
    await asyncio.sleep(0.5)  # it draws the dialog before it reads keys
    if "❯ Yes, I trust" not in ((await t.screen(eid)).get("text") or ""):
        await t.keys(eid, "Down")
    await _screen_until(t, eid, r"❯ Yes, I trust", 10)
    await t.keys(eid, "Enter")
    if await _screen_until(t, eid, r"use this API key", 20):
        await t.keys(eid, "Up")
        await _screen_until(t, eid, r"❯ Yes", 10)
        await t.keys(eid, "Enter")
    return await _screen_until(t, eid, TURNS["claude"].idle)


async def _codex_ready(t: Tether, eid: str) -> bool:
    if await _screen_until(t, eid, r"(?i)trust this folder"):
        await asyncio.sleep(0.5)
        await t.keys(eid, "Enter")
    return await _screen_until(t, eid, TURNS["codex"].idle)


async def approvals_inside(t: Tether, env: Env, rec: Recorder, program: str,
                           project: Path) -> None:
    """A real program asks to run a command: ``Agent approvals`` lists it with that command;
    ``respond deny`` → nothing runs and the model's next request carries the denial (in the
    tool result the program sends with the next prompt); ``respond approve`` on the next one
    → the command runs once (its file holds one line)."""
    report = rec.report
    if program == "claude":
        eid = await t.launch("claude", ["--permission-mode", "manual"],
                             title="interop claude approvals")
        ready = await _claude_ready(t, eid)
    else:
        eid = await t.launch("codex", ["--no-daemon"], title="interop codex approvals")
        ready = await _codex_ready(t, eid)
    if not report.check(ready, f"approvals: {program} never waited for input"):
        return
    ran = project / "approved_by_agent.txt"
    asked_at = time.monotonic()
    await t.agent("prompt", target=eid, prompt_id=f"ask-{secrets.token_hex(3)}",
                  text="please TETHER-APPEND", timeout_seconds=10)
    first = await _pending_command(t, eid)
    if not report.check(first is not None, "approvals: the command's question was never listed"):
        return
    assert first is not None
    listed_s = time.monotonic() - asked_at
    request = first["request"]
    report.check("approved_by_agent.txt" in str(request.get("detail")),
                 f"approvals: the listed request does not show the command: {request}")
    report.check(any(o["kind"] == "approve" for o in request["options"])
                 and any(o["kind"] == "deny" for o in request["options"]),
                 f"approvals: no approve and deny among the options: {request['options']}")
    denied = await t.agent("respond", approval_id=first["approval_id"], choice="deny",
                           timeout_seconds=10)
    data = denied.get("data") or {}
    response = data.get("response") or {}
    report.check(denied.get("ok") is True and response.get("left_approval") is True
                 and (data.get("approval") or {}).get("resolved", {}).get("how") == "denied",
                 f"approvals: deny did not leave the question denied: {error_text(denied)} {data}")
    again = await t.agent("respond", approval_id=first["approval_id"], choice="approve")
    report.check((again.get("data") or {}).get("replayed") is True,
                 f"approvals: a repeat respond was not a replay: {again}")
    await _screen_until(t, eid, TURNS[program].idle, 20)
    await asyncio.sleep(1.0)
    report.check(not ran.exists(), "approvals: the denied command ran")
    since = time.time()
    await t.agent("prompt", target=eid, prompt_id=f"ask-{secrets.token_hex(3)}",
                  text="again TETHER-APPEND", timeout_seconds=10)
    second = await _pending_command(t, eid)
    request_after = last_request(env.log, "TETHER-APPEND", since)
    carried = str((request_after or {}).get("last_tool_output") or "")
    report.check(bool(DENIAL.search(carried)),
                 f"approvals: the model's next request did not carry the denial: {carried!r}")
    if not report.check(second is not None, "approvals: the second question was never listed"):
        return
    assert second is not None
    approved = await t.agent("respond", approval_id=second["approval_id"], choice="approve",
                             timeout_seconds=10)
    adata = approved.get("data") or {}
    report.check(approved.get("ok") is True and (adata.get("response") or {}).get(
        "left_approval") is True, f"approvals: approve did not leave the question: {adata}")
    await until(lambda: ran.exists(), 20)
    await _screen_until(t, eid, TURNS[program].idle, 30)
    await asyncio.sleep(1.0)
    lines = ran.read_text().splitlines() if ran.exists() else []
    report.check(lines == ["ran"], f"approvals: the approved command ran {len(lines)} times")
    report.receipts.append(
        f"approvals: listed {listed_s:.2f}s after the prompt, what={request.get('what')} "
        f"detail={request.get('detail')!r} options={[o['key'] for o in request['options']]}; "
        f"deny typed {response.get('keys')} left_approval={response.get('left_approval')}; "
        f"denial carried to the model: {carried[:80]!r}; approve typed "
        f"{(adata.get('response') or {}).get('keys')}, the command ran {len(lines)} time(s)")
    await close(t, rec, eid)


# -- the programs as Tether's MCP client ------------------------------------------------------


def tether_server_entry(env: Env) -> dict[str, Any]:
    return {"command": str(ROOT / ".venv" / "bin" / "tether"), "args": ["serve"],
            "env": dict(env.tether_env)}


def run_client(report: Report, argv: list[str], cwd: Path, extra_env: dict[str, str],
               timeout: float = 120) -> str:
    started = time.monotonic()
    try:
        done = subprocess.run(argv, cwd=cwd, env={**os.environ, **extra_env}, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        # Captured output comes as bytes here whatever ``text`` says.
        said = (exc.stdout or b"").decode(errors="replace")
        report.check(False, f"{argv[0]} as client timed out after {timeout}s: {said}")
        return ""
    output = done.stdout + done.stderr
    report.client.append(f"{Path(argv[0]).name} exit {done.returncode} in "
                         f"{time.monotonic() - started:.1f}s")
    return output


def client_verdict(report: Report, output: str, log: Path, since: float,
                   workspace: Path | None = None) -> None:
    ok = "MCP-OK" in output
    report.check(ok, f"client run did not report MCP-OK: {output[-600:]}")
    if workspace is not None:  # the file the scripted model created, read and edited
        edited = workspace / "interop.txt"
        held = edited.read_text() if edited.exists() else None
        report.check(held == interop_models.FILES_LAST,
                     f"interop.txt holds {held!r} after the client's ReadFiles and EditFiles")
        report.client.append(f"files: interop.txt holds {held!r} (expected "
                             f"{interop_models.FILES_LAST!r})")
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    entries = [e for e in entries if e["t"] >= since]
    listed: set[str] = set()
    calls = [e["value"] for e in entries if e["decision"] == "tool"]
    for entry in entries:
        listed |= set(entry.get("tether_tools") or {})
    report.client.append(f"tools the model saw from Tether: {', '.join(sorted(listed)) or 'none'}")
    report.client.append(f"calls made: {', '.join(calls) or 'none'}; result: "
                         + ("MCP-OK (BashCommand output came back)" if ok else "FAIL"))
    schemas: dict[str, Any] = next(
        (e["tether_tools"] for e in reversed(entries) if e.get("tether_tools")), {})
    report.client.append("schemas: " + compare_schemas(schemas))


def compare_schemas(seen: dict[str, Any]) -> str:
    """How the client changed Tether's input schemas before showing them to the model."""
    from tether.frontend.tools.registry import all_tools

    ours = {tool.name: tool.definition().input_schema for tool in all_tools()}
    notes = []
    for name, schema in sorted(seen.items()):
        short = next((tool for tool in ours if name.endswith(tool)), None)
        if short is None:
            continue
        if json.dumps(ours[short], sort_keys=True) == json.dumps(schema, sort_keys=True):
            notes.append(f"{short} unchanged")
            continue
        dropped: set[str] = set()
        added: set[str] = set()
        _schema_diff(ours[short], schema, dropped, added)
        kept = [k for k in ("$defs", "$ref", "oneOf", "anyOf") if k in json.dumps(schema)]
        notes.append(f"{short} rewritten (dropped {', '.join(sorted(dropped)) or 'nothing'}; "
                     f"added {', '.join(sorted(added)) or 'nothing'}; kept {', '.join(kept)})")
    return "; ".join(notes) or "not visible to the model API"


def _schema_diff(mine: Any, theirs: Any, dropped: set[str], added: set[str]) -> None:
    if isinstance(mine, dict) and isinstance(theirs, dict):
        for key in mine.keys() - theirs.keys():
            if key not in ("properties", "$defs"):
                dropped.add(key)
        for key in theirs.keys() - mine.keys():
            if key not in ("properties", "$defs"):
                added.add(key)
        for key in mine.keys() & theirs.keys():
            _schema_diff(mine[key], theirs[key], dropped, added)
    elif isinstance(mine, list) and isinstance(theirs, list):
        for a, b in zip(mine, theirs, strict=False):
            _schema_diff(a, b, dropped, added)


async def claude_client(env: Env, report: Report) -> None:
    home = env.fresh("claude-client-home")
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
    workspace = env.fresh("claude-client-ws")
    config = home / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"tether": tether_server_entry(env)}}))
    since = time.time()
    output = run_client(report, [
        env.bin("claude"), "-p", f"TETHER-MCP workspace={workspace}", "--mcp-config", str(config),
        "--strict-mcp-config", "--allowedTools",
        "mcp__tether__Initialize,mcp__tether__BashCommand,mcp__tether__ReadFiles,"
        "mcp__tether__EditFiles",
    ], workspace, {"HOME": str(home), "PATH": env.path(), "ENABLE_TOOL_SEARCH": "false",
                   "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{env.port}",
                   "ANTHROPIC_API_KEY": FAKE_ANTHROPIC_KEY, "DISABLE_AUTOUPDATER": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    client_verdict(report, output, env.log, since, workspace)


async def codex_client(env: Env, report: Report) -> None:
    home = env.fresh("codex-client-home")
    workspace = env.fresh("codex-client-ws")
    entry = tether_server_entry(env)
    env_table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in entry["env"].items())
    (home / "config.toml").write_text(
        'model = "scripted-model"\nmodel_provider = "scripted"\n'
        "[model_providers.scripted]\nname = \"Scripted\"\n"
        f'base_url = "http://127.0.0.1:{env.port}/v1"\nwire_api = "responses"\n'
        # Without ``required`` codex exec sends its first request before a server that takes
        # a second or two to start has listed its tools, and the model never sees them.
        f"[mcp_servers.tether]\ncommand = {json.dumps(entry['command'])}\nargs = [\"serve\"]\n"
        "required = true\n"
        f"env = {{ {env_table} }}\n"
        "[mcp_servers.tether.tools.Initialize]\napproval_mode = \"approve\"\n"
        "[mcp_servers.tether.tools.BashCommand]\napproval_mode = \"approve\"\n"
        "[mcp_servers.tether.tools.ReadFiles]\napproval_mode = \"approve\"\n"
        "[mcp_servers.tether.tools.EditFiles]\napproval_mode = \"approve\"\n")
    since = time.time()
    output = run_client(report, [
        env.bin("codex"), "exec", "--skip-git-repo-check", f"TETHER-MCP workspace={workspace}",
    ], workspace, {"HOME": str(home), "CODEX_HOME": str(home), "PATH": env.path()})
    client_verdict(report, output, env.log, since, workspace)


async def opencode_client(env: Env, report: Report) -> None:
    home = env.fresh("opencode-client-home")
    workspace = env.fresh("opencode-client-ws")
    entry = tether_server_entry(env)
    config = opencode_config(env.port, {
        "mcp": {"tether": {"type": "local", "command": [entry["command"], *entry["args"]],
                           "environment": entry["env"], "enabled": True}},
        "permission": {"bash": "ask", "edit": "ask", "tether_*": "allow"},
    })
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
    since = time.time()
    output = run_client(report, [
        env.bin("opencode"), "run", f"TETHER-MCP workspace={workspace}",
    ], workspace, {"HOME": str(home), "PATH": env.path()})
    client_verdict(report, output, env.log, since)


# -- main ------------------------------------------------------------------------------------

INSIDE: dict[str, Callable[[Tether, Env, Recorder, Path], Any]] = {
    "claude": claude_inside, "codex": codex_inside, "opencode": opencode_inside}
#: What the guardian (and so every managed agent it launches) gets in its environment.
AGENT_ENV: dict[str, Callable[[Env], dict[str, str]]] = {
    "claude": claude_env, "codex": codex_env, "opencode": opencode_env}
CLIENT: dict[str, Callable[[Env, Report], Any]] = {
    "claude": claude_client, "codex": codex_client, "opencode": opencode_client}
RECOGNIZERS = {"claude": "claude", "codex": "codex", "opencode": "opencode"}
#: The turn checks' view of each program's screen: input box ready; working on a turn.
TURNS = {"claude": TurnScreens(idle=r"^❯\s*$", busy=r"esc to interrupt"),
         "codex": TurnScreens(idle=r"Ask Codex to do anything", busy=r"esc to interrupt"),
         "opencode": TurnScreens(idle=r"ctrl\+p commands", busy=r"esc interrupt")}


async def run_program(program: str, env: Env, save: bool, skip_client: bool,
                      skip_inside: bool = False, checks: str = "all") -> Report:
    version = PINS[program][1]
    report = Report(program, version, saved=save)
    out_dir: Path | None = None
    if save:
        out_dir = FIXTURES / f"{program}-{version}"
        out_dir.mkdir(parents=True, exist_ok=True)
    rec = Recorder(report, out_dir, RECOGNIZERS[program])
    rec.load_saved()
    project = env.fresh(f"{program}-project")
    subprocess.run(["git", "init", "-q", str(project)], check=False)
    # This workspace's guardian is started by this server and inherits its environment, and
    # every managed agent inherits the guardian's: the pinned Node and CLIs on PATH, and the
    # program's home and model API.
    params = StdioServerParameters(command=str(ROOT / ".venv" / "bin" / "tether"), args=["serve"],
                                   env={**env.tether_env, "PATH": env.path(), "TERM": "xterm-256color",
                                        **AGENT_ENV[program](env)})
    if not skip_inside:
        await _inside(program, version, env, rec, project, params, checks)
    if not skip_client and checks == "all":
        print(f"interop: {program} {version} as Tether's MCP client", flush=True)
        try:
            await CLIENT[program](env, report)
        except Exception as exc:
            report.check(False, f"as client: {type(exc).__name__}: {exc}")
    return report


async def _inside(program: str, version: str, env: Env, rec: Recorder, project: Path,
                  params: StdioServerParameters, checks: str) -> None:
    """The program as a managed agent inside Tether (the first part of the module doc)."""
    print(f"interop: {program} {version} inside Tether", flush=True)
    try:
        async with Client(params) as client:
            init = await client.call_tool("Initialize", {"type": "first_call",
                                                         "workspace_root": str(project)})
            assert init.structured_content is not None
            session = init.structured_content["data"]
            t = Tether(client, session, Config.from_env(env.tether_env))
            if checks == "approvals":
                await approvals_inside(t, env, rec, program, project)
            else:
                await INSIDE[program](t, env, rec, project)
    except Exception as exc:  # one program's failure must not hide the others' results
        rec.report.check(False, f"inside Tether: {_innermost(exc)}")


def _innermost(exc: BaseException) -> str:
    """The first real error inside (nested) exception groups, as ``Type: message``."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def summary(reports: list[Report]) -> str:
    lines = ["", "== scripts/interop summary =="]
    for r in reports:
        lines.append(f"{r.program} {r.version}: {'PASS' if not r.failures else 'FAIL'} "
                     f"({r.screens} distinct screens, "
                     + (f"{r.new} new saved)" if r.saved else "not saved)"))
        lines.append("  states met (recognition [rule] agent=agent_state/attention): "
                     + "; ".join(r.states))
        met = list(dict.fromkeys(r.agent_states))
        lines.append("  agent states met: " + ", ".join(met))
        for receipt in r.receipts:
            lines.append(f"  receipt: {receipt}")
        for item in r.client:
            lines.append(f"  client: {item}")
        for failure in r.failures:
            lines.append(f"  FAILED: {failure.splitlines()[0]}")
    lines.append(f"distinct screens in total: {sum(r.screens for r in reports)}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="Real agent CLIs against Tether, both ways.")
    parser.add_argument("--only", default="claude,codex,opencode")
    parser.add_argument("--no-save", action="store_true", help="do not rewrite the fixtures")
    parser.add_argument("--no-client", action="store_true", help="skip the MCP client runs")
    parser.add_argument("--client-only", action="store_true",
                        help="only the MCP client runs (skip the programs inside Tether)")
    parser.add_argument("--keep", action="store_true", help="keep the run's homes and logs")
    parser.add_argument("--checks", choices=("all", "approvals"), default="all",
                        help="approvals: only the Agent approvals/respond checks (claude, codex)")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "TETHER_INTEROP_CACHE", Path.home() / ".cache" / "tether-interop")))
    args = parser.parse_args()
    programs = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in programs if p not in PINS]
    if unknown:
        parser.error(f"unknown program {unknown[0]!r}; choose from {', '.join(PINS)}")
    if args.checks == "approvals" and set(programs) - {"claude", "codex"}:
        parser.error("--checks approvals runs with claude and codex: pass --only claude,codex")
    cache = args.cache.resolve()
    if cache.is_relative_to(ROOT):
        parser.error("the cache must be outside the checkout (node_modules never enter it)")
    bins = install(cache)
    # A fresh directory per run: a guardian left by an interrupted run keeps its own runtime
    # directory, locks and sockets, never this run's.
    work = cache / "runs" / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    log = work / "models.jsonl"
    server = interop_models.serve(0, log)
    tether_env = {"TETHER_HOME": str(work / "tether-home"), "TETHER_RUNTIME_DIR": str(work / "rt"),
                  "HOME": str(Path.home())}
    env = Env(cache, bins, server.server_address[1], log, tether_env, work)
    reports: list[Report] = []
    try:
        for program in programs:
            reports.append(asyncio.run(run_program(program, env, not args.no_save, args.no_client,
                                                   args.client_only, args.checks)))
    finally:
        server.shutdown()
        for workspace in env.workspaces:  # every guardian this run may have started
            subprocess.run([str(ROOT / ".venv" / "bin" / "tether"), "guardians", "stop",
                            "--workspace", str(workspace), "--yes"],
                           env={**os.environ, **tether_env}, capture_output=True, check=False)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(summary(reports))
    return 1 if any(r.failures for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
