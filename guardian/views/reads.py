"""The read side of history: ``exec.read``, ``exec.observe`` and ``exec.wait`` (docs/tools.md).

Pages of ``output`` are raw journal ranges (offsets stay offsets into the raw journal) whose
text is rendered for a model; pages end on UTF-8 boundaries and never inside an escape
sequence (``pages`` says where). Pages of ``screen`` are slices of one screen snapshot; a
cursor remembers which snapshot, and a changed screen is ``resync_required`` instead of a
page that would not concatenate.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from tether.guardian.history.pages import held_tail, render_page, utf8_safe_end
from tether.guardian.history.records import compact_view
from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.limits import (
    MAX_OBSERVE_BUDGET,
    MAX_OBSERVE_ITEMS,
    MAX_PAGE_BYTES,
    MAX_PAGE_TEXT_RATIO,
    MIN_PAGE_BYTES,
)
from tether.protocol.methods import ExecObserveParams, ExecReadParams, ExecWaitParams, Scoped
from tether.protocol.results import ObserveResult, ReadResult, Result, WaitResult
from tether.shared.cursors import CursorSigner, load_secret
from tether.shared.store.rows import TERMINAL_STATUSES

if TYPE_CHECKING:
    from tether.guardian.agents.watch import TurnWatch
    from tether.guardian.runtime.live import LiveTable
    from tether.guardian.runtime.notify import ChangeNotifier
    from tether.guardian.runtime.scope import Scope
    from tether.guardian.views.inspection import Inspector
    from tether.shared.paths import GuardianPaths
    from tether.shared.store.catalog import Catalog

ZERO_TIMEOUT_BUDGET_S = 0.25
_RECOGNIZER_EVENTS = frozenset({"awaiting_input", "awaiting_approval", "busy"})


class History:
    """Read-side handlers over this guardian's executions."""

    def __init__(
        self, *, scope: Scope, catalog: Catalog, live: LiveTable, notifier: ChangeNotifier,
        paths: GuardianPaths, inspector: Inspector, watch: TurnWatch,
    ) -> None:
        self._watch = watch
        self._scope = scope
        self._catalog = catalog
        self._live = live
        self._notifier = notifier
        self.inspector = inspector
        self.signer = CursorSigner(load_secret(paths.state / "cursor.key"))

    def handlers(self) -> dict[str, Callable[[Request, Any], Awaitable[Result]]]:
        return {"exec.read": self.read, "exec.observe": self.observe, "exec.wait": self.wait}

    # -- read ------------------------------------------------------------------------------

    def _cursor_scope(self, params: Scoped, execution_id: str, source: str) -> dict[str, str]:
        return {
            "p": params.principal, "w": params.workspace_root, "t": params.thread_id,
            "e": execution_id, "s": source,
        }

    async def read(self, request: Request, params: ExecReadParams) -> ReadResult:
        self._scope.thread_for(params)
        record = self._scope.record_for(params, params.execution_id)
        live = self._live.get(params.execution_id)
        if live is not None and params.source != "output":
            await live.screen.snapshot_async()  # the page below then reads it without stalling
        page = self._page(params, record, params.source, params.page_bytes, params.cursor)
        return ReadResult.model_validate({**page, "execution": self._live.view(record)})

    def _page(
        self, params: Scoped, record: dict[str, Any], source: str, page_bytes: int,
        cursor: str | None,
    ) -> dict[str, Any]:
        scope = self._cursor_scope(params, record["execution_id"], source)
        # No cursor is None; "" never came from Tether (its params model refuses it too).
        state = self.signer.verify(cursor, scope) if cursor is not None else {}
        if source == "output":
            return self._output_page(record, scope, page_bytes, state)
        return self._snapshot_page(record, scope, source, page_bytes, state)

    def _output_page(
        self, record: dict[str, Any], scope: dict[str, str], page_bytes: int,
        state: dict[str, Any],
    ) -> dict[str, Any]:
        journal = self._live.journal(record["execution_id"])
        offset = int(state.get("o", 0))  # no cursor: from the stream's very first byte
        offset, gap = journal.resume(offset)  # past the bytes retention dropped, if in them
        raw = journal.read(offset, page_bytes)
        written_after = offset + len(raw) < journal.end
        if written_after:
            raw = raw[: utf8_safe_end(raw)]
        elif self._live.get(record["execution_id"]) is not None:
            # The live end of a running execution: its last character or escape sequence may
            # be half written. Hold it back (the page may be empty, the cursor stays) until
            # the rest comes; once the execution has ended, whatever is there is rendered.
            raw = raw[: len(raw) - held_tail(raw)]
        # The text's bound keeps every page within what the reader's decoder takes.
        taken, text = render_page(raw, page_bytes * MAX_PAGE_TEXT_RATIO)
        end = offset + taken
        page: dict[str, Any] = {
            "text": text,
            "start": offset,
            "end": end,
            # A held live tail is not there to read yet.
            "has_more": written_after or taken < len(raw),
            "next_cursor": self.signer.sign(scope, {"o": end}),
        }
        if gap:
            page["gap"] = gap
        return page

    def _snapshot_text(self, record: dict[str, Any], source: str) -> str:
        live = self._live.get(record["execution_id"])
        if source == "screen":
            if live is not None:
                return live.screen.snapshot_now().text
            if record.get("screen_text") is None and record.get("status") != "running":
                # Its guardian was lost before it drew the final screen: say so, rather than
                # answer an empty screen that was never empty.
                raise TetherError(
                    ErrorCode.NOT_FOUND,
                    f"no screen was kept for execution {record['execution_id']}: it ended "
                    f"{record.get('status')} ({record.get('reason') or 'no reason recorded'}) "
                    "before its final screen was drawn. Its output is kept: read it with "
                    "source=output.",
                    {"execution_id": record["execution_id"], "status": record.get("status")},
                )
            return str(record.get("screen_text") or "")
        return self.inspector.detection_for(record, live)

    def _snapshot_page(
        self, record: dict[str, Any], scope: dict[str, str], source: str, page_bytes: int,
        state: dict[str, Any],
    ) -> dict[str, Any]:
        data = self._snapshot_text(record, source).encode()
        digest = hashlib.sha256(data).hexdigest()[:16]
        offset = int(state.get("o", 0))
        page: dict[str, Any] = {}
        if state and state.get("h") != digest:
            # The screen changed under the cursor: start again from fresh data.
            page["resync_required"] = True
            offset = 0
        chunk = data[offset : offset + page_bytes]
        if offset + len(chunk) < len(data):
            chunk = chunk[: utf8_safe_end(chunk)]
        end = offset + len(chunk)
        page.update(
            text=chunk.decode("utf-8", "replace"),
            start=offset,
            end=end,
            has_more=end < len(data),
            next_cursor=self.signer.sign(scope, {"o": end, "h": digest}),
        )
        return page

    # -- observe ---------------------------------------------------------------------------

    async def observe(self, request: Request, params: ExecObserveParams) -> ObserveResult:
        _validate_observe(params)
        self._scope.thread_for(params)
        loop = asyncio.get_running_loop()
        budget = params.timeout_ms / 1000 or ZERO_TIMEOUT_BUDGET_S
        deadline = loop.time() + budget
        items: list[dict[str, Any]] = [{"errors": []} for _ in params.items]
        # Refresh each distinct execution once: bring its screen up to date when a screen or
        # detection page is asked for (output pages read the journal, which is always current).
        refreshed: set[str] = set()
        screens = sorted({item.execution_id for item in params.items if item.source != "output"
                          and self._live.get(item.execution_id) is not None})
        # Only what this request may see (Scope.visible, as get/read/wait decide it).
        visible = {eid for eid, record in self._catalog.get_executions(screens).items()
                   if self._scope.visible(record, params)} if screens else set()
        for item, out in zip(params.items, items, strict=True):
            if item.execution_id in refreshed or item.source == "output":
                continue
            refreshed.add(item.execution_id)
            live = self._live.get(item.execution_id)
            if live is not None and item.execution_id in visible:
                try:
                    await live.screen.snapshot_async()
                except Exception as exc:  # a broken emulator must not sink the siblings
                    out["errors"].append(
                        {"stage": "refresh", "code": ErrorCode.INTERNAL.value, "message": str(exc)}
                    )
            if loop.time() > deadline:
                raise TetherError(
                    ErrorCode.DEADLINE_EXPIRED,
                    f"observe did not finish within its {budget:g}s deadline",
                )
        with self._catalog.snapshot():
            records = self._catalog.get_executions(
                sorted({item.execution_id for item in params.items})
            )
            for item, out in zip(params.items, items, strict=True):
                record = records.get(item.execution_id)
                if record is None or not self._scope.visible(record, params):
                    out["errors"].append({
                        "stage": "read", "code": ErrorCode.NOT_FOUND.value,
                        "message": f"no execution {item.execution_id!r} in this thread",
                    })
                    out["execution"] = None
                    out["status"] = "error"
                    continue
                out["execution"] = compact_view(record, self._live.get(item.execution_id))
                try:
                    out["page"] = self._page(
                        params, record, item.source, item.page_bytes, item.cursor
                    )
                except TetherError as err:
                    out["errors"].append(
                        {"stage": "read", "code": err.code.value, "message": err.message}
                    )
                out["status"] = "error" if out["errors"] else "ok"
            catalog_cursor = self._catalog.change_seq()
        issues = any(out["errors"] for out in items)
        result: dict[str, Any] = {"items": items, "catalog_cursor": catalog_cursor}
        if issues:
            result["completed_with_issues"] = True
        return ObserveResult.built(result)

    # -- wait ------------------------------------------------------------------------------

    async def wait(self, request: Request, params: ExecWaitParams) -> WaitResult:
        """Wait for events on executions, from a position in the catalog and its turn log.

        A cursor (or a catalog cursor) is a position: every turn-log row after it counts, so a
        turn that began and ended before this call is reported, with the states it went
        through (``transitions``), and a state entered after the cursor answers at once even
        if it is the state the execution was in when the cursor was taken. Without ``after``
        the position is now: only what happens from this call on counts (read the current
        state from ``current``), except that an execution which has already ended answers at
        once: nothing can happen to it any more, and a timeout would say nothing of its end
        (it is in ``changed``, its status fired, ``ended_before_wait``). Every reply carries
        ``current``: each execution's record in short with the turn watch's ``recognition``.
        """
        self._scope.thread_for(params)
        ids = list(dict.fromkeys(params.execution_ids))
        scope = {"p": params.principal, "w": params.workspace_root, "t": params.thread_id,
                 "e": ",".join(sorted(ids)), "s": "wait"}
        events = set(params.events or ["state", "output", "exited", "unknown"])
        loop = asyncio.get_running_loop()
        budget = params.timeout_ms / 1000
        deadline = loop.time() + (budget if budget > 0 else ZERO_TIMEOUT_BUDGET_S)
        if events & _RECOGNIZER_EVENTS:
            # Under the guardian's watch from now on; the current state is in the log before
            # the position below is taken, so it never reads as a change.
            for record in self._catalog.get_executions(ids).values():
                if self._scope.visible(record, params):
                    await self._watch.ensure(record)
        baseline = self._wait_baseline(params.after, scope, ids)
        wants_output = "output" in events
        while True:
            outcome = self._changes(params, ids, baseline, events, from_now=params.after is None)
            if outcome is not None or budget == 0 or loop.time() >= deadline:
                break
            await self._notifier.wait(deadline - loop.time(), output=wants_output)
        if outcome is None:
            outcome = ("timeout", [])
        kind, changed = outcome
        return WaitResult.model_validate({
            "outcome": kind,
            "changed": changed,
            "cursor": self.signer.sign(scope, self._baseline(ids)),
            "current": self._current(ids),
        })

    def _current(self, ids: list[str]) -> list[dict[str, Any]]:
        """Each watched record as it is now, in short, with its recognition if it has one."""
        current = []
        for eid, record in self._catalog.get_executions(ids).items():
            view = dict(compact_view(record, self._live.get(eid)))
            view["execution_id"] = eid
            recognition = self._watch.summary(eid)
            if recognition is not None:
                view["recognition"] = recognition
            current.append(view)
        return current

    def _wait_baseline(self, after: str | None, scope: dict[str, str], ids: list[str]) -> dict[str, Any]:
        """Where a wait starts: now, a wait cursor, or a catalog cursor (list/observe/wait).

        Both kinds of cursor hold a catalog sequence, which is also a position in the turn
        log (its rows take their numbers from the same counter): every record persisted and
        every turn-log row written after it counts as changed. A wait cursor made before
        the turn log existed carries the same sequence and is read the same way (the
        recognition states it also held are not needed any more).
        """
        if after is None:
            return self._baseline(ids)
        # ASCII digits only: str.isdigit() also takes "²" (int() refuses it) and "٣" (3).
        if after.isascii() and after.isdigit():
            seq = int(after)
            if seq > self._catalog.change_seq():
                raise TetherError(ErrorCode.INVALID_CURSOR,
                                  "catalog cursor is ahead of this catalog; call list again")
            return {"seq": seq}
        return self.signer.verify(after, scope)

    def _baseline(self, ids: list[str]) -> dict[str, Any]:
        records = self._catalog.get_executions(ids)
        ends = {eid: self._live.view(r)["output_end"] for eid, r in records.items()}
        return {"seq": self._catalog.change_seq(), "out": ends}

    def _changes(
        self, params: ExecWaitParams, ids: list[str], baseline: dict[str, Any], events: set[str],
        *, from_now: bool = False,
    ) -> tuple[str, list[dict[str, Any]]] | None:
        records = self._catalog.get_executions(ids)
        known = baseline.get("out", {})
        if any(eid in known and eid not in records for eid in ids):
            return "resync", []  # a watched record was pruned since the cursor
        after = int(baseline.get("seq", 0))
        if after > self._catalog.change_seq():
            return "resync", []
        missing = [eid for eid in ids if eid not in records or not self._scope.visible(records[eid], params)]
        if missing:
            raise TetherError(
                ErrorCode.NOT_FOUND, f"no execution {missing[0]!r} in this thread",
                {"execution_ids": missing},
            )
        changed = []
        turns = self._watch.log.since(ids, after) if events & _RECOGNIZER_EVENTS else {}
        for eid in ids:
            record = records[eid]
            view = self._live.view(record)
            fired: list[str] = []  # which of the requested events happened, in event order
            persisted_change = int(record["change_seq"]) > after
            if persisted_change and "state" in events:
                fired.append("state")
            if persisted_change and record["status"] == "exited" and "exited" in events:
                fired.append("exited")
            if persisted_change and record["status"] == "unknown" and "unknown" in events:
                fired.append("unknown")
            if "output" in events and view["output_end"] > int(known.get(eid, view["output_end"])):
                fired.append("output")
            rows = turns.get(eid, [])
            for row in rows:
                if row.to_state in events and row.to_state not in fired:
                    fired.append(row.to_state)
            ended_before = from_now and not fired and record["status"] in TERMINAL_STATUSES
            if ended_before:
                # A wait from now on an execution that has already ended would wait for
                # nothing and answer timeout: its end is reported at once, by its status,
                # whatever events were asked for (no other can come).
                fired.append(str(record["status"]))
            if fired:
                item = {**view, "fired": fired}
                if ended_before:
                    item["ended_before_wait"] = True
                if rows:
                    item["transitions"] = [row.to_dict() for row in rows]
                changed.append(item)
        return ("changed", changed) if changed else None


def _validate_observe(params: ExecObserveParams) -> None:
    """Reject the whole request before any work (docs/tools.md observe)."""
    count = len(params.items)
    if not 1 <= count <= MAX_OBSERVE_ITEMS:
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"observe takes 1-{MAX_OBSERVE_ITEMS} items; got {count}",
            {"rule": "observe_item_count", "limit": MAX_OBSERVE_ITEMS},
        )
    seen: set[tuple[str, str]] = set()
    total = 0
    for index, item in enumerate(params.items):
        pair = (item.execution_id, item.source)
        if pair in seen:
            raise TetherError(
                ErrorCode.INVALID_REQUEST,
                f"item {index} repeats execution {item.execution_id} with source {item.source}; "
                "each execution/source pair may appear once",
                {"rule": "observe_duplicate_item", "index": index},
            )
        seen.add(pair)
        if not MIN_PAGE_BYTES <= item.page_bytes <= MAX_PAGE_BYTES:
            raise TetherError(
                ErrorCode.LIMIT_EXCEEDED,
                f"item {index} asks for a {item.page_bytes}-byte page; pages are "
                f"{MIN_PAGE_BYTES}-{MAX_PAGE_BYTES} bytes",
                {"rule": "observe_page_bytes", "index": index},
            )
        total += item.page_bytes
    if total > MAX_OBSERVE_BUDGET:
        raise TetherError(
            ErrorCode.LIMIT_EXCEEDED,
            f"observe pages add up to {total} bytes; the sum may be at most {MAX_OBSERVE_BUDGET}",
            {"rule": "observe_total_budget", "limit": MAX_OBSERVE_BUDGET},
        )
