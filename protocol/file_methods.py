"""ReadFiles and EditFiles on the wire (docs/tools.md#readfiles, docs/tools.md#editfiles):
the path-spec grammar, and the params and result models of ``files.read``, ``files.edit``
and ``files.release`` (capability ``files``, protocol 1.9).

The grammar is defined once, here: the guardian reads what a spec asks for with
:func:`parse_path_spec`, and the usage log classifies requests with the same function
(whole file, bounded range, open-ended range), so the two cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from tether.protocol.errors import ErrorCode
from tether.protocol.limits import (
    HELPER_NAME_PATTERN,
    MAX_BLOCKS,
    MAX_EDIT_CALL_BYTES,
    MAX_EDITS,
    MAX_PATH,
    MAX_READ_PATHS,
    MAX_RELEASE,
    MAX_WIRE_INT,
    MAX_WRITE_BYTES,
)
from tether.protocol.methods import Params, Scoped, coded_error, utf8_limit
from tether.protocol.results import Result
from tether.protocol.text import CleanText

# -- path specs ----------------------------------------------------------------------------

#: The range suffix of a spec: ``:10-20``, ``:-20`` (lines 1-20), ``:20-`` and ``:20`` (from
#: line 20 to the end). Anything else after a colon is part of the file's name.
_RANGE = re.compile(r":(?:(\d{1,10})-(\d{1,10})|-(\d{1,10})|(\d{1,10})-?)$")

Shape = Literal["whole", "bounded", "open_ended"]


@dataclass(frozen=True, slots=True)
class PathSpec:
    """One ReadFiles entry: the path, and the lines asked for (``end`` None: to the end)."""

    path: str
    start: int
    end: int | None
    shape: Shape


def parse_path_spec(spec: str) -> PathSpec:
    """``"a.py"``, ``"a.py:10-20"``, ``"a.py:-20"``, ``"a.py:20-"`` or ``"a.py:20"``; raises
    ValueError for a range that names no line (line 0, an end before its start). A file
    whose name ends in ``:<digits>`` is read whole as ``name:1-``."""
    match = _RANGE.search(spec)
    if match is None or match.start() == 0:
        return PathSpec(spec, 1, None, "whole")
    path = spec[: match.start()]
    first, last, upto, start = match.groups()
    if first is not None:
        spec_start, spec_end = int(first), int(last)
    elif upto is not None:
        spec_start, spec_end = 1, int(upto)
    else:
        spec_start, spec_end = int(start), None
    if spec_start < 1 or (spec_end is not None and spec_end < 1):
        raise ValueError(f"{spec!r}: lines are numbered from 1")
    if spec_end is not None and spec_end < spec_start:
        raise ValueError(f"{spec!r}: the range ends (line {spec_end}) before it starts "
                         f"(line {spec_start})")
    if spec_start > MAX_WIRE_INT or (spec_end or 0) > MAX_WIRE_INT:
        raise ValueError(f"{spec!r}: a line number is at most {MAX_WIRE_INT}")
    return PathSpec(path, spec_start, spec_end, "bounded" if spec_end is not None else "open_ended")


def _check_spec(value: str) -> str:
    parse_path_spec(value)
    return value


PathSpecText = Annotated[CleanText, Field(min_length=1, max_length=MAX_PATH + 32),
                         AfterValidator(_check_spec)]
FilePath = Annotated[CleanText, Field(min_length=1, max_length=MAX_PATH)]
#: A revision or generation as Tether hands them out (opaque to clients).
Token = Annotated[str, Field(min_length=1, max_length=64)]
WriteText = Annotated[CleanText, AfterValidator(utf8_limit(
    MAX_WRITE_BYTES, "Write a large file in parts with search/replace blocks, or with a "
                     "command."))]


# -- params ---------------------------------------------------------------------------------


class ReadFilesParams(Scoped):
    paths: list[PathSpecText] = Field(min_length=1, max_length=MAX_READ_PATHS)
    #: Read helpers of the thread's managed temporary directory (names, not paths).
    temporary: bool = False


class SearchBlock(Params):
    search: WriteText = Field(min_length=1)
    replace: WriteText


class FileEdit(Params):
    """One file's edit: its whole new ``content``, or ``blocks`` applied in order."""

    path: FilePath
    revision: Token | None = None
    content: WriteText | None = None
    blocks: list[SearchBlock] | None = Field(default=None, min_length=1, max_length=MAX_BLOCKS)

    @model_validator(mode="after")
    def _one_kind(self) -> FileEdit:
        if (self.content is None) == (self.blocks is None):
            raise ValueError("an edit has either content (the whole file) or blocks "
                             "(search/replace), not both and not neither")
        return self

    def size(self) -> int:
        """The UTF-8 bytes this edit carries (content, or every block's search and replace)."""
        if self.content is not None:
            return len(self.content.encode())
        return sum(len(b.search.encode()) + len(b.replace.encode()) for b in self.blocks or ())


class EditFilesParams(Scoped):
    edits: list[FileEdit] = Field(min_length=1, max_length=MAX_EDITS)
    #: Write helpers into the thread's managed temporary directory (``path`` is a name).
    temporary: bool = False

    @model_validator(mode="after")
    def _whole_call(self) -> EditFilesParams:
        size = sum(edit.size() for edit in self.edits)
        if size > MAX_EDIT_CALL_BYTES:
            raise coded_error(
                ErrorCode.LIMIT_EXCEEDED,
                f"the edits carry {size} bytes in UTF-8; one EditFiles carries at most "
                f"{MAX_EDIT_CALL_BYTES}. Nothing was written. Send them in several calls.",
                limit=MAX_EDIT_CALL_BYTES, size=size)
        paths = [edit.path for edit in self.edits]
        if len(set(paths)) != len(paths):
            raise ValueError("a path appears in two edits of one call; put its changes in "
                             "one edit (blocks apply in order)")
        return self


HelperName = Annotated[str, Field(pattern=HELPER_NAME_PATTERN)]


class ReleaseItem(Params):
    """A helper to delete: its name (or its path under TETHER_TMP), with the revision and
    the managed directory's generation from a fresh read."""

    name: FilePath
    revision: Token
    generation: Token


class ReleaseTemporaryParams(Scoped):
    helpers: list[ReleaseItem] = Field(min_length=1, max_length=MAX_RELEASE)


# -- results --------------------------------------------------------------------------------


class FileError(Result):
    """Why one file (or helper) was not read, written or released: a stable code, what to
    do instead, and detail (``suggested_range``, ``limit``, ``lines``, ...)."""

    code: str
    message: str


class TemporaryUsage(Result):
    """The thread's managed temporary directory as measured during the call."""

    dir: str
    generation: str
    used_bytes: int
    files: int
    budget_bytes: int
    budget_files: int
    over_budget: bool


class FileRead(Result):
    """One path spec's answer, in request order."""

    spec: str
    ok: bool
    path: str | None = None
    content: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    total_lines: int | None = None
    revision: str | None = None
    size_bytes: int | None = None
    #: Bytes that are not UTF-8 were shown as U+FFFD; an edit by blocks keeps them as they are.
    invalid_utf8: bool | None = None
    error: FileError | None = None


class ReadFilesResult(Result):
    files: list[FileRead]
    temporary: TemporaryUsage | None = None


class FileEdited(Result):
    """One edit's answer: applied (``action``: created, written, unchanged) or why not."""

    path: str
    ok: bool
    action: str | None = None
    revision: str | None = None
    previous_revision: str | None = None
    diff: str | None = None
    diff_lines_omitted: int | None = None
    total_lines: int | None = None
    size_bytes: int | None = None
    error: FileError | None = None


class EditFilesResult(Result):
    #: True when every edit was written; False: none was (each file's ``error`` says why).
    applied: bool
    files: list[FileEdited]
    temporary: TemporaryUsage | None = None


class HelperReleased(Result):
    """One helper's answer: ``released``, ``absent`` (nothing there: a repeat is safe),
    ``kept`` (a running execution uses it: ``reason``, ``pids``) or ``refused`` (``error``)."""

    name: str
    status: str
    reason: str | None = None
    pids: list[int] | None = None
    error: FileError | None = None


class ReleaseResult(Result):
    helpers: list[HelperReleased]
    temporary: TemporaryUsage
