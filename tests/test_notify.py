"""The change notifier cannot lose a wake-up (issue 11, reproduction 6)."""

from __future__ import annotations

import asyncio

import pytest

from tether.guardian.runtime.notify import ChangeNotifier

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("output", [True, False])
async def test_notify_right_after_the_wait_starts_wakes_it(output: bool) -> None:
    """The window that lost the wake-up: the waiting task has started and is suspended, but
    an inner task that would register its interest has not run yet."""
    notifier = ChangeNotifier()
    waiter = asyncio.ensure_future(notifier.wait(5.0, output=output))
    await asyncio.sleep(0)  # the waiter runs up to its first suspension, no further
    notifier.notify()
    assert await asyncio.wait_for(waiter, 10) is True


async def test_output_does_not_wake_a_state_waiter() -> None:
    notifier = ChangeNotifier()
    waiter = asyncio.ensure_future(notifier.wait(0.2, output=False))
    await asyncio.sleep(0)
    notifier.notify_output()
    assert await waiter is False


async def test_a_notification_before_the_wait_is_seen_by_sequence() -> None:
    """A waiter that looked at the state, then waits, wakes for a change made in between."""
    notifier = ChangeNotifier()
    seen = notifier.seq
    notifier.notify()
    assert await notifier.wait(5.0, since=seen) is True
    assert await notifier.wait(0.05, since=notifier.seq) is False
