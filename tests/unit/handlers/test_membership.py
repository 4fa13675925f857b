"""Membership: joins, leaves and their announcements at every size, capacity,
registration all or nothing, listings and paging, departures — against the
memory presence and backplane, members being fakes."""

from __future__ import annotations

import asyncio
from typing import Any

from hub.core.authz import Grant
from hub.core.peer import PeerKind
from hub.errors import BackplaneUnavailable
from tests.support.handlers import HandlerRig, until
from tests.support.peers import FakePeer


async def joined_all(rig: HandlerRig, space: str, *agents: str) -> list[FakePeer]:
    peers = [await rig.connect(a) for a in agents]
    for p in peers:
        await rig.join(p, space)
    for p in peers:
        p.frames.clear()
    return peers


def announcements(peer: FakePeer) -> list[dict[str, Any]]:
    return [m for m in peer.messages("space.members") if "id" not in m]


# ── joining ──────────────────────────────────────────────────────────────────


async def test_the_first_join_creates_the_space_and_subscribes(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    reply = await rig.join(alice, "room")
    assert reply["id"] == "j-room" and reply["members"] == ["alice"]
    assert reply["member_count"] == 1 and reply["seq"] == 0 and reply["epoch"]
    assert "recovered" not in reply
    assert await rig.members_of("room") == ["alice"]
    assert rig.registry.members("room") == [alice]
    assert alice.session is not None and alice.session.spaces == {"room"}
    assert rig.subscriptions.active == {"room"}
    assert announcements(alice) == [], "nobody else to tell"


async def test_a_join_is_announced_to_the_others_with_the_member_list(rig: HandlerRig) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room")
    assert reply["members"] == ["alice", "bob", "carol"] and reply["member_count"] == 3
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
    assert rig.backplane.switches.calls.count("subscribe") == 1, "subscribed once"


async def test_joining_twice_answers_again_and_announces_nothing(rig: HandlerRig) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    reply = await rig.join(bob, "room")
    assert reply["members"] == ["alice", "bob"] and reply["seq"] == 0
    assert alice.frames == []
    assert await rig.members_of("room") == ["alice", "bob"]


async def test_above_members_list_limit_announcements_carry_no_list(make_rig: Any) -> None:
    rig = await make_rig(members_list_limit=2)
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    carol = await rig.connect("carol")
    reply = await rig.join(carol, "room")
    assert reply["members"] == ["alice", "bob"], "at most members_list_limit ids"
    assert reply["member_count"] == 3, "the count stays exact"
    announced = alice.one()
    assert "members" not in announced
    assert (announced["member_count"], announced["joined"]) == (3, "carol")
    await rig.send(carol, {"type": "space.leave", "id": "l", "space": "room"})
    left = bob.messages()[-1]
    assert left["left"] == "carol" and left["member_count"] == 2
    assert left["members"] == ["alice", "bob"], "back at the limit: the list again"


async def test_above_member_events_limit_joins_and_leaves_are_not_announced(
    make_rig: Any,
) -> None:
    rig = await make_rig(members_list_limit=1, member_events_limit=3)
    alice, bob, carol = await joined_all(rig, "room", "alice", "bob", "carol")
    for newcomer in ("dave", "erin"):
        reply = await rig.join(await rig.connect(newcomer), "room")
    assert reply["member_count"] == 5 and reply["members"] == ["alice"]
    await rig.send(bob, {"type": "space.leave", "id": "l", "space": "room"})
    assert alice.frames == [] and carol.frames == [], "4 or 5 members: nothing announced"
    await rig.send(carol, {"type": "space.leave", "id": "l", "space": "room"})
    announced = alice.one()
    assert (announced["member_count"], announced["left"]) == (3, "carol"), "at the limit again"
    assert "members" not in announced


async def test_declared_limits_override_the_node_wide_ones(make_rig: Any) -> None:
    rig = await make_rig(spaces=[{"id": "quiet", "member_events_limit": 0}])
    (alice,) = await joined_all(rig, "quiet", "alice")
    await rig.join(await rig.connect("bob"), "quiet")
    assert alice.frames == []


async def test_a_full_space_refuses_with_nothing_changed(make_rig: Any) -> None:
    rig = await make_rig(space_capacity=2)
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    carol = await rig.connect("carol")
    await rig.send(carol, {"type": "space.join", "id": "j3", "space": "room"})
    error = carol.one()
    assert (error["code"], error["request_id"]) == ("SPACE_FULL", "j3")
    assert await rig.members_of("room") == ["alice", "bob"]
    assert carol not in rig.registry.members("room")
    assert carol.session is not None and carol.session.spaces == set()
    assert alice.frames == [] and bob.frames == []
    await rig.publish(carol, "room", {"text": "x"}, id="p")
    assert carol.errors()[-1] == ("UNAUTHORIZED", "p"), "still not a member"


async def test_a_declared_capacity_applies_to_its_space(make_rig: Any) -> None:
    rig = await make_rig(spaces=[{"id": "tiny", "capacity": 1}])
    await joined_all(rig, "tiny", "alice")
    bob = await rig.connect("bob")
    await rig.send(bob, {"type": "space.join", "id": "j", "space": "tiny"})
    await rig.join(bob, "other")  # the node-wide capacity elsewhere
    assert bob.errors() == [("SPACE_FULL", "j")]


async def test_a_failed_subscribe_rolls_the_join_back(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    rig.backplane.switches.fail.add("subscribe")
    await rig.send(alice, {"type": "space.join", "id": "j", "space": "room"})
    assert alice.errors() == [("UNAVAILABLE", "j")]
    assert await rig.members_of("room") == []
    assert not rig.registry.has_space("room") and alice.session.spaces == set()
    rig.backplane.switches.fail.clear()
    assert (await rig.join(alice, "room"))["members"] == ["alice"]


async def test_a_failed_position_read_rolls_the_join_back(rig: HandlerRig) -> None:
    (alice,) = await joined_all(rig, "room", "alice")
    bob = await rig.connect("bob")
    rig.backplane.switches.fail.add("position")
    await rig.send(bob, {"type": "space.join", "id": "j", "space": "room"})
    assert bob.errors() == [("UNAVAILABLE", "j")]
    assert await rig.members_of("room") == ["alice"]
    assert rig.registry.members("room") == [alice]
    assert alice.frames == [], "no announcement of a join that did not happen"


async def test_unavailable_presence_refuses_the_join(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    rig.presence.switches.fail.add("join_space")
    await rig.send(alice, {"type": "space.join", "id": "j", "space": "room"})
    assert alice.errors() == [("UNAVAILABLE", "j")]
    assert not rig.registry.has_space("room") and rig.subscriptions.active == set()


async def test_a_join_a_socket_sent_before_its_client_closed_is_carried_out(
    rig: HandlerRig,
) -> None:
    """Its frames are carried out in order before its cleanup starts: the join
    happens, is announced, and the departure (its cleanup) undoes it."""
    (bob,) = await joined_all(rig, "room", "bob")
    alice = await rig.connect("alice")
    gate = rig.presence.switches.hold("join_space")
    joining = asyncio.get_running_loop().create_task(rig.send(alice, _join("room")))
    await asyncio.wait_for(rig.presence.switches.reached("join_space"), 5)
    alice.abort()  # the client went away meanwhile
    gate.set()
    await asyncio.wait_for(joining, 5)
    assert alice.session is not None and alice.session.spaces == {"room"}
    assert sorted(await rig.members_of("room")) == ["alice", "bob"]
    assert [m["joined"] for m in bob.take()] == ["alice"]
    await rig.membership.detach(alice, alice.record)
    assert bob.one()["left"] == "alice"
    assert await rig.members_of("room") == ["bob"]


async def test_a_virtual_members_join_when_it_closed_meanwhile_is_undone(
    rig: HandlerRig,
) -> None:
    """Its cleanup runs beside its requests and would not know of the space."""
    (bob,) = await joined_all(rig, "room", "bob")
    member = await rig.connect("bridge", kind=PeerKind.VIRTUAL)
    gate = rig.presence.switches.hold("join_space")
    joining = asyncio.get_running_loop().create_task(rig.send(member, _join("room")))
    await asyncio.wait_for(rig.presence.switches.reached("join_space"), 5)
    member.abort()
    gate.set()
    await asyncio.wait_for(joining, 5)
    assert await rig.members_of("room") == ["bob"]
    assert bob.frames == [], "never announced"


def _join(space: str) -> dict[str, Any]:
    return {"type": "space.join", "id": f"j-{space}", "space": space}


async def test_which_spaces_may_be_joined(make_rig: Any) -> None:
    rig = await make_rig(auto_create_spaces=False, spaces=[{"id": "lobby"}])
    alice = await rig.connect("alice")
    await rig.send(alice, {"type": "space.join", "id": "j1", "space": "elsewhere"})
    await rig.send(alice, {"type": "space.join", "id": "j2", "space": "file.changes"})
    assert alice.errors() == [("SPACE_NOT_FOUND", "j1"), ("SPACE_NOT_FOUND", "j2")]
    assert (await rig.join(alice, "lobby"))["members"] == ["alice"]
    assert (await rig.join(alice, "agent.status"))["space"] == "agent.status"


# ── leaving ──────────────────────────────────────────────────────────────────


async def test_a_leave_is_acknowledged_and_announced(rig: HandlerRig) -> None:
    alice, bob, carol = await joined_all(rig, "room", "alice", "bob", "carol")
    await rig.send(bob, {"type": "space.leave", "id": "l1", "space": "room"})
    assert bob.one() == {"type": "space.left", "space": "room", "id": "l1"}
    for other in (alice, carol):
        assert other.one()["left"] == "bob" and other.one()["members"] == ["alice", "carol"]
    assert await rig.members_of("room") == ["alice", "carol"]
    assert bob not in rig.registry.members("room") and bob.session.spaces == set()
    await rig.publish(alice, "room", {"text": "after"})
    assert bob.messages("space.event") == []


async def test_the_last_leave_ends_the_space_and_its_subscription(rig: HandlerRig) -> None:
    (alice,) = await joined_all(rig, "room", "alice")
    await rig.send(alice, {"type": "space.leave", "id": "l1", "space": "room"})
    await until(lambda: "unsubscribe" in rig.backplane.switches.calls)
    assert rig.subscriptions.active == set() and not rig.registry.has_space("room")
    await rig.send(alice, {"type": "space.list", "id": "s"})
    assert "room" not in [s["id"] for s in alice.messages("space.list")[0]["spaces"]]
    await rig.publish(alice, "room", {"text": "x"}, id="p")
    assert alice.errors() == [("SPACE_NOT_FOUND", "p")]


async def test_a_leave_the_cluster_cannot_hear_keeps_the_member(rig: HandlerRig) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    rig.presence.switches.fail.add("leave_space")
    await rig.send(bob, {"type": "space.leave", "id": "l1", "space": "room"})
    assert bob.errors() == [("UNAVAILABLE", "l1")]
    assert await rig.members_of("room") == ["alice", "bob"]
    assert bob.session.spaces == {"room"} and bob in rig.registry.members("room")
    assert alice.frames == []


async def test_a_leave_answered_unavailable_whose_command_ran_is_put_back(
    rig: HandlerRig,
) -> None:
    """Redis stalled past the timeout: the leave is refused, yet its command
    ran. The agent is still a member, so presence says so again once the
    cluster answers."""
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    presence = rig.presence
    leave_space = presence.leave_space

    async def ran_then_timed_out(space: str, agent_id: str) -> int:
        await leave_space(space, agent_id)
        raise BackplaneUnavailable("leave_space failed (TimeoutError)")

    presence.leave_space = ran_then_timed_out  # type: ignore[method-assign]
    await rig.send(alice, {"type": "space.leave", "id": "l", "space": "room"})
    await rig.send(alice, {"type": "space.leave", "id": "l2", "space": "room"})  # a retry
    presence.leave_space = leave_space  # type: ignore[method-assign]
    assert alice.errors() == [("UNAVAILABLE", "l"), ("UNAVAILABLE", "l2")]
    assert list(rig.membership.unsure_leaves) == [(alice, "room")]
    assert await rig.members_of("room") == ["bob"], "the command ran"
    await rig.membership.retry_departures()  # the node's beat, the cluster back
    assert sorted(await rig.members_of("room")) == ["alice", "bob"]
    assert alice.session is not None and alice.session.spaces == {"room"}
    assert announcements(bob) == [], "nobody was told it left: it did not"
    await rig.membership.retry_departures()
    assert not rig.membership.unsure_leaves


async def test_leaving_ends_the_leavers_open_streams_first(rig: HandlerRig) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    delta = {"type": "space.event.delta", "space": "room", "event_id": "s", "data": {"text": "a"}}
    await rig.send(alice, delta)
    await rig.send(alice, {"type": "space.leave", "id": "l1", "space": "room"})
    got = bob.messages()
    assert [m["type"] for m in got] == ["space.event.delta", "space.event.cancel", "space.members"]
    assert got[1]["reason"] == "publisher_left_space" and got[1]["event_id"] == "alice/s"


async def test_a_departed_connection_leaves_everything_and_goes_offline(rig: HandlerRig) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    watcher = await rig.connect("watcher")
    await rig.join(watcher, "agent.status")
    watcher.frames.clear()
    await rig.membership.detach(alice, alice.record)
    assert bob.one()["left"] == "alice"
    status = watcher.one()
    assert status["data"]["event"] == "offline" and status["data"]["agent"]["id"] == "alice"
    assert status["from"] == "@hub"
    assert await rig.presence.get_agent("alice") is None
    assert await rig.members_of("room") == ["bob"]
    assert alice.connection_id not in rig.registry.connections


async def test_a_departure_during_an_outage_is_told_when_the_cluster_is_back(
    rig: HandlerRig,
) -> None:
    alice, bob = await joined_all(rig, "room", "alice", "bob")
    rig.presence.switches.fail.add("leave_space")
    await rig.membership.detach(alice, alice.record)
    assert rig.registry.members("room") == [bob], "this node stops delivering at once"
    assert len(rig.membership.pending_departures) == 1
    assert bob.frames == []
    assert await rig.members_of("room") == ["alice", "bob"], "the cluster has not heard yet"
    rig.presence.switches.fail.clear()
    await rig.membership.retry_departures()
    assert rig.membership.pending_departures == []
    assert await rig.members_of("room") == ["bob"]
    assert bob.one()["left"] == "alice"
    assert await rig.presence.get_agent("alice") is None


async def test_a_shared_members_copy_leaves_only_this_node(rig: HandlerRig) -> None:
    (alice,) = await joined_all(rig, "room", "alice")
    bridge = await rig.connect("bridge", kind=PeerKind.SHARED)
    await rig.join(bridge, "room")
    await rig.send(bridge, {"type": "space.leave", "id": "l", "space": "room"})
    assert bridge.messages()[-1]["type"] == "space.left"
    assert await rig.members_of("room") == ["alice", "bridge"], "other nodes' copies stay"
    assert bridge not in rig.registry.members("room")
    assert [m["joined"] for m in alice.messages()] == ["bridge"], "no leave announced"


# ── registration ─────────────────────────────────────────────────────────────


def register(agent_id: str = "alice", **info: Any) -> dict[str, Any]:
    return {"type": "agent.register", "id": "r1", "agent": {"id": agent_id, **info}}


async def test_register_stores_announces_and_answers(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    watcher = await rig.connect("watcher")
    await rig.join(watcher, "agent.status")
    watcher.frames.clear()
    await rig.send(alice, register(type="bot", capabilities=["tool:a"], metadata={"v": 1}))
    reply = alice.one()
    assert reply["type"] == "agent.registered" and reply["id"] == "r1"
    assert reply["agent"] == {"id": "alice", "connection_id": alice.connection_id}
    assert reply["heartbeat_timeout"] == round(rig.settings.heartbeat_timeout * 1000)
    stored = await rig.presence.get_agent("alice")
    assert stored is not None and stored == alice.record
    assert (stored.type, stored.capabilities, stored.metadata) == ("bot", ("tool:a",), {"v": 1})
    status = watcher.one()["data"]
    assert status["event"] == "updated"
    assert status["agent"] == {
        "id": "alice",
        "type": "bot",
        "capabilities": ["tool:a"],
        "metadata": {"v": 1},
    }
    await rig.send(alice, register(metadata={"v": 2}))
    again = await rig.presence.get_agent("alice")
    assert again is not None and (again.type, again.metadata) == ("bot", {"v": 2}), "merged"


async def test_register_is_all_or_nothing(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    before = alice.record
    rig.backplane.switches.fail.add("publish")  # agent.status cannot be told
    await rig.send(alice, register(type="bot"))
    assert alice.errors() == [("UNAVAILABLE", "r1")]
    assert alice.messages("agent.registered") == []
    assert alice.record is before
    assert await rig.presence.get_agent("alice") == before, "presence restored"
    rig.presence.switches.fail.add("update_agent")
    rig.backplane.switches.fail.clear()
    await rig.send(alice, register(type="bot"))
    assert alice.errors()[-1] == ("UNAVAILABLE", "r1")
    assert alice.record is before and await rig.presence.get_agent("alice") == before


async def test_register_for_another_id_is_refused(rig: HandlerRig) -> None:
    alice = await rig.connect("alice")
    await rig.send(alice, register("mallory", type="bot"))
    assert alice.errors() == [("INVALID_REQUEST", "r1")]
    assert (await rig.presence.get_agent("alice")).type is None


# ── listings ─────────────────────────────────────────────────────────────────


async def test_space_list_counts_members_and_shows_declared_and_system_spaces(
    make_rig: Any,
) -> None:
    rig = await make_rig(spaces=[{"id": "lobby"}])
    await joined_all(rig, "room", "alice", "bob")
    carol = await rig.connect("carol")
    await rig.send(carol, {"type": "space.list", "id": "s1"})
    reply = carol.one()
    assert reply["id"] == "s1"
    assert reply["spaces"] == [
        {"id": "agent.status", "type": "system", "member_count": 0},
        {"id": "lobby", "type": "public", "member_count": 0},
        {"id": "room", "type": "public", "member_count": 2},
    ]


async def test_space_list_shows_only_the_spaces_the_caller_may_join(make_rig: Any) -> None:
    vault = {"id": "vault", "allow_join": ["keeper"]}
    rig = await make_rig(spaces=[vault, {"id": "plaza"}])
    await joined_all(rig, "room", "alice")

    async def listed(peer: Any) -> list[str]:
        peer.frames.clear()
        await rig.send(peer, {"type": "space.list", "id": "s"})
        return [s["id"] for s in peer.one("space.list")["spaces"]]

    everything = ["agent.status", "plaza", "room", "vault"]
    assert await listed(await rig.connect("keeper")) == everything
    # Kept out of vault by its rules: vault is not listed (as if it did not exist).
    assert await listed(await rig.connect("outsider")) == ["agent.status", "plaza", "room"]
    # Join claims limit what is listed too.
    assert await listed(await rig.connect("ops", grant=Grant(join=("plaza",)))) == ["plaza"]


async def test_members_are_paged_in_join_order(rig: HandlerRig) -> None:
    names = [f"a{i}" for i in range(5)]
    await joined_all(rig, "room", *names)
    asker = await rig.connect("asker")  # not a member: it may still page
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        await rig.send(
            asker,
            {"type": "space.members", "id": "m", "space": "room", "limit": 2, "cursor": cursor},
        )
        page = asker.take()[0]
        assert page["id"] == "m" and page["member_count"] == 5
        assert len(page["members"]) <= 2
        seen += page["members"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == names


async def test_paging_refuses_unknown_spaces_and_foreign_cursors(rig: HandlerRig) -> None:
    await joined_all(rig, "room", "alice")
    bob = await rig.connect("bob")
    await rig.send(bob, {"type": "space.members", "id": "m1", "space": "nowhere"})
    await rig.send(bob, {"type": "space.members", "id": "m2", "space": "room", "cursor": "zzz"})
    assert bob.errors() == [("SPACE_NOT_FOUND", "m1"), ("INVALID_REQUEST", "m2")]


async def test_agent_list_filters_by_capability_and_space(rig: HandlerRig) -> None:
    alice = await rig.connect("alice", capabilities=("tool:search", "tool:math"))
    bob = await rig.connect("bob", capabilities=("tool:search",))
    await rig.connect("carol", capabilities=("chat",))
    await rig.join(bob, "room")

    async def listed(**query: Any) -> list[str]:
        await rig.send(alice, {"type": "agent.list", "id": "a", **query})
        reply = alice.take("agent.list")[0]
        assert reply["next_cursor"] is None
        return [a["id"] for a in reply["agents"]]

    assert await listed() == ["alice", "bob", "carol"]
    assert await listed(capability="tool:search") == ["alice", "bob"]
    assert await listed(capability="tool:*") == ["alice", "bob"]
    assert await listed(capability="tool:math") == ["alice"]
    assert await listed(space="room") == ["bob"]
    assert await listed(capability="chat", space="room") == []
    await rig.send(alice, {"type": "agent.list", "id": "a", "cursor": "not an id!"})
    assert alice.errors() == [("INVALID_REQUEST", "a")]


# ── discovery: agent.list without a space (contract §18) ──────────────────────


async def listed(rig: HandlerRig, peer: FakePeer) -> set[str]:
    peer.frames.clear()
    await rig.send(peer, {"type": "agent.list", "id": "l"})
    return {a["id"] for a in peer.one("agent.list")["agents"]}


async def test_agent_list_hides_agents_in_spaces_the_caller_may_not_join(make_rig: Any) -> None:
    vault = {"id": "vault", "allow_join": ["keeper", "both", "ops-*"]}
    rig = await make_rig(spaces=[vault, {"id": "plaza"}, {"id": "lab"}])
    for agent, spaces in (("keeper", ["vault"]), ("both", ["vault", "plaza"]),
                          ("idle", []), ("labrat", ["lab"])):  # fmt: skip
        peer = await rig.connect(agent)
        for space in spaces:
            await rig.join(peer, space)
    everyone = {"keeper", "both", "idle", "labrat"}
    # An outsider kept out of vault by its rules: not keeper, nor both (in vault too).
    outsider = await rig.connect("outsider")
    assert await listed(rig, outsider) == everyone - {"keeper", "both"} | {"outsider"}
    # One whose claims limit it to plaza: only those it shares a space with.
    limited = await rig.connect("ops-1", grant=Grant(join=("plaza",)))
    assert await listed(rig, limited) == {"both"}
    # One the rules let in and no claims limit: everyone.
    member = await rig.connect("ops-2")
    assert await listed(rig, member) == everyone | {"outsider", "ops-1", "ops-2"}
    # With a space it may join, every member of it.
    limited.frames.clear()
    await rig.send(limited, {"type": "agent.list", "id": "s", "space": "plaza"})
    assert {a["id"] for a in limited.one("agent.list")["agents"]} == {"both"}
