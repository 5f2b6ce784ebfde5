"""Where a ReadFiles or EditFiles path leads, and what a file is (docs/tools.md#readfiles,
docs/security.md#files): paths resolved inside the thread's workspace (symlinks too) or
refused, helpers named inside the thread's managed directory, revisions bound to content,
and one pass over a file that hashes it, counts its lines and picks a range of them.

Everything here is blocking file I/O: callers run it in a worker thread, never on the loop.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import HELPER_NAME_PATTERN, MAX_SCAN_BYTES

#: Read in pieces this large: a 50 MB file is hashed and counted in ~50 reads.
CHUNK = 1024 * 1024
#: A NUL byte in a file's first bytes (or in the range read) makes it binary, as for git.
BINARY_SNIFF = 8192
_HELPER = re.compile(HELPER_NAME_PATTERN)


def revision_of(data: bytes) -> str:
    """The revision of a file whose content is ``data``."""
    return _revision(hashlib.sha256(data))


def _revision(digest: hashlib._Hash) -> str:
    # Opaque to clients; bound to the content only, so a file written back unchanged keeps it.
    return "r1-" + digest.hexdigest()[:32]


def inside(path: str, root: str) -> bool:
    """Is the absolute ``path`` ``root`` or under it?"""
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class Located:
    """A path as asked for (``shown``: relative to its base), as written (``written``: the
    absolute path before symlinks, which the ``.git`` rule reads too) and as the kernel
    resolves it (``real``)."""

    shown: str
    written: str
    real: str


def locate(base: str, path: str, *, what: str = "the workspace") -> Located:
    """``path`` (relative to ``base``, or absolute) when it resolves inside ``base``;
    ``denied`` otherwise, naming where it leads."""
    written = path if path.startswith("/") else os.path.join(base, path)
    real = os.path.realpath(written)
    base_real = os.path.realpath(base)
    if not inside(real, base_real) or real == base_real:
        where = "" if real == written else f" (it resolves to {real})"
        raise TetherError(
            ErrorCode.DENIED,
            f"{path} is outside {what} {base_real}{where}; ReadFiles and EditFiles reach only "
            "files inside it, with symlinks resolved. Nothing was read or written.",
            {"path": path, "input_sent": False})
    return Located(os.path.relpath(real, base_real), written, real)


def locate_helper(directory: str, name: str) -> Located:
    """A helper of the managed ``directory``: a plain name, or its path under the directory;
    a path anywhere else (another thread's directory too) is ``denied``."""
    base_real = os.path.realpath(directory)
    if name.startswith("/"):
        parent, leaf = os.path.split(os.path.normpath(name))
        if os.path.realpath(parent) != base_real:
            raise TetherError(
                ErrorCode.DENIED,
                f"{name} is not a helper of this thread: its managed directory (TETHER_TMP) "
                f"is {base_real}. Nothing was read, written or released.",
                {"path": name, "input_sent": False})
        name = leaf
    if not _HELPER.fullmatch(name):
        raise TetherError(
            ErrorCode.INVALID_REQUEST,
            f"{name[:140]!r} is not a helper name: one plain file name of letters, digits, "
            "'.', '_' and '-' (not starting with '.' or '-'), at most 128 characters",
            {"path": name, "input_sent": False})
    written = os.path.join(base_real, name)
    real = os.path.realpath(written)
    if os.path.dirname(real) != base_real:  # a symlink a command left there
        raise TetherError(
            ErrorCode.DENIED,
            f"helper {name} is a symlink that leads to {real}, outside the managed directory; "
            "helpers are plain files. Nothing was read or written.",
            {"path": name, "input_sent": False})
    return Located(name, written, real)


@dataclass(slots=True)
class Scan:
    """One pass over a file: its size, lines, revision, and the bytes of the lines asked
    for (``picked``, at most ``budget`` + 1 of them: more means the range is over budget)."""

    size: int
    total_lines: int
    revision: str
    binary: bool
    picked: bytes
    #: First and last line of ``picked`` (``start`` past the end: None).
    start_line: int | None
    end_line: int | None
    over_budget: bool
    #: The stat of the open file (its identity and times, for an edit's last check).
    stat: os.stat_result


def open_regular(path: str) -> tuple[int, os.stat_result]:
    """An fd of the regular file at ``path`` (O_NONBLOCK: a FIFO never blocks the read);
    FileNotFoundError when it is not there, ``denied`` when it is not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except PermissionError:
        raise TetherError(ErrorCode.DENIED, f"{path}: the operating system does not let "
                          "Tether open it (permission denied)", {"input_sent": False}) from None
    except IsADirectoryError:
        raise TetherError(ErrorCode.DENIED, f"{path} is a directory, not a file; list it "
                          "with BashCommand (ls)", {"input_sent": False}) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise TetherError(ErrorCode.DENIED, f"{path} is {kind}; ReadFiles and EditFiles "
                          "handle regular files only", {"input_sent": False})
    return fd, st


def too_big_to_scan(shown: str, size: int) -> TetherError:
    return TetherError(
        ErrorCode.TOO_LARGE,
        f"{shown} is {size} bytes; Tether reads through files of at most {MAX_SCAN_BYTES} "
        "bytes (to count lines and take a revision). Look at parts of it with BashCommand "
        "(head, tail, sed -n 'A,Bp', grep -n).",
        {"size": size, "limit": MAX_SCAN_BYTES, "rule": "scan"})


def scan(fd: int, st: os.stat_result, shown: str, *, start: int = 1, end: int | None = None,
         budget: int = MAX_SCAN_BYTES) -> Scan:
    """Read the open file once: hash it, count its lines, and keep lines ``start``..``end``
    (None: to the end) up to ``budget`` + 1 bytes. A line is what ends in "\\n", and a last
    line without one."""
    if st.st_size > MAX_SCAN_BYTES:
        raise too_big_to_scan(shown, st.st_size)
    digest = hashlib.sha256()
    newlines = offset = 0
    start_off: int | None = 0 if start == 1 else None
    end_off: int | None = None
    picked = bytearray()
    binary, last = False, b""
    while True:
        chunk = os.read(fd, CHUNK)
        if not chunk:
            break
        digest.update(chunk)
        if offset < BINARY_SNIFF and b"\0" in chunk[: BINARY_SNIFF - offset]:
            binary = True
        count = chunk.count(b"\n")
        if start_off is None and newlines + count >= start - 1:
            start_off = offset + _nth_newline(chunk, start - 1 - newlines) + 1
        if end is not None and end_off is None and newlines + count >= end:
            end_off = offset + _nth_newline(chunk, end - newlines) + 1
        if start_off is not None and len(picked) <= budget:
            lo = max(start_off - offset, 0)
            hi = len(chunk) if end_off is None else min(end_off - offset, len(chunk))
            if hi > lo:
                picked += chunk[lo:min(hi, lo + budget + 1 - len(picked))]
        newlines += count
        offset += len(chunk)
        last = chunk[-1:]
        if offset > MAX_SCAN_BYTES:  # it grew while being read
            raise too_big_to_scan(shown, offset)
    total = newlines + (1 if offset and last != b"\n" else 0)
    if b"\0" in picked:
        binary = True
    first: int | None = start if start <= total else None
    final = None if first is None else (total if end is None else min(end, total))
    return Scan(size=offset, total_lines=total, revision=_revision(digest), binary=binary,
                picked=bytes(picked), start_line=first, end_line=final,
                over_budget=len(picked) > budget, stat=st)


def _nth_newline(chunk: bytes, n: int) -> int:
    """Index of the ``n``-th (from 1) b"\\n" of ``chunk``, which has at least ``n``; -1 for
    n = 0 (the range starts at the chunk's first byte)."""
    at = -1
    for _ in range(n):
        at = chunk.index(b"\n", at + 1)
    return at


def read_whole(path: str, shown: str) -> tuple[bytes, os.stat_result] | None:
    """A regular file's bytes and stat (None: it is not there); ``too_large`` over the scan
    limit, ``denied`` when it is not a file Tether may open."""
    try:
        fd, st = open_regular(path)
    except FileNotFoundError:
        return None
    try:
        if st.st_size > MAX_SCAN_BYTES:
            raise too_big_to_scan(shown, st.st_size)
        parts = []
        while chunk := os.read(fd, CHUNK):
            parts.append(chunk)
        return b"".join(parts), st
    finally:
        os.close(fd)


def same_file(before: os.stat_result | None, path: str) -> bool:
    """Is ``path`` still the file that was read (None: still absent)? Identity, size and
    modification time: a write in between changes one of them."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return before is None
    if before is None:
        return False
    return ((now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns)
            == (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns))
