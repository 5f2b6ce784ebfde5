"""At most once per idempotency key (docs/protocol.md#deadlines-and-the-guardian-instance): the ledger in
front of every delivering method."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from tether.protocol.errors import ErrorCode, TetherError
from tether.shared.store.catalog import Catalog
from tether.shared.store.rows import COMPACT_SORTED_JSON, StoredResult
from tether.shared.store.store_errors import StoreError

log = logging.getLogger(__name__)

#: An outcome waits at most this long for a commit to ride along with (a command that is
#: still running when its request is answered), and is tried again this often while the
#: disk refuses it.
OUTCOME_WRITE_S = 0.05
OUTCOME_RETRY_S = 0.5


class IdempotencyLedger:
    """Remembers what each key delivered, so a repeat gets the same answer and types nothing."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        # Keys looked up but not yet claimed (their deliverer is still getting ready), with
        # the method and fingerprint the row will hold.
        self._unclaimed: dict[tuple[str, str], tuple[str, str]] = {}
        self._writer: asyncio.TimerHandle | None = None
        self._failing = False

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
        outcome with the next commit (at most :data:`OUTCOME_WRITE_S` later; reads see it at
        once); a repeat returns that outcome (``replayed: true``) without
        delivering again, and a repeat that finds ``delivering`` (the first attempt died
        mid-way) says the delivery is unknown instead of guessing.
        """
        async def claimed_first(claim: Callable[[], None]) -> dict[str, Any]:
            claim()
            return await deliver()

        return await self.once_claiming(principal, key, method, params, claimed_first)

    async def once_claiming(
        self,
        principal: str,
        key: str,
        method: str,
        params: BaseModel,
        deliver: Callable[[Callable[[], None]], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """:meth:`once`, where the deliverer records the key itself: it calls ``claim()``
        (which writes the ``delivering`` row) before it types any byte, inside its own write
        transaction if it likes, so that the key and what the delivery creates (the
        execution's record) are one commit instead of two.

        Between this lookup and the claim the deliverer may wait (for a shell's first
        prompt); a repeat of the key in that window is answered as if the row were there
        already (``delivery_unknown``), exactly as it would have been before.
        """
        catalog = self._catalog
        fingerprint = _fingerprint(method, params)
        ident = (principal, key)
        stored = catalog.idempotent_result(principal, key)
        if stored is None and ident in self._unclaimed:
            stored = StoredResult(*self._unclaimed[ident], _DELIVERING)
        if stored is not None:
            return _replay(method, fingerprint, stored)
        claimed = False

        def claim() -> None:
            nonlocal claimed
            if claimed:
                return
            catalog.remember_result(principal, key, method, fingerprint, _DELIVERING)
            claimed = True
            self._unclaimed.pop(ident, None)

        self._unclaimed[ident] = (method, fingerprint)
        try:
            outcome = await deliver(claim)
        except TetherError as err:
            if err.data.get("input_sent") is False:
                # Nothing was typed: remember the refusal so a repeat gets the same answer.
                catalog.remember_result(principal, key, method, fingerprint, {"error": err.to_wire()})
            raise
        finally:
            self._unclaimed.pop(ident, None)
        if not claimed:  # a deliverer that forgot to claim: the key must still hold
            raise AssertionError(f"{method} delivered without claiming its idempotency key")
        # The outcome rides along with the next commit (a command's end, a moment later)
        # rather than paying for one of its own; a repeat sees it at once. Should the
        # guardian die first, the key stays `delivering`: its repeat is delivery_unknown.
        catalog.remember_result_soon(principal, key, method, fingerprint, outcome)
        self._write_soon_later(OUTCOME_WRITE_S)
        return outcome

    def _write_soon_later(self, delay_s: float) -> None:
        """Make sure outcomes waiting for a commit are written within ``delay_s``."""
        if self._writer is None:
            self._writer = asyncio.get_running_loop().call_later(delay_s, self._write_soon)

    def _write_soon(self) -> None:
        self._writer = None
        try:
            self._catalog.write_waiting()
        except (StoreError, OSError) as exc:  # a full disk: kept in memory, tried again
            if not self._failing:
                log.warning("idempotency outcomes not written yet (tried again): %s", exc)
            self._failing = True
            self._write_soon_later(OUTCOME_RETRY_S)
        else:
            self._failing = False


#: The row of a key whose delivery has started and not been recorded as finished.
_DELIVERING: dict[str, Any] = {"state": "delivering"}


def _replay(method: str, fingerprint: str, stored: tuple[str, str, Any]) -> dict[str, Any]:
    """The answer to a repeat of a key already used (never a second delivery)."""
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




def _fingerprint(method: str, params: BaseModel) -> str:
    """What makes two requests "the same" for idempotency (waits do not)."""
    data = params.model_dump(mode="json", exclude={"wait_ms"})
    blob = COMPACT_SORTED_JSON.encode([method, data])
    return hashlib.sha256(blob.encode()).hexdigest()
