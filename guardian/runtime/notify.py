"""A change notifier: waiters sleep until something changes or their deadline passes.

This is how long waits are answered without polling (docs/protocol.md#transport): the PTY reader and exit
watchers
notify; a waiting request wakes, re-checks its condition, and either answers or sleeps again.

There are two channels, because output arrives thousands of times a second under load while
state (a record persisted, an exit) changes rarely: a waiter that only cares about state must
not be woken, and re-query the catalog, for every chunk of output.

A wake-up cannot be lost: a waiter registers its future synchronously, before its first
suspension, so a notification that fires at any later moment finds it. (The earlier design
awaited ``Event.wait()`` inside ``wait_for``; on Python 3.11 that runs in an inner task, and a
notification fired before that task started found no waiter and was skipped.) Each channel
also counts its notifications, so a waiter that checked its condition at ``seq`` and only then
calls :meth:`ChangeNotifier.wait` with ``since=seq`` returns at once if anything happened in
between.
"""

from __future__ import annotations

import asyncio


class _Channel:
    def __init__(self) -> None:
        self.seq = 0
        self.waiters: list[asyncio.Future[None]] = []

    def fire(self) -> None:
        self.seq += 1
        if self.waiters:
            waiters, self.waiters = self.waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(None)


class ChangeNotifier:
    """Wakes waiters on output (``output=True`` waiters) and on state changes (everyone)."""

    def __init__(self) -> None:
        self._output = _Channel()
        self._state = _Channel()

    @property
    def seq(self) -> int:
        """Notifications so far (output and state): pass it to :meth:`wait` as ``since``."""
        return self._output.seq

    @property
    def state_seq(self) -> int:
        """State notifications so far: the ``since`` of an ``output=False`` wait."""
        return self._state.seq

    def resume_counts(self, output_seq: int, state_seq: int) -> None:
        """Go on counting from where the code before a live upgrade stopped."""
        self._output.seq = output_seq
        self._state.seq = state_seq

    def notify_output(self) -> None:
        """New output arrived. Cheap enough for the PTY reader's hot path."""
        self._output.fire()

    def notify(self) -> None:
        """Persisted state changed (a record, an exit): wake every waiter."""
        self._output.fire()
        self._state.fire()

    async def wait(self, timeout_s: float, *, output: bool = True, since: int | None = None) -> bool:
        """Sleep until the next notification (True) or ``timeout_s`` (False).

        With ``output=False`` only state changes wake the caller. With ``since`` (a value of
        :attr:`seq`, or of :attr:`state_seq` for ``output=False``), a notification after that
        value counts even when it came before this call.
        """
        channel = self._output if output else self._state
        if since is not None and channel.seq != since:
            return True
        if timeout_s <= 0:
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        channel.waiters.append(future)  # registered before the first suspension
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            return False
        finally:
            if not future.done():
                future.cancel()
                # Drop it now rather than at the next notification.
                if future in channel.waiters:
                    channel.waiters.remove(future)
        return True
