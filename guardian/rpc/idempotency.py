"""At most once per idempotency key (R9): the ledger in front of every delivering method."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.catalog import Catalog


class IdempotencyLedger:
    """Remembers what each key delivered, so a repeat gets the same answer and types nothing."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    async def once(
        self,
        principal: str,
        key: str,
        method: str,
        params: BaseModel,
        deliver: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Deliver at most once per idempotency key.

        The key is recorded as ``delivering`` before any byte is typed and replaced by the
        outcome right after; a repeat returns that outcome (``replayed: true``) without
        delivering again, and a repeat that finds ``delivering`` (the first attempt died
        mid-way) says the delivery is unknown instead of guessing.
        """
        catalog = self._catalog
        fingerprint = _fingerprint(method, params)
        stored = catalog.idempotent_result(principal, key)
        if stored is not None:
            stored_method, stored_fingerprint, outcome = stored
            if stored_method != method or stored_fingerprint != fingerprint:
                raise TetherError(
                    ErrorCode.IDEMPOTENCY_CONFLICT,
                    f"idempotency key was already used for a different request ({stored_method}"
                    " with other params); nothing was done. Use a new key for a new request.",
                    {"input_sent": False},
                )
            if outcome.get("state") == "delivering":
                raise TetherError(
                    ErrorCode.DELIVERY_UNKNOWN,
                    "an earlier attempt with this idempotency key did not finish; whether its "
                    "input was delivered is unknown, and it will not be sent again",
                    {"input_sent": "unknown"},
                )
            if "error" in outcome:
                raise TetherError.from_wire(outcome["error"])
            return {**outcome, "replayed": True}
        catalog.remember_result(principal, key, method, fingerprint, {"state": "delivering"})
        try:
            outcome = await deliver()
        except TetherError as err:
            if err.data.get("input_sent") is False:
                # Nothing was typed: remember the refusal so a repeat gets the same answer.
                catalog.remember_result(principal, key, method, fingerprint, {"error": err.to_wire()})
            raise
        catalog.remember_result(principal, key, method, fingerprint, outcome)
        return outcome


def _fingerprint(method: str, params: BaseModel) -> str:
    """What makes two requests "the same" for idempotency (waits do not)."""
    data = params.model_dump(mode="json", exclude={"wait_ms"})
    blob = json.dumps([method, data], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
