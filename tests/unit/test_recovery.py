"""The held-frames machinery of resume, without sockets: Holding and Boundary."""

from __future__ import annotations

import orjson

from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.handlers.recovery import Boundary, Holding


class Member:
    def __init__(self, agent_id: str = "m") -> None:
        self.agent_id = agent_id
        self.closing = False
        self.got: list[bytes] = []

    def push(self, frame: OutFrame) -> bool:
        self.got.append(frame.payload)
        return True


def member_of(*spaces: str) -> tuple[Member, Registry[Member]]:
    member, registry = Member(), Registry()
    registry.add("c1", member)
    for space in spaces:
        registry.join(space, member)
    return member, registry


def deliver(registry: Registry[Member], *frames: OutFrame) -> None:
    """Through the fan-out, as the node delivers."""
    for f in frames:
        registry.deliver(orjson.loads(f.payload)["space"], f)


def frame(space: str, seq: int | None, kind: str = "space.event", event_id: str = "e") -> OutFrame:
    msg = {"type": kind, "space": space, "event_id": event_id}
    if seq is not None:
        msg["seq"] = seq
    return OutFrame(orjson.dumps(msg))


def seqs(member: Member) -> list[tuple[str, int | None]]:
    return [(m["space"], m.get("seq")) for m in map(orjson.loads, member.got)]


def test_held_frames_are_released_in_order_past_the_boundary() -> None:
    member, registry = member_of("room", "other")
    hold = Holding(registry, member, limit=1 << 20)
    deliver(registry, frame("room", 3), frame("other", 9), frame("room", 5), frame("room", 6))
    assert member.got == []
    boundary = Boundary(registry, member, "room", 5)
    hold.release(boundary.keep, lambda: True)
    assert seqs(member) == [("other", 9), ("room", 6)]
    deliver(registry, frame("room", 4))
    assert seqs(member)[-1] == ("room", 4), "settled: frames go to the member again"
    assert registry.route_of(member) == member.push


def test_until_settled_late_frames_up_to_the_boundary_are_dropped() -> None:
    member, registry = member_of("room")
    hold = Holding(registry, member, limit=1 << 20)
    settled = False
    hold.release(Boundary(registry, member, "room", 10).keep, lambda: settled)
    deliver(registry, frame("room", 8))  # still on its way from Redis: already replayed
    deliver(registry, frame("room", 11))
    settled = True
    deliver(registry, frame("room", 10))  # the last one before the position: dropped, then live
    deliver(registry, frame("room", 12))
    assert seqs(member) == [("room", 11), ("room", 12)]
    assert registry.route_of(member) == member.push


def test_a_stream_cut_by_the_boundary_is_dropped_whole() -> None:
    member, registry = member_of("room")
    hold = Holding(registry, member, limit=1 << 20)
    for f in (
        frame("room", 4, "space.event.delta", "bob/s"),  # before the position
        frame("room", 6, "space.event.delta", "bob/s"),
        frame("room", 7, "space.event.done", "bob/s"),
        frame("room", None, "space.event.cancel", "bob/t"),
        frame("room", 8, "space.event.delta", "bob/u"),
    ):
        hold.push(f)
    hold.release(Boundary(registry, member, "room", 5).keep, lambda: True)
    assert [orjson.loads(p)["event_id"] for p in member.got] == ["bob/t", "bob/u"]


def test_overflow_is_reported_and_nested_holdings_unwind() -> None:
    member, registry = member_of("room")
    outer = Holding(registry, member, limit=10)
    inner = Holding(registry, member, limit=1 << 20)
    deliver(registry, frame("room", 1))
    inner.release()
    assert registry.route_of(member) == outer.push
    deliver(registry, frame("room", 2))
    assert outer.overflowed
    outer.release()
    assert registry.route_of(member) == member.push
    assert seqs(member) == [("room", 1)]
    deliver(registry, frame("room", 3))
    assert seqs(member) == [("room", 1), ("room", 3)]
