"""The catalog's tables and what an older catalog gets when it is opened (its migrations).

A catalog file is created and migrated only by its guardian (``core.CatalogCore``); whoever
has no live guardian reads it through ``view`` and never runs any of this.
"""

from __future__ import annotations

#: 3: the turn log (``turns``, ``turn_table``), a new table only.
#: 4: approvals and the operator hook's notices (``approval_table``), new tables, and the
#: approval a notification tells of (``notifications.approval_id``).
SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS threads (
    thread_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    workspace_root TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    shell_execution_id TEXT,
    generation INTEGER NOT NULL DEFAULT 1,
    cwd TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    seq INTEGER PRIMARY KEY,
    execution_id TEXT UNIQUE NOT NULL,
    principal TEXT NOT NULL,
    workspace_root TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    command TEXT NOT NULL,
    cwd TEXT,
    status TEXT NOT NULL,
    exit_code INTEGER,
    reason TEXT,
    started_unix_ms INTEGER NOT NULL,
    ended_unix_ms INTEGER,
    terminal_unix_ms INTEGER,
    observed_at_unix_ms INTEGER NOT NULL,
    guardian_instance_id TEXT NOT NULL,
    runtime TEXT,
    generation INTEGER NOT NULL DEFAULT 1,
    output_start INTEGER NOT NULL DEFAULT 0,
    output_end INTEGER NOT NULL DEFAULT 0,
    output_pending INTEGER NOT NULL DEFAULT 0,
    output_activity_seq INTEGER NOT NULL DEFAULT 0,
    screen_text TEXT,
    recognizer TEXT,
    parent_execution_id TEXT,
    labels TEXT NOT NULL DEFAULT '{}',
    archived_at INTEGER,
    recovery TEXT,
    rows INTEGER NOT NULL DEFAULT 40,
    cols INTEGER NOT NULL DEFAULT 120,
    change_seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS executions_thread ON executions (thread_id, seq);
CREATE TABLE IF NOT EXISTS receipts (
    execution_id TEXT NOT NULL,
    prompt_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    payload_sha256 TEXT NOT NULL,
    receipt TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (execution_id, prompt_id)
);
CREATE TABLE IF NOT EXISTS person_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    attach_id TEXT NOT NULL,
    at_unix_ms INTEGER NOT NULL,
    UNIQUE (execution_id, kind, attach_id)
);
CREATE TABLE IF NOT EXISTS execution_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    at_unix_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS thread_modes (
    thread_id TEXT PRIMARY KEY,
    mode TEXT NOT NULL,
    changed_unix_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS agent_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    execution_id TEXT NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    attention TEXT,
    reason TEXT NOT NULL,
    generation INTEGER NOT NULL,
    turn_seq INTEGER NOT NULL,
    at_unix_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_events_execution ON agent_events (execution_id, seq);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_execution_id TEXT NOT NULL,
    child_execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    turn_seq INTEGER NOT NULL,
    event_seq INTEGER NOT NULL UNIQUE,
    created_at_unix_ms INTEGER NOT NULL,
    delivered_prompt_id TEXT,
    delivered_at_unix_ms INTEGER
);
CREATE INDEX IF NOT EXISTS notifications_parent ON notifications (parent_execution_id, id);
CREATE TABLE IF NOT EXISTS idempotency (
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    method TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    result TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY,
    execution_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    rule TEXT,
    recognizer TEXT,
    at_unix_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_execution ON turns (execution_id, seq);
CREATE TABLE IF NOT EXISTS approvals (
    seq INTEGER PRIMARY KEY,
    approval_id TEXT UNIQUE NOT NULL,
    execution_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    principal TEXT NOT NULL,
    workspace_root TEXT NOT NULL,
    parent_execution_id TEXT,
    guardian_instance_id TEXT NOT NULL,
    pending INTEGER NOT NULL,
    record TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_execution ON approvals (execution_id, seq);
CREATE INDEX IF NOT EXISTS approvals_pending ON approvals (seq) WHERE pending = 1;
CREATE TABLE IF NOT EXISTS notices (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    hook TEXT NOT NULL,
    created_unix_ms INTEGER NOT NULL,
    detail TEXT
);
"""

#: Indexes a command's writes no longer pay for (each index is a page more per commit on a
#: command's path): no query needs change_seq indexed (changed_since looks rows up by id), and
#: only managed agents are looked up by parent or listed newest first, so those indexes hold
#: agent rows only. (Catalogs made before keep AUTOINCREMENT, one more page per insert, and a
#: rowid idempotency table, one more page.)
INDEX_CHANGES = (
    "DROP INDEX IF EXISTS executions_change",
    "DROP INDEX IF EXISTS executions_agents",
    "CREATE INDEX IF NOT EXISTS executions_agent_parents"
    " ON executions (parent_execution_id, seq) WHERE kind = 'agent'",
    "CREATE INDEX IF NOT EXISTS executions_agents_newest ON executions (seq) WHERE kind = 'agent'",
)

#: Columns that schema 2 added to ``executions`` for managed agents (docs/tools.md#managed-agents). A catalog
#: written by an older Tether gets them with ALTER TABLE on open; old rows read as non-agents.
AGENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("provider", "TEXT"),
    ("agent_state", "TEXT"),
    ("attention", "TEXT"),
    ("title", "TEXT"),
    ("conversation_id", "TEXT"),
    ("auto_archive", "INTEGER NOT NULL DEFAULT 0"),
    ("notify_on_finish", "INTEGER NOT NULL DEFAULT 0"),
    ("parent_workspace", "TEXT"),
    ("argv", "TEXT"),
    ("agent_recognizer", "TEXT"),
    ("turn_seq", "INTEGER NOT NULL DEFAULT 0"),
)

#: Columns added to ``threads`` after schema 2, the same way: how the thread's main shell
#: ended when no reset replaced it (``{generation, reason}`` as JSON), so that the shell
#: started after it can say why the thread has a new one.
THREAD_COLUMNS: tuple[tuple[str, str], ...] = (("shell_ended", "TEXT"),)

#: Columns added to ``notifications`` in schema 4: the approval an ``approval`` notice tells of.
NOTIFICATION_COLUMNS: tuple[tuple[str, str], ...] = (("approval_id", "TEXT"),)
