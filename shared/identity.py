"""Process identities (docs/protocol.md#identity): a pid alone is never identity, because pids are reused.

"Alive" means: the pid exists, with the same create time, on the same boot.

On Linux both are read from ``/proc`` directly, the way psutil computes them (so the figures
are identical to psutil's): the guardian imports this module, and psutil would cost it
about 2.5 MB of resident memory for two numbers. Elsewhere psutil is used.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_PROC = os.path.exists("/proc/self/stat")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _PROC else 100


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:  # no such process (or not ours to read)
        return None
    return data[data.rfind(b")") + 2 :].split()


def _boot_time() -> float:
    """psutil.boot_time() on Linux: ``btime`` of /proc/stat, read every time as psutil does."""
    with open("/proc/stat", "rb") as fh:
        for line in fh:
            if line.startswith(b"btime"):
                return float(line.split()[1])
    raise RuntimeError("no btime in /proc/stat")


@functools.cache
def boot_id() -> str:
    """This boot's id (stable for the life of the kernel, so caching is safe)."""
    try:
        with open(BOOT_ID_PATH) as fh:
            return fh.read().strip()
    except OSError:
        # Not Linux: fall back to boot time, which also changes on every boot.
        import psutil

        return f"boot-time-{psutil.boot_time():.0f}"


def create_time(pid: int) -> float | None:
    """The process's create time, or None when no such process exists."""
    if pid <= 0:
        return None
    if _PROC:
        fields = _stat(pid)
        if fields is None or len(fields) < 20:
            return None
        # starttime (field 22) is in clock ticks since boot: psutil's exact arithmetic.
        return float(fields[19]) / _CLOCK_TICKS + _boot_time()
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """``{pid, create_time, boot_id}`` of one process."""

    pid: int
    create_time: float
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """Identity of a live process, or None when it does not exist."""
        ctime = create_time(pid)
        return None if ctime is None else cls(pid, ctime, boot_id())

    def alive(self) -> bool:
        """True when this very process (not a reused pid) still runs on this boot."""
        if self.boot_id != boot_id():
            return False
        ctime = create_time(self.pid)
        if ctime is None:
            return False
        if _PROC:
            fields = _stat(self.pid)
            if fields is None or fields[0] == b"Z":  # a zombie has ended
                return False
        else:
            import psutil

            try:
                if psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE:
                    return False
            except psutil.Error:
                return False
        return abs(ctime - self.create_time) < 0.01

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time, "boot_id": self.boot_id}

    @classmethod
    def from_dict(cls, data: Any) -> ProcessIdentity | None:
        """Parse; None for anything malformed (a damaged file is treated as 'no process')."""
        if not isinstance(data, dict):
            return None
        pid, ctime, boot = data.get("pid"), data.get("create_time"), data.get("boot_id")
        if not isinstance(pid, int) or not isinstance(ctime, int | float) or not isinstance(boot, str):
            return None
        return cls(pid, float(ctime), boot)


class Marked(NamedTuple):
    """A live process's parent and the marks (``{name: value}``) in its environment."""

    ppid: int
    marks: dict[str, str]


def process_marks(names: Sequence[str]) -> dict[int, Marked]:
    """Each live process (not this one, not a zombie) whose environment sets any of the
    variables ``names``: its parent and those variables' values. Linux only.

    Tether marks every process it starts with its thread, and those in their own terminal
    with their execution (docs/tools.md#trees-and-parents). The mark goes wherever the process goes: out of
    its session
    (``setsid``, ``nohup``) or past its guardian's death, where no process tree leads to it.
    """
    if not _PROC:
        return {}
    wanted = tuple(f"{name}=".encode() for name in names)
    found: dict[int, Marked] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                variables = fh.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        marks = {v.split(b"=", 1)[0].decode(): v.split(b"=", 1)[1].decode(errors="replace")
                 for v in variables if v.startswith(wanted)}
        if marks:
            fields = _stat(int(entry.name))
            if fields is not None and fields[0] not in (b"Z", b"X"):
                found[int(entry.name)] = Marked(int(fields[1]), marks)
    return found
