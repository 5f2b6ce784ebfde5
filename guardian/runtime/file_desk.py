"""The files methods (``files.read``, ``files.edit``, ``files.release``; capability ``files``):
the thread and its authority checked here, on the loop, then the file work in a worker
thread (docs/tools.md#readfiles, docs/tools.md#editfiles, docs/security.md#files).

The guardian checks an edit's authority itself, because it is where the path is resolved
and the file written (also for a workspace on another host): the thread's mode as stored
now (architect refuses every edit; code_writer's ``allowed_globs`` and the ``.git`` rule
apply exactly as to a redirection, through ``shared/write_rules``), and every path inside
the workspace, or for helpers inside the thread's own managed directory. A call that breaks
any of these is refused whole before anything is read or written. Edits and releases run
one at a time, so two of them never interleave on one file.
"""

from __future__ import annotations

import asyncio
import errno
from typing import Any

from tether.guardian.runtime.file_edits import EditRefused, Prepared, answer, prepare, write_all
from tether.guardian.runtime.file_paths import Located, locate, locate_helper
from tether.guardian.runtime.file_reads import read_files
from tether.guardian.runtime.mode_store import ThreadModes
from tether.guardian.runtime.scope import Scope
from tether.guardian.runtime.temporary import (
    measure,
    refuse_over_budget,
    release,
    thread_processes,
    users_of,
)
from tether.guardian.runtime.threads import Threads
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.file_methods import (
    EditFilesParams,
    EditFilesResult,
    ReadFilesParams,
    ReadFilesResult,
    ReleaseResult,
    ReleaseTemporaryParams,
)
from tether.protocol.method_table import FILES_EDIT, FILES_READ, FILES_RELEASE
from tether.protocol.methods import ModeSpec
from tether.shared.write_rules import glob_regex, write_refusal


class FileDesk:
    """ReadFiles, EditFiles and the release of temporary helpers for this workspace."""

    def __init__(self, *, scope: Scope, threads: Threads, modes: ThreadModes) -> None:
        self._scope = scope
        self._threads = threads
        self._modes = modes
        self._writing = asyncio.Lock()

    def handlers(self) -> dict[str, Any]:
        return {FILES_READ.name: self.read, FILES_EDIT.name: self.edit,
                FILES_RELEASE.name: self.release}

    async def read(self, request: Request, params: ReadFilesParams) -> ReadFilesResult:
        self._scope.thread_for(params)
        if not params.temporary:
            files = await asyncio.to_thread(read_files, params, self._scope.workspace_root,
                                            temporary=False)
            return ReadFilesResult.model_validate({"files": [f.wire() for f in files]})
        directory = str(self._threads.temporary_dir(params.thread_id))

        def work() -> dict[str, Any]:
            files = read_files(params, directory, temporary=True)
            return {"files": [f.wire() for f in files], "temporary": measure(directory)}

        return ReadFilesResult.model_validate(await asyncio.to_thread(work))

    async def edit(self, request: Request, params: EditFilesParams) -> EditFilesResult:
        self._scope.thread_for(params)
        mode = self._modes.current(params.thread_id)
        base = (str(self._threads.temporary_dir(params.thread_id)) if params.temporary
                else self._scope.workspace_root)
        where = [locate_helper(base, edit.path) if params.temporary else locate(base, edit.path)
                 for edit in params.edits]
        self._authorize(mode, where, "edit")

        def work() -> dict[str, Any]:
            return _edit(params, where, base)

        async with self._writing:
            return EditFilesResult.model_validate(await asyncio.to_thread(work))

    async def release(self, request: Request, params: ReleaseTemporaryParams) -> ReleaseResult:
        self._scope.thread_for(params)
        mode = self._modes.current(params.thread_id)
        directory = str(self._threads.temporary_dir(params.thread_id))
        named = []
        for item in params.helpers:
            try:
                named.append(locate_helper(directory, item.name))
            except TetherError:
                continue  # refused on its own below, with the reason
        self._authorize(mode, named, "release")
        shell = self._threads.shell(params.thread_id)
        idle = (shell.runtime.pid if shell is not None and shell.alive and not shell.busy
                else None)

        def work() -> dict[str, Any]:
            users = users_of(directory, thread_processes(params.thread_id, idle))
            helpers = release(directory, params.helpers, users)
            return {"helpers": [h.wire() for h in helpers], "temporary": measure(directory)}

        async with self._writing:
            return ReleaseResult.model_validate(await asyncio.to_thread(work))

    def _authorize(self, mode: ModeSpec, where: list[Located], doing: str) -> None:
        """Refuse the whole call (``mode_denied``) when the thread's mode does not let it
        write each of these files."""
        if mode.name == "architect":
            raise _mode_denied(mode, [(w.shown, "no_writes", "architect mode writes no files")
                                      for w in where[:1]] or [("-", "no_writes", "")], doing)
        config = mode.code_writer
        if mode.name != "code_writer" or config is None or config.allowed_globs == "all":
            return
        globs = [glob_regex(glob, self._scope.workspace_root) for glob in config.allowed_globs]
        refused = [(w.shown, "allowed_globs", detail) for w in where
                   if (detail := write_refusal(w.written, globs, shown=w.shown)) is not None]
        if refused:
            raise _mode_denied(mode, refused, doing)


def _mode_denied(mode: ModeSpec, refused: list[tuple[str, str, str]], doing: str) -> TetherError:
    reasons = "; ".join(f"{path}: rule {rule}: {detail}" for path, rule, detail in refused[:5])
    more = f" (and {len(refused) - 5} more)" if len(refused) > 5 else ""
    return TetherError(
        ErrorCode.MODE_DENIED,
        f"mode {mode.name} refused this {doing}; nothing was written or deleted. {reasons}"
        f"{more}. Edit only what the mode allows, or change the mode with Initialize "
        "type=change_mode.",
        {"mode": mode.name, "input_sent": False,
         "violations": [{"segment": p, "rule": r, "detail": d} for p, r, d in refused[:32]]})


def _edit(params: EditFilesParams, where: list[Located], base: str) -> dict[str, Any]:
    """Prepare every edit; write them all only if every one applies (blocking)."""
    prepared: list[Prepared | None] = []
    refusals: dict[int, dict[str, Any]] = {}
    for index, (edit, place) in enumerate(zip(params.edits, where, strict=True)):
        try:
            prepared.append(prepare(edit, place, helper=params.temporary))
        except (EditRefused, TetherError) as exc:
            prepared.append(None)
            refusals[index] = _refusal(place, exc)
    usage = measure(base) if params.temporary else None
    ready = [item for item in prepared if item is not None]
    if usage is not None and not refusals:
        refuse_over_budget(usage, sum(len(p.new) - len(p.old or b"") for p in ready),
                           sum(1 for p in ready if p.old is None))
    if not refusals:
        try:
            write_all(ready)
        except EditRefused as exc:
            refusals[-1] = {"path": "", "ok": False, "error": _error(exc)}
        except OSError as exc:
            raise _os_error(exc) from None
    files: list[dict[str, Any]] = []
    for index, item in enumerate(prepared):
        if index in refusals:
            files.append(refusals[index])
        elif item is None or refusals:
            files.append({"path": where[index].shown, "ok": False, "action": "not_written"})
        else:
            files.append(answer(item).wire())
    if -1 in refusals:  # changed during the write itself: say so on the call's first file
        files[0] = {**files[0], "error": refusals[-1]["error"]}
    result: dict[str, Any] = {"applied": not refusals, "files": files}
    if usage is not None:
        result["temporary"] = measure(base)
    return result


def _refusal(place: Located, exc: EditRefused | TetherError) -> dict[str, Any]:
    return {"path": place.shown, "ok": False, "action": "not_written", "error": _error(exc)}


def _error(exc: EditRefused | TetherError) -> dict[str, Any]:
    if isinstance(exc, EditRefused):
        return {"code": exc.code.value, "message": exc.message, **exc.detail}
    detail = {k: v for k, v in exc.data.items() if k != "input_sent"}
    return {"code": exc.code.value, "message": exc.message, **detail}


def _os_error(exc: OSError) -> TetherError:
    """A write the operating system refused: nothing was renamed into place."""
    if isinstance(exc, PermissionError):
        return TetherError(ErrorCode.DENIED, f"the operating system refused the write "
                           f"({exc.strerror}: {exc.filename}); nothing was written",
                           {"input_sent": False})
    resource = "disk" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else "filesystem"
    return TetherError(ErrorCode.RESOURCE_EXHAUSTED, f"the write failed ({exc.strerror}: "
                       f"{exc.filename}); nothing was written", {"resource": resource,
                                                                 "input_sent": False})

