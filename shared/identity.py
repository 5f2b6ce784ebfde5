"""Process identities (SPEC R10): a pid alone is never identity, because pids are reused.

"Alive" means: the pid exists, with the same create time, on the same boot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import psutil

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@functools.cache
def boot_id() -> str:
    """This boot's id (stable for the life of the kernel, so caching is safe)."""
    try:
        with open(BOOT_ID_PATH) as fh:
            return fh.read().strip()
    except OSError:
        # Not Linux: fall back to boot time, which also changes on every boot.
        return f"boot-time-{psutil.boot_time():.0f}"


def create_time(pid: int) -> float | None:
    """The process's create time, or None when no such process exists."""
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
