"""``files.read`` (docs/tools.md#readfiles): each path spec read on its own, with its range,
total lines and revision, or an error of its own that leaves its siblings alone.

Two budgets bound a reply: :data:`MAX_READ_FILE_BYTES` of one file and
:data:`MAX_READ_CALL_BYTES` of all of them. A file or range over either is ``too_large``,
and the error names a range of that file that fits (found in the same pass that hashed it),
so the next call can ask for exactly that.
"""

from __future__ import annotations

import os
from typing import Any

from tether.guardian.runtime.file_paths import Located, locate, locate_helper, open_regular, scan
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.file_methods import FileRead, PathSpec, ReadFilesParams, parse_path_spec
from tether.protocol.limits import MAX_READ_CALL_BYTES, MAX_READ_FILE_BYTES


def read_files(params: ReadFilesParams, base: str, *, temporary: bool) -> list[FileRead]:
    """Every spec of ``params`` in request order (blocking: run it in a worker thread).
    ``base`` is the workspace, or the thread's managed directory for ``temporary``."""
    left = MAX_READ_CALL_BYTES
    answers = []
    for spec_text in params.paths:
        spec = parse_path_spec(spec_text)
        try:
            where = locate_helper(base, spec.path) if temporary else locate(base, spec.path)
            entry, used = _read_one(spec_text, spec, where, left)
            left -= used
        except TetherError as err:
            entry = {"spec": spec_text, "ok": False, "path": spec.path,
                     "error": {"code": err.code.value, "message": err.message, **_detail(err)}}
        answers.append(FileRead.model_validate(entry))
    return answers


def _detail(err: TetherError) -> dict[str, Any]:
    return {k: v for k, v in err.data.items() if k not in ("input_sent", "code", "message")}


def _read_one(spec_text: str, spec: PathSpec, where: Located,
              left: int) -> tuple[dict[str, Any], int]:
    try:
        fd, st = open_regular(where.real)
    except FileNotFoundError:
        raise TetherError(ErrorCode.NOT_FOUND, f"{where.shown} does not exist (EditFiles "
                          "creates a file without a revision)") from None
    budget = min(MAX_READ_FILE_BYTES, left)
    try:
        found = scan(fd, st, where.shown, start=spec.start, end=spec.end, budget=budget)
    finally:
        os.close(fd)
    known = {"spec": spec_text, "path": where.shown, "total_lines": found.total_lines,
             "revision": found.revision, "size_bytes": found.size}
    if found.binary:
        return _failed(known, ErrorCode.BINARY,
                       f"{where.shown} holds NUL bytes: it is binary, not text. Look at it with "
                       "BashCommand (file, xxd | head, strings)"), 0
    if found.start_line is None:
        return _failed(known, ErrorCode.INVALID_REQUEST,
                       f"{where.shown} has {found.total_lines} lines; line {spec.start} is past "
                       "its end"), 0
    if found.over_budget:
        return _over_budget(known, spec, found.picked[:budget], found.end_line, left), 0
    text = found.picked.decode("utf-8", errors="replace")
    answer = {**known, "ok": True, "content": text, "start_line": found.start_line,
              "end_line": found.end_line}
    if "\ufffd" in text and _invalid_utf8(found.picked):
        answer["invalid_utf8"] = True
    return answer, len(found.picked)


def _invalid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _failed(known: dict[str, Any], code: ErrorCode, message: str,
            **detail: Any) -> dict[str, Any]:
    return {**known, "ok": False, "error": {"code": code.value, "message": message, **detail}}


def _over_budget(known: dict[str, Any], spec: PathSpec, fitting: bytes, last: int | None,
                 left: int) -> dict[str, Any]:
    """``too_large``: the lines asked for are over the file's or the call's budget. Names
    the longest range from the same start that fits (whole lines)."""
    shown, start = known["path"], spec.start
    whole_lines = fitting.count(b"\n")
    per_call = left < MAX_READ_FILE_BYTES
    limit = left if per_call else MAX_READ_FILE_BYTES
    asked = (f"lines {start}-{last}" if spec.shape != "whole"
             else f"the whole file ({known['size_bytes']} bytes)")
    rule = (f"this call has {left} of the {MAX_READ_CALL_BYTES} bytes one ReadFiles returns "
            "left after the files before it" if per_call
            else f"ReadFiles returns at most {MAX_READ_FILE_BYTES} bytes of one file")
    detail: dict[str, Any] = {"limit": limit, "rule": "per_call" if per_call else "per_file",
                              "total_lines": known["total_lines"]}
    if whole_lines:
        suggested = f"{shown}:{start}-{start + whole_lines - 1}"
        detail["suggested_range"] = suggested
        advice = (f"Ask for a range that fits, such as \"{suggested}\", and go on from line "
                  f"{start + whole_lines} in the next request"
                  + (" (or read this file in a call of its own)" if per_call else ""))
    elif per_call:
        advice = "Read it in a call of its own"
    else:
        advice = (f"line {start} alone is longer than that: look at it with BashCommand "
                  f"(sed -n '{start}p' {shown} | cut -c1-2000)")
    return _failed(known, ErrorCode.TOO_LARGE, f"{shown}: {asked} is over the budget ({rule}; "
                   f"the file has {known['total_lines']} lines). {advice}.", **detail)
