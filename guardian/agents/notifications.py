"""Durable finish notices (docs/tools.md#deaths-cancel-and-notices): reading them, waiting for them, and
typing them into a
managed parent.

Rows are written by the agent store in the same transaction as the event that causes them,
so they exist exactly once and survive restarts of front-end and guardian. Reading is
``agent.notifications`` (with an optional wait: ``Agent.wait`` event ``notification``).
When the parent is a managed agent of this guardian, each notice is also typed into its
terminal as a prompt with ``prompt_id = "notify-<id>"`` through the prompt desk (docs/tools.md#prompts,
docs/tools.md#once-only):
only when the parent awaits input with an empty input box (a draft there is never typed
into: the notice waits), once only — a repeat of that prompt id types nothing — and
pending until then. An ``approval`` notice carries the approval it tells of (the request,
its options and keys: docs/tools.md#approvals), so a parent can answer from the notice alone.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from tether.protocol.envelope import Request
from tether.protocol.errors import ErrorCode, TetherError
from tether.protocol.methods import AgentNotificationsParams, AgentPromptParams
from tether.protocol.results import AgentNotificationsResult
from tether.shared.store.agent_table import AgentStore
from tether.shared.store.rows import NotificationRow

if TYPE_CHECKING:
    from tether.guardian.agents.receipts import PromptDesk
    from tether.guardian.runtime.assembly import Runtime
    from tether.shared.store.catalog import Catalog

log = logging.getLogger(__name__)

_KIND_TEXT = {
    "finished": "finished a turn",
    "error": "stopped with an error",
    "approval": "is waiting for an approval",
    "closed": "was closed before it finished",
}


#: How much of a request's detail a notice typed into a parent quotes.
NOTICE_DETAIL_CHARS = 300


def notice_text(notification: NotificationRow, approval: dict[str, Any] | None = None) -> str:
    """What a managed parent reads: which child, what happened, where to look; for an
    approval, what it asks and how to answer it (docs/tools.md#approvals). One line."""
    head = (f"[tether] agent {notification['child_execution_id']} "
            f"{_KIND_TEXT.get(notification['kind'], notification['kind'])} "
            f"(notification {notification['id']}, turn {notification['turn_seq']})")
    if approval is None:
        return f"{head}. Look at it with Agent get {notification['child_execution_id']}."
    request = approval["request"]
    asked = " ".join(str(part) for part in (request.get("tool"), request.get("detail"))
                     if part) or str(request.get("question") or request.get("what"))
    options = ", ".join(f"{o['key']} {o['label']}" for o in request.get("options", []))
    return (f"{head}: {_one_line(asked)[:NOTICE_DETAIL_CHARS]}. Options: "
            f"{_one_line(options)[:NOTICE_DETAIL_CHARS] or 'none read'}. Answer once with "
            f"Agent respond approval_id={approval['approval_id']} choice=approve|deny|<key>.")


def _one_line(text: str) -> str:
    """Text that cannot end or start a line of a terminal's input (no control characters)."""
    return "".join(ch if ch.isprintable() else " " for ch in text.replace("\n", " ⏎ "))


def with_approvals(rows: list[NotificationRow], catalog: Catalog) -> list[dict[str, Any]]:
    """Notification rows with the approval each ``approval`` notice tells of."""
    out: list[dict[str, Any]] = []
    for row in rows:
        entry: dict[str, Any] = dict(row)
        approval_id = entry.pop("approval_id", None)
        if approval_id:
            entry["approval"] = catalog.get_approval(str(approval_id))
        out.append(entry)
    return out


class NoticeDesk:
    """``agent.notifications`` and delivery of notices into managed parents."""

    def __init__(self, runtime: Runtime, store: AgentStore, prompts: PromptDesk) -> None:
        self._rt = runtime
        self.store = store
        self.prompts = prompts
        self._delivering: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def notifications(self, request: Request | None, params: AgentNotificationsParams
                            ) -> AgentNotificationsResult:
        """Notices for ``parent`` after ``after``, waiting up to ``timeout_ms`` for one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + params.timeout_ms / 1000
        while True:
            rows = self.store.notifications(params.parent, params.after, params.limit)
            if rows or loop.time() >= deadline:
                break
            await self._rt.notifier.wait(deadline - loop.time(), output=False)
        cursor = rows[-1]["id"] if rows else params.after
        return AgentNotificationsResult.model_validate(
            {"notifications": with_approvals(rows, self.store.catalog), "cursor": cursor})

    def busy(self) -> bool:
        """A notice is being typed into a parent right now."""
        return any(not task.done() for task in self._tasks)

    def deliver_soon(self, parent_id: str) -> None:
        """Type pending notices into ``parent_id`` if it is a live managed agent awaiting input."""
        parent = self.store.get(parent_id)
        if parent is None or parent["agent_state"] != "idle" or self._rt.live.get(parent_id) is None:
            return
        task = asyncio.get_running_loop().create_task(self._deliver(parent_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self, parent_id: str) -> None:
        lock = self._delivering.setdefault(parent_id, asyncio.Lock())
        async with lock:
            pending = self.store.undelivered(parent_id)
            parent = self.store.get(parent_id)
            if not pending or parent is None or parent["agent_state"] != "idle":
                return
            # One notice per idle period: typing it starts the parent's turn; the next one
            # waits for the parent's next idle.
            notice = pending[0]
            prompt_id = f"notify-{notice['id']}"
            params = AgentPromptParams(
                principal=parent["principal"], workspace_root=parent["workspace_root"],
                thread_id=parent["thread_id"], execution_id=parent_id, prompt_id=prompt_id,
                text=notice_text(notice, self.store.catalog.get_approval(str(notice["approval_id"]))
                                 if notice.get("approval_id") else None),
                recognizer=parent["agent_recognizer"] or "auto",
                timeout_ms=0,
            )
            try:
                await self.prompts.prompt(None, params)
            except TetherError as err:
                # Busy, or a draft in its box (never typed into, docs/tools.md#drafts): pending, no news.
                if err.code not in (ErrorCode.INPUT_NOT_READY, ErrorCode.INPUT_NOT_EMPTY):
                    log.warning("notice %s for %s not delivered: %s", notice["id"], parent_id, err)
                if err.data.get("input_sent") is False:
                    return  # still pending: delivered at the parent's next idle
            self.store.mark_delivered(int(notice["id"]), prompt_id)
