"""The catalog's rows as the store hands them out, and how columns are stored.

Small rows are typed maps (``TypedDict``): what a read returns is what the type says. An
execution's record stays a plain map (:data:`ExecutionRow`): forty-odd columns, merged,
overlaid and handed on by every room of the guardian, most of them optional by kind.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, NamedTuple, NotRequired, TypedDict

#: An execution's record as reads return it: every column of ``executions``
#: (``schema.SCHEMA`` and ``schema.AGENT_COLUMNS``), JSON and boolean columns decoded.
ExecutionRow = dict[str, Any]
#: A prompt receipt, as the guardian stored it (JSON).
Receipt = dict[str, Any]
#: A thread's mode as stored (``ModeSpec`` as JSON: name, code_writer's lists).
StoredMode = dict[str, Any]
#: A record's ``(output_start, output_end)``: where its journal's window lies.
OutputFigures = tuple[int, int]


class ThreadRow(TypedDict):
    """A row of ``threads``."""

    thread_id: str
    principal: str
    workspace_root: str
    created_unix_ms: int
    shell_execution_id: str | None
    generation: int
    cwd: str
    #: How the main shell ended when no reset replaced it (JSON text), or None.
    shell_ended: NotRequired[str | None]


class PeekedThread(ThreadRow):
    """A thread read without a guardian, with its stored mode (None: never changed)."""

    mode: dict[str, Any] | None


class PersonEventRow(TypedDict):
    seq: int
    kind: str
    attach_id: str
    at_unix_ms: int


class ExecutionEventRow(TypedDict):
    kind: str
    detail: str
    at_unix_ms: int


class AgentEventRow(TypedDict):
    """A row of ``agent_events``: one managed-agent transition."""

    seq: int
    execution_id: str
    from_state: str | None
    to_state: str
    attention: str | None
    reason: str
    generation: int
    turn_seq: int
    at_unix_ms: int


class NotificationRow(TypedDict):
    """A row of ``notifications`` (``delivered_prompt_id`` in listings only)."""

    id: int
    parent_execution_id: str
    child_execution_id: str
    kind: str
    turn_seq: int
    created_at_unix_ms: int
    delivered_prompt_id: NotRequired[str | None]
    approval_id: NotRequired[str | None]


class PruningRow(TypedDict):
    """What retention looks at for one record of a thread."""

    execution_id: str
    status: str
    kind: str
    archived_at: int | None
    terminal_unix_ms: int | None
    output_start: int
    output_end: int
    screen_bytes: int


class ExpiryRow(TypedDict):
    """What the expiry sweep looks at for one record (``archived_at``: agents only)."""

    seq: int
    execution_id: str
    status: str
    kind: str
    terminal_unix_ms: int | None
    output_start: int
    output_end: int
    archived_at: int | None


class StoredReceipt(NamedTuple):
    payload_sha256: str
    receipt: Receipt


class ReceiptMatch(NamedTuple):
    execution_id: str
    prompt_id: str
    receipt: Receipt


class StoredResult(NamedTuple):
    """An idempotency key's outcome."""

    method: str
    fingerprint: str
    result: Any


#: Columns stored as JSON text and decoded into Python values on read.
_JSON_COLUMNS = ("runtime", "recognizer", "labels", "recovery", "argv")
_BOOL_COLUMNS = ("output_pending", "auto_archive", "notify_on_finish")
TERMINAL_STATUSES = ("exited", "unknown")


def decode_row(row: sqlite3.Row) -> ExecutionRow:
    return decode_fields(dict(row))


def sql_literal(text: str | None) -> Any:
    """A column's declared default (``PRAGMA table_info``) as the value SQLite stores."""
    if text is None or text.upper() == "NULL":
        return None
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("''", "'")
    try:
        return int(text)
    except ValueError:
        return float(text)


def decode_fields(record: dict[str, Any]) -> dict[str, Any]:
    for column in _JSON_COLUMNS:
        if column in record and record[column] is not None:
            record[column] = json.loads(record[column])
    for column in _BOOL_COLUMNS:
        if column in record:
            record[column] = bool(record[column])
    return record


#: UPDATE ... RETURNING (SQLite 3.35): one statement instead of two where it exists.
RETURNING = sqlite3.sqlite_version_info >= (3, 35)

# json.dumps with options builds an encoder per call; these are built once (same output).
COMPACT_SORTED_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
PLAIN_JSON = json.JSONEncoder()


def encode_value(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS and value is not None:
        return COMPACT_SORTED_JSON.encode(value)
    if column in _BOOL_COLUMNS:
        return int(bool(value))
    return value
