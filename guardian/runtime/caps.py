"""Caps on what runs at once, and what a start says when the host has run out.

Every background command and managed agent holds a terminal of the host, a process and about
three of the guardian's descriptors. Without a cap one client starting jobs in a loop runs
the host out of terminals, or the guardian out of descriptors, for every other client (700
jobs in 4 s did), and the guardian then cannot even open a journal to answer a read. So a
start is refused before anything is created when its thread or its guardian already runs
its share (``limit_exceeded``), or when the guardian would be left with fewer than
:data:`DESCRIPTOR_RESERVE` free descriptors (``resource_exhausted``). A start that fails all
the same because something ran out (another process took the last terminal) is
``resource_exhausted`` too, naming what ran out: :func:`exhausted`.
"""

from __future__ import annotations

import errno
import os
import resource
from dataclasses import dataclass

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import (
    DESCRIPTOR_RESERVE,
    MAX_RUNNING_PER_GUARDIAN,
    MAX_RUNNING_PER_THREAD,
)

#: What to do about a refusal, said once for every message below.
_END_SOME = ("End some of them (send_keys Ctrl-c, or kill their processes) or wait for them "
             "to finish, then start it again; Execution.list shows what runs.")

#: What an errno of a failed start says ran out, and how a person gets more of it.
_RAN_OUT: dict[int, tuple[str, str]] = {
    errno.EMFILE: ("descriptors", "the guardian's open-file limit (RLIMIT_NOFILE, `ulimit -n` "
                   "where the guardian starts)"),
    errno.ENFILE: ("descriptors", "the host's open-file limit (fs.file-max)"),
    errno.ENOSPC: ("terminals", "the host's pseudo-terminals (kernel.pty.max)"),
    errno.EAGAIN: ("processes", "the processes this user may run (RLIMIT_NPROC, `ulimit -u`) "
                   "or the host's pid limit"),
    errno.ENOMEM: ("memory", "the host's memory"),
}
#: What Python's ``pty`` module raises when it found no terminal to open, without the errno
#: of why (ptyprocess forks through it): a new terminal is asked for to learn the errno.
_NO_PTY = "out of pty devices"


@dataclass(frozen=True, slots=True)
class RunningCaps:
    """How many background commands and managed agents may run at once."""

    per_thread: int = MAX_RUNNING_PER_THREAD
    per_guardian: int = MAX_RUNNING_PER_GUARDIAN
    descriptor_reserve: int = DESCRIPTOR_RESERVE

    def check(self, running: tuple[int, int]) -> None:
        """Refuse one more start, before anything is created, when ``running`` (``(in the
        thread, in the guardian)``, ``LiveTable.running``) is at a cap, or when descriptors
        are short."""
        in_thread, in_all = running
        if in_thread >= self.per_thread:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"this thread already runs {in_thread} background commands and managed agents, "
                f"the most one thread may run at once ({self.per_thread}, "
                f"TETHER_MAX_RUNNING_PER_THREAD); nothing was started. {_END_SOME}",
                {"input_sent": False, "rule": "running_per_thread", "limit": self.per_thread,
                 "running": in_thread},
            )
        if in_all >= self.per_guardian:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"this workspace's guardian already runs {in_all} background commands and "
                f"managed agents, the most it runs at once ({self.per_guardian}, "
                f"TETHER_MAX_RUNNING_PER_GUARDIAN); nothing was started. {_END_SOME}",
                {"input_sent": False, "rule": "running_per_guardian", "limit": self.per_guardian,
                 "running": in_all},
            )
        self.check_descriptors()

    def check_descriptors(self) -> None:
        """``resource_exhausted`` when fewer than ``descriptor_reserve`` descriptors are left
        below the guardian's open-file limit (a new main shell asks this too)."""
        left = descriptors_left()
        if left is None or left[0] >= self.descriptor_reserve:
            return
        free, limit = left
        raise TetherError(
            ErrorCode.RESOURCE_EXHAUSTED,
            f"the guardian is running out of descriptors: {limit - free} of its {limit} are "
            f"open (RLIMIT_NOFILE), and it keeps {self.descriptor_reserve} free to answer "
            f"requests; nothing was started. {_END_SOME} Or raise the limit (`ulimit -n`) "
            "where the guardian starts.",
            {"input_sent": False, "resource": "descriptors", "limit": limit,
             "open": limit - free, "reserve": self.descriptor_reserve},
        )


def descriptors_left() -> tuple[int, int] | None:
    """``(free, limit)``: descriptors this process may still open below its soft
    RLIMIT_NOFILE, and that limit; None when it has none."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return None
    try:
        used = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            return None  # no /proc: nothing to go by
        used = limit  # not even the listing could open one
    return max(0, limit - used), limit


def exhausted(exc: OSError, *, started: bool = False) -> TetherError | None:
    """The ``resource_exhausted`` error for a start that failed because something ran out,
    naming it; None for any other failure. ``started``: the program may have run a moment
    (the failure came after the fork), so what was typed is unknown, not unsent."""
    code = exc.errno
    if code is None and _NO_PTY in str(exc):
        code = _terminal_errno() or errno.ENOSPC  # a terminal came free since: say what was
    if code not in _RAN_OUT:
        return None
    what, where = _RAN_OUT[code]
    done = ("it was started and killed at once" if started else "nothing was started")
    return TetherError(
        ErrorCode.RESOURCE_EXHAUSTED,
        f"could not start the program: out of {what} ({os.strerror(code)}: {where}); "
        f"{done}. {_END_SOME}",
        {"input_sent": "unknown" if started else False, "resource": what,
         "errno": errno.errorcode.get(code, str(code))},
    )


def _terminal_errno() -> int | None:
    """Why a new pseudo-terminal cannot be opened now (its errno), or None when it can."""
    try:
        master, peer = os.openpty()
    except OSError as exc:
        return exc.errno
    os.close(master)
    os.close(peer)
    return None
