"""Prompt receipts (docs/tools.md#prompts, docs/tools.md#once-only): the ``receipts`` table, one row per
prompt id of an execution."""

from __future__ import annotations

import json

from tether.shared.store.core import CatalogCore
from tether.shared.store.rows import Receipt, ReceiptMatch, StoredReceipt


class ReceiptsTable(CatalogCore):
    """What became of each prompt typed into an agent, by execution and prompt id."""

    def get_receipt(self, execution_id: str, prompt_id: str) -> StoredReceipt | None:
        """``(payload_sha256, receipt)`` stored for a prompt id on an execution, or None."""
        row = self._db.execute(
            "SELECT payload_sha256, receipt FROM receipts WHERE execution_id = ? AND prompt_id = ?",
            (execution_id, prompt_id),
        ).fetchone()
        return None if row is None else StoredReceipt(row[0], json.loads(row[1]))

    def count_receipts(self, execution_id: str, generation: int) -> int:
        row = self._db.execute(
            "SELECT count(*) FROM receipts WHERE execution_id = ? AND generation = ?",
            (execution_id, generation),
        ).fetchone()
        return int(row[0])

    def put_receipt(
        self, execution_id: str, prompt_id: str, generation: int, payload_sha256: str,
        receipt: Receipt,
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO receipts VALUES (?, ?, ?, ?, ?, ?)",
            (execution_id, prompt_id, generation, payload_sha256, json.dumps(receipt),
             self.clock.now_ms()),
        )

    def receipts_containing(self, text: str) -> list[ReceiptMatch]:
        """``(execution_id, prompt_id, receipt)`` of each receipt whose stored JSON contains
        ``text``: a cheap first cut over the whole table, which the caller refines."""
        rows = self._db.execute(
            "SELECT execution_id, prompt_id, receipt FROM receipts WHERE instr(receipt, ?) > 0",
            (text,),
        ).fetchall()
        return [ReceiptMatch(row[0], row[1], json.loads(row[2])) for row in rows]

    def replace_receipt(self, execution_id: str, prompt_id: str, receipt: Receipt) -> None:
        """Rewrite a stored receipt, keeping its payload digest, generation and creation time."""
        self._db.execute(
            "UPDATE receipts SET receipt = ? WHERE execution_id = ? AND prompt_id = ?",
            (json.dumps(receipt), execution_id, prompt_id),
        )

    def list_receipts(self, execution_id: str) -> list[Receipt]:
        rows = self._db.execute(
            "SELECT receipt FROM receipts WHERE execution_id = ? ORDER BY created_unix_ms",
            (execution_id,),
        ).fetchall()
        return [json.loads(row[0]) for row in rows]
