"""``files.edit`` (docs/tools.md#editfiles): whole-file writes and search/replace blocks,
each checked against the revision it was made from, written atomically.

Every edit of a call is prepared first (read, revision checked, blocks applied in memory);
if any of them cannot be applied, nothing is written and each file says why. Then each file
is written to a temporary file in its own directory (its mode kept), fsynced, checked once
more to be the file that was read, and renamed over it, and the directory is fsynced: a
crash at any moment leaves the old file or the new one, never a mix (a crash may leave the
temporary file itself behind, named ``.<name>.tether-<random>.tmp``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from typing import Any

from tether.guardian.runtime.file_paths import Located, read_whole, revision_of, same_file
from tether.protocol.errors import ErrorCode
from tether.protocol.file_methods import FileEdit, FileEdited, SearchBlock
from tether.protocol.limits import MAX_DIFF_LINES, MAX_SCAN_BYTES

#: Mode of a file an edit creates (as a shell with umask 022 makes it; the guardian's own
#: umask, 077, is for Tether's files), and of a helper in the private managed directory.
NEW_FILE_MODE = 0o644
NEW_HELPER_MODE = 0o600
#: Files longer than this many lines are searched for a nearest match by their lines that
#: resemble the search's first or last line only.
NEAREST_FULL_LINES = 5000
#: Above this size a whole-file write's diff is summarised instead of computed.
DIFF_MAX_BYTES = 1024 * 1024


@dataclass(slots=True)
class Prepared:
    """One edit, ready to write: the new bytes, what it replaces, and its diff."""

    where: Located
    new: bytes
    old: bytes | None
    old_stat: os.stat_result | None
    diff: list[str]
    mode: int


class EditRefused(Exception):
    """One file's edit cannot be applied (nothing is written for the call)."""

    def __init__(self, code: ErrorCode, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.detail = code, message, detail


def prepare(edit: FileEdit, where: Located, *, helper: bool) -> Prepared:
    """Check one edit against the file as it is now and compute its result (blocking)."""
    found = read_whole(where.real, where.shown)
    if found is None:
        if edit.revision is not None:
            raise EditRefused(ErrorCode.STALE_REVISION,
                              f"{where.shown} no longer exists (revision {edit.revision} was of "
                              "a file that has been removed since); nothing was written. Leave "
                              "out revision to create it")
        if edit.blocks is not None:
            raise EditRefused(ErrorCode.NOT_FOUND,
                              f"{where.shown} does not exist; search/replace blocks need a file "
                              "to search. Create it with content (no revision)")
        if not os.path.isdir(os.path.dirname(where.real)):
            raise EditRefused(ErrorCode.NOT_FOUND,
                              f"the directory of {where.shown} does not exist; create it first "
                              "(BashCommand mkdir -p)")
        new = (edit.content or "").encode()
        return Prepared(where, new, None, None, _created_diff(new),
                        NEW_HELPER_MODE if helper else NEW_FILE_MODE)
    old, st = found
    current = revision_of(old)
    if edit.revision is None:
        raise EditRefused(ErrorCode.REVISION_REQUIRED,
                          f"{where.shown} exists; overwriting or changing it needs the revision "
                          "of a ReadFiles of it (only creating a file needs none). Read it "
                          "first, then edit with that revision", path=where.shown)
    if edit.revision != current:
        raise EditRefused(ErrorCode.STALE_REVISION,
                          f"{where.shown} changed since revision {edit.revision} was read (by a "
                          "person, a formatter, a command or another agent); nothing was "
                          "written. Read it again and make the edit against what it holds now",
                          revision=current)
    if edit.content is not None:
        new = edit.content.encode()
        diff = _whole_diff(old, new)
    else:
        new, diff = apply_blocks(old, edit.blocks or [], where.shown)
    if len(new) > MAX_SCAN_BYTES:
        raise EditRefused(ErrorCode.LIMIT_EXCEEDED,
                          f"{where.shown} would be {len(new)} bytes; Tether edits files of at "
                          f"most {MAX_SCAN_BYTES} bytes", limit=MAX_SCAN_BYTES, size=len(new))
    return Prepared(where, new, old, st, diff, st.st_mode & 0o7777)


def write_all(prepared: list[Prepared]) -> None:
    """Write every prepared file atomically (blocking). Temporary files first, all of them;
    then each is checked to be the file that was read and renamed over it."""
    prepared = [item for item in prepared if item.new != item.old]  # unchanged: no write
    temps: list[str] = []
    try:
        for item in prepared:
            temps.append(_write_temp(item))
        for item in prepared:
            if not same_file(item.old_stat, item.where.real):
                raise EditRefused(ErrorCode.STALE_REVISION,
                                  f"{item.where.shown} changed while this edit was being "
                                  "written; nothing was written. Read it again")
        for item, temp in zip(prepared, temps, strict=True):
            os.rename(temp, item.where.real)
            _sync_dir(os.path.dirname(item.where.real))
        temps.clear()
    finally:
        for temp in temps:
            with contextlib.suppress(OSError):
                os.unlink(temp)


def _write_temp(item: Prepared) -> str:
    directory, name = os.path.split(item.where.real)
    temp = os.path.join(directory, f".{name}.tether-{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        view = memoryview(item.new)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, item.mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    os.close(fd)
    return temp


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def answer(item: Prepared) -> FileEdited:
    """What the reply says of a written file."""
    lines = item.new.count(b"\n") + (1 if item.new and not item.new.endswith(b"\n") else 0)
    action = "created" if item.old is None else ("unchanged" if item.old == item.new
                                                 else "written")
    shown = item.diff[:MAX_DIFF_LINES]
    fields: dict[str, Any] = {
        "path": item.where.shown, "ok": True, "action": action,
        "revision": revision_of(item.new), "diff": "\n".join(shown),
        "total_lines": lines, "size_bytes": len(item.new)}
    if item.old is not None:
        fields["previous_revision"] = revision_of(item.old)
    if len(item.diff) > len(shown):
        fields["diff_lines_omitted"] = len(item.diff) - len(shown)
    return FileEdited.model_validate(fields)


# -- search/replace ---------------------------------------------------------------------


def apply_blocks(old: bytes, blocks: list[SearchBlock], shown: str) -> tuple[bytes, list[str]]:
    """Apply each block in order: its search text must occur exactly once in the file as
    the blocks before it left it. Works on bytes, so what the blocks do not touch (bytes
    that are not UTF-8 too) stays exactly as it was."""
    data, diff = old, []
    for number, block in enumerate(blocks, start=1):
        search, replace = block.search.encode(), block.replace.encode()
        places = _places(data, search)
        if not places:
            raise _not_found(data, block.search, number, shown)
        if len(places) > 1:
            lines = [data.count(b"\n", 0, at) + 1 for at in places]
            raise EditRefused(
                ErrorCode.SEARCH_AMBIGUOUS,
                f"{shown}: search block {number} matches {len(places)} places, starting at lines "
                f"{', '.join(map(str, lines))}; nothing was written. Make the search text "
                "longer (include a line around it) so that it matches one place only",
                block=number, lines=lines)
        at = places[0]
        line = data.count(b"\n", 0, at) + 1
        diff.append(f"@@ block {number}, line {line} @@")
        diff += [f"-{x}" for x in block.search.splitlines()]
        diff += [f"+{x}" for x in block.replace.splitlines()]
        data = data[:at] + replace + data[at + len(search):]
    return data, diff


def _places(data: bytes, search: bytes, most: int = 20) -> list[int]:
    """Where ``search`` starts in ``data`` (overlapping matches too), at most ``most``."""
    found: list[int] = []
    at = data.find(search)
    while at != -1 and len(found) < most:
        found.append(at)
        at = data.find(search, at + 1)
    return found


def _not_found(data: bytes, search: str, number: int, shown: str) -> EditRefused:
    """``search_not_found``, naming the lines that resemble the search most."""
    import difflib  # only a refused block needs it (guardian idle memory)

    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    wanted = search.splitlines() or [search]
    size = len(wanted)
    firsts = {wanted[0].strip(), wanted[-1].strip()}
    candidates = [i for i in range(max(len(lines) - size + 1, 0))
                  if len(lines) <= NEAREST_FULL_LINES
                  or lines[i].strip() in firsts or lines[i + size - 1].strip() in firsts]
    best, best_ratio = None, 0.0
    joined = "\n".join(wanted)
    for i in candidates[:20000]:
        window = "\n".join(lines[i:i + size])
        matcher = difflib.SequenceMatcher(None, window, joined, autojunk=False)
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best, best_ratio = i, ratio
    if best is None:
        return EditRefused(ErrorCode.SEARCH_NOT_FOUND,
                           f"{shown}: search block {number} matches no place, and no lines of the "
                           "file resemble it; nothing was written. Read the file again and copy "
                           "the search text from it exactly", block=number)
    found = lines[best:best + size]
    hint = ("They differ only in whitespace: copy the indentation exactly. "
            if [x.strip() for x in found] == [x.strip() for x in wanted] else "")
    return EditRefused(
        ErrorCode.SEARCH_NOT_FOUND,
        f"{shown}: search block {number} matches no place; nothing was written. The nearest "
        f"match is lines {best + 1}-{best + size} ({best_ratio:.0%} alike). {hint}The file "
        f"has there:\n" + "\n".join(found[:20]),
        block=number, nearest_lines=[best + 1, best + size], similarity=round(best_ratio, 3))


# -- diffs --------------------------------------------------------------------------------


def _created_diff(new: bytes) -> list[str]:
    text = new.decode("utf-8", errors="replace")
    return ["@@ created @@", *(f"+{x}" for x in text.splitlines())]


def _whole_diff(old: bytes, new: bytes) -> list[str]:
    if old == new:
        return []
    if len(old) > DIFF_MAX_BYTES or len(new) > DIFF_MAX_BYTES:
        before_lines, after_lines = old.count(b"\n"), new.count(b"\n")
        return [f"@@ whole file replaced: {before_lines} lines -> {after_lines} lines (too "
                "large to compare here) @@"]
    import difflib  # only a whole-file write needs it (guardian idle memory)

    before = old.decode("utf-8", errors="replace").splitlines()
    after = new.decode("utf-8", errors="replace").splitlines()
    return list(difflib.unified_diff(before, after, n=1, lineterm=""))[2:]
