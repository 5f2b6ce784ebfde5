"""Which request tasks are only waiting now (docs/protocol.md#live-upgrade).

A live upgrade may cut a request short only where cutting changes nothing: a read, or a
request whose delivery is done and recorded (its idempotency key's outcome, a prompt's
receipt) and that now only waits for what follows. Such a request, cut, is answered
``guardian_upgrading`` and sent again by the front-end, which then gets the recorded outcome
(never a second delivery) and waits on the new code. A handler marks the point from which it
only waits with :func:`only_waiting`; until then the upgrade waits for it.
"""

from __future__ import annotations

import asyncio

_WAITING: set[asyncio.Task[object]] = set()


def only_waiting() -> None:
    """The current request task delivers nothing more: it may be cut from here on."""
    task = asyncio.current_task()
    if task is not None:
        _WAITING.add(task)


def done(task: asyncio.Task[object] | None) -> None:
    """The request task ended (answered or cut)."""
    if task is not None:
        _WAITING.discard(task)


def waiting_tasks() -> set[asyncio.Task[object]]:
    """The request tasks that only wait now (a copy)."""
    return {task for task in _WAITING if not task.done()}
