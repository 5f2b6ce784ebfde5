"""A change notifier: waiters sleep until something changes or their deadline passes.

This is how long waits are answered without polling (R5): the PTY reader and exit watchers
call :meth:`ChangeNotifier.notify`; a waiting request wakes, re-checks its condition, and
either answers or sleeps again.
"""

from __future__ import annotations

import asyncio


class ChangeNotifier:
    """A generation counter plus an event that is replaced on every notify."""

    def __init__(self) -> None:
        self.generation = 0
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every current waiter. Cheap enough for the PTY reader's hot path."""
        self.generation += 1
        if self._event._waiters:  # skip allocation when nobody waits
            self._event.set()
            self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> bool:
        """Sleep until the next notify (True) or ``timeout_s`` (False)."""
        if timeout_s <= 0:
            return False
        event = self._event
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
