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
        self.push = self._outbox  # like a connection: an instance attribute

    def _outbox(self, frame: OutFrame) -> bool:
        self.got.append(frame.payload)
        return True


def frame(space: str, seq: int | None, kind: str = "space.event", event_id: str = "e") -> OutFrame:
    msg = {"type": kind, "space": space, "event_id": event_id}
    if seq is not None:
        msg["seq"] = seq
    return OutFrame(orjson.dumps(msg))


def seqs(member: Member) -> list[tuple[str, int | None]]:
    return [(m["space"], m.get("seq")) for m in map(orjson.loads, member.got)]


def test_held_frames_are_released_in_order_past_the_boundary() -> None:
    member, registry = Member(), Registry()
    hold = Holding(member, limit=1 << 20)
    for f in (frame("room", 3), frame("other", 9), frame("room", 5), frame("room", 6)):
        member.push(f)
    assert member.got == []
    boundary = Boundary(registry, member, "room", 5)
    hold.release(boundary.keep, lambda: True)
    assert seqs(member) == [("other", 9), ("room", 6)]
    member.push(frame("room", 4))
    assert seqs(member)[-1] == ("room", 4), "settled: the original push is back"
    assert member.push == member._outbox


def test_until_settled_late_frames_up_to_the_boundary_are_dropped() -> None:
    member, registry = Member(), Registry()
    hold = Holding(member, limit=1 << 20)
    settled = False
    hold.release(Boundary(registry, member, "room", 10).keep, lambda: settled)
    member.push(frame("room", 8))  # still on its way from Redis: already replayed
    member.push(frame("room", 11))
    settled = True
    member.push(frame("room", 10))  # the last one before the position: dropped, then live
    member.push(frame("room", 12))
    assert seqs(member) == [("room", 11), ("room", 12)]
    assert member.push == member._outbox


def test_a_stream_cut_by_the_boundary_is_dropped_whole() -> None:
    member, registry = Member(), Registry()
    hold = Holding(member, limit=1 << 20)
    for f in (
        frame("room", 4, "space.event.delta", "bob/s"),  # before the position
        frame("room", 6, "space.event.delta", "bob/s"),
        frame("room", 7, "space.event.done", "bob/s"),
        frame("room", None, "space.event.cancel", "bob/t"),
        frame("room", 8, "space.event.delta", "bob/u"),
    ):
        member.push(f)
    hold.release(Boundary(registry, member, "room", 5).keep, lambda: True)
    assert [orjson.loads(p)["event_id"] for p in member.got] == ["bob/t", "bob/u"]


def test_overflow_is_reported_and_nested_holdings_unwind() -> None:
    member = Member()
    outer = Holding(member, limit=10)
    inner = Holding(member, limit=1 << 20)
    member.push(frame("room", 1))
    inner.release()
    assert member.push == outer.push
    outer.push(frame("room", 2))
    assert outer.overflowed
    outer.release()
    assert member.push == member._outbox
    assert seqs(member) == [("room", 1)]
