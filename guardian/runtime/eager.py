"""Moving an eagerly started handler into a task before it waits with a timeout.

The guardian's socket runs a handler right in its reader callback, outside any task, until
the handler first suspends (``protocol/transport.RouterServer``): a command then reaches its
terminal without a trip through the event loop. Timeouts need a task (``asyncio.timeout``, and
``asyncio.wait_for`` from Python 3.12 on), so code on such a path calls :func:`in_task` before
it waits with one.
"""

from __future__ import annotations

import asyncio


async def in_task() -> None:
    """Continue inside a task: outside one, suspend once (the socket wraps the rest of the
    handler in a task and resumes it on the next loop turn); inside one, do nothing."""
    if asyncio.current_task() is None:
        await asyncio.sleep(0)
