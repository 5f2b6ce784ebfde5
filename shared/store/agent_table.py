"""Managed agents in the catalog: state transitions with event rows, durable notifications,
labels, and the archive cascade (docs/tools.md#agent-states, docs/tools.md#close-resume-archive).

Every transition is one catalog transaction: the new state on the execution record, one
``agent_events`` row, and — when the agent has a parent and ``notify_on_finish`` — one
``notifications`` row keyed by that event (``UNIQUE(event_seq)``). A notification therefore
exists exactly once per event, whatever restarts follow, and an event is never written
without its notification or the reverse.

Labels live in the record's ``labels`` map (docs/tools.md#records); ``tether.open.<client-id> = "true"`` is a
client holding the agent open, which keeps it out of a parent's archive cascade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, cast

from tether.protocol.limits import MAX_LABELS
from tether.shared.agent_states import AgentState, Step, archived_state, step
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import AgentEventRow, ExecutionRow, NotificationRow

OPEN_LABEL_PREFIX = "tether.open."


def is_held_open(labels: Mapping[str, Any] | None) -> bool:
    """Whether any client holds the agent open (``tether.open.<client> = "true"``)."""
    return any(k.startswith(OPEN_LABEL_PREFIX) and v == "true" for k, v in (labels or {}).items())


@dataclass(frozen=True, slots=True)
class Transition:
    """One persisted transition: the record after it, its event, and what it implies."""

    record: ExecutionRow
    event_seq: int
    step: Step
    notification_id: int | None


@dataclass(slots=True)
class Cascade:
    """What one archive did, in cascade order (root first)."""

    archived: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)


class _Keep:
    """Marker: leave ``attention`` as it is."""


KEEP = _Keep()


class AgentStore:
    """Agent-side reads and writes over a guardian's catalog."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._db = catalog.connection
        #: Called with every transition, inside its transaction (docs/tools.md#approvals: the
        #: operator hook's finish notices are written with the transition they tell of).
        self.on_transition: Callable[[Transition], None] | None = None

    # -- reads -----------------------------------------------------------------------------

    def get(self, execution_id: str) -> ExecutionRow | None:
        record = self.catalog.get_execution(execution_id)
        return record if record is not None and record["kind"] == "agent" else None

    def list_agents(
        self, principal: str, workspace_root: str, *, parent: str | None = None,
        include_archived: bool = False, limit: int = 100, before: int | None = None,
    ) -> list[ExecutionRow]:
        """The workspace's agents (whichever thread launched them), newest first; ``before``:
        only those older than that ``seq`` (the next page of a listing)."""
        query = "SELECT * FROM executions WHERE kind = 'agent' AND principal = ? AND workspace_root = ?"
        args: list[Any] = [principal, workspace_root]
        if before is not None:
            query += " AND seq < ?"
            args.append(before)
        if parent is not None:
            query += " AND parent_execution_id = ?"
            args.append(parent)
        if not include_archived:
            query += " AND archived_at IS NULL"
        rows = self._db.execute(query + " ORDER BY seq DESC LIMIT ?", [*args, limit]).fetchall()
        return [self.catalog.decode(row) for row in rows]

    def events(self, execution_id: str, limit: int = 200) -> list[AgentEventRow]:
        rows = self._db.execute(
            "SELECT seq, execution_id, from_state, to_state, attention, reason, generation,"
            " turn_seq, at_unix_ms FROM agent_events WHERE execution_id = ? ORDER BY seq LIMIT ?",
            (execution_id, limit),
        ).fetchall()
        return [cast(AgentEventRow, dict(row)) for row in rows]

    def notifications(self, parent: str, after: int = 0, limit: int = 100) -> list[NotificationRow]:
        rows = self._db.execute(
            "SELECT id, parent_execution_id, child_execution_id, kind, turn_seq,"
            " created_at_unix_ms, delivered_prompt_id, approval_id FROM notifications"
            " WHERE parent_execution_id = ? AND id > ? ORDER BY id LIMIT ?",
            (parent, after, limit),
        ).fetchall()
        return [cast(NotificationRow, dict(row)) for row in rows]

    def undelivered(self, parent: str) -> list[NotificationRow]:
        """Notifications not yet typed into a managed parent, oldest first."""
        rows = self._db.execute(
            "SELECT id, parent_execution_id, child_execution_id, kind, turn_seq,"
            " created_at_unix_ms, approval_id FROM notifications WHERE parent_execution_id = ?"
            " AND delivered_at_unix_ms IS NULL ORDER BY id",
            (parent,),
        ).fetchall()
        return [cast(NotificationRow, dict(row)) for row in rows]

    def mark_delivered(self, notification_id: int, prompt_id: str) -> None:
        self._db.execute(
            "UPDATE notifications SET delivered_prompt_id = ?, delivered_at_unix_ms = ?"
            " WHERE id = ? AND delivered_at_unix_ms IS NULL",
            (prompt_id, self.catalog.clock.now_ms(), notification_id),
        )

    # -- writes ----------------------------------------------------------------------------

    def create(self, record: dict[str, Any], *, reason: str = "launched") -> Transition:
        """Insert a new agent record in ``initializing`` with its first event."""
        with self.catalog.transaction():
            self.catalog.insert_execution({**record, "kind": "agent", "agent_state": None})
            created = self.transition(record["execution_id"], "initializing", reason=reason)
        assert created is not None
        return created

    def transition(
        self, execution_id: str, to: AgentState, *, reason: str,
        attention: str | _Keep | None = KEEP, fields: Mapping[str, Any] | None = None,
    ) -> Transition | None:
        """Persist ``to`` (and attention) with an event row; None when nothing changes.

        ``fields`` are other record fields written in the same transaction (runtime,
        generation, status, ...).
        """
        with self.catalog.transaction():
            current = self.get(execution_id)
            if current is None:
                return None
            before: AgentState | None = current["agent_state"]
            attention_before = current["attention"]
            attention_after = attention_before if isinstance(attention, _Keep) else attention
            if to != "running":
                attention_after = None  # attention means "this turn waits on a person"
            if before == to and attention_before == attention_after:
                if fields:
                    self.catalog.update_execution(execution_id, **fields)
                return None
            what = step(before, to, attention_before, attention_after)
            turn_seq = int(current["turn_seq"]) + (1 if what.turn_started else 0)
            record = self.catalog.update_execution(
                execution_id, agent_state=to, attention=attention_after, turn_seq=turn_seq,
                **dict(fields or {}),
            )
            assert record is not None
            now = self.catalog.clock.now_ms()
            cursor = self._db.execute(
                "INSERT INTO agent_events (execution_id, from_state, to_state, attention, reason,"
                " generation, turn_seq, at_unix_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (execution_id, before, to, attention_after, reason, record["generation"],
                 turn_seq, now),
            )
            event_seq = int(cursor.lastrowid or 0)
            notification_id = None
            parent = record["parent_execution_id"]
            if what.notification is not None and record["notify_on_finish"] and parent:
                # An approval notice names the approval the same look recorded
                # (docs/tools.md#approvals): the parent can answer from the notice alone.
                approval_id = (self.catalog.latest_pending_approval(execution_id)
                               if what.notification == "approval" else None)
                cursor = self._db.execute(
                    "INSERT OR IGNORE INTO notifications (parent_execution_id, child_execution_id,"
                    " kind, turn_seq, event_seq, created_at_unix_ms, approval_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (parent, execution_id, what.notification, turn_seq, event_seq, now,
                     approval_id),
                )
                notification_id = int(cursor.lastrowid or 0) or None
            moved = Transition(record, event_seq, what, notification_id)
            if self.on_transition is not None:
                self.on_transition(moved)  # in this transaction (the operator hook's notice)
        return moved

    def set_labels(self, execution_id: str, changes: Mapping[str, str | None]) -> ExecutionRow:
        """Merge ``changes`` into the labels (``None`` removes a key); returns the record."""
        with self.catalog.transaction():
            current = self.get(execution_id)
            assert current is not None
            labels = dict(current["labels"] or {})
            for key, value in changes.items():
                if value is None:
                    labels.pop(key, None)
                else:
                    labels[key] = value
            if len(labels) > MAX_LABELS:
                raise ValueError(
                    f"an agent may carry at most {MAX_LABELS} labels; this would make {len(labels)}"
                )
            record = self.catalog.update_execution(execution_id, labels=labels)
        assert record is not None
        return record

    def detach(self, execution_id: str) -> ExecutionRow | None:
        """Clear the parent and every open label, and nothing else (docs/tools.md#trees-and-parents)."""
        with self.catalog.transaction():
            current = self.get(execution_id)
            if current is None:
                return None
            labels = {k: v for k, v in (current["labels"] or {}).items()
                      if not k.startswith(OPEN_LABEL_PREFIX)}
            return self.catalog.update_execution(
                execution_id, parent_execution_id=None, parent_workspace=None, labels=labels
            )

    def detach_children_of(self, parent_workspace: str, parent_ids: Sequence[str]) -> list[str]:
        """Detach unarchived agents whose parent (in another workspace) was archived."""
        if not parent_ids:
            return []
        marks = ", ".join("?" for _ in parent_ids)
        with self.catalog.transaction():
            rows = self._db.execute(
                f"SELECT execution_id FROM executions WHERE kind = 'agent' AND archived_at IS NULL"
                f" AND parent_workspace = ? AND parent_execution_id IN ({marks}) ORDER BY seq",
                [parent_workspace, *parent_ids],
            ).fetchall()
            ids = [str(row[0]) for row in rows]
            for execution_id in ids:
                self.detach(execution_id)
        return ids

    def archive_tree(self, root_id: str, live: AbstractSet[str] = frozenset()) -> Cascade:
        """Archive ``root_id`` and its children recursively, in one transaction
        (docs/tools.md#trees-and-parents).

        A child held open by any client is detached instead of archived; a child whose
        recorded parent workspace is not this one is detached (children that live in other
        workspaces are in other guardians' catalogs: see ``detach_children_of``). Agents in
        ``live`` still hold a runtime: their state moves (to ``closed``) when it has ended,
        so ``closed`` never names a process that is still there.
        """
        cascade = Cascade()
        with self.catalog.transaction():
            root = self.get(root_id)
            if root is None:
                return cascade
            queue = [root]
            while queue:
                agent = queue.pop(0)
                self._archive_one(agent, cascade, agent["execution_id"] in live)
                rows = self._db.execute(
                    "SELECT * FROM executions WHERE kind = 'agent' AND archived_at IS NULL"
                    " AND parent_execution_id = ? ORDER BY seq",
                    (agent["execution_id"],),
                ).fetchall()
                for row in rows:
                    child = self.catalog.decode(row)
                    other_workspace = child["parent_workspace"] not in (None, agent["workspace_root"])
                    if other_workspace or is_held_open(child["labels"]):
                        self.detach(child["execution_id"])
                        cascade.detached.append(child["execution_id"])
                    else:
                        queue.append(child)
        return cascade

    def _archive_one(self, agent: ExecutionRow, cascade: Cascade, live: bool) -> None:
        execution_id = agent["execution_id"]
        now = self.catalog.clock.now_ms()
        if live:
            self.catalog.update_execution(execution_id, archived_at=now)
        else:
            moved = self.transition(
                execution_id, archived_state(agent["agent_state"] or "closed"), reason="archived",
                fields={"archived_at": now},
            )
            if moved is not None:
                cascade.transitions.append(moved)
        cascade.archived.append(execution_id)

    def unarchive(self, execution_id: str) -> ExecutionRow | None:
        return self.catalog.update_execution(execution_id, archived_at=None)

    def runtime_lost(self, execution_id: str, reason: str) -> Transition | None:
        """An agent whose runtime vanished unobserved (guardian lost): ``error``, never idle."""
        current = self.get(execution_id)
        if current is None or current["agent_state"] in ("closed", "error"):
            return None
        return self.transition(execution_id, "error", reason=reason)

