"""The execution catalog: one guardian's threads, execution records, receipts, events and
idempotency keys in SQLite, its families composed.

The guardian is the catalog's one writer (WAL mode: readers never wait for it). A dead
guardian's records are reconciled by the guardian that replaces it; whoever has no live
guardian reads the catalog through ``view``, which writes nothing.
"""

from __future__ import annotations

from tether.shared.store.approval_table import ApprovalsTable
from tether.shared.store.event_table import EventsTable
from tether.shared.store.execution_table import ExecutionsTable
from tether.shared.store.idempotency_table import IdempotencyTable
from tether.shared.store.receipt_table import ReceiptsTable
from tether.shared.store.thread_table import ThreadsTable


class Catalog(ThreadsTable, ExecutionsTable, ReceiptsTable, EventsTable, IdempotencyTable,
              ApprovalsTable):
    """Access to one guardian's catalog file: every table family over one connection and
    one transaction (``core.CatalogCore``), so that a step that writes several families
    commits or rolls back as one."""
