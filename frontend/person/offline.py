"""Executions whose guardian is gone, read from the files it left (``tether show``,
``tail``, ``attach`` and ``ls`` after a crash).

A guardian keeps its catalog and output journals on disk, so a record outlives it. When no
running guardian holds an execution, its record and retained output are read from there,
read-only: nothing is started, written or reconciled by looking (the next guardian of that
workspace marks the record; docs/protocol.md#finding-a-guardian-and-recovery,
docs/tools.md#unknown-is-not-success). A record that still
says ``running`` was left so by a guardian that is gone: nobody saw its end, so it is shown
the way reconciliation will record it, ``unknown`` (``guardian_lost``), and says so.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import MAX_WORKSPACE_LIST
from tether.protocol.method_table import EXEC_DESCRIBE, EXEC_STREAM, Method
from tether.protocol.results import DescribeResult, Result, StreamResult, WorkspaceListResult
from tether.shared.config import Config
from tether.shared.segments import Segment, journal_figures, scan_segments, window
from tether.shared.store.rows import TERMINAL_STATUSES
from tether.shared.store.schema import AGENT_COLUMNS
from tether.shared.store.store_errors import StoreError
from tether.shared.store.view import PeekedExecution, peek_execution, peek_workspace

#: Catalog columns that are not part of the record as clients see it (as a guardian hides
#: them: guardian/history/records.py).
_INTERNAL = ("seq", "change_seq")
_AGENT_ONLY = (*(name for name, _ in AGENT_COLUMNS), "parent_workspace")


def status_now(status: str) -> str:
    """What a status read from the catalog of a guardian that is gone stands for: one that
    is not terminal was left so by that guardian, so its end was never seen
    (docs/tools.md#unknown-is-not-success)."""
    return status if status in TERMINAL_STATUSES else "unknown"


def as_reconciled(record: dict[str, Any]) -> str:
    """``record`` shown the way reconciliation will record it (``Catalog.mark_lost``):
    ``unknown`` (``guardian_lost``) without an exit code when it was not terminal. Returns
    the status the catalog gives."""
    was = str(record.get("status"))
    if status_now(was) != was:
        record.update(status="unknown", exit_code=None, reason="guardian_lost")
    return was


def client_view(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the catalog's own columns, as a guardian hands it to clients."""
    hidden = _INTERNAL if record.get("kind") == "agent" else (*_INTERNAL, *_AGENT_ONLY)
    return {k: v for k, v in record.items() if k not in hidden}


R = TypeVar("R", bound=Result)


def list_on_disk(state: Path, scope: dict[str, Any], limit: int) -> WorkspaceListResult | None:
    """What ``workspace.list`` would answer for the guardian whose state directory is
    ``state``, read from the catalog it left: records as they are on disk, those it left
    running shown as reconciliation will record them, and every thread without a shell (its
    shells died with it). ``scope``: its principal and workspace root. ``None`` when it left
    no catalog; an unreadable one raises ``StoreError`` (or ``ValueError``, for rows that
    are not records)."""
    found = peek_workspace(state / "catalog.sqlite3", limit)
    if found is None:
        return None
    counts: dict[str, int] = {}
    for status, count in found["counts"].items():
        now = status_now(status)
        counts[now] = counts.get(now, 0) + count
    for record in found["executions"]:
        if as_reconciled(record) != record["status"]:
            # A guardian persists output figures when a command ends (a live view reads
            # them from the journal): for one it left running, the journal has them.
            figures = journal_figures(state / "journals", str(record["execution_id"]))
            if figures is not None:
                record["output_start"], record["output_end"] = figures
    return WorkspaceListResult.model_validate({
        **scope, "catalog_cursor": found["catalog_cursor"], "counts": counts,
        "threads": [{**t, "shell_alive": False, "shell_busy": False} for t in found["threads"]],
        "executions": [client_view(record) for record in found["executions"]],
    })


@dataclass
class OnDisk:
    """One execution in the state directory of a guardian that is not running: answers the
    calls ``show``, ``tail`` and ``attach`` make of a guardian (``Found.call``) from disk."""

    state: Path
    found: PeekedExecution
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        record = self.found["execution"]
        self.info = {"workspace_root": record.get("workspace_root"),
                     "principal": record.get("principal"),
                     "instance_id": record.get("guardian_instance_id")}
        self.was = as_reconciled(record)
        segments = self._segments()
        if segments:
            record["output_start"], record["output_end"] = window(segments).figures

    @property
    def workspace(self) -> str:
        return str(self.info.get("workspace_root") or "?")

    @property
    def catalog(self) -> Path:
        return self.state / "catalog.sqlite3"

    def note(self) -> str:
        """What a person should know about a record read from disk."""
        if self.was in TERMINAL_STATUSES:
            return f"read from disk ({self.catalog}): no running guardian holds it"
        return (f"read from disk ({self.catalog}): no running guardian holds it. The catalog "
                f"still says {self.was}, but the guardian that ran it is gone, so its end was "
                "not seen: shown as unknown (guardian_lost), which is what the next guardian of "
                f"{self.workspace} records")

    def _segments(self) -> list[Segment]:
        return scan_segments(self.state / "journals", str(self.found["execution"]["execution_id"]))

    async def call(self, method: Method[Any, R], params: dict[str, Any], *,
                   timeout_s: float = 0) -> R:
        # The two methods a record on disk can answer; their models are these methods'.
        if method is EXEC_DESCRIBE:
            return cast(R, self._describe())
        if method is EXEC_STREAM:
            return cast(R, self._stream(params))
        raise TetherError(ErrorCode.NOT_RUNNING,
                          f"{self.found['execution']['execution_id']} is not held by a running "
                          "guardian; nothing can be typed into it", {"input_sent": False})

    async def watch(self) -> None:
        """Return never: there is no guardian to lose."""
        await asyncio.Event().wait()

    def _describe(self) -> DescribeResult:
        view = client_view(self.found["execution"])
        return DescribeResult.model_validate({
            "execution": view, "thread": self.found["thread"], "live": False,
            "receipts": self.found["receipts"], "agent_events": self.found["agent_events"],
            "person_events": self.found["person_events"],
            "from_disk": {"catalog": str(self.catalog), "status_in_catalog": self.was,
                          "note": self.note()}})

    def _stream(self, params: dict[str, Any]) -> StreamResult:
        record = self.found["execution"]
        segments = self._segments()
        kept = window(segments)
        start, end = kept.figures
        figures = {"execution_id": record["execution_id"], "status": record["status"],
                   "exit_code": record.get("exit_code"), "reason": record.get("reason"),
                   "live": False, "journal_start": start, "journal_end": end,
                   "rows": record.get("rows") or 24, "cols": record.get("cols") or 80}
        if params.get("screen"):
            screen = {"lines": str(record.get("screen_text") or "").split("\n"),
                      "cursor_row": None, "cursor_col": None, "rows": figures["rows"],
                      "cols": figures["cols"], "alternate": False, "title": ""}
            return StreamResult.model_validate({**figures, "screen": screen, "data": b"",
                                                "start": end, "end": end, "gap": 0})
        asked = params.get("offset")
        offset = start if asked is None else int(asked)
        if offset > end:
            raise TetherError(ErrorCode.INVALID_REQUEST,
                              f"offset {offset} is past the end of the output ({end})",
                              {"journal_end": end})
        offset, gap = kept.resume(offset)
        data = read_range(segments, offset,
                          min(kept.run_end(offset), offset + int(params.get("max_bytes") or 0)))
        return StreamResult.model_validate({**figures, "data": data, "start": offset,
                                            "end": offset + len(data), "gap": gap})


def read_range(segments: list[Segment], offset: int, stop: int) -> bytes:
    """The journal's bytes from absolute ``offset`` up to ``stop``, across its segments."""
    chunks: list[bytes] = []
    for seg in segments:
        seg_end = seg.base + seg.size
        if seg_end <= offset or seg.base >= stop:
            continue
        lo, hi = max(offset, seg.base) - seg.base, min(stop, seg_end) - seg.base
        try:
            fd = os.open(seg.path, os.O_RDONLY)
        except FileNotFoundError:
            break  # pruned meanwhile: stop here rather than skip bytes silently
        try:
            chunk = os.pread(fd, hi - lo, lo)
        finally:
            os.close(fd)
        chunks.append(chunk)
        if len(chunk) < hi - lo:
            break
    return b"".join(chunks)


def ids_on_disk(config: Config, prefix: str, *, skip: set[str],
                workspace: str | None = None) -> list[str]:
    """The execution ids starting with ``prefix`` in the catalogs of guardians that are not
    running (state keys not in ``skip``), of ``workspace`` only when given: their newest
    ``MAX_WORKSPACE_LIST`` records each, read without writing a byte."""
    base = config.state_home / "guardians"
    if not base.is_dir():
        return []
    ids = []
    for state in sorted(p for p in base.iterdir() if p.is_dir() and p.name not in skip):
        try:
            found = peek_workspace(state / "catalog.sqlite3", MAX_WORKSPACE_LIST)
        except StoreError:
            continue  # unreadable: `tether doctor` says so
        for record in (found or {"executions": []})["executions"]:
            if workspace is not None and record.get("workspace_root") != workspace:
                continue
            if str(record["execution_id"]).startswith(prefix):
                ids.append(str(record["execution_id"]))
    return ids


def find_on_disk(config: Config, execution_id: str, *, skip: set[str],
                 workspace: str | None = None) -> OnDisk | None:
    """``execution_id`` in the catalog of a guardian that is not running (its state key not
    in ``skip``, the keys of live guardians), of ``workspace`` only when given; None when no
    catalog on disk has it."""
    base = config.state_home / "guardians"
    if not base.is_dir():
        return None
    for state in sorted(p for p in base.iterdir() if p.is_dir() and p.name not in skip):
        try:
            found = peek_execution(state / "catalog.sqlite3", execution_id)
        except StoreError:
            continue  # unreadable: `tether doctor` says so
        if found is None:
            continue
        if workspace is not None and found["execution"].get("workspace_root") != workspace:
            continue
        return OnDisk(state, found)
    return None
