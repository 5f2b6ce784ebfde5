"""Idempotency keys: the ``idempotency`` table, one outcome per (principal, key)."""

from __future__ import annotations

import json
from typing import Any

from tether.shared.store.core import CatalogCore
from tether.shared.store.rows import PLAIN_JSON, StoredResult


class IdempotencyTable(CatalogCore):
    """A key's outcome, written now or with the catalog's next commit."""

    def idempotent_result(self, principal: str, key: str) -> StoredResult | None:
        """``(method, fingerprint, result)`` stored for a key (or waiting for the next commit),
        or None."""
        soon = self._soon.get((principal, key))
        if soon is not None:
            return soon
        row = self._db.execute(
            "SELECT method, fingerprint, result FROM idempotency WHERE principal = ? AND key = ?",
            (principal, key),
        ).fetchone()
        if row is None:
            return None
        return StoredResult(row[0], row[1], json.loads(row[2]))

    def remember_result(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        """Write a key's row now (in the open transaction, if any)."""
        self._soon.pop((principal, key), None)
        self._insert_result(principal, key, method, fingerprint, result)

    def remember_result_soon(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        """Write a key's row with the next commit of this catalog instead of a commit of its
        own (an ended command's record is written a moment later: the same commit).

        Reads of this catalog object see it at once. Until it is written the stored row is
        the one before (``delivering``): a guardian that dies meanwhile leaves a key whose
        repeat is ``delivery_unknown``. :meth:`write_waiting` writes it without waiting.
        """
        self._soon[(principal, key)] = StoredResult(method, fingerprint, result)

    def _insert_result(
        self, principal: str, key: str, method: str, fingerprint: str, result: Any
    ) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?, ?, ?)",
            (principal, key, method, fingerprint, PLAIN_JSON.encode(result), self.clock.now_ms()),
        )

    def forget_results_before(self, unix_ms: int) -> None:
        self._db.execute("DELETE FROM idempotency WHERE created_unix_ms < ?", (unix_ms,))
