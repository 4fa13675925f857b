"""Interest-based subscriptions, reference-counted by local members.

Against the memory backplane with switches on ``subscribe``/``unsubscribe``
(fail, or hold until the test lets them go), so concurrency is exact and no
test waits on the clock except for the grace period itself (sub-second).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from hub.cluster.subscriptions import Subscriptions
from hub.errors import BackplaneUnavailable
from tests.support.handlers import FlakyBackplane, until

WAIT = 5.0  # generous: the grace periods below are 0.05 s


class Wanted:
    """The node's answer to "does anyone here still want this space?"."""

    def __init__(self) -> None:
        self.spaces: set[str] = set()

    def __call__(self, space: str) -> bool:
        return space in self.spaces


@pytest.fixture
async def backplane() -> AsyncIterator[FlakyBackplane]:
    bp = FlakyBackplane()
    yield bp
    await bp.aclose()


@pytest.fixture
def make(backplane: FlakyBackplane) -> Callable[..., tuple[Subscriptions, Wanted]]:
    def _make(grace: float = 0.0) -> tuple[Subscriptions, Wanted]:
        wanted = Wanted()
        return Subscriptions(backplane, grace, wanted), wanted

    return _make


def calls(backplane: FlakyBackplane, op: str) -> int:
    return backplane.switches.calls.count(op)


async def test_the_first_member_subscribes_and_later_ones_do_not(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make()
    await subs.ensure("room")
    await subs.ensure("room")
    await subs.ensure("lab")
    assert subs.active == {"room", "lab"}
    assert calls(backplane, "subscribe") == 2
    assert backplane._subscribed == {"room", "lab"}


async def test_without_grace_the_last_leave_unsubscribes_at_once(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make(grace=0.0)
    await subs.ensure("room")
    subs.release("room")
    assert subs.active == set()
    await until(lambda: calls(backplane, "unsubscribe") == 1)
    assert backplane._subscribed == set()


async def test_a_space_wanted_again_at_release_time_stays_subscribed(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, wanted = make(grace=0.0)
    await subs.ensure("room")
    wanted.spaces.add("room")  # a member came back before the release ran
    subs.release("room")
    assert subs.active == {"room"}
    await asyncio.sleep(0)
    assert calls(backplane, "unsubscribe") == 0


async def test_the_last_leave_unsubscribes_after_the_grace(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make(grace=0.05)
    await subs.ensure("room")
    subs.release("room")
    subs.release("room")  # released twice: one timer
    assert subs.active == {"room"}, "kept through the grace"
    async with asyncio.timeout(WAIT):
        await backplane.switches.reached("unsubscribe")
    assert subs.active == set()


async def test_a_join_within_the_grace_keeps_the_subscription(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make(grace=0.05)
    await subs.ensure("room")
    await subs.ensure("lab")
    subs.release("room")
    await subs.ensure("room")  # back within the grace: the timer is cancelled
    subs.release("lab")  # a later timer with the same grace, as a clock
    async with asyncio.timeout(WAIT):
        await backplane.switches.reached("unsubscribe")
    assert subs.active == {"room"}
    assert calls(backplane, "subscribe") == 2, "no churn: room was subscribed once"
    assert backplane._subscribed == {"room"}


async def test_concurrent_first_joins_share_one_subscribe(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make()
    gate = backplane.switches.hold("subscribe")
    joins = [asyncio.create_task(subs.ensure("room")) for _ in range(3)]
    await until(lambda: calls(backplane, "subscribe") == 1)
    assert not any(j.done() for j in joins), "all wait for the one subscribe"
    gate.set()
    await asyncio.gather(*joins)
    assert calls(backplane, "subscribe") == 1 and subs.active == {"room"}


async def test_a_failed_subscribe_raises_to_every_waiter_and_may_be_retried(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make()
    gate = backplane.switches.hold("subscribe")
    backplane.switches.fail.add("subscribe")
    joins = [asyncio.create_task(subs.ensure("room")) for _ in range(3)]
    await until(lambda: calls(backplane, "subscribe") == 1)
    gate.set()
    results = await asyncio.gather(*joins, return_exceptions=True)
    assert all(isinstance(r, BackplaneUnavailable) for r in results), results
    assert subs.active == set()
    backplane.switches.fail.clear()
    await subs.ensure("room")
    assert subs.active == {"room"} and calls(backplane, "subscribe") == 2


async def test_any_subscribe_failure_is_backplane_unavailable() -> None:
    class Broken(FlakyBackplane):
        async def subscribe(self, space: str) -> None:
            raise OSError("connection reset")

    subs = Subscriptions(Broken(), 0.0, lambda space: False)
    with pytest.raises(BackplaneUnavailable, match="subscribe failed: connection reset"):
        await subs.ensure("room")


async def test_a_cancelled_join_does_not_cancel_the_others_subscribe(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make()
    gate = backplane.switches.hold("subscribe")
    first = asyncio.create_task(subs.ensure("room"))
    second = asyncio.create_task(subs.ensure("room"))
    await until(lambda: calls(backplane, "subscribe") == 1)
    first.cancel()
    gate.set()
    await second
    assert first.cancelled() and subs.active == {"room"}


async def test_a_failed_unsubscribe_is_harmless(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make()
    await subs.ensure("room")
    backplane.switches.fail.add("unsubscribe")
    subs.release("room")
    await until(lambda: calls(backplane, "unsubscribe") == 1)
    assert subs.active == set(), "forgotten here; a reconnect resubscribes only what is active"
    backplane.switches.fail.clear()
    await subs.ensure("room")
    assert subs.active == {"room"}


async def test_aclose_cancels_pending_unsubscribes(
    backplane: FlakyBackplane, make: Callable[..., tuple[Subscriptions, Wanted]]
) -> None:
    subs, _ = make(grace=0.05)
    await subs.ensure("room")
    await subs.ensure("lab")
    subs.release("room")
    await subs.aclose()
    other, _ = make(grace=0.05)  # a clock: its timer runs out after room's would have
    await other.ensure("clock")
    other.release("clock")
    async with asyncio.timeout(WAIT):
        await backplane.switches.reached("unsubscribe")
    assert other.active == set()
    assert subs.active == {"room", "lab"}
    assert calls(backplane, "unsubscribe") == 1, "only the clock's"
    assert backplane._subscribed == {"room", "lab"}
