"""Coalesced membership announcements (hub/handlers/member_events.py): the
throttle alone with a recording announcer, then through the membership
handler against the memory stores. Windows end when the test's clock says so
(a fake ``sleep``); nothing here waits on real time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hub.config.settings import Settings, load_settings
from hub.errors import BackplaneUnavailable, ConfigError
from hub.handlers.member_events import Batch, MemberEvents
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer


class Clock:
    """A fake ``sleep``: every window waits until :meth:`tick` ends it."""

    def __init__(self) -> None:
        self.sleeping: list[asyncio.Future[None]] = []
        self.delays: list[float] = []

    async def sleep(self, delay: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self.sleeping.append(future)
        self.delays.append(delay)
        await future

    async def tick(self, windows: int = 1) -> None:
        """End the ``windows`` open windows, once their timers are waiting."""
        await until(lambda: len(self.sleeping) >= windows)
        sleeping, self.sleeping = self.sleeping, []
        for future in sleeping:
            if not future.done():
                future.set_result(None)


class Announced:
    """A recording announcer; ``failing`` refuses that many batches as an
    unreachable cluster does."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, Batch]] = []
        self.failing = 0
        self._arrived = asyncio.Event()

    async def __call__(self, space: str, batch: Batch) -> None:
        if self.failing:
            self.failing -= 1
            raise BackplaneUnavailable("cluster unreachable")
        self.batches.append((space, batch))
        self._arrived.set()

    async def count(self, n: int) -> None:
        """Wait (bounded) until ``n`` batches have been announced."""
        async with asyncio.timeout(2):
            while len(self.batches) < n:
                self._arrived.clear()
                await self._arrived.wait()
        assert len(self.batches) == n, self.batches

    def changes(self) -> list[tuple[str, tuple[tuple[str, bool], ...]]]:
        return [(space, batch.changes) for space, batch in self.batches]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def announced() -> Announced:
    return Announced()


@pytest.fixture
async def events(clock: Clock, announced: Announced) -> Any:
    throttle = MemberEvents(0.25, announced, sleep=clock.sleep)
    yield throttle
    await throttle.aclose()


# ── the setting ──────────────────────────────────────────────────────────────


def test_the_interval_is_a_quarter_second_by_default_and_never_negative() -> None:
    assert Settings.model_fields["member_events_interval"].default == 0.25
    assert load_settings({"member_events_interval": 0}).member_events_interval == 0
    with pytest.raises(ConfigError, match="member_events_interval"):
        load_settings({"member_events_interval": -0.1})


# ── the throttle alone ──────────────────────────────────────────────────────


async def test_a_change_with_no_open_window_is_announced_at_once(
    events: MemberEvents, announced: Announced
) -> None:
    await events.changed("room", "alice", True, (["alice"], 1))
    assert announced.batches == [("room", Batch((("alice", True),), (["alice"], 1)))]
    assert events.open_windows == 1, "and it opens a window"


async def test_changes_within_a_window_go_out_once_in_order_of_arrival(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    for agent, joined in (("b", True), ("c", False), ("d", True), ("e", False)):
        await events.changed("room", agent, joined)
    assert len(announced.batches) == 1, "held until the window ends"
    await clock.tick()
    await announced.count(2)
    batch = announced.batches[1][1]
    assert batch.changes == (("b", True), ("c", False), ("d", True), ("e", False))
    assert (batch.joined, batch.left, batch.listing) == (["b", "d"], ["c", "e"], None)


async def test_a_join_and_a_leave_of_one_agent_in_a_window_both_appear(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    """Contract §21: coalesced, never dropped (the old window netted them out)."""
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await events.changed("room", "c", False)
    await events.changed("room", "b", False)  # joined then left
    await events.changed("room", "c", True)  # left then back
    await events.changed("room", "d", True)
    await events.changed("room", "d", True)  # the same change twice counts once
    await clock.tick()
    await announced.count(2)
    batch = announced.batches[1][1]
    assert batch.changes == (
        ("b", True),
        ("c", False),
        ("b", False),
        ("c", True),
        ("d", True),
    )
    assert (batch.joined, batch.left) == (["b", "c", "d"], ["c", "b"])


async def test_a_third_change_of_one_agent_seals_the_batch(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    """Joined, left, joined: one batch cannot say that, so it is two, in order."""
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await events.changed("room", "x", True)
    await events.changed("room", "b", False)
    await events.changed("room", "b", True)
    await events.changed("room", "y", False)
    await events.changed("room", "b", False)
    await events.changed("room", "b", True)
    assert len(announced.batches) == 1, "still held until the window ends"
    await clock.tick()
    await announced.count(4)
    assert [b.changes for _, b in announced.batches[1:]] == [
        (("b", True), ("x", True), ("b", False)),
        (("b", True), ("y", False), ("b", False)),
        (("b", True),),
    ]
    await until(lambda: len(clock.sleeping) == 1)
    assert events.open_windows == 1, "one window: its batches went out at its end"


async def test_a_join_and_leave_in_one_window_is_announced(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await events.changed("room", "b", False)
    await clock.tick()
    await announced.count(2)
    assert announced.changes()[1] == ("room", (("b", True), ("b", False)))
    await clock.tick()  # nothing more held: the window closes
    await until(lambda: events.open_windows == 0)
    assert len(announced.batches) == 2


async def test_the_window_reopens_after_a_batch_and_closes_when_quiet(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await clock.tick()
    await announced.count(2)
    assert events.open_windows == 1, "re-opened: a storm keeps being throttled"
    await events.changed("room", "c", True)
    await until(lambda: len(clock.sleeping) == 1)
    assert len(announced.batches) == 2, "held by the re-opened window"
    await clock.tick()
    await announced.count(3)
    await until(lambda: len(clock.sleeping) == 1)
    await clock.tick()  # nothing held: the window closes
    await until(lambda: events.open_windows == 0)
    await events.changed("room", "d", False)
    assert announced.changes()[-1] == ("room", (("d", False),)), "closed: at once again"
    await until(lambda: len(clock.delays) == 4)
    assert clock.delays == [0.25] * 4, "and opened a new window"


async def test_spaces_have_their_own_windows(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("one", "a", True)
    await events.changed("two", "a", True)
    await events.changed("one", "b", True)
    assert announced.changes() == [("one", (("a", True),)), ("two", (("a", True),))]
    assert events.open_windows == 2
    await clock.tick(2)
    await announced.count(3)
    assert announced.changes()[-1] == ("one", (("b", True),))


async def test_interval_zero_announces_every_change_at_once(announced: Announced) -> None:
    events = MemberEvents(0.0, announced)
    for agent in ("a", "b", "c"):
        await events.changed("room", agent, True)
    await events.changed("room", "a", False)
    assert announced.changes() == [
        ("room", (("a", True),)),
        ("room", (("b", True),)),
        ("room", (("c", True),)),
        ("room", (("a", False),)),
    ]
    assert events.open_windows == 0, "no windows, no timers"


async def test_a_failed_first_announcement_raises_for_the_callers_retry(
    events: MemberEvents, announced: Announced
) -> None:
    announced.failing = 1
    with pytest.raises(BackplaneUnavailable):
        await events.changed("room", "a", False)
    await events.changed("room", "a", False)  # the departure's retry: held, not lost
    assert announced.batches == []
    assert events.open_windows == 1


async def test_a_batch_the_cluster_refuses_is_kept_and_retried_later(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    await events.changed("room", "b", False)
    announced.failing = 2
    await clock.tick()
    await until(lambda: len(clock.delays) == 2)
    await events.changed("room", "c", True)  # arrives while the cluster is away
    await events.changed("room", "b", True)  # b came back: after its kept leave
    await clock.tick()
    await until(lambda: len(clock.delays) == 3)
    await clock.tick()
    await announced.count(3)
    assert announced.changes()[1:] == [
        ("room", (("b", False),)),
        ("room", (("c", True), ("b", True))),
    ], "the kept batch first, then what arrived since: nothing merged away"
    await until(lambda: len(clock.delays) == 4)
    assert clock.delays == [0.25, 0.5, 1.0, 0.25], "backing off while refused, then not"


# ── a publisher's held changes go out first ─────────────────────────────────


async def test_held_changes_of_a_publisher_go_out_before_its_event(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await events.changed("room", "c", True)
    await events.announce_held("room", "x")  # nothing of x is held: no-op
    await events.announce_held("elsewhere", "b")  # no window there
    assert len(announced.batches) == 1
    await events.announce_held("room", "c")
    assert announced.changes()[1] == ("room", (("b", True), ("c", True)))
    await events.announce_held("room", "c")  # sent already: nothing held
    assert len(announced.batches) == 2
    await events.changed("room", "d", True)
    await clock.tick()  # the window's end sends what arrived since
    await announced.count(3)
    assert announced.changes()[2] == ("room", (("d", True),))


async def test_a_held_change_waits_for_the_announcement_in_flight(
    announced: Announced, clock: Clock
) -> None:
    """One space's announcements from one node go out in order, whoever sends."""
    release = asyncio.Event()
    order: list[tuple[tuple[str, bool], ...]] = []

    async def slow(space: str, batch: Batch) -> None:
        if batch.changes == (("a", True),):
            await release.wait()
        order.append(batch.changes)

    events = MemberEvents(0.25, slow, sleep=clock.sleep)
    first = asyncio.get_running_loop().create_task(events.changed("room", "a", True))
    await until(lambda: events.open_windows == 1)
    await events.changed("room", "a", False)
    await events.changed("room", "b", True)
    early = asyncio.get_running_loop().create_task(events.announce_held("room", "b"))
    await asyncio.sleep(0)
    assert order == [], "the leading announcement is still being sent"
    release.set()
    await asyncio.wait_for(asyncio.gather(first, early), 2)
    assert order == [(("a", True),), (("a", False), ("b", True))]
    await events.aclose()


async def test_a_change_the_windows_end_is_announcing_still_holds_the_event_back(
    clock: Clock,
) -> None:
    """At the window's end its batch is taken and announced: while that is on
    its way to the cluster, an event of an agent in it waits for it (the
    event used to overtake its join, reaching members never told of it)."""
    release = asyncio.Event()
    order: list[Any] = []

    async def slow(space: str, batch: Batch) -> None:
        if batch.changes == (("b", True),):
            await release.wait()
        order.append(batch.changes)

    events = MemberEvents(0.25, slow, sleep=clock.sleep)
    await events.changed("room", "a", True)  # opens the window
    await events.changed("room", "b", True)  # held
    await clock.tick()  # the window's end takes b's join and announces it
    await until(lambda: not events._windows["room"].gathering.changes)
    event = asyncio.get_running_loop().create_task(events.announce_held("room", "b"))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not event.done(), "b's event must wait for its join on its way"
    release.set()
    await asyncio.wait_for(event, 2)
    assert order == [(("a", True),), (("b", True),)]
    await events.aclose()


async def test_a_held_change_the_cluster_refuses_stops_the_event(
    events: MemberEvents, announced: Announced, clock: Clock
) -> None:
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    announced.failing = 1
    with pytest.raises(BackplaneUnavailable):
        await events.announce_held("room", "b")
    await clock.tick()  # kept for the window's end
    await announced.count(2)
    assert announced.changes()[1] == ("room", (("b", True),))


async def test_closing_sends_what_is_held_and_leaves_nothing_running(
    clock: Clock, announced: Announced
) -> None:
    events = MemberEvents(0.25, announced, sleep=clock.sleep)
    await events.changed("one", "a", True)
    await events.changed("one", "b", False)
    await events.changed("one", "c", True)
    await events.changed("two", "x", False)
    await events.aclose()
    assert announced.changes()[2:] == [("one", (("b", False), ("c", True)))]
    assert events.open_windows == 0
    timers = [t for t in asyncio.all_tasks() if "MemberEvents._run" in repr(t)]
    assert not [t for t in timers if not t.done()], "no timer left running"
    await events.changed("one", "d", True)
    assert announced.changes()[-1] == ("one", (("d", True),)), "after close: at once"
    assert events.open_windows == 0
    await events.aclose()  # idempotent


async def test_closing_mid_announcement_keeps_the_batch(announced: Announced) -> None:
    clock = Clock()
    sending = asyncio.Event()
    release = asyncio.Event()
    sent: list[Batch] = []

    async def slow(space: str, batch: Batch) -> None:
        if len(batch.changes) > 1 and not sending.is_set():
            sending.set()
            await release.wait()
        sent.append(batch)

    events = MemberEvents(0.25, slow, sleep=clock.sleep)
    await events.changed("room", "a", True)
    await events.changed("room", "b", True)
    await events.changed("room", "c", True)
    await clock.tick()
    async with asyncio.timeout(2):
        await sending.wait()
    await events.aclose()  # cancels the timer mid-send: the batch is sent on close
    assert [b.changes for b in sent][-1] == (("b", True), ("c", True))


# ── through the membership handler ─────────────────────────────────────────


@pytest.fixture
async def coalescing(make_rig: Any, clock: Clock) -> HandlerRig:
    rig: HandlerRig = await make_rig(members_list_limit=100)
    membership = rig.membership
    # The rig's node runs each change at once; this one throttles on the test's clock.
    membership.member_events = MemberEvents(0.25, membership._announce, sleep=clock.sleep)
    return rig


async def settled(rig: HandlerRig, clock: Clock) -> None:
    """End windows until every space's window has closed."""
    events = rig.membership.member_events
    for _ in range(10):
        if events.open_windows == 0:
            return
        await clock.tick(events.open_windows)
        await asyncio.sleep(0)
    assert events.open_windows == 0


def announcements(peer: FakePeer) -> list[dict[str, Any]]:
    return [m for m in peer.messages("space.members") if "id" not in m]


async def members(rig: HandlerRig, clock: Clock, space: str, *agents: str) -> list[FakePeer]:
    peers = [await rig.connect(a) for a in agents]
    for p in peers:
        await rig.join(p, space)
    await settled(rig, clock)
    for p in peers:
        p.frames.clear()
    return peers


async def test_one_join_alone_is_the_seeds_event(coalescing: HandlerRig, clock: Clock) -> None:
    alice, bob = await members(coalescing, clock, "room", "alice", "bob")
    carol = await coalescing.connect("carol")
    await coalescing.join(carol, "room")
    expected = {
        "type": "space.members",
        "space": "room",
        "members": ["alice", "bob", "carol"],
        "member_count": 3,
        "joined": "carol",
        "left": None,
    }
    assert alice.messages() == [expected] == bob.messages()
    assert announcements(carol) == [], "the joiner has its reply"


async def test_joins_of_one_instant_are_one_event_with_lists(
    coalescing: HandlerRig, clock: Clock
) -> None:
    (alice,) = await members(coalescing, clock, "room", "alice")
    newcomers = [await coalescing.connect(f"n{i}") for i in range(5)]
    for peer in newcomers:
        await coalescing.join(peer, "room")
    first = alice.one("space.members")
    assert (first["joined"], first["left"], first["member_count"]) == ("n0", None, 2)
    assert "n0" not in {m.get("joined") for m in announcements(newcomers[0])}
    alice.frames.clear()
    await clock.tick()
    await until(lambda: bool(alice.frames))
    coalesced = alice.one()
    assert coalesced == {
        "type": "space.members",
        "space": "room",
        "members": ["alice", "n0", "n1", "n2", "n3", "n4"],
        "member_count": 6,
        "joined": ["n1", "n2", "n3", "n4"],
        "left": [],
    }
    assert announcements(newcomers[1])[-1] == coalesced, "a coalesced event excludes nobody"


async def test_a_batch_of_one_at_the_windows_end_is_the_seeds_shape(
    coalescing: HandlerRig, clock: Clock
) -> None:
    alice, _ = await members(coalescing, clock, "room", "alice", "bob")
    carol, dave = await coalescing.connect("carol"), await coalescing.connect("dave")
    await coalescing.join(carol, "room")
    await coalescing.join(dave, "room")
    alice.frames.clear()
    await clock.tick()
    await until(lambda: bool(alice.frames))
    assert alice.one()["joined"] == "dave" and alice.one()["left"] is None
    assert [m["joined"] for m in announcements(dave)] == [], "the lone joiner is excluded"


async def test_a_mass_departure_is_one_left_list(coalescing: HandlerRig, clock: Clock) -> None:
    peers = await members(coalescing, clock, "room", *(f"a{i}" for i in range(30)))
    observer, leaving = peers[0], peers[1:]
    for peer in leaving:
        await coalescing.membership.detach(peer, peer.record)
    await settled(coalescing, clock)
    got = announcements(observer)
    assert len(got) == 2
    assert (got[0]["left"], got[0]["joined"]) == ("a1", None)
    assert got[1]["left"] == [f"a{i}" for i in range(2, 30)] and got[1]["joined"] == []
    assert got[1]["member_count"] == 1 and got[1]["members"] == ["a0"]


async def test_coalesced_events_keep_the_size_limits(make_rig: Any, clock: Clock) -> None:
    rig: HandlerRig = await make_rig(members_list_limit=2, member_events_limit=4)
    rig.membership.member_events = MemberEvents(0.25, rig.membership._announce, sleep=clock.sleep)
    (alice,) = await members(rig, clock, "room", "alice")
    for agent in ("b", "c"):
        await rig.join(await rig.connect(agent), "room")
    alice.frames.clear()
    await clock.tick()
    await until(lambda: bool(alice.frames))
    announced = alice.one()
    assert "members" not in announced and announced["member_count"] == 3
    assert announced["joined"] == "c", "b went out at once"
    alice.frames.clear()
    await until(lambda: len(clock.sleeping) == 1)
    for agent in ("d", "e"):
        await rig.join(await rig.connect(agent), "room")
    await settled(rig, clock)
    assert alice.frames == [], "5 members: above member_events_limit, nothing"


async def test_a_node_closing_sends_the_held_departures(
    coalescing: HandlerRig, clock: Clock
) -> None:
    observer, *leaving = await members(coalescing, clock, "room", "o", "x", "y", "z")
    for peer in leaving:
        await coalescing.membership.detach(peer, peer.record)
    await coalescing.membership.aclose()
    assert [m["left"] for m in announcements(observer)] == ["x", ["y", "z"]]
    assert coalescing.membership.member_events.open_windows == 0


async def test_a_join_and_leave_within_a_window_reach_the_others(
    coalescing: HandlerRig, clock: Clock
) -> None:
    """The issue's repro: alice joins, bob joins within her window and leaves
    again — alice is told both (the old window cancelled them out: nothing)."""
    rig = coalescing
    alice, bob = await rig.connect("alice"), await rig.connect("bob")
    await rig.join(alice, "room")  # opens the space's window
    await rig.join(bob, "room")
    await rig.send(bob, {"type": "space.leave", "id": "l", "space": "room"})
    assert announcements(alice) == [], "held until the window ends"
    await settled(rig, clock)
    assert announcements(alice) == [
        {
            "type": "space.members",
            "space": "room",
            "members": ["alice"],
            "member_count": 1,
            "joined": ["bob"],
            "left": ["bob"],
        }
    ]


async def test_a_joiner_publishing_in_its_window_is_announced_first(
    coalescing: HandlerRig, clock: Clock
) -> None:
    """Nobody gets an event from an agent whose join it was not told of."""
    rig = coalescing
    alice, bob = await rig.connect("alice"), await rig.connect("bob")
    await rig.join(alice, "room")
    await rig.join(bob, "room")  # held: alice's join opened the window
    assert announcements(alice) == []
    alice.frames.clear()
    await rig.publish(bob, "room", {"text": "hi"})
    await rig.send(bob, {"type": "space.event.delta", "space": "room", "event_id": "s1",
                         "data": {"text": "x"}})  # fmt: skip
    got = [(m["type"], m.get("joined"), m.get("from")) for m in alice.messages()]
    assert got == [
        ("space.members", "bob", None),
        ("space.event", None, "bob"),
        ("space.event.delta", None, "bob"),
    ]
    await settled(rig, clock)
    assert len(announcements(alice)) == 1, "announced once"


async def test_a_publisher_with_nothing_held_costs_no_announcement(
    coalescing: HandlerRig, clock: Clock
) -> None:
    alice, bob = await members(coalescing, clock, "room", "alice", "bob")
    carol = await coalescing.connect("carol")
    await coalescing.join(carol, "room")  # leading edge: out at once, window open
    dave = await coalescing.connect("dave")
    await coalescing.join(dave, "room")  # held
    await coalescing.publish(bob, "room", {"text": "hi"})  # bob holds nothing
    assert [m["type"] for m in alice.messages()] == ["space.members", "space.event"]
    await settled(coalescing, clock)
    assert [m.get("joined") for m in announcements(alice)] == ["carol", "dave"]


async def test_a_join_announced_while_a_joiner_reads_the_members_reaches_it(
    make_rig: Any,
) -> None:
    """Bob joins (on another node) after alice's members read ran in Redis, and
    his announcement reaches alice's node before her read's answer does. She
    must hear of him anyway: the read happens once she is in the fan-out, so
    the announcement waits for her ``space.joined`` (it used to be dropped:
    she was not in the fan-out yet, and her list did not have him)."""
    rig: HandlerRig = await make_rig(members_list_limit=100)
    alice = await rig.connect("alice")
    presence = rig.presence
    gate = presence.switches.hold("space_members:answered")
    joining = asyncio.get_running_loop().create_task(rig.join(alice, "room"))
    async with asyncio.timeout(2):
        await presence.switches.reached("space_members:answered")
    # Bob's node: his membership, then its announcement.
    await presence.join_space("room", "bob", 100)
    async with asyncio.timeout(2):  # bob's node read its own listing
        await rig.membership.member_events.changed("room", "bob", True, (["alice", "bob"], 2))
    gate.set()
    async with asyncio.timeout(2):
        joined = await joining
    told = [m.get("joined") for m in announcements(alice)]
    assert "bob" in joined["members"] or "bob" in told, (joined, told)


async def test_an_agent_gone_before_a_joiner_read_the_members_sends_it_nothing(
    make_rig: Any,
) -> None:
    """Bob publishes and leaves while carol's join is under way: carol's list
    does not have him, so she must not get his event either. The members are
    read before the position — his event is then at or before it (it used to
    be read after: carol got an event from an agent she was never told of)."""
    rig: HandlerRig = await make_rig(members_list_limit=100)
    alice, bob, carol = [await rig.connect(a) for a in ("alice", "bob", "carol")]
    await rig.join(alice, "room")
    await rig.join(bob, "room")
    real = rig.presence.space_members
    reading, release = asyncio.Event(), asyncio.Event()

    async def space_members(space: str, limit: int) -> tuple[list[str], int]:
        if not reading.is_set():  # carol's read: bob acts first
            reading.set()
            await release.wait()
        return await real(space, limit)

    rig.presence.space_members = space_members  # type: ignore[method-assign]
    joining = asyncio.get_running_loop().create_task(rig.join(carol, "room"))
    async with asyncio.timeout(2):
        await reading.wait()
    await rig.publish(bob, "room", {"text": "bye"})
    await rig.send(bob, {"type": "space.leave", "space": "room"})
    release.set()
    async with asyncio.timeout(2):
        joined = await joining
    told = set(joined["members"])
    for m in carol.messages():
        joined_now = m.get("joined") or []
        if m["type"] == "space.members" and "id" not in m:
            told.update([joined_now] if isinstance(joined_now, str) else joined_now)
        elif m["type"] == "space.event":
            assert m["from"] in told, (m, joined)
