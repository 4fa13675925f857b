"""Where the backplane delivers: the node's side of the fan-out, without sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from hub.cluster.backplane import Delivery, MemoryBackplane, StreamOp
from hub.core.counters import Counters
from hub.core.registry import Registry
from hub.handlers.gaps import GapFiller
from hub.node.delivery import CountingDelivery, FanOut, NodeDelivery
from tests.support.peers import FakePeer


def wired(counting: bool = False) -> tuple[NodeDelivery, Registry[FakePeer], Counters, list[Any]]:
    registry: Registry[FakePeer] = Registry()
    counters = Counters()
    fan_out = FanOut(registry, counters, preframe=True, lag=lambda: 0.0)
    gaps = GapFiller(MemoryBackplane(), registry, fan_out, spawn=lambda coro: coro.close())
    seen: list[Any] = []
    kind = CountingDelivery if counting else NodeDelivery
    delivery = kind(
        registry, fan_out, gaps,
        on_ready=seen.append, on_node_message=seen.append, on_signal=seen.append,
    )  # fmt: skip
    return delivery, registry, counters, seen


def member(registry: Registry[FakePeer], agent_id: str, *spaces: str) -> FakePeer:
    peer = FakePeer(agent_id, f"c-{agent_id}")
    registry.add(peer.connection_id, peer)
    registry.bind_agent(peer)
    for space in spaces:
        registry.join(space, peer)
    return peer


def event(space: str, seq: int, **routing: Any) -> Delivery:
    frame = b'{"type":"space.event","space":"%s","seq":%d}' % (space.encode(), seq)
    return Delivery(space, frame, seq, **routing)


def test_a_message_reaches_the_local_audience_once_and_is_counted() -> None:
    delivery, registry, counters, _ = wired()
    alice, bob = member(registry, "alice", "room"), member(registry, "bob", "room")
    delivery.deliver(event("room", 1))
    delivery.deliver(event("room", 2, exclude="alice"))
    delivery.deliver(event("room", 3, to=("alice",)))
    assert [m["seq"] for m in alice.messages()] == [1, 3]
    assert [m["seq"] for m in bob.messages()] == [1, 2]
    assert alice.frames[0] is bob.frames[0], "the same bytes for everyone"
    assert counters.deliveries == 4


def test_a_space_without_local_members_costs_nothing() -> None:
    delivery, registry, counters, _ = wired()
    member(registry, "alice", "room")
    delivery.deliver(event("elsewhere", 1))
    assert counters.deliveries == 0


async def test_streams_keep_the_audience_of_their_first_frame() -> None:
    delivery, registry, _, _ = wired()
    alice = member(registry, "alice", "room")
    delivery.deliver(event("room", 1, stream="s", op=StreamOp.OPEN))
    bob = member(registry, "bob", "room")
    delivery.deliver(event("room", 2, stream="s", op=StreamOp.END))
    assert len(alice.frames) == 2 and bob.frames == []


def test_the_status_page_counts_events_per_local_space() -> None:
    delivery, registry, _, _ = wired(counting=True)
    member(registry, "alice", "room", "lab")
    for seq, space in enumerate(["room", "room", "lab", "elsewhere"], 1):
        delivery.deliver(event(space, seq))
    assert delivery.take_space_events() == {"room": 2, "lab": 1}
    assert delivery.take_space_events() == {}, "counted since the last reading"
    plain, *_ = wired()
    assert plain.take_space_events() is None, "not counted when the page is off"


def test_readiness_and_node_messages_go_to_the_node() -> None:
    delivery, _, _, seen = wired()
    delivery.backplane_ready(False)
    delivery.node_message(b"probe")
    assert seen == [False, b"probe"]


def test_stream_signals_go_to_their_handler_never_to_members() -> None:
    """A signal about a stream's receivers (hub/handlers/stream_stops.py) is
    for the node, even one with no member of the space left (it must still
    answer a census)."""
    delivery, registry, counters, seen = wired()
    alice = member(registry, "alice", "room")
    signal = Delivery("room", b'{"op":"census"}', op=StreamOp.SIGNAL)
    elsewhere = Delivery("elsewhere", b'{"op":"census"}', op=StreamOp.SIGNAL)
    delivery.deliver(signal)
    delivery.deliver(elsewhere)
    assert seen == [signal, elsewhere]
    assert alice.frames == [] and counters.deliveries == 0


async def test_a_leave_waits_until_its_publish_came_back_and_no_longer() -> None:
    """FanOut.reached: returns once the seq (or a later one) was fanned out
    here, at once when it already was, and after its timeout when it never is."""
    delivered = {"room": 4}
    registry: Registry[FakePeer] = Registry()
    fan_out = FanOut(
        registry, Counters(), preframe=True, lag=lambda: 0.0, delivered=delivered.__getitem__
    )
    member(registry, "alice", "room")
    await asyncio.wait_for(fan_out.reached("room", 3, 60), 5)  # already here
    waiting = asyncio.ensure_future(fan_out.reached("room", 6, 60))
    await asyncio.sleep(0)
    fan_out(event("room", 5))
    await asyncio.sleep(0)
    assert not waiting.done()
    fan_out(event("room", 7))  # a later one: 6 went by (or was refused)
    await asyncio.wait_for(waiting, 5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await fan_out.reached("room", 9, 0.05)  # never comes: given up
    assert loop.time() - started >= 0.05
    assert not fan_out._awaited, "no waiter is left behind"
