"""Member views: a node back from an outage tells its members the membership
changes it missed (contract §21), before anything newer of the space.

"Another node" is presence changed directly: a change announced there while
this node's link was down never reaches it, exactly as a ``space.members``
event published on Redis while the node was unsubscribed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hub.cluster.backplane import Delivery, Draft
from protocol import codec
from tests.support.handlers import HandlerRig
from tests.support.peers import FakePeer

CAPACITY = 10_000


async def views_rig(make_rig: Any, **settings: Any) -> tuple[HandlerRig, FakePeer]:
    """A rig keeping member views, with ``alice`` in ``room`` (nothing received yet)."""
    rig = await make_rig(views=True, **settings)
    alice = await rig.connect("alice")
    await rig.join(alice, "room")
    alice.frames.clear()
    return rig, alice


async def elsewhere(rig: HandlerRig, agent: str, *, joined: bool, told: bool) -> None:
    """``agent`` on another node joins or leaves ``room``; ``told``: its
    announcement reaches this node (else this node's link was down)."""
    if joined:
        count = await rig.presence.join_space("room", agent, CAPACITY)
    else:
        count = await rig.presence.leave_space("room", agent)
    if told:
        change = (agent, None) if joined else (None, agent)
        rig.delivery.deliver(Delivery("room", codec.members("room", None, count, *change)))


async def publish(rig: HandlerRig, sender: str, n: int) -> None:
    head, tail = codec.sequenced("space.event", "room", f"e{n}", {"from": sender, "data": {"n": n}})
    await rig.backplane.publish("room", Draft(head, tail))


async def back(rig: HandlerRig) -> list[str]:
    """The link is back: hold, reconcile (what a node does when ready again)."""
    assert rig.views is not None
    held = rig.views.hold()
    await rig.views.reconcile(held)
    return held


async def test_what_changed_while_cut_off_is_told_before_anything_newer(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    await elsewhere(rig, "dave", joined=True, told=True)
    assert [m["joined"] for m in alice.take("space.members")] == ["dave"]
    # The link goes down: dave leaves and carol joins, announced elsewhere only.
    await elsewhere(rig, "dave", joined=False, told=False)
    await elsewhere(rig, "carol", joined=True, told=False)
    assert rig.views is not None
    held = rig.views.hold()  # the link is back
    assert held == ["room"] and "room" in rig.gaps.filling
    await publish(rig, "carol", 1)  # carol's first event arrives meanwhile: it waits
    assert alice.messages() == []
    await rig.views.reconcile(held)
    told, event = alice.messages()
    assert told == {
        "type": "space.members",
        "space": "room",
        "members": ["alice", "carol"],
        "member_count": 2,
        "joined": ["carol"],
        "left": ["dave"],
    }
    assert event["type"] == "space.event" and event["from"] == "carol"
    assert rig.gaps.filling == {} and rig.views.told == 1
    alice.frames.clear()
    await back(rig)
    assert alice.messages() == [], "told once: the view is what presence says now"


async def test_one_missed_change_has_the_seeds_shape(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    await elsewhere(rig, "dave", joined=True, told=False)
    await back(rig)
    (told,) = alice.messages()
    assert (told["joined"], told["left"], told["members"]) == ("dave", None, ["alice", "dave"])


async def test_nothing_missed_tells_nothing_and_releases_the_space(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    await elsewhere(rig, "dave", joined=True, told=True)
    await elsewhere(rig, "dave", joined=False, told=True)
    alice.frames.clear()
    assert rig.views is not None
    held = rig.views.hold()
    await publish(rig, "alice", 1)
    await rig.views.reconcile(held)
    assert [m["type"] for m in alice.messages()] == ["space.event"]
    assert rig.views.told == 0


async def test_a_join_and_leave_in_one_window_leave_the_view_as_it_was(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    await elsewhere(rig, "dave", joined=True, told=True)
    # One coalesced event each: eve came and went; dave went and came back.
    await rig.presence.join_space("room", "eve", CAPACITY)
    await rig.presence.leave_space("room", "eve")
    both = codec.members("room", None, 2, ["eve", "dave"], ["eve", "dave"])
    rig.delivery.deliver(Delivery("room", both))
    alice.frames.clear()
    await back(rig)
    assert alice.messages() == [], "eve is not a member, dave still is: nothing to tell"


async def test_a_space_whose_presence_cannot_be_read_is_released_and_tried_again(
    make_rig: Any,
) -> None:
    rig, alice = await views_rig(make_rig)
    await elsewhere(rig, "dave", joined=True, told=False)
    rig.presence.switches.fail.add("space_members")
    assert rig.views is not None
    held = rig.views.hold()
    await publish(rig, "alice", 1)
    await rig.views.reconcile(held)  # does not raise
    assert [m["type"] for m in alice.take()] == ["space.event"], "released as it was"
    rig.presence.switches.fail.clear()
    await back(rig)  # the next time the link is back
    assert [m["joined"] for m in alice.messages("space.members")] == ["dave"]


async def test_a_gap_reported_while_held_is_filled_before_what_waited(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    assert rig.views is not None
    held = rig.views.hold()
    await rig.backplane.unsubscribe("room")
    await publish(rig, "alice", 1)  # missed: recorded, not received
    await rig.backplane.subscribe("room")
    rig.delivery.missed("room", 0, 2)
    await publish(rig, "alice", 2)
    assert alice.messages() == []
    await rig.views.reconcile(held)
    await rig.background()
    assert [m["data"]["n"] for m in alice.messages("space.event")] == [1, 2]
    assert rig.gaps.filling == {}


async def test_a_member_list_read_in_part_at_the_first_join_is_completed(make_rig: Any) -> None:
    rig = await make_rig(views=True, members_list_limit=1)
    for agent in ("dave", "erin"):
        await rig.presence.join_space("room", agent, CAPACITY)
    alice = await rig.connect("alice")
    joined = await rig.join(alice, "room")
    assert joined["member_count"] == 3 and len(joined["members"]) == 1
    await elsewhere(rig, "erin", joined=False, told=False)
    alice.frames.clear()
    await back(rig)
    (told,) = alice.messages()
    assert (told["left"], told["member_count"], "members" in told) == ("erin", 2, False)


async def test_a_space_past_the_member_events_limit_keeps_no_view(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig, member_events_limit=2)
    await elsewhere(rig, "dave", joined=True, told=True)
    for agent in ("erin", "frank"):  # past the limit: no events
        await elsewhere(rig, agent, joined=True, told=False)
    await elsewhere(rig, "dave", joined=False, told=False)  # 3 members: no event either
    alice.frames.clear()
    await back(rig)
    assert alice.messages() == [] and rig.views is not None and "room" not in rig.views


async def test_a_space_the_node_left_is_forgotten(make_rig: Any) -> None:
    rig, alice = await views_rig(make_rig)
    await rig.send(alice, {"type": "space.leave", "id": "l", "space": "room"})
    assert rig.views is not None
    assert await back(rig) == [] and "room" not in rig.views


async def test_a_link_back_again_while_a_space_is_reconciled_reads_it_once_more(
    make_rig: Any,
) -> None:
    rig, alice = await views_rig(make_rig)
    assert rig.views is not None
    switches = rig.presence.switches
    answered = switches.hold("space_members:answered")
    before = switches.calls.count("space_members:answered")  # alice's join read too
    held = rig.views.hold()
    reconciling = asyncio.ensure_future(rig.views.reconcile(held))
    async with asyncio.timeout(5):
        await switches.reached("space_members:answered", before + 1)
    # Read, not answered yet; the link drops, dave joins elsewhere, the link is back.
    await elsewhere(rig, "dave", joined=True, told=False)
    assert rig.views.hold() == [], "still held by the first reconciliation"
    answered.set()
    async with asyncio.timeout(5):
        await reconciling
    assert [m["joined"] for m in alice.messages("space.members")] == ["dave"]
    assert rig.gaps.filling == {}
