"""Gap filling: what the node missed while its link was down, from history.

The memory backplane never loses a message, so the tests make the gap the
way Redis would: the space's channel is dropped (messages are recorded in
history but reach nobody), then the backplane reports the skip (``missed``)
just before the next message arrives.
"""

from __future__ import annotations

from typing import Any

import pytest

from hub.cluster.backplane import Draft
from hub.core.peer import PeerKind
from hub.handlers import gaps
from protocol import codec
from protocol.errors import CloseCode, ErrorCode
from tests.support.handlers import HandlerRig
from tests.support.peers import FakePeer


async def members(rig: HandlerRig) -> tuple[FakePeer, FakePeer]:
    """A socket member and a virtual one in ``room``."""
    alice = await rig.connect("alice")
    bridge = await rig.connect("bridge", kind=PeerKind.VIRTUAL)
    for p in (alice, bridge):
        await rig.join(p, "room")
    for p in (alice, bridge):
        p.frames.clear()
    return alice, bridge


async def publish(rig: HandlerRig, n: int, to: tuple[str, ...] | None = None) -> int:
    head, tail = codec.sequenced("space.event", "room", f"e{n}", {"data": {"n": n}})
    return await rig.backplane.publish("room", Draft(head, tail, to=to))


async def link_down(rig: HandlerRig, *numbers: int) -> None:
    """Messages published while this node's channel was down: recorded, not received."""
    await rig.backplane.unsubscribe("room")
    for n in numbers:
        await publish(rig, n)
    await rig.backplane.subscribe("room")


def numbers(peer: FakePeer) -> list[int]:
    return [m["data"]["n"] for m in peer.messages("space.event")]


async def test_a_gap_is_filled_in_order_and_newer_messages_wait_for_it(rig: HandlerRig) -> None:
    alice, bridge = await members(rig)
    await publish(rig, 1)
    await link_down(rig, 2, 3, 4)
    rig.delivery.missed("room", 1, 5)  # reported before 5 is delivered
    assert rig.gaps.filling == {"room": []}
    await publish(rig, 5)
    await publish(rig, 6)
    assert numbers(alice) == [1], "5 and 6 wait behind the gap"
    await rig.background()
    assert numbers(alice) == [1, 2, 3, 4, 5, 6] == numbers(bridge)
    assert [m["seq"] for m in alice.messages()] == [1, 2, 3, 4, 5, 6]
    assert rig.gaps.filled == 3 and rig.gaps.filling == {}
    await publish(rig, 7)
    assert numbers(alice)[-1] == 7, "straight through again"
    assert not alice.closing


async def test_a_long_gap_is_read_page_by_page(rig: HandlerRig) -> None:
    alice, _ = await members(rig)
    missed = list(range(1, 2 * gaps.PAGE + 50))
    await link_down(rig, *missed)
    rig.delivery.missed("room", 0, len(missed) + 1)
    await publish(rig, len(missed) + 1)
    await rig.background()
    assert numbers(alice) == [*missed, len(missed) + 1]


async def test_filled_messages_keep_their_audience(rig: HandlerRig) -> None:
    alice, bridge = await members(rig)
    await rig.backplane.unsubscribe("room")
    await publish(rig, 1, to=("bridge",))
    await publish(rig, 2)
    await rig.backplane.subscribe("room")
    rig.delivery.missed("room", 0, 3)
    await rig.background()
    assert numbers(alice) == [2] and numbers(bridge) == [1, 2]


async def test_a_gap_in_a_space_without_local_members_is_ignored(rig: HandlerRig) -> None:
    await members(rig)
    rig.delivery.missed("elsewhere", 0, 9)
    assert rig.gaps.filling == {}
    await rig.background()
    assert rig.gaps.filled == 0


def gave_up(peer: FakePeer) -> bool:
    return peer.closed_with is not None and peer.closed_with[:2] == (
        CloseCode.TRY_AGAIN_LATER,
        ErrorCode.UNAVAILABLE,
    )


async def test_lost_history_closes_socket_members_and_the_rest_carry_on(make_rig: Any) -> None:
    rig = await make_rig(history_size=2)
    alice, bridge = await members(rig)
    await link_down(rig, 1, 2, 3)  # history keeps 2 and 3: 1 is gone
    rig.delivery.missed("room", 0, 4)
    await publish(rig, 4)
    await rig.background()
    assert gave_up(alice), "it reconnects and resumes from its own position"
    assert "'room'" in alice.messages("error")[0]["message"]
    assert not bridge.closing, "a virtual member cannot reconnect"
    assert numbers(bridge) == [4], "no partial fill; the held message still goes out"
    assert rig.gaps.filling == {}


async def test_an_unreadable_history_gives_up(rig: HandlerRig) -> None:
    alice, bridge = await members(rig)
    await link_down(rig, 1, 2)
    rig.backplane.switches.fail.add("history")
    rig.delivery.missed("room", 0, 3)
    await publish(rig, 3)
    await rig.background()
    assert gave_up(alice) and numbers(bridge) == [3]


async def test_a_second_gap_while_filling_gives_up(rig: HandlerRig) -> None:
    alice, bridge = await members(rig)
    await link_down(rig, 1)
    rig.delivery.missed("room", 0, 2)
    await publish(rig, 2)
    await link_down(rig, 3)
    rig.delivery.missed("room", 2, 4)  # the fill of the first has not run yet
    await publish(rig, 4)
    await rig.background()
    assert gave_up(alice)
    assert numbers(bridge) == [2, 4], "what was held is delivered, in order"


async def test_holding_too_much_gives_up(rig: HandlerRig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gaps, "MAX_DEFERRED", 3)
    alice, bridge = await members(rig)
    await link_down(rig, 1)
    rig.delivery.missed("room", 0, 2)
    for n in range(2, 6):  # four held: one over the bound
        await publish(rig, n)
    await rig.background()
    assert gave_up(alice)
    assert numbers(bridge) == [2, 3, 4, 5]
