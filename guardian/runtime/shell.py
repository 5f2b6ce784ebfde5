"""A thread's main shell: interactive bash in a PTY with Tether's shell integration.

A command is typed as one line, so multi-line commands, heredocs and unbalanced quotes
behave exactly as in a script (one command line, one ``C`` marker, one ``D`` marker) instead
of leaving the shell waiting at a continuation prompt: a short command as
`` eval $'<command>'`` with every byte that readline or history expansion could act on
escaped (a line-editing switch, ``set +o emacs``, as it is), a long one written to a private
file and run as `` . <file>`` (readline redraws a long line as it is typed). The bytes
between ``C`` and ``D`` are the execution's output. Each line starts with the terminal's
kill character (Ctrl-u unless ``stty kill`` changed it: ``PtyRuntime.kill_char``), which
readline binds to unix-line-discard: stray input already in the line editor (a late answer to
a terminal query, a person's half-typed line) is discarded instead of becoming the start of
the command; none is typed when the terminal has it disabled.

An end marker is only a claim: the command has ended when the kernel confirms that the
shell is back at its prompt (``kernel.why_not_at_prompt``), checked right after the marker
and then with a backoff. Until then the shell stays busy and the bytes after the marker are
held; a later end marker, or more output than any prompt, shows the first was forged: it is
recorded as an event and what it held is the command's output, unless a C came between
them: then a line typed ahead into the command ran after it, and the first end stands. The
working directory is read from ``/proc`` at a confirmed end.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tether.guardian.runtime import kernel, sandbox
from tether.guardian.runtime.answers import AnswerGate
from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.markers import Marker, MarkerScanner, rc_text
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.identity import ProcessIdentity
from tether.shared.paths import write_private_file

#: Longest escaped command typed inline; longer ones go through a private file.
INLINE_MAX = 512
# The line stays readable on the shell's screen: printable ASCII as it is, except \ and '
# (backslash-escaped); ! (history expansion), controls and non-ASCII bytes (readline may take
# them for Meta keys outside a UTF-8 locale) as \xHH, a two-digit escape that ends where it
# should.
_INLINE = [
    "\\\\" if b == 0x5C else "\\'" if b == 0x27 else "\\n" if b == 0x0A else "\\t" if b == 0x09
    else chr(b) if 0x20 <= b < 0x7F and b != 0x21 else f"\\x{b:02x}"
    for b in range(256)
]


#: A command that switches line editing (readline) off or on. Through ``eval`` it changes
#: readline while readline still holds the line that ran it: bash then waits at its
#: continuation prompt (``set +o emacs``, ``set +o vi``), and the next command is lost. Typed
#: as it is, it is read and run as a person's would be. Only these are: any other line typed
#: bare could meet an alias, a reserved word or a changed ``histchars`` that ``eval $'...'``
#: is immune to.
_EDITING_SWITCH = re.compile(r" *set +[-+]o +(?:emacs|vi) *")


def inline_line(command: str, kill: str) -> str | None:
    """The line to type for ``command`` without a file, or None if too long:
    `` eval $'...'``, which puts any command on one line, or a line-editing switch as it is
    (:data:`_EDITING_SWITCH`).

    ``kill``: the terminal's kill character, typed first (see the module's text). A leading
    space keeps it out of history (HISTCONTROL=ignorespace in the rc). The eval
    body ends with a newline, as the command file does, so a heredoc's delimiter is complete.
    """
    if _EDITING_SWITCH.fullmatch(command):
        return f"{kill} {command}\r"
    data = command.encode()
    if len(data) > INLINE_MAX:
        return None
    body = "".join([_INLINE[b] for b in data])
    if len(body) > INLINE_MAX:
        return None
    return f"{kill} eval $'{body}\\n'\r"


#: Delays between kernel checks after an end marker (the last one repeats).
CHECK_BACKOFF_S = (0.0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Bytes held after an unconfirmed end marker; more than any prompt prints.
HELD_LIMIT = 64 * 1024


class ShellListener(Protocol):
    """What the guardian wants to hear from a main shell."""

    def command_finished(self, live: LiveExecution, exit_code: int | None) -> None: ...

    def shell_exited(self, shell: MainShell, status: ExitStatus) -> None: ...

    def command_discarded(self, live: LiveExecution) -> None: ...

    def marker_ignored(self, live: LiveExecution, detail: str) -> None: ...

    def output_arrived(self) -> None: ...


class MainShell:
    """The interactive shell of one thread, at one generation."""

    def __init__(
        self,
        *,
        thread_id: str,
        generation: int,
        cwd: str,
        env: Mapping[str, str],
        scratch: Path,
        rows: int,
        cols: int,
        listener: ShellListener,
        sandboxed: bool = False,
        handed: Mapping[str, Any] | None = None,
    ) -> None:
        """``handed``: the state of this very shell as the code before a live upgrade left
        it (:meth:`handover`); its process is adopted by :meth:`adopt`, not started."""
        self.thread_id = thread_id
        #: Started inside the architect sandbox (``sandbox.py``), for its whole life.
        self.sandboxed = sandboxed
        self.generation = generation
        # Where the shell starts: its home directory, as bash does, when ``cwd`` is gone.
        self.cwd = cwd if os.path.isdir(cwd) else str(Path.home())
        self._scratch = scratch
        self._listener = listener
        if handed is not None:
            self.cwd = str(handed["cwd"])
        nonce = str(handed["nonce"]) if handed is not None else secrets.token_hex(8)
        self.nonce = nonce
        self._scanner = MarkerScanner(
            nonce, bytes.fromhex(handed["scanner_carry"]) if handed is not None else b"")
        self.rc_path = scratch / f"bashrc-{thread_id}-{generation}"
        rc_fd = sandbox.RC_FD if sandboxed else None
        if handed is None:
            write_private_file(self.rc_path,
                               rc_text(nonce, str(self.rc_path), handed_fd=rc_fd).encode())
        argv = ["bash", "--rcfile", str(self.rc_path), "-i"]
        if sandboxed:
            argv = sandbox.wrap(["bash", "--rcfile", f"/dev/fd/{rc_fd}", "-i"],
                                str(self.rc_path))
        self.screen = TerminalScreen(cols=cols, rows=rows, respond=self._respond)
        self.runtime = PtyRuntime(
            argv,
            env=env,
            cwd=self.cwd,
            rows=rows,
            cols=cols,
            on_output=self._on_output,
            on_exit=self._on_exit,
        )
        self.screen.flow = self.runtime.set_reading  # emulation paces a runaway program
        # The screen's answers to terminal queries reach the shell only while the asker can
        # read them (answers.py).
        self._answers = AnswerGate(self.runtime, self._command_running)
        self.current: LiveExecution | None = None
        self._in_command = False  # from a C marker until the kernel confirms the end
        self._command_no = 0  # command lines started (C markers): which one an answer is for
        self._command_file: Path | None = None
        # An end marker seen, not yet confirmed: its exit code, and the bytes after it (a
        # prompt if the end is real; the command's output if the marker was forged).
        self._end: _EndCandidate | None = None
        self._check: asyncio.TimerHandle | None = None
        self._check_step = 0
        # Set at the first prompt: typing before it races the shell's startup.
        self.ready = asyncio.Event()
        # The typed command line has not started running yet (no C since it was typed).
        self._awaiting_start = False
        self._discard_check = False
        # Did the shell's stderr, where PS0 prints a line's C, reach its terminal at its last
        # prompt (None: not known)? Read after each end, off the reply's path, so that a D
        # without its C is judged by where the C went, not by where a command moved stderr
        # since (exec 2>&1 after exec 2>/dev/null).
        self._stderr_at_prompt: bool | None = None
        self._stderr_note: asyncio.Handle | None = None
        # A line not ours ran (typed ahead into a command, or swallowing ours): the shell may
        # have looked idle while that line's `read` waited, so no reading since is trusted
        # until one of our commands ends at a real prompt; a D without C waits for that.
        self._stderr_unsure = False
        # A D while our line's C was not seen, and where stderr went is not known: decided
        # once the shell is back at its prompt.
        self._unseen_start: _EndCandidate | None = None
        self._markers_seen = 0  # markers read so far (did a check's last read bring any?)
        # The final screen of the last command, drawn right after its end was answered
        # (Finisher.finish, defer_screen) and always before the screen changes again.
        self._pending_draw: Callable[[], Callable[[], None] | None] | None = None

    def start(self) -> ProcessIdentity:
        return self.runtime.start()

    # -- live upgrade (docs/protocol.md#live-upgrade) --------------------------------------

    def handover_blocked(self) -> str | None:
        """Why this shell's state cannot be handed over at this instant (None: it can): an
        end marker the kernel has not confirmed yet, a check for a discarded line, a draw
        still pending. Each settles within moments."""
        if self._end is not None or self._unseen_start is not None:
            return "an end marker is being checked"
        if self._discard_check:
            return "a discarded command line is being checked"
        if self._pending_draw is not None or self._stderr_note is not None:
            return "its final screen is being drawn"
        return self.runtime.handover_blocked()

    def handover(self) -> dict[str, Any]:
        """This shell's state for the code that takes it over: its process and terminal, the
        marker scanner's nonce and carry, and where its command stands."""
        return {
            "thread_id": self.thread_id, "generation": self.generation, "cwd": self.cwd,
            "sandboxed": self.sandboxed, "nonce": self.nonce,
            "scanner_carry": self._scanner.carry.hex(), "ready": self.ready.is_set(),
            "current": self.current.execution_id if self.current is not None else None,
            "in_command": self._in_command, "command_no": self._command_no,
            "awaiting_start": self._awaiting_start,
            "command_file": str(self._command_file) if self._command_file else None,
            "stderr_at_prompt": self._stderr_at_prompt, "stderr_unsure": self._stderr_unsure,
            "markers_seen": self._markers_seen, "runtime": self.runtime.handover(),
        }

    def adopt(self, handed: Mapping[str, Any], current: LiveExecution | None) -> None:
        """Go on with the shell the code before left (:meth:`handover`): its process, and
        ``current``, the execution its running command line belongs to."""
        self.runtime = PtyRuntime.adopt(handed["runtime"], on_output=self._on_output,
                                        on_exit=self._on_exit)
        self.screen.flow = self.runtime.set_reading
        self._answers = AnswerGate(self.runtime, self._command_running)
        if handed["ready"]:
            self.ready.set()
        self.current = current
        self._in_command = bool(handed["in_command"])
        self._command_no = int(handed["command_no"])
        self._awaiting_start = bool(handed["awaiting_start"])
        self._command_file = Path(handed["command_file"]) if handed["command_file"] else None
        self._stderr_at_prompt = handed["stderr_at_prompt"]
        self._stderr_unsure = bool(handed["stderr_unsure"])
        self._markers_seen = int(handed["markers_seen"])

    @property
    def alive(self) -> bool:
        return self.runtime.alive

    @property
    def busy(self) -> bool:
        """A command (ours, or one typed by hand) is running in the foreground."""
        return self.current is not None or self._in_command

    def busy_error(self, advice: str) -> TetherError:
        """``shell_busy`` while :attr:`busy`: names the running execution, then ``advice``."""
        running = self.current.execution_id if self.current else None
        return TetherError(
            ErrorCode.SHELL_BUSY,
            "the main shell is still running "
            + (f"execution {running}" if running else "a command typed into it")
            + f"; {advice}",
            {"input_sent": False, "running_execution_id": running},
        )

    def command_line(self, execution_id: str, command: str) -> str:
        """The line to type for ``command``: inline when short, else through a file."""
        kill = self.runtime.kill_char()
        return inline_line(command, kill) or self.command_file(execution_id, command, kill)

    def command_file(self, execution_id: str, command: str, kill: str) -> str:
        """Write ``command`` to a private file; return the line to type for it."""
        path = self._scratch / f"cmd-{execution_id}.sh"
        # Read once by the shell a moment later; it need not survive a power cut.
        write_private_file(path, command.encode() + b"\n", durable=False)
        self._command_file = path
        # A leading space keeps it out of history (HISTCONTROL=ignorespace in the rc).
        return f"{kill} . {shlex.quote(str(path))}\r"

    def attach(self, live: LiveExecution) -> None:
        """``live`` is the execution whose output the next C..D window belongs to."""
        self.current = live
        self._awaiting_start = True
        if self._stderr_note is not None:  # typed before the note's turn came: read it now
            self._note_stderr(at_prompt=True)
        elif self._stderr_at_prompt is None and not self._stderr_unsure:
            self._note_stderr(at_prompt=False)  # the first line (the hook may still run)

    def defer_draw(self, draw: Callable[[], Callable[[], None] | None]) -> None:
        """Run ``draw`` (it reads this shell's screen, and may return a write to do after)
        on the next loop turn, or earlier if the screen is about to change: before any more
        output is fed, a resize, a close."""
        self.flush_draw()
        self._pending_draw = draw
        asyncio.get_running_loop().call_soon(self.flush_draw)

    def flush_draw(self, *, write_now: bool = True) -> None:
        """Run the pending draw now, if there is one, then its write: at once, or on the next
        loop turn (``write_now=False``: the PTY reader only appends, it never writes files)."""
        draw, self._pending_draw = self._pending_draw, None
        write = draw() if draw is not None else None
        if write is not None:
            if write_now:
                write()
            else:
                asyncio.get_running_loop().call_soon(write)

    def resize(self, rows: int, cols: int) -> None:
        """Resize the terminal and its screen (a pending draw sees the old size first)."""
        self.flush_draw()
        self.runtime.resize(rows, cols)
        self.screen.resize(cols, rows)

    def _stderr_reaches_terminal(self, *, at_prompt: bool) -> bool | None:
        """Does the shell's stderr (where PS0 prints C) reach its terminal? A closed one does
        not, when read with the shell waiting at its prompt (``at_prompt``); otherwise it may
        be the prompt hook's (run with stderr closed): None, unknown."""
        pid = self.runtime.pid
        where = None if pid is None else kernel.where_fd_goes(pid, 2)
        if where == "closed":
            return False if at_prompt else None
        return None if where is None else where == "terminal"

    def _note_stderr_soon(self) -> None:
        """The shell waits at its prompt: note where its stderr goes, on the next loop turn
        (after the reply that is on its way)."""
        if self._stderr_note is None:
            self._stderr_note = asyncio.get_running_loop().call_soon(
                self._note_stderr, True)

    def _note_stderr(self, at_prompt: bool) -> None:
        self._drop_stderr_note()  # read now: a pending turn would read it again
        self._stderr_at_prompt = self._stderr_reaches_terminal(at_prompt=at_prompt)

    def _drop_stderr_note(self) -> None:
        if self._stderr_note is not None:
            self._stderr_note.cancel()
            self._stderr_note = None

    def _distrust_stderr(self) -> None:
        """A line not ours ran: forget where stderr went (see ``_stderr_unsure``)."""
        self._stderr_unsure = True
        self._stderr_at_prompt = None
        self._drop_stderr_note()

    def _respond(self, data: bytes) -> None:
        self._answers.answer(data)

    def _command_running(self) -> int | None:
        """The number of the command line running now; None at the prompt (or once its end
        marker came)."""
        return self._command_no if self._in_command and self._end is None else None

    # -- output and markers ----------------------------------------------------------------

    def _on_output(self, data: bytes) -> None:
        if self._pending_draw is not None:
            self.flush_draw(write_now=False)
        self.screen.feed(data)
        for piece in self._scanner.feed(data):
            if isinstance(piece, Marker):
                self._on_marker(piece)
            elif self._end is not None and self._end.next_line:
                pass  # output of a line typed ahead, run after ours ended: not ours, not held
            elif self._end is not None:
                self._end.held.append(piece)
                self._end.held_bytes += len(piece)
                if self._end.held_bytes > HELD_LIMIT:
                    # No prompt is this long: the marker was not the shell's.
                    self._reject_end("more output followed it")
            elif self._in_command and self.current is not None:
                self.current.append_output(piece)
        if self._end is not None:
            # The prompt's own bytes just came: the shell is about to wait for input.
            self._schedule_check(restart=True)
        self._listener.output_arrived()

    def _on_marker(self, marker: Marker) -> None:
        self._markers_seen += 1
        if marker.kind == "A":
            self.ready.set()
            if self._end is not None:
                self._schedule_check(restart=True)
            elif self._awaiting_start and self.current is not None:
                # A whole new prompt cycle (A comes from PROMPT_COMMAND, once per cycle)
                # although our line never started: the terminal discarded it (an interrupt
                # flushes the tty's input queue) - once the kernel agrees the shell is idle.
                self._discard_check = True
                self._schedule_check(restart=True)
        elif marker.kind == "C":
            if self._end is None:
                self._in_command = True
                self._stderr_at_prompt = None  # the command may move it
                self._command_no += 1
                self._awaiting_start = False
                self._discard_check = False
            elif not self._end.next_line:
                # A new command line began after our end marker (and its prompt cycle's A):
                # text typed ahead into the command, which the shell read once the command
                # ended. The end stays ours; it is confirmed when the shell is back at its
                # prompt, after that line.
                self._end.next_line = True
                self._distrust_stderr()
                self._ignored("a line typed ahead into this command ran after it, as a "
                              "command line of its own (not recorded as an execution)")
        elif marker.kind == "D":
            if not self._in_command and self._awaiting_start and self.current is not None:
                reached = None if self._stderr_unsure else self._stderr_at_prompt
                if reached is None:
                    # Read when the shell waits at its prompt again (not while the prompt
                    # hook, which printed this D, runs with stderr closed).
                    self._unseen_start = _EndCandidate(marker.exit_code)
                    self._schedule_check(restart=True)
                    return
                if not reached:
                    self._start_unseen()
            if not self._in_command:
                self._ignored(f"end marker (exit {marker.exit_code}) while no command line ran")
                self._distrust_stderr()
                return
            if self._end is not None and self._end.next_line:
                self._schedule_check(restart=True)  # the end of the line typed ahead
                return
            if self._end is not None:
                self._reject_end("a later end marker followed it")
            self._end = _EndCandidate(marker.exit_code)
            self._schedule_check(restart=True)

    # -- the kernel's confirmation ---------------------------------------------------------

    def _schedule_check(self, *, restart: bool) -> None:
        """Check now-ish, then back off: a real prompt is reached within milliseconds of its
        markers, a forged one is never reached until the command really ends."""
        if restart:
            self._check_step = 0
        if self._check is not None:
            self._check.cancel()
        delay = CHECK_BACKOFF_S[min(self._check_step, len(CHECK_BACKOFF_S) - 1)]
        self._check_step += 1
        self._check = asyncio.get_running_loop().call_later(delay, self._run_check)

    def _run_check(self) -> None:
        self._check = None
        if self._end is None and not self._discard_check and self._unseen_start is None:
            return
        fd, pid = self.runtime.fd, self.runtime.pid
        if fd is None or pid is None or not self.runtime.alive:
            return  # the exit handler takes over
        reason = kernel.why_not_at_prompt(fd, pid)
        if reason is not None:
            if self._end is not None:
                self._end.last_reason = reason
            self._schedule_check(restart=False)
            return
        markers = self._markers_seen
        if self.runtime.read_pending() is None or self._markers_seen != markers:
            # The shell waits for input, but markers it wrote before it sat down had not
            # reached this side when the kernel was asked (a line typed ahead that ran and
            # printed its own end), or not all it wrote could be read now: judge again once
            # that is taken into account. (Plain output, such as a background job's, changes
            # nothing here.)
            self._schedule_check(restart=True)
            return
        if self._unseen_start is not None:
            unseen, self._unseen_start = self._unseen_start, None
            if self._awaiting_start and self._stderr_reaches_terminal(at_prompt=True) is False:
                self._start_unseen()
                self._end = unseen
            else:
                self._ignored(f"end marker (exit {unseen.exit_code}) while no command line ran")
                self._distrust_stderr()
        if self._end is not None:
            self._confirm_end()
        elif self._discard_check and self._awaiting_start and self.current is not None:
            self._discard_check = False
            discarded, self.current = self.current, None
            self._awaiting_start = False
            self._listener.command_discarded(discarded)
            if not self._stderr_unsure:
                self._note_stderr_soon()  # after the end's waiters: they wake first

    def _confirm_end(self) -> None:
        """The shell is back at its prompt: the command ended with the marker's exit code,
        in the directory the kernel reports. Bytes after the marker were the prompt."""
        assert self._end is not None
        candidate, self._end = self._end, None
        exit_code = candidate.exit_code
        self._in_command = False
        if not candidate.next_line:  # our command's end, at a real prompt
            self._stderr_unsure = False
        self._unlink_command_file()
        pid = self.runtime.pid
        cwd = kernel.cwd_of(pid) if pid is not None else None
        if cwd is not None:
            self.cwd = cwd
        finished, self.current = self.current, None
        if finished is not None:
            self._listener.command_finished(finished, exit_code)
        if not candidate.next_line:
            # Scheduled after the end (which wakes the reply's task): the reply goes first.
            self._note_stderr_soon()

    def _reject_end(self, why: str) -> None:
        """The end marker was not the shell's: what followed it is the command's output."""
        assert self._end is not None
        candidate, self._end = self._end, None
        if self._check is not None:
            self._check.cancel()
            self._check = None
        if self.current is not None:
            for piece in candidate.held:
                self.current.append_output(piece)
        self._ignored(f"end marker (exit {candidate.exit_code}) ignored: {why}; the kernel "
                      f"said {candidate.last_reason or 'nothing yet'}")

    def _start_unseen(self) -> None:
        """The shell prints D only after PS0 ran for a command line, so our line ran though
        its C never came: PS0 goes to the shell's stderr, which a command sent elsewhere
        (exec 2>/dev/null). What it printed cannot be told from the line's echo: kept as an
        event, and the end is the D's."""
        self._in_command = True
        self._awaiting_start = False
        self._discard_check = False
        self._stderr_at_prompt = None  # the command may move it
        self._ignored("start marker not seen (the shell's stderr does not reach its "
                      "terminal): the command ran, but its output was not captured")

    def _ignored(self, detail: str) -> None:
        if self.current is not None:
            self._listener.marker_ignored(self.current, detail)

    # -- exit ------------------------------------------------------------------------------

    def _unlink_command_file(self) -> None:
        if self._command_file is not None:
            self._command_file.unlink(missing_ok=True)
            self._command_file = None

    def _on_exit(self, status: ExitStatus) -> None:
        self._in_command = False
        self._end = None
        self._unseen_start = None
        if self._check is not None:
            self._check.cancel()
            self._check = None
        self._unlink_command_file()
        self._listener.shell_exited(self, status)

    def close(self) -> None:
        self.flush_draw()
        self._answers.close()
        self._drop_stderr_note()
        if self._check is not None:
            self._check.cancel()
            self._check = None
        self.runtime.close()
        self.rc_path.unlink(missing_ok=True)


@dataclass(slots=True)
class _EndCandidate:
    exit_code: int | None
    held: list[bytes] = field(default_factory=list)
    held_bytes: int = 0
    #: A command line started after this marker (C): typed-ahead text the shell ran.
    next_line: bool = False
    last_reason: str | None = None
