"""Answers to terminal queries in a thread's main shell: sent only while the asker can read them.

A program that asks the terminal something (``ESC[6n``: where is the cursor; ``ESC[c``: what
are you) and exits at once leaves its question in its output, and the screen answers it when
that output is read. By then the shell is often back at its prompt, where readline takes the
answer for typed input: after ``printf '\\e[6n'`` the next command line began with ``1R``
(``1R: command not found``, exit 127), so that command did not run as asked.

So an answer goes in only while someone who may read it holds the terminal (the kernel says
who). When the terminal's foreground process group is not the shell's own, a program runs in
front: it gets the answer at once, as from a real terminal; so does a child of the shell in
its own group, which the shell waits for (a command substitution, ``set +m``). When it is the
shell's own while
a command line runs, either the shell itself asked (the ``read`` builtin,
``read -s -d R -p $'\\e[6n'``) or the program that asked has exited and the command's end
marker is on its way: the answer waits until the shell is blocked reading its terminal with
no output left unread (the end marker would be in it), and is sent then, unless that end came
first. At the prompt it is dropped: nobody asked the line editor anything.

(A leftover that gets past this, say an answer handed to a program in front that never
reads it, is cleared by the kill-line key each typed command line starts with:
``shell.inline_line``.)
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import struct
import termios
from collections.abc import Callable

from tether.guardian.runtime import kernel
from tether.guardian.runtime.pty import PtyRuntime

log = logging.getLogger(__name__)

#: How often a held answer looks again whether the shell itself reads.
HOLD_S = 0.01
#: How long an answer may be held before it is dropped (nobody read it).
HOLD_MAX_S = 5.0


class AnswerGate:
    """Decides, once the output being read has been seen, whether the screen's answers go
    into the main shell's terminal."""

    def __init__(self, runtime: PtyRuntime, running: Callable[[], int | None]) -> None:
        """``running``: the number of the command line that runs now, None when none does or
        its end marker has come."""
        self._runtime = runtime
        self._running = running
        # (the command line it is for, held since, answer): the command line is None until
        # the read that asked has been seen whole (its C marker may come in the same read,
        # after the question).
        self._queued: list[tuple[int | None, float, bytes]] = []
        self._decision: asyncio.Handle | None = None

    def answer(self, data: bytes) -> None:
        """Take one answer. It is decided on after the read that asked (whose end marker, if
        any, has been seen by then), never in the middle of it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests of the screen path): send as it comes
            self._runtime.answer_query(data)
            return
        self._queued.append((None, loop.time(), data))
        if self._decision is None:
            self._decision = loop.call_soon(self._decide)

    def _decide(self) -> None:
        self._decision = None
        answers, self._queued = self._queued, []
        fd, pid = self._runtime.fd, self._runtime.pid
        if not answers or fd is None or pid is None:
            return
        try:
            in_front, own = os.tcgetpgrp(fd), os.getpgid(pid)
        except OSError:  # the terminal or the shell is gone: nobody to answer
            return
        if in_front != own or kernel.waits_for_a_child_in_front(pid):
            # A program runs in front (its own group, or the shell's when the shell waits
            # for it: a command substitution, no job control): it is the one that reads.
            for _, _, data in answers:
                self._runtime.answer_query(data)
            return
        now, loop = self._running(), asyncio.get_running_loop()
        held = now is not None and any(asked_in == now for asked_in, _, _ in answers)
        reads = held and _shell_reads(fd, pid)
        dropped = 0
        for asked_in, since, data in answers:
            if now is None or (asked_in is not None and asked_in != now):
                dropped += 1  # its command has ended: the shell is at (or near) its prompt
            elif asked_in is not None and reads:
                self._runtime.answer_query(data)
            elif loop.time() - since > HOLD_MAX_S:
                dropped += 1
            else:
                self._queued.append((now, since, data))
        if self._queued:
            self._decision = loop.call_later(HOLD_S, self._decide)
        if dropped:
            log.info("dropped %d answer(s) to terminal queries: the program that asked has "
                     "ended", dropped)

    def close(self) -> None:
        if self._decision is not None:
            self._decision.cancel()
            self._decision = None
        self._queued.clear()


def _shell_reads(fd: int, pid: int) -> bool:
    """Is the shell itself blocked reading its terminal, with none of its output unread?

    Output still unread may hold the end marker of the command that asked, printed just
    before the shell went back to reading (at its prompt)."""
    try:
        unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return False
    return unread == 0 and kernel.why_not_at_prompt(fd, pid) is None
