"""A thread's main shell: interactive bash in a PTY with Tether's shell integration.

A command is typed as one line, so multi-line commands, heredocs and unbalanced quotes
behave exactly as in a script (one command line, one ``C`` marker, one ``D`` marker) instead
of leaving the shell waiting at a continuation prompt: a short command as
`` eval $'<command>'`` with every byte that readline or history expansion could act on
escaped, a long one written to a private file and run as `` . <file>`` (readline redraws a
long line as it is typed). The bytes between ``C`` and ``D`` are the execution's output.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tether.guardian.runtime.live import LiveExecution
from tether.guardian.runtime.markers import Marker, MarkerScanner, rc_text
from tether.guardian.runtime.pty import ExitStatus, PtyRuntime
from tether.guardian.terminal.screen import TerminalScreen
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


def inline_line(command: str) -> str | None:
    """`` eval $'...'`` typing ``command`` in one line without a file, or None if too long.

    A leading space keeps it out of history (HISTCONTROL=ignorespace in the rc). The body
    ends with a newline, as the command file does, so a heredoc's delimiter is complete.
    """
    data = command.encode()
    if len(data) > INLINE_MAX:
        return None
    body = "".join([_INLINE[b] for b in data])
    if len(body) > INLINE_MAX:
        return None
    return f" eval $'{body}\\n'\r"


class ShellListener(Protocol):
    """What the guardian wants to hear from a main shell."""

    def command_finished(self, live: LiveExecution, exit_code: int | None) -> None: ...

    def shell_exited(self, shell: MainShell, status: ExitStatus) -> None: ...

    def command_discarded(self, live: LiveExecution) -> None: ...

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
    ) -> None:
        self.thread_id = thread_id
        self.generation = generation
        self.cwd = cwd
        self._scratch = scratch
        self._listener = listener
        nonce = secrets.token_hex(8)
        self._scanner = MarkerScanner(nonce)
        self.rc_path = scratch / f"bashrc-{thread_id}-{generation}"
        write_private_file(self.rc_path, rc_text(nonce).encode())
        self.screen = TerminalScreen(cols=cols, rows=rows, respond=self._respond)
        self.runtime = PtyRuntime(
            ["bash", "--rcfile", str(self.rc_path), "-i"],
            env=env,
            cwd=cwd if os.path.isdir(cwd) else str(Path.home()),
            rows=rows,
            cols=cols,
            on_output=self._on_output,
            on_exit=self._on_exit,
        )
        self.screen.flow = self.runtime.set_reading  # emulation paces a runaway program
        self.current: LiveExecution | None = None
        self._in_command = False  # between a C and a D marker
        self._command_file: Path | None = None
        # Set by D, reported at the OSC 7 that follows it, when the new cwd is known.
        self._finished: tuple[LiveExecution, int | None] | None = None
        # Set at the first prompt: typing before it races the shell's startup.
        self.ready = asyncio.Event()
        # The typed command line has not started running yet (no C since it was typed).
        self._awaiting_start = False

    def start(self) -> ProcessIdentity:
        return self.runtime.start()

    @property
    def alive(self) -> bool:
        return self.runtime.alive

    @property
    def busy(self) -> bool:
        """A command (ours, or one typed by hand) is running in the foreground."""
        return self.current is not None or self._in_command

    def command_line(self, execution_id: str, command: str) -> str:
        """The line to type for ``command``: inline when short, else through a file."""
        return inline_line(command) or self.command_file(execution_id, command)

    def command_file(self, execution_id: str, command: str) -> str:
        """Write ``command`` to a private file; return the line to type for it."""
        path = self._scratch / f"cmd-{execution_id}.sh"
        # Read once by the shell a moment later; it need not survive a power cut.
        write_private_file(path, command.encode() + b"\n", durable=False)
        self._command_file = path
        # A leading space keeps it out of history (HISTCONTROL=ignorespace in the rc).
        return f" . {shlex.quote(str(path))}\r"

    def attach(self, live: LiveExecution) -> None:
        """``live`` is the execution whose output the next C..D window belongs to."""
        self.current = live
        self._awaiting_start = True

    def _respond(self, data: bytes) -> None:
        self.runtime.answer_query(data)

    def _on_output(self, data: bytes) -> None:
        self.screen.feed(data)
        current = self.current
        for piece in self._scanner.feed(data):
            if isinstance(piece, Marker):
                self._on_marker(piece)
            elif self._in_command and current is not None:
                current.append_output(piece)
        self._listener.output_arrived()

    def _on_marker(self, marker: Marker) -> None:
        if marker.kind == "A":
            self.ready.set()
        elif marker.kind == "C":
            self._in_command = True
            self._awaiting_start = False
        elif marker.kind == "D":
            self._in_command = False
            finished, self.current = self.current, None
            if self._command_file is not None:
                self._command_file.unlink(missing_ok=True)
                self._command_file = None
            if finished is not None:
                self._finished = (finished, marker.exit_code)
        elif marker.kind == "cwd" and marker.cwd:
            # OSC 7 comes from PROMPT_COMMAND, once per prompt cycle, right after D.
            self.cwd = marker.cwd
            pending = self._finished
            if pending is not None:
                self._finished = None
                self._listener.command_finished(pending[0], pending[1])
            elif self._awaiting_start and self.current is not None:
                # A whole new prompt cycle although our line never started: the terminal
                # discarded it (an interrupt flushes the tty's input queue). It did not run.
                # (A bare A marker is not enough: readline re-prints the prompt on SIGWINCH.)
                discarded, self.current = self.current, None
                self._awaiting_start = False
                self._listener.command_discarded(discarded)

    def _on_exit(self, status: ExitStatus) -> None:
        self._in_command = False
        if self._command_file is not None:
            self._command_file.unlink(missing_ok=True)
        self._listener.shell_exited(self, status)

    def close(self) -> None:
        self.runtime.close()
        self.rc_path.unlink(missing_ok=True)
