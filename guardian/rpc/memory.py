"""Giving freed memory back once the guardian goes quiet (docs/development.md#benchmarks: idle RSS ≤ 40 MB).

Python frees objects into glibc's heap, which keeps the pages: after a burst of requests
(or start-up's imports) the resident size stays at its peak. ``malloc_trim`` returns the
free pages to the kernel. It walks the heap (about a millisecond), so it runs once activity
has been quiet for a moment, never on a request's path.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How long without a request before the heap is trimmed.
QUIET_S = 0.5


def _libc_trim() -> Callable[[], None] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None
    return lambda: trim(0)


class QuietTrimmer:
    """Call :meth:`touch` on every request; the heap is trimmed after each quiet spell."""

    def __init__(self) -> None:
        self._trim = _libc_trim()
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def touch(self) -> None:
        self._last = time.monotonic()
        if self._timer is None and self._trim is not None:
            self._timer = asyncio.get_running_loop().call_later(QUIET_S, self._check)

    def _check(self) -> None:
        self._timer = None
        quiet = time.monotonic() - self._last
        if quiet < QUIET_S:
            self._timer = asyncio.get_running_loop().call_later(QUIET_S - quiet, self._check)
        elif self._trim is not None:
            self._trim()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
