"""A change notifier: waiters sleep until something changes or their deadline passes.

This is how long waits are answered without polling (R5): the PTY reader and exit watchers
notify; a waiting request wakes, re-checks its condition, and either answers or sleeps again.

There are two channels, because output arrives thousands of times a second under load while
state (a record persisted, an exit) changes rarely: a waiter that only cares about state must
not be woken, and re-query the catalog, for every chunk of output.
"""

from __future__ import annotations

import asyncio


class _Channel:
    def __init__(self) -> None:
        self.event = asyncio.Event()

    def fire(self) -> None:
        # Allocate a fresh event only when somebody is waiting on the current one.
        if self.event._waiters:
            self.event.set()
            self.event = asyncio.Event()


class ChangeNotifier:
    """Wakes waiters on output (``output=True`` waiters) and on state changes (everyone)."""

    def __init__(self) -> None:
        self._output = _Channel()
        self._state = _Channel()

    def notify_output(self) -> None:
        """New output arrived. Cheap enough for the PTY reader's hot path."""
        self._output.fire()

    def notify(self) -> None:
        """Persisted state changed (a record, an exit): wake every waiter."""
        self._output.fire()
        self._state.fire()

    async def wait(self, timeout_s: float, *, output: bool = True) -> bool:
        """Sleep until the next notification (True) or ``timeout_s`` (False).

        With ``output=False`` only state changes wake the caller.
        """
        if timeout_s <= 0:
            return False
        event = (self._output if output else self._state).event
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
