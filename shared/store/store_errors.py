"""Storage failures, reported as what they are (issue 11).

When the state directory's file system is full (or the catalog cannot be written for any
other reason), a request fails with ``storage_unavailable`` naming the path and the free
space, instead of ``internal_error``; transitions the guardian could not write are kept in
memory and retried until written.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from tether.protocol.errors import ErrorCode, TetherError

#: What a read or write of a catalog raises when SQLite refuses it (a damaged, locked or
#: missing file, a full disk): callers outside the store catch this, never SQLite's names.
StoreError = sqlite3.Error

#: What a failing write raises: SQLite ("database or disk is full", "disk I/O error",
#: "database is locked") or the file system (ENOSPC, EFBIG, EIO).
STORAGE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)


def free_bytes(path: Path) -> int | None:
    """Free space on the file system holding ``path`` (None when it cannot be asked)."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def storage_unavailable(path: Path, exc: BaseException) -> TetherError:
    """The error for a write to ``path`` that failed with ``exc``."""
    free = free_bytes(path)
    space = "unknown" if free is None else f"{free} bytes"
    return TetherError(
        ErrorCode.STORAGE_UNAVAILABLE,
        f"cannot write Tether's state at {path} ({exc}); free space there: {space}. Free some "
        "space; nothing new was started, and ends already observed are kept in memory and "
        "written as soon as the disk accepts them.",
        {"path": str(path), "free_bytes": free, "input_sent": False},
    )
