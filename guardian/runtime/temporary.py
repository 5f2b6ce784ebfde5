"""Each thread's managed temporary directory (``TETHER_TMP``, docs/tools.md#temporary-helpers):
its budget, measured; its generation; and the release of named helpers that no running
execution of the thread uses.

A helper is kept, with the reason, when a live process of the thread (anything carrying its
``TETHER_THREAD_ID`` mark but its main shell idle at the prompt) names it in its argv, has
its working directory inside the managed directory, or holds it open (``/proc/PID/fd``). A
process whose ``/proc`` entries cannot be read keeps every helper (``unresolved``): nothing
is deleted on a guess. Nothing is ever deleted by age, nor from another thread's directory.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Any

from tether.guardian.history.reconcile import THREAD_MARK
from tether.guardian.runtime.file_paths import Located, inside, locate_helper, revision_of
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.file_methods import HelperReleased, ReleaseItem
from tether.protocol.limits import MAX_SCAN_BYTES, TEMPORARY_BUDGET_BYTES, TEMPORARY_BUDGET_FILES
from tether.shared.identity import process_marks

#: Entries looked at when measuring (a command may fill the directory with many more).
MAX_MEASURED_ENTRIES = 100_000


def generation_of(directory: str) -> str:
    """The managed directory's generation: it changes whenever an entry is added, removed
    or replaced (an atomic write is a new inode), by Tether or by a command."""
    digest = hashlib.sha256()
    try:
        digest.update(str(os.stat(directory).st_ino).encode())
        entries = sorted((entry.name, entry.inode()) for entry in os.scandir(directory))
    except FileNotFoundError:
        entries = []
    for name, inode in entries:
        digest.update(f"\0{name}\0{inode}".encode())
    return "g1-" + digest.hexdigest()[:24]


def measure(directory: str) -> dict[str, Any]:
    """The directory's ``TemporaryUsage``: bytes and files in it (subdirectories too),
    against the per-thread budget."""
    used = files = seen = 0
    pending = [directory]
    while pending and seen < MAX_MEASURED_ENTRIES:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                pending.append(entry.path)
            else:
                files += 1
                used += st.st_size
    return {"dir": directory, "generation": generation_of(directory), "used_bytes": used,
            "files": files, "budget_bytes": TEMPORARY_BUDGET_BYTES,
            "budget_files": TEMPORARY_BUDGET_FILES,
            "over_budget": used > TEMPORARY_BUDGET_BYTES or files > TEMPORARY_BUDGET_FILES}


def refuse_over_budget(usage: dict[str, Any], adding_bytes: int, adding_files: int) -> None:
    """``limit_exceeded`` when writing these helpers would take the directory over budget."""
    after_bytes = usage["used_bytes"] + adding_bytes
    after_files = usage["files"] + adding_files
    if after_bytes > TEMPORARY_BUDGET_BYTES or after_files > TEMPORARY_BUDGET_FILES:
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"the thread's managed directory would hold {after_bytes} bytes in {after_files} "
            f"files; its budget is {TEMPORARY_BUDGET_BYTES} bytes and {TEMPORARY_BUDGET_FILES} "
            "files. Nothing was written. Release helpers that are no longer needed "
            "(EditFiles release_temporary).",
            {"limit": TEMPORARY_BUDGET_BYTES, "size": after_bytes,
             "limit_files": TEMPORARY_BUDGET_FILES, "files": after_files, "input_sent": False})


@dataclass(slots=True)
class Users:
    """What the thread's running processes use of the managed directory."""

    #: helper path -> [(pid, reason)]
    by_path: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    #: processes whose working directory is inside the directory (they use every helper)
    in_dir: list[int] = field(default_factory=list)
    #: processes whose /proc entries could not be read
    unresolved: list[int] = field(default_factory=list)
    #: argv of each process, for helpers named there
    argv: dict[int, list[str]] = field(default_factory=dict)
    cwd: dict[int, str] = field(default_factory=dict)

    def of(self, helper: str, name: str) -> tuple[str, list[int]] | None:
        """(reason, pids) when a process uses ``helper`` (its real path), else None."""
        if self.unresolved:
            return "unresolved", list(self.unresolved)
        if self.in_dir:
            return "cwd", list(self.in_dir)
        holders = self.by_path.get(helper, [])
        if holders:
            return "open", sorted({pid for pid, _ in holders})
        named = [pid for pid, argv in self.argv.items()
                 if any(_names(arg, helper, name, self.cwd.get(pid, "/")) for arg in argv)]
        if named:
            return "argv", named
        return None


def _names(arg: str, helper: str, name: str, cwd: str) -> bool:
    """Does one argument name the helper: its path, a path to it from the process's cwd,
    or a command line (``bash -c``) that holds its path or ``$TETHER_TMP/name``?"""
    if helper in arg or f"$TETHER_TMP/{name}" in arg or f"${{TETHER_TMP}}/{name}" in arg:
        return True
    if os.path.basename(arg) != name:
        return False
    return os.path.realpath(os.path.join(cwd, arg)) == helper


def thread_processes(thread_id: str, idle_shell: int | None) -> list[int]:
    """Live processes marked with the thread, but its main shell when idle at its prompt."""
    return sorted(pid for pid, found in process_marks((THREAD_MARK,)).items()
                  if found.marks.get(THREAD_MARK) == thread_id and pid != idle_shell)


def users_of(directory: str, pids: list[int]) -> Users:
    """Read each process's cwd, open files and argv (Linux /proc)."""
    directory = os.path.realpath(directory)
    users = Users()
    for pid in pids:
        try:
            cwd = _link(f"/proc/{pid}/cwd")
            fds = [_link(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended meanwhile: it uses nothing
        except OSError:
            users.unresolved.append(pid)
            continue
        users.cwd[pid] = cwd
        users.argv[pid] = [arg for arg in argv if arg]
        if inside(cwd, directory):
            users.in_dir.append(pid)
        for target in fds:
            if inside(target, directory):
                users.by_path.setdefault(target, []).append((pid, "open"))
    return users


def _link(path: str) -> str:
    target = os.readlink(path)
    return target.removesuffix(" (deleted)")


def release(directory: str, items: list[ReleaseItem], users: Users) -> list[HelperReleased]:
    """Delete each named helper that is there, unchanged since its revision, in a directory
    of the generation named, and unused; say for each what happened (blocking)."""
    generation = generation_of(directory)  # one for the whole request, taken before any delete
    answers = []
    for item in items:
        try:
            where = locate_helper(directory, item.name)
            answers.append(_release_one(where, item, generation, users))
        except TetherError as err:
            answers.append(HelperReleased.model_validate({
                "name": item.name, "status": "refused",
                "error": {"code": err.code.value, "message": err.message}}))
    return answers


def _release_one(where: Located, item: ReleaseItem, generation: str,
                 users: Users) -> HelperReleased:
    name = where.shown
    try:
        st = os.lstat(where.real)
    except FileNotFoundError:
        return HelperReleased.model_validate({"name": name, "status": "absent"})
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCAN_BYTES:
        raise TetherError(ErrorCode.DENIED, f"{name} is not a plain file of at most "
                          f"{MAX_SCAN_BYTES} bytes; release_temporary deletes helper files only")
    with open(where.real, "rb") as fh:
        current = revision_of(fh.read())
    if current != item.revision:
        raise TetherError(ErrorCode.STALE_REVISION,
                          f"{name} changed since revision {item.revision} (it is {current} now); "
                          "nothing was deleted. Read it again (ReadFiles temporary=true) and "
                          "release it with the fresh revision if it is still not needed.")
    if generation != item.generation:
        raise TetherError(ErrorCode.STALE_REVISION,
                          f"the managed directory changed since generation {item.generation} (it "
                          f"is {generation} now: helpers were added or removed); nothing was "
                          "deleted. Read the helper again to get the current generation.")
    used = users.of(where.real, name)
    if used is not None:
        reason, pids = used
        return HelperReleased.model_validate({"name": name, "status": "kept", "reason": reason,
                                              "pids": pids})
    try:
        os.unlink(where.real)
    except FileNotFoundError:
        return HelperReleased.model_validate({"name": name, "status": "absent"})
    return HelperReleased.model_validate({"name": name, "status": "released"})
