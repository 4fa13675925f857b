"""Resume without sockets: the buffered-frames machinery (ReplayBuffer and Boundary),
then Recovery's joins, replays and history reads through the handlers."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.handlers.recovery import PAGE, Boundary, ReplayBuffer
from protocol.errors import CloseCode, ErrorCode
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer


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
    buffer = ReplayBuffer(registry, member, limit=1 << 20)
    deliver(registry, frame("room", 3), frame("other", 9), frame("room", 5), frame("room", 6))
    assert member.got == []
    boundary = Boundary(registry, member, "room", 5)
    buffer.release(boundary.keep, lambda: True)
    assert seqs(member) == [("other", 9), ("room", 6)]
    deliver(registry, frame("room", 4))
    assert seqs(member)[-1] == ("room", 4), "settled: frames go to the member again"
    assert registry.route_of(member) == member.push


def test_until_settled_late_frames_up_to_the_boundary_are_dropped() -> None:
    member, registry = member_of("room")
    buffer = ReplayBuffer(registry, member, limit=1 << 20)
    settled = False
    buffer.release(Boundary(registry, member, "room", 10).keep, lambda: settled)
    deliver(registry, frame("room", 8))  # still on its way from Redis: already replayed
    deliver(registry, frame("room", 11))
    settled = True
    deliver(registry, frame("room", 10))  # the last one before the position: dropped, then live
    deliver(registry, frame("room", 12))
    assert seqs(member) == [("room", 11), ("room", 12)]
    assert registry.route_of(member) == member.push


def test_a_stream_cut_by_the_boundary_is_dropped_whole() -> None:
    member, registry = member_of("room")
    buffer = ReplayBuffer(registry, member, limit=1 << 20)
    for f in (
        frame("room", 4, "space.event.delta", "bob/s"),  # before the position
        frame("room", 6, "space.event.delta", "bob/s"),
        frame("room", 7, "space.event.done", "bob/s"),
        frame("room", None, "space.event.cancel", "bob/t"),
        frame("room", 8, "space.event.delta", "bob/u"),
    ):
        buffer.push(f)
    buffer.release(Boundary(registry, member, "room", 5).keep, lambda: True)
    assert [orjson.loads(p)["event_id"] for p in member.got] == ["bob/t", "bob/u"]


def test_overflow_is_reported_and_nested_holdings_unwind() -> None:
    member, registry = member_of("room")
    outer = ReplayBuffer(registry, member, limit=10)
    inner = ReplayBuffer(registry, member, limit=1 << 20)
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


# ── Recovery.join and space.history through the handlers ─────────────────────


async def resumer(rig: HandlerRig, space: str = "room") -> tuple[FakePeer, FakePeer]:
    """alice publishes in ``space``; bob is there to see it."""
    alice, bob = await rig.connect("alice"), await rig.connect("bob")
    for p in (alice, bob):
        await rig.join(p, space)
    return alice, bob


async def say(rig: HandlerRig, peer: FakePeer, *numbers: int, **extra: Any) -> None:
    for n in numbers:
        await rig.publish(peer, "room", {"n": n}, **extra)


def said(peer: FakePeer) -> list[int]:
    return [m["data"]["n"] for m in peer.messages("space.event")]


async def test_a_join_goes_live_at_the_position_it_reports(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2)
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room")
    assert reply["seq"] == 2 and reply["epoch"] == (await rig.backplane.position("room")).epoch
    await say(rig, alice, 3)
    assert said(carol) == [3]
    assert carol.messages()[0]["type"] == "space.joined", "nothing overtakes the reply"


async def test_a_resume_replays_what_came_after_its_seq_then_goes_live(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2, 3, 4, 5)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room", since={"seq": 2, "epoch": epoch})
    assert reply["recovered"] is True and reply["seq"] == 5 and reply["epoch"] == epoch
    await say(rig, alice, 6)
    assert said(carol) == [3, 4, 5, 6]
    assert [m["seq"] for m in carol.messages("space.event")] == [3, 4, 5, 6]


async def test_events_published_while_the_history_is_read_arrive_exactly_once(
    rig: HandlerRig,
) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2, 3)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    gate = rig.backplane.switches.hold("history")
    join = asyncio.create_task(
        rig.send(
            carol, {"type": "space.join", "space": "room", "since": {"seq": 1, "epoch": epoch}}
        )
    )
    await until(lambda: "history" in rig.backplane.switches.calls)
    await say(rig, alice, 4)  # carol is in the fan-out already: held, not lost
    assert carol.frames == []
    gate.set()
    await join
    await say(rig, alice, 5)
    assert said(carol) == [2, 3, 4, 5], "no gap, no duplicate at the boundary"
    assert carol.messages()[0]["seq"] == 4, "the position includes what raced the join"


@pytest.mark.parametrize(
    "since",
    [{"seq": 1, "epoch": "0123456789ab"}, {"seq": 99, "epoch": None}],
    ids=["other-epoch", "ahead-of-the-space"],
)
async def test_a_resume_that_cannot_be_done_says_recovered_false(
    rig: HandlerRig, since: dict[str, Any]
) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2, 3)
    position = await rig.backplane.position("room")
    since["epoch"] = since["epoch"] or position.epoch
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room", since=since)
    assert reply["recovered"] is False and reply["seq"] == 3 and reply["epoch"] == position.epoch
    await say(rig, alice, 4)
    assert said(carol) == [4], "live from the new position, nothing replayed"


async def test_a_trimmed_history_is_not_recovered(make_rig: Any) -> None:
    rig = await make_rig(history_size=2)
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2, 3, 4)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    assert (await rig.join(carol, "room", since={"seq": 1, "epoch": epoch}))["recovered"] is False
    assert said(carol) == []
    dave = await rig.connect("dave")
    reply = await rig.join(dave, "room", since={"seq": 2, "epoch": epoch})
    assert reply["recovered"] is True and said(dave) == [3, 4], "3 is still there"


async def test_the_replay_obeys_the_live_rules(rig: HandlerRig) -> None:
    alice, bob = await resumer(rig)
    carol = await rig.connect("carol")
    await rig.join(carol, "room")
    epoch = (await rig.backplane.position("room")).epoch
    await say(rig, alice, 1)
    await say(rig, alice, 2, to="bob")  # addressed: not carol's
    await say(rig, carol, 3, echo=False)  # carol asked for no echo
    await rig.send(carol, {"type": "space.leave", "id": "l", "space": "room"})
    carol.frames.clear()
    await rig.join(carol, "room", since={"seq": 0, "epoch": epoch})
    assert said(carol) == [1]
    bob.frames.clear()
    await rig.send(bob, {"type": "space.leave", "id": "l", "space": "room"})
    await rig.join(bob, "room", since={"seq": 0, "epoch": epoch})
    assert said(bob) == [1, 2, 3]


def delta(event_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "space.event.delta",
        "space": "room",
        "event_id": event_id,
        "data": {"text": text},
    }


def done(event_id: str) -> dict[str, Any]:
    return {"type": "space.event.done", "space": "room", "event_id": event_id}


async def test_complete_streams_are_replayed_and_unfinished_ones_skipped(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    epoch = (await rig.backplane.position("room")).epoch
    await rig.send(alice, delta("open", "never"))
    await rig.send(alice, delta("whole", "a"))
    await rig.send(alice, delta("whole", "b"))
    await rig.send(alice, done("whole"))
    carol = await rig.connect("carol")
    await rig.join(carol, "room", since={"seq": 0, "epoch": epoch})
    await rig.send(alice, delta("open", "finished"))  # its live rest is skipped too
    await rig.send(alice, done("open"))
    got = [(m["type"], m["event_id"]) for m in carol.messages() if m["type"] != "space.joined"]
    assert got == [
        ("space.event.delta", "alice/whole"),
        ("space.event.delta", "alice/whole"),
        ("space.event.done", "alice/whole"),
    ]


async def test_a_resume_whose_history_cannot_be_read_changes_nothing(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    rig.backplane.switches.fail.add("history")
    since = {"seq": 0, "epoch": epoch}
    await rig.send(carol, {"type": "space.join", "id": "j", "space": "room", "since": since})
    assert carol.errors() == [("UNAVAILABLE", "j")]
    assert carol not in rig.registry.members("room") and carol.session.spaces == set()
    assert await rig.members_of("room") == ["alice", "bob"]
    assert rig.registry.route_of(carol) == carol.push, "nothing left holding its frames"


async def test_a_replay_cut_short_closes_the_connection_to_resume_again(
    rig: HandlerRig,
) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, *range(1, PAGE + 20))
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    rig.backplane.switches.fail_from["history"] = 2  # the second page fails
    reply = await rig.join(carol, "room", since={"seq": 0, "epoch": epoch})
    assert reply["recovered"] is True
    assert said(carol) == list(range(1, PAGE + 1)), "the first page, in order"
    assert carol.closed_with is not None
    assert carol.closed_with[:2] == (CloseCode.TRY_AGAIN_LATER, ErrorCode.UNAVAILABLE)


async def test_history_returns_the_newest_events_a_member_may_see(rig: HandlerRig) -> None:
    alice, bob = await resumer(rig)
    bob.frames.clear()
    carol = await rig.connect("carol")
    await rig.join(carol, "room")
    await say(rig, alice, 1, 2)
    await say(rig, alice, 3, to="bob")
    await say(rig, alice, 4, 5)
    carol.frames.clear()
    await rig.send(carol, {"type": "space.history", "id": "h", "space": "room", "limit": 3})
    page = carol.one()
    assert page["id"] == "h" and page["seq"] == 5
    assert [e["data"]["n"] for e in page["events"]] == [4, 5], "3 was bob's alone"
    assert page["next_before_seq"] == 3
    await rig.send(
        carol, {"type": "space.history", "id": "h2", "space": "room", "limit": 3, "before_seq": 3}
    )
    older = carol.messages()[-1]
    assert [e["data"]["n"] for e in older["events"]] == [1, 2]
    assert older["next_before_seq"] is None
    outsider = await rig.connect("dave")
    await rig.send(outsider, {"type": "space.history", "id": "h3", "space": "room"})
    assert outsider.errors() == [("UNAUTHORIZED", "h3")]
    await rig.send(bob, {"type": "space.history", "id": "h4", "space": "room", "limit": 3})
    assert [e["data"]["n"] for e in bob.one("space.history")["events"]] == [3, 4, 5]


async def test_joins_of_one_member_take_turns_and_leave_no_lock_behind(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    gate = rig.backplane.switches.hold("history")
    since = {"seq": 0, "epoch": epoch}
    first = asyncio.create_task(
        rig.send(carol, {"type": "space.join", "space": "room", "since": since})
    )
    second = asyncio.create_task(rig.send(carol, {"type": "space.join", "space": "other"}))
    await until(lambda: "history" in rig.backplane.switches.calls)
    await until(lambda: rig.recovery._locks[carol].users == 2)  # the second waits
    gate.set()
    await asyncio.gather(first, second)
    assert [m["space"] for m in carol.messages("space.joined")] == ["room", "other"]
    assert rig.recovery._locks == {}


async def test_a_resume_that_missed_nothing_replays_nothing_and_goes_live(rig: HandlerRig) -> None:
    alice, _ = await resumer(rig)
    await say(rig, alice, 1, 2)
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room", since={"seq": 2, "epoch": epoch})
    assert reply["recovered"] is True and reply["seq"] == 2
    assert said(carol) == []
    await say(rig, alice, 3)
    assert said(carol) == [3]


async def test_a_resume_whose_connection_closed_meanwhile_reads_and_sends_no_replay(
    rig: HandlerRig,
) -> None:
    """A storm's client that gave up while its position was read: nothing is
    sent to it and no further page of history is read for it."""
    alice, _ = await resumer(rig)
    await say(rig, alice, *range(1, PAGE + 20))
    epoch = (await rig.backplane.position("room")).epoch
    carol = await rig.connect("carol")
    switches = rig.backplane.switches
    gate = switches.hold("history")
    join = asyncio.create_task(
        rig.send(
            carol,
            {"type": "space.join", "id": "r", "space": "room", "since": {"seq": 0, "epoch": epoch}},
        )
    )
    await until(lambda: "history" in switches.calls)
    carol.abort()  # the client gives up while the first page is read
    pushed = len(carol.frames)
    gate.set()
    await join
    assert switches.calls.count("history") == 1, "no second page read for a closed connection"
    assert len(carol.frames) == pushed
    assert rig.registry.route_of(carol) == carol.push, "nothing left holding its frames"
