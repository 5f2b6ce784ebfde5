"""Time and ids come from one small injected object so tests can drive them."""

from __future__ import annotations

import secrets
import time


class Clock:
    """Wall and monotonic time, and new ids."""

    def now_ms(self) -> int:
        """Unix time in milliseconds."""
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        return time.monotonic()

    def new_id(self, prefix: str) -> str:
        """A new random id such as ``ex_3f9c...`` (URL-safe, 1-64 chars)."""
        return f"{prefix}_{secrets.token_hex(8)}"
