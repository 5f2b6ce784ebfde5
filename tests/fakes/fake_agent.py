#!/usr/bin/env python3
"""A scripted coding-agent TUI for end-to-end tests (stdlib only).

Run it in a real PTY::

    python tests/fakes/fake_agent.py --log FILE [--busy-seconds S] [--approval]
                                     [--ignore-interrupt] [--run-prompts]

It draws, with plain ANSI, what agent CLIs such as Claude Code draw: a header, a transcript,
and at the bottom an input box (``╭───╮`` / ``│ > text`` / ``╰───╯``) with a hint line.
Typed characters are echoed into the box. Enter on a non-empty draft appends one JSON line
``{"received": TEXT}`` to ``--log`` (flushed and fsynced, so a test can count deliveries),
then the agent is busy for ``--busy-seconds`` (a spinner line ``✻ Working… (esc to
interrupt)`` redrawn a few times a second), prints ``● Done: TEXT`` and is idle again; a
turn shorter than a spinner frame ends on time (``--busy-seconds 0.015``: a 15 ms turn).
With ``--start-delay S`` a submitted turn looks idle for S seconds (the prompt in the
transcript, an empty box) before the spinner shows. With ``--done-log FILE`` each finished
turn appends ``{"done": TEXT}`` there once the idle screen after it is drawn.

With ``--paste-burst-ms N`` an Enter that comes within N ms of a typed character joins the
draft as a newline instead of submitting it, as Codex does (it takes such an Enter for part
of a paste).

With ``--approval`` a submitted prompt first raises a permission dialog drawn as Claude Code
draws one: ``Bash command``, the prompt's text as the command in a dashed box, ``Do you want
to proceed?`` / ``❯ 1. Yes`` / ``2. No``. ``1``, ``y`` or Enter accepts (then busy as above),
``2``, ``n`` or Escape declines (``● Declined: TEXT``); with ``--answer-log FILE`` each answer
appends ``{"answer": "approved" | "denied", "key": KEY, "command": TEXT}`` there (flushed
and fsynced, so a test can count answers). Escape or Ctrl-C while busy cancels
(``● Interrupted``) — unless ``--ignore-interrupt``, which stands in for an agent that does
not acknowledge an interrupt (it keeps working); with ``--interrupt-presses 2`` the first
Escape only arms it (the hint reads ``esc again to interrupt``) and a second within
``ARMED_SECONDS`` interrupts, as OpenCode does. With ``--run-prompts`` a prompt of the form
``run: COMMAND`` runs ``COMMAND`` with ``sh -c`` as the turn's work (the agent is busy until it
ends), the way an agent runs a tool — which is how tests start a Tether front-end *inside* an
agent's terminal. Escape sequences (arrows, focus events) are consumed and ignored; inside a
bracketed paste (``ESC[200~ … ESC[201~``) newlines belong to the text (shown as ``⏎``, logged
as ``\n``) instead of submitting it. Ctrl-D, SIGHUP and SIGTERM exit cleanly with the terminal restored.

Drafts, as Claude Code has them: ``--draft TEXT`` starts with TEXT typed into the box (not
sent), and with ``--restore-on-interrupt`` an interrupted turn puts its prompt back into the
box, where whatever is typed next joins it. Backspace deletes the draft's last character
(with ``--sticky-draft`` it does nothing: a box that cannot be cleared).

``--start-log FILE`` appends, once at start, ``{"argv": [...], "env": {NAME: value}}``: the
arguments it was started with and the variables named by ``--show-env NAME`` (repeatable;
null when unset), so a test can see what a launch or a resume passed.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import select
import signal
import subprocess
import sys
import termios
import time
import tty
from dataclasses import dataclass, field
from types import FrameType
from typing import Literal

Mode = Literal["idle", "busy", "approval"]

SPINNER = "·✢✳✶✻✽"
FRAME_SECONDS = 0.2  # spinner redraw period: "a few times per second"
ESC_WAIT_SECONDS = 0.05  # how long a lone ESC waits for the rest of a sequence
ESC = "\x1b"
PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
PASTED_NEWLINE = "pasted-newline"
ARMED_SECONDS = 3.0  # --interrupt-presses: how long a first Escape keeps the interrupt armed


@dataclass
class Agent:
    """The fake agent's whole state; ``draw`` renders it, ``feed`` advances it."""

    log_path: str
    busy_seconds: float
    approval: bool
    start_delay: float = 0.0
    ignore_interrupt: bool = False
    interrupt_presses: int = 1
    presses: list[float] = field(default_factory=list)  # this turn's recent interrupt presses
    run_prompts: bool = False
    mode: Mode = "idle"
    draft: str = ""
    pending: str = ""  # the prompt being worked on or awaiting approval
    busy_until: float = 0.0
    busy_started: float = 0.0
    transcript: list[str] = field(default_factory=list)
    quit: bool = False
    paste_burst_seconds: float = 0.0  # an Enter this soon after a typed character is a newline
    last_char_at: float = float("-inf")
    tool: subprocess.Popen[bytes] | None = None  # the command a ``run:`` prompt started
    restore_on_interrupt: bool = False  # an interrupted prompt goes back into the box
    sticky_draft: bool = False  # Backspace does nothing
    answer_log: str | None = None  # --answer-log: one line per approval answered

    # --- input -------------------------------------------------------------------------

    def key(self, key: str, now: float) -> None:
        """Handle one key: a character, or ``"escape"`` for a lone Escape."""
        if key == "\x04":  # Ctrl-D
            self.quit = True
        elif self.mode == "approval":
            self._approval_key(key, now)
        elif key in ("escape", "\x03"):
            if self.mode == "busy" and not self.ignore_interrupt:
                self.presses = [t for t in self.presses if now - t < ARMED_SECONDS] + [now]
                if len(self.presses) >= self.interrupt_presses:
                    self.mode = "idle"
                    self.presses = []
                    self.transcript.append("● Interrupted")
                    if self.restore_on_interrupt:
                        self.draft = self.pending + self.draft
            elif key == "\x03":
                self.draft = ""
        elif key in ("\r", "\n") and now - self.last_char_at < self.paste_burst_seconds:
            self.draft += "\n"  # Codex's paste-burst rule: Enter right after typing is pasted
        elif key in ("\r", "\n"):
            if self.mode == "idle" and self.draft.strip():
                self._submit(self.draft, now)
        elif key == PASTED_NEWLINE:
            self.draft += "\n"
        elif key in ("\x7f", "\x08"):
            self.draft = self.draft if self.sticky_draft else self.draft[:-1]
        elif key.isprintable():
            self.draft += key  # typed while busy: kept as the next draft, like real agents
            self.last_char_at = now

    def _submit(self, text: str, now: float) -> None:
        self._log(text)
        self.transcript.append(f"❯ {_flat(text)}")
        self.draft = ""
        self.pending = text
        if self.approval:
            self.mode = "approval"
        else:
            # From after the log's fsync (it can take longer than a short turn): the busy
            # screen shows for the whole of --busy-seconds.
            self._start_busy(time.monotonic())

    def _approval_key(self, key: str, now: float) -> None:
        if key in ("1", "\r", "\n", "y"):
            self._answered("approved", key)
            self._start_busy(now)
        elif key in ("2", "n", "escape", "\x03"):
            self._answered("denied", key)
            self.mode = "idle"
            self.transcript.append(f"● Declined: {_flat(self.pending)}")

    def _answered(self, answer: str, key: str) -> None:
        if self.answer_log is None:
            return
        with open(self.answer_log, "a", encoding="utf-8") as log:
            log.write(json.dumps({"answer": answer, "key": key, "command": self.pending}) + "\n")
            log.flush()
            os.fsync(log.fileno())

    def _start_busy(self, now: float) -> None:
        self.mode = "busy"
        # With --start-delay the screen still looks idle (the prompt moved to the transcript,
        # an empty box) for that long before the spinner shows, as a real agent's can.
        self.busy_started = now + self.start_delay
        self.busy_until = self.busy_started + self.busy_seconds
        if self.run_prompts and self.pending.startswith("run: "):
            self.tool = subprocess.Popen(
                ["sh", "-c", self.pending[len("run: "):]], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )

    def tick(self, now: float) -> bool:
        """Advance time: finish the running turn when its time is up (and its command, if
        it started one, has ended). True if it finished."""
        if self.tool is not None and self.tool.poll() is None:
            return False
        self.tool = None
        if self.mode == "busy" and now >= self.busy_until:
            self.mode = "idle"
            self.transcript.append(f"● Done: {_flat(self.pending)}")
            return True
        return False

    def _log(self, text: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"received": text}) + "\n")
            log.flush()
            os.fsync(log.fileno())

    # --- output ------------------------------------------------------------------------

    def draw(self, now: float, cols: int, rows: int) -> str:
        """The whole screen as one ANSI string (clear, then every row from the top)."""
        width = max(20, cols)
        bottom = self._bottom(now, width)
        header = [" ✻ Fake Agent v0.1", f"   {os.getcwd()}"[:width], ""]
        room = max(0, rows - len(header) - len(bottom))
        body: list[str] = []
        for entry in self.transcript:
            body.extend([entry[:width], ""])
        body = body[-room:] if room else []
        lines = header + body + [""] * (room - len(body)) + bottom
        out = ["\x1b[?25l\x1b[H\x1b[2J"]
        out.append("\r\n".join(line[:width] for line in lines[:rows]))
        if not self.busy_shown(now):
            # Park the cursor after the draft, where a real agent's caret would be.
            boxed = self.mode != "approval"
            row = rows - len(bottom) + 4 if boxed else rows  # the "│ >" row
            col = min(width, 5 + len(_flat(self.draft))) if boxed else 1
            out.append(f"\x1b[{row};{col}H\x1b[?25h")
        return "".join(out)

    def busy_shown(self, now: float) -> bool:
        """Whether the spinner is on screen (busy, and past any --start-delay)."""
        return self.mode == "busy" and now >= self.busy_started

    def _bottom(self, now: float, width: int) -> list[str]:
        inner = width - 2
        if self.mode == "approval":
            return [
                "─" * width,
                " Bash command",
                " Run what was asked",
                "╌" * width,
                f" {_flat(self.pending)}"[:width],
                "╌" * width,
                " Do you want to proceed?",
                " ❯ 1. Yes",
                "   2. No",
                "",
                " Esc to cancel",
            ]
        box = [
            "╭" + "─" * inner + "╮",
            ("│ > " + _flat(self.draft))[: width - 1].ljust(width - 1) + "│",
            "╰" + "─" * inner + "╯",
        ]
        if self.busy_shown(now):
            frame = SPINNER[int((now - self.busy_started) / FRAME_SECONDS) % len(SPINNER)]
            elapsed = int(now - self.busy_started)
            armed = [t for t in self.presses if now - t < ARMED_SECONDS]
            hint = "esc again to interrupt" if armed else "esc to interrupt"
            return [
                f"{frame} Working… ({elapsed}s · {hint})",
                "",
                *box,
                f"  {hint}",
            ]
        return ["", "", *box, "  ? for shortcuts"]


class KeyReader:
    """Turns raw bytes from the terminal into keys, swallowing escape sequences."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.buffer = ""
        self.pasting = False

    def read(self) -> list[str] | None:
        """Keys available now (``None`` at end of input)."""
        data = os.read(self.fd, 4096)
        if not data:
            return None
        self.buffer += self.decoder.decode(data)
        if self.buffer.endswith(ESC) and _readable(self.fd, ESC_WAIT_SECONDS):
            more = os.read(self.fd, 4096)  # the rest of a sequence split across reads
            self.buffer += self.decoder.decode(more)
        keys: list[str] = []
        text, self.buffer = self.buffer, ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch != ESC:
                if self.pasting and ch in "\r\n":
                    keys.append(PASTED_NEWLINE)
                    i += 2 if text.startswith("\r\n", i) else 1
                    continue
                keys.append(ch)
                i += 1
                continue
            end = _sequence_end(text, i)
            if end is None:  # a lone Escape key
                keys.append("escape")
                i += 1
                continue
            if text[i:end] in (PASTE_START, PASTE_END):
                self.pasting = text[i:end] == PASTE_START
            i = end  # any other CSI / SS3 / Alt-key sequence is ignored
        return keys


def _sequence_end(text: str, start: int) -> int | None:
    """End index of the escape sequence at ``start``, or ``None`` for a lone ESC."""
    if start + 1 >= len(text):
        return None
    kind = text[start + 1]
    if kind == "[":  # CSI: parameters, then one final byte in @..~
        i = start + 2
        while i < len(text) and not ("@" <= text[i] <= "~"):
            i += 1
        return min(i + 1, len(text))
    if kind == "O":  # SS3: one more character
        return min(start + 3, len(text))
    if kind == ESC:
        return None
    return start + 2  # Alt+key


def _flat(text: str) -> str:
    """``text`` on one screen row: newlines shown as ⏎."""
    return text.replace("\n", "⏎")


def _readable(fd: int, timeout: float) -> bool:
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready)


def _terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return 80, 24
    return size.columns, size.lines


class _Stop(Exception):
    """Raised from a signal handler to unwind the main loop and restore the terminal."""


def _on_stop_signal(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signum)


def main(argv: list[str] | None = None) -> int:
    """Run the fake agent until Ctrl-D, end of input, SIGHUP or SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--log", required=True, help="append one JSON line per prompt here")
    parser.add_argument("--busy-seconds", type=float, default=1.5)
    parser.add_argument("--approval", action="store_true", help="ask before each prompt")
    parser.add_argument("--paste-burst-ms", type=float, default=0.0,
                        help="an Enter this soon after a typed character is a newline")
    parser.add_argument("--ignore-interrupt", action="store_true",
                        help="keep working on Escape / Ctrl-C (never acknowledge a cancel)")
    parser.add_argument("--interrupt-presses", type=int, default=1,
                        help="Escapes it takes to interrupt a turn (OpenCode: 2)")
    parser.add_argument("--run-prompts", action="store_true",
                        help="a prompt 'run: CMD' runs CMD with sh -c as the turn's work")
    parser.add_argument("--draft", default="", help="start with this text typed into the box")
    parser.add_argument("--restore-on-interrupt", action="store_true",
                        help="an interrupted prompt goes back into the box (Claude Code)")
    parser.add_argument("--sticky-draft", action="store_true", help="Backspace does nothing")
    parser.add_argument("--start-log", help="append the argv and --show-env variables here")
    parser.add_argument("--show-env", action="append", default=[], help="a variable to log")
    parser.add_argument("--start-delay", type=float, default=0.0,
                        help="seconds a submitted turn still looks idle before the spinner")
    parser.add_argument("--done-log", help="append one JSON line per finished turn here, "
                        "once the idle screen after it is drawn")
    parser.add_argument("--one-write-turns", action="store_true",
                        help="draw each turn's busy frame and the idle frame after it in one "
                        "write (a turn shorter than any read)")
    parser.add_argument("--answer-log", help="append one JSON line per approval answered here")
    args = parser.parse_args(argv)
    if args.start_log:
        started = {"argv": sys.argv[1:] if argv is None else argv,
                   "env": {name: os.environ.get(name) for name in args.show_env}}
        with open(args.start_log, "a", encoding="utf-8") as log:
            log.write(json.dumps(started) + "\n")

    agent = Agent(log_path=args.log, busy_seconds=args.busy_seconds, approval=args.approval,
                  start_delay=args.start_delay,
                  paste_burst_seconds=args.paste_burst_ms / 1000,
                  ignore_interrupt=args.ignore_interrupt, run_prompts=args.run_prompts,
                  interrupt_presses=args.interrupt_presses, draft=args.draft,
                  restore_on_interrupt=args.restore_on_interrupt, sticky_draft=args.sticky_draft,
                  answer_log=args.answer_log)
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd) if os.isatty(fd) else None
    resized: list[int] = []

    def on_resize(signum: int, frame: FrameType | None) -> None:
        resized.append(signum)

    signal.signal(signal.SIGHUP, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    signal.signal(signal.SIGWINCH, on_resize)
    out = sys.stdout
    try:
        if saved is not None:
            tty.setraw(fd)
        out.write("\x1b]0;Fake Agent\x07\x1b[?2004h")  # title; bracketed paste on
        reader = KeyReader(fd)
        redraw = True
        while not agent.quit:
            now = time.monotonic()
            finished = agent.tick(now)
            redraw = finished or redraw or bool(resized)
            if args.one_write_turns and agent.mode == "busy" and agent.busy_shown(now):
                # The busy frame and the idle one after it in a single write: what a loaded
                # machine's reader gets of a short turn (both frames in one read).
                cols, rows = _terminal_size()
                busy_frame = agent.draw(now, cols, rows)
                agent.busy_until = now
                finished = agent.tick(now)
                out.write(busy_frame + agent.draw(now, cols, rows))
                out.flush()
                redraw = False
            elif redraw or agent.mode == "busy":
                resized.clear()
                cols, rows = _terminal_size()
                out.write(agent.draw(now, cols, rows))
                out.flush()
                redraw = False
            if finished and args.done_log:
                with open(args.done_log, "a", encoding="utf-8") as done:
                    done.write(json.dumps({"done": agent.pending}) + "\n")
            # Busy: wake up for the next spinner frame, or the turn's end if sooner (a turn of
            # a few milliseconds ends on time); idle: only input matters.
            now = time.monotonic()
            next_change = agent.busy_started if now < agent.busy_started else agent.busy_until
            busy_wait = min(FRAME_SECONDS, max(0.0, next_change - now))
            if not _readable(fd, busy_wait if agent.mode == "busy" else 1.0):
                continue
            keys = reader.read()
            if keys is None:
                break
            for key in keys:
                agent.key(key, time.monotonic())
            redraw = True
    except _Stop:
        pass
    except OSError:
        pass  # the terminal went away (hang-up): nothing left to restore or draw on
    finally:
        # A second SIGTERM must not interrupt the restore below.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            out.write("\x1b[?2004l\x1b[?25h\r\n")
            out.flush()
            if saved is not None:
                termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        except (OSError, termios.error):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
