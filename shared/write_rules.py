"""Which files a restricted mode may write (docs/security.md#modes): the write globs of
``code_writer``, the ``.git`` rule, and paths resolved the way the kernel resolves them.

One rule for every way of writing a file: the front-end applies it to a command line's
redirections (``frontend/policy/shell_policy``), the guardian to ``EditFiles``
(``guardian/runtime/file_edits``), so that a file a redirection may not write cannot be
written by an edit either, nor the other way round.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence

#: Where a path names another file in each process (``/proc/self``, ``/dev/fd``,
#: ``/dev/stdout``), or no file at all (devices; bash's own ``/dev/tcp``).
_PROCESS_DEPENDENT = ("/proc/", "/dev/")
#: A path component no write glob matches: git's own directory (or file, in a worktree).
GIT_DIR = ".git"
#: Symlinks followed in one path before giving up (the kernel's limit, ELOOP).
_MAX_LINKS = 40


def write_refusal(written: str, globs: Sequence[re.Pattern[str]] | None, *,
                  shown: str) -> str | None:
    """Why ``globs`` (None: any file) do not let a write to the absolute path ``written``
    through, or None when they do. ``shown`` names the target in the reason as the caller
    gave it. Symlinks are resolved: one inside an allowed directory must not lead the write
    elsewhere."""
    if globs is None:
        return None
    path = resolve_write_target(written)
    if path is None:
        return (f"`{shown}` leads into /proc or /dev, where a path names another file in each "
                "process (/proc/self/cwd is the shell's directory, not the checker's); name a "
                "file in the workspace, or /dev/null")
    if GIT_DIR in written.split("/") or GIT_DIR in path.split("/"):
        # git runs what its config and hooks name: `pager = touch x` in .git/config ran
        # at the next `git log`. No glob reaches there (`"all"` does, on purpose).
        return (f"{path} is inside a .git directory (or is one), and git runs the programs "
                "its config and hooks name; write globs never match there, only "
                "allowed_globs \"all\" does")
    if not any(glob.fullmatch(path) for glob in globs):
        return f"{path} matches none of allowed_globs"
    return None


def resolve_write_target(path: str) -> str | None:
    """The absolute ``path`` with its symlinks resolved, as the kernel would for any process;
    None when it passes through /proc or /dev (except the final /dev/null), or loops.

    Not ``os.path.realpath``: that resolves /proc/self, /proc/thread-self and /dev/fd
    (through /dev/stdout, a symlink to /proc/self/fd/1) against the *checking* process, while
    bash opens them in the shell, whose directory and descriptors are others.
    """
    pending = [part for part in reversed(path.split("/")) if part]
    resolved, links = "/", 0
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, part)
        if candidate != "/dev/null" and candidate.startswith(_PROCESS_DEPENDENT):
            return None
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            is_link = False  # missing (or unreadable): the rest of the path is literal
        if not is_link:
            resolved = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            return None
        try:
            link = os.readlink(candidate)
        except OSError:
            return None  # it changed under the check
        if link.startswith("/"):
            resolved = "/"
        pending.extend(part for part in reversed(link.split("/")) if part)
    return resolved


def glob_regex(glob: str, workspace_root: str) -> re.Pattern[str]:
    """A write glob as a regex over absolute paths: relative globs are under the workspace;
    ``*`` and ``?`` stay inside one path component, ``**`` crosses them."""
    absolute = glob if glob.startswith("/") else os.path.join(workspace_root, glob)
    out, i = [], 0
    while i < len(absolute):
        if absolute.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif absolute.startswith("**", i):
            out.append(".*")
            i += 2
        elif absolute[i] == "*":
            out.append("[^/]*")
            i += 1
        elif absolute[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(absolute[i]))
            i += 1
    return re.compile("".join(out))
