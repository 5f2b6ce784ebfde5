"""Answers to terminal queries in a thread's main shell: sent only while the asker can read them.

A program that asks the terminal something (``ESC[6n``: where is the cursor; ``ESC[c``: what
are you) and exits at once leaves its question in its output, and the screen answers it when
that output is read. By then the shell is often back at its prompt, where readline takes the
answer for typed input: after ``printf '\\e[6n'`` the next command line began with ``1R``
(``1R: command not found``, exit 127), so that command did not run as asked.

So an answer goes out only while someone who may read it holds the terminal (the kernel says
who): when the terminal's foreground process group is not the shell's own, a program runs in
front and gets its answer at once. When it is the shell's own while a command line runs, the
shell itself may be asking (the ``read`` builtin, ``read -s -d R -p $'\\e[6n'``), or the
program that asked has just exited and the command's end marker is on its way: the answer is
held for :data:`HOLD_S`, then sent unless that end came meanwhile. At the prompt it is
dropped: nobody asked the line editor anything, and typed into it the answer would become
part of the next command line.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable

from tether.guardian.runtime.pty import PtyRuntime

log = logging.getLogger(__name__)

#: How long an answer waits when the shell itself holds the terminal during a command.
HOLD_S = 0.05


class AnswerGate:
    """Decides, once the output being read has been seen, whether the screen's answers go
    into the main shell's terminal."""

    def __init__(self, runtime: PtyRuntime, running: Callable[[], int | None]) -> None:
        """``running``: the number of the command line that runs now, None when none does or
        its end marker has come."""
        self._runtime = runtime
        self._running = running
        # (the command line it is for, answer): None until the read that asked has been
        # seen whole (its own C marker may come in the same read, after the question).
        self._queued: list[tuple[int | None, bytes]] = []
        self._decision: asyncio.Handle | None = None

    def answer(self, data: bytes) -> None:
        """Take one answer. It is decided on after the read that asked (whose end marker, if
        any, has been seen by then), never in the middle of it."""
        self._queued.append((None, data))
        if self._decision is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (unit tests of the screen path): decide now
            self._decide()
            return
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
        if in_front != own:  # a program runs in front: it is the one that reads
            for _, data in answers:
                self._runtime.answer_query(data)
            return
        # The shell itself holds the terminal. An answer is first held, for the command line
        # running once its read has been seen whole; it is sent if that command still runs
        # when the hold ends, and dropped if it has ended (or none ran).
        now = self._running()
        dropped = 0
        for asked_in, data in answers:
            if now is None or (asked_in is not None and asked_in != now):
                dropped += 1  # its command has ended: the shell is at (or near) its prompt
            elif asked_in is None:
                self._queued.append((now, data))
            else:
                self._runtime.answer_query(data)
        if self._queued:
            self._decision = asyncio.get_running_loop().call_later(HOLD_S, self._decide)
        if dropped:
            log.info("dropped %d answer(s) to terminal queries: the program that asked has "
                     "ended and the shell is at its prompt", dropped)

    def close(self) -> None:
        if self._decision is not None:
            self._decision.cancel()
            self._decision = None
        self._queued.clear()
