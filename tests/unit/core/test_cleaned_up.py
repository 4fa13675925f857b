"""CleanedUp: an asyncio.Event's set/is_set/wait without a deque per connection."""

from __future__ import annotations

import asyncio

from hub.core.peer import CleanedUp


async def test_wait_returns_at_once_when_set():
    flag = CleanedUp()
    assert not flag.is_set()
    flag.set()
    assert flag.is_set()
    assert await asyncio.wait_for(flag.wait(), 0.1) is True


async def test_every_waiter_wakes_when_set():
    flag = CleanedUp()
    waiters = [asyncio.create_task(flag.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    flag.set()
    assert await asyncio.gather(*waiters) == [True, True, True]


async def test_a_waiter_giving_up_does_not_cancel_the_others():
    flag = CleanedUp()
    patient = asyncio.create_task(flag.wait())
    try:
        async with asyncio.timeout(0.01):
            await flag.wait()
    except TimeoutError:
        pass
    assert not patient.done()
    flag.set()
    assert await asyncio.wait_for(patient, 1) is True
    # A later waiter after a cancelled one works too.
    late = CleanedUp()
    gone = asyncio.create_task(late.wait())
    await asyncio.sleep(0)
    gone.cancel()
    late.set()
    assert await asyncio.wait_for(late.wait(), 0.1) is True


def test_nothing_is_allocated_for_waiters_until_someone_waits():
    flag = CleanedUp()
    flag.set()
    assert flag._waiter is None
    assert not hasattr(flag, "__dict__")
