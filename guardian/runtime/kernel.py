"""What the kernel says about the processes behind a PTY (issue 11).

Markers printed into a terminal can be forged by whatever runs in it; these facts cannot:
which process group owns the terminal's foreground, who belongs to a session, what a
process is blocked in. They decide when a shell is really back at its prompt, and which
processes a reset must end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.shared.identity import process_marks

_PROC = Path("/proc")


def _read_proc(path: str) -> bytes:
    """One small ``/proc`` file in one ``read`` (no Path objects, no buffered file: this runs
    after every end marker, on the command's path). Raises OSError when it is gone."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
        while len(data) % 4096 == 0 and data:  # a long children list: read to the end
            more = os.read(fd, 4096)
            if not more:
                break
            data += more
        return data
    finally:
        os.close(fd)
#: Kernel wait channels of a shell that is busy although it sleeps: waiting for a child
#: (``wait`` for a background job), or reading a pipe (a command substitution). Used only
#: where ``/proc/<pid>/syscall`` cannot be read.
_BUSY_WAITS = ("do_wait", "pipe_read", "pipe_wait")
#: System calls a shell at its prompt is blocked in: read, poll, select, pselect6, ppoll.
#: (A shell blocked writing to a full terminal, or waiting for a child, is busy.)
_INPUT_SYSCALLS = {
    "x86_64": {0, 7, 23, 270, 271},
    "aarch64": {63, 72, 73},
}.get(os.uname().machine)
#: Of those, the ones whose first argument says which descriptor is read: read(fd, ...), and
#: select/pselect6(nfds, ...).
_READ_SYSCALLS = {"x86_64": {0}, "aarch64": {63}}.get(os.uname().machine, set())
_SELECT_SYSCALLS = {"x86_64": {23, 270}, "aarch64": {72}}.get(os.uname().machine, set())


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that matter here."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    #: The controlling terminal's device number, as ``/proc/<pid>/stat`` encodes it.
    tty_nr: int = 0


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of a process, or None when it is gone."""
    try:
        raw = _read_proc(f"/proc/{pid}/stat")
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]),
                        int(fields[4]))
    except (IndexError, ValueError):
        return None


def _wait_channel(pid: int) -> str | None:
    try:
        wchan = _read_proc(f"/proc/{pid}/wchan").decode(errors="replace").strip()
    except OSError:
        return None
    return wchan if wchan and wchan != "0" else None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in _read_proc(f"/proc/{pid}/task/{pid}/children").split()]
    except (OSError, ValueError):  # a kernel without CONFIG_PROC_CHILDREN
        return [stat.pid for stat in _all_processes() if stat.ppid == pid]


def _all_processes() -> list[ProcStat]:
    """Every process's stat (no psutil in the guardian: it costs resident memory)."""
    stats = []
    for entry in os.scandir(_PROC):
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None:
                stats.append(stat)
    return stats


def why_not_at_prompt(master_fd: int, shell_pid: int) -> str | None:
    """None when the shell is idle at its prompt, else the reason it is not.

    Idle means: the terminal's foreground process group is the shell's own, and the shell
    sleeps reading its terminal (read, or select/pselect of its stdin alone, on the
    terminal itself). Then a child of the shell in that group is not a command it waits for
    (it would be blocked waiting for the child, or reading a pipe from it) but one that runs
    beside it: a process substitution (``exec > >(tee log)``) or a coprocess. When the call
    does not say which descriptor it reads (poll), idle also needs no child of the shell in
    that group (a command substitution, a pipeline without job control), and a sleep in
    something other than waiting for a child or reading a pipe. A command that runs inside
    the shell itself and waits for terminal input (the ``read`` builtin) looks the same; see
    docs/architecture.md.
    """
    try:
        foreground = os.tcgetpgrp(master_fd)
    except OSError as exc:
        return f"the terminal has no foreground process group ({exc.strerror})"
    shell = proc_stat(shell_pid)
    if shell is None:
        return "the shell is gone"
    if foreground != shell.pgrp:
        return f"process group {foreground} owns the terminal, not the shell's ({shell.pgrp})"
    if shell.state != "S":
        return f"the shell is not waiting for input (state {shell.state})"
    call = _blocking_call(shell_pid)
    if isinstance(call, str):  # "running"
        # On a CPU now, though it slept a moment ago when its state was read: the two
        # readings are instants apart, and a shell that is running is not idle (it was
        # taken for idle, and a line typed ahead then lent its exit status to ours).
        return "the shell is running, not waiting for input"
    if call is not None and _INPUT_SYSCALLS is not None:
        number, args = call
        if number not in _INPUT_SYSCALLS:
            return f"the shell is blocked in system call {number}, not reading input"
        fd = _read_fd(number, args)
        on_terminal = None if fd is None else _is_controlling_terminal(shell, fd)
        if on_terminal:
            return None
        if on_terminal is False:
            return f"the shell is reading descriptor {fd}, not its terminal"
    for child in _children(shell_pid):
        stat = proc_stat(child)
        if stat is not None and stat.pgrp == shell.pgrp and stat.state != "Z":
            return f"process {child} runs in the shell's foreground group"
    if call is not None and _INPUT_SYSCALLS is not None:
        return None
    wchan = _wait_channel(shell_pid)
    if wchan is not None and any(busy in wchan for busy in _BUSY_WAITS):
        return f"the shell is waiting in {wchan}, not for input"
    return None


def _blocking_call(pid: int) -> tuple[int, list[int]] | Literal["running"] | None:
    """The system call ``pid`` is blocked in and its six arguments, ``"running"`` when it is
    on a CPU, or None when that cannot be read."""
    try:
        fields = _read_proc(f"/proc/{pid}/syscall").split()
    except OSError:
        return None
    if fields[:1] == [b"running"]:
        return "running"
    try:
        return int(fields[0]), [int(arg, 16) for arg in fields[1:7]]
    except (IndexError, ValueError):  # a field that is not a number
        return None


def _read_fd(number: int, args: list[int]) -> int | None:
    """The one descriptor a blocked input call waits on, when its arguments say: read(fd),
    or select/pselect6 of descriptor 0 alone (nfds 1, as readline and ``read -t`` wait).
    None for poll and wider selects (which descriptors they watch is in user memory)."""
    if number in _READ_SYSCALLS:
        return args[0]
    if number in _SELECT_SYSCALLS and args[0] == 1:
        return 0
    return None


#: The device of /dev/tty, which opens the process's controlling terminal.
_DEV_TTY = (5, 0)


def where_fd_goes(pid: int, fd: int) -> Literal["terminal", "elsewhere", "closed"] | None:
    """Where ``pid``'s descriptor ``fd`` leads: its controlling terminal, elsewhere, or
    nowhere (closed). None: unknown (no such process, or /proc unreadable)."""
    stat = proc_stat(pid)
    if stat is None:
        return None
    if not os.path.lexists(f"/proc/{pid}/fd/{fd}"):
        return "closed" if os.path.isdir(f"/proc/{pid}/fd") else None
    reaches = _is_controlling_terminal(stat, fd)
    return None if reaches is None else "terminal" if reaches else "elsewhere"


def waits_for_a_child_in_front(pid: int) -> bool:
    """Is a child of ``pid`` in its process group (what the shell waits for when a command
    substitution or a pipeline without job control runs)?"""
    shell = proc_stat(pid)
    if shell is None:
        return False
    for child in _children(pid):
        stat = proc_stat(child)
        if stat is not None and stat.pgrp == shell.pgrp and stat.state != "Z":
            return True
    return False


def _is_controlling_terminal(stat: ProcStat, fd: int) -> bool | None:
    """Is the process's descriptor ``fd`` its controlling terminal? None when that cannot be
    read (then nothing is concluded from it)."""
    if not stat.tty_nr:
        return None
    try:
        device = os.stat(f"/proc/{stat.pid}/fd/{fd}").st_rdev
    except OSError:
        return None
    if (os.major(device), os.minor(device)) == _DEV_TTY:
        return True  # /dev/tty: whatever the controlling terminal is (exec 0</dev/tty)
    # tty_nr packs the device as the kernel's old_encode_dev does: minor bits 0-7 and 20-31.
    major, minor = (stat.tty_nr >> 8) & 0xFFF, (stat.tty_nr & 0xFF) | ((stat.tty_nr >> 12) & 0xFFF00)
    return os.major(device) == major and os.minor(device) == minor


def cwd_of(pid: int) -> str | None:
    """The working directory of a live process, from the kernel: its path, as ``pwd`` says it,
    also when the directory was removed (the kernel then appends `` (deleted)``)."""
    try:
        path = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    if path.endswith(_DELETED) and not os.path.isdir(path):
        return path[: -len(_DELETED)]
    return path


_DELETED = " (deleted)"


def session_members(session_id: int) -> list[int]:
    """Every live process of a session (the session id is its leader's pid)."""
    return [s.pid for s in _all_processes() if s.session == session_id and s.state != "Z"]


def foreground_reads(master_fd: int) -> tuple[int, tuple[int, ...], int] | None:
    """The terminal's foreground process group, its members, and the bytes they have read so
    far in all (``rchar`` of ``/proc/<pid>/io``: every ``read``, the terminal's included), or
    None when any of it cannot be read. Unchanged between two readings, nobody in front read
    a byte — from the terminal or anywhere."""
    try:
        group = os.tcgetpgrp(master_fd)
    except OSError:
        return None
    members = tuple(sorted(s.pid for s in _all_processes() if s.pgrp == group and s.state != "Z"))
    total = 0
    for pid in members:
        try:
            io = _read_proc(f"/proc/{pid}/io")
        except OSError:
            return None
        line = next((row for row in io.splitlines() if row.startswith(b"rchar:")), None)
        if line is None:
            return None
        total += int(line.split()[1])
    return (group, members, total) if members else None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (including those that left its session)."""
    children: dict[int, list[int]] = {}
    for stat in _all_processes():
        if stat.state != "Z":
            children.setdefault(stat.ppid, []).append(stat.pid)
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return found


def signal_all(pids: Iterable[int], sig: int) -> None:
    """Send ``sig`` to each process that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _exited(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is None or stat.state in ("Z", "X")


async def wait_exited(pids: Iterable[int], timeout_s: float) -> set[int]:
    """Wait until every process has exited (zombies count as exited) or the timeout passes;
    returns the ones still alive. Exits are seen through pidfds: no polling."""
    loop = asyncio.get_running_loop()
    pending: dict[int, int] = {}
    for pid in pids:
        try:
            pending[os.pidfd_open(pid)] = pid
        except OSError:
            continue  # already gone
    if not pending:
        return set()
    all_gone = loop.create_future()

    def on_exit(fd: int) -> None:
        loop.remove_reader(fd)
        os.close(fd)
        del pending[fd]
        if not pending and not all_gone.done():
            all_gone.set_result(None)

    for fd in pending:
        loop.add_reader(fd, on_exit, fd)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_gone, timeout_s)
    alive = set()
    for fd, pid in pending.items():
        loop.remove_reader(fd)
        os.close(fd)
        if not _exited(pid):
            alive.add(pid)
    return alive


def session_trees(leaders: Iterable[int]) -> set[int]:
    """Every live member of these sessions and every descendant of their leaders (including
    those that left the session), from one ``/proc`` scan."""
    wanted = set(leaders)
    stats = [stat for stat in _all_processes() if stat.state != "Z"]
    found = {stat.pid for stat in stats if stat.session in wanted}
    children: dict[int, list[int]] = {}
    for stat in stats:
        children.setdefault(stat.ppid, []).append(stat.pid)
    todo = list(wanted)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


async def end_session(leader: int, grace_s: float) -> list[int]:
    """End a PTY session the way a closing terminal would, then make sure.

    SIGHUP (and SIGCONT, so stopped jobs see it) to every process of the session and every
    descendant of its leader; SIGKILL to whatever is still alive after ``grace_s``. Returns
    the pids that survived even that. The caller reaps the leader (it is its child).
    """
    targets = {leader, *session_members(leader), *descendants(leader)}
    signal_all(targets, signal.SIGHUP)
    signal_all(targets, signal.SIGCONT)
    alive = await wait_exited(targets, grace_s)
    # Anything forked since the first look (a trap handler's child) goes too.
    alive |= {*session_members(leader), *descendants(leader)} - targets
    signal_all(alive, signal.SIGKILL)
    return sorted(await wait_exited(alive, 1.0))


async def end_sessions(leaders: Iterable[int], grace_s: float) -> list[int]:
    """:func:`end_session` for many sessions at once (an archive cascade ends a whole tree
    of agents): one ``/proc`` scan per step instead of two per session."""
    leaders = list(leaders)
    targets = {*leaders, *session_trees(leaders)}
    signal_all(targets, signal.SIGHUP)
    signal_all(targets, signal.SIGCONT)
    alive = await wait_exited(targets, grace_s)
    # Anything forked since the first look (a trap handler's child) goes too.
    alive |= session_trees(leaders) - targets
    signal_all(alive, signal.SIGKILL)
    return sorted(await wait_exited(alive, 1.0))


def processes_marked(name: str, value: str, *, unless: str) -> list[int]:
    """Live processes whose environment has ``name=value`` but no variable ``unless``.

    Tether marks every process it starts with its thread (docs/tools.md#trees-and-parents); a process that
    left its
    session (``setsid``) can still be found by that mark, though not stopped by a hangup.
    """
    return sorted(pid for pid, found in process_marks((name, unless)).items()
                  if found.marks.get(name) == value and unless not in found.marks)
