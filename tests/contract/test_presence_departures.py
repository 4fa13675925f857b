"""Leaves a node holds unannounced (its coalescing window, contract §21) are
noted in presence; a dead node's reaper gets them back (``ReapedAgent.held``).
The same bodies in memory (a single node is never reaped: notes only come and
go) and on Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.cluster.presence import ReapedAgent
from tests.contract.test_presence_contract import PresenceCluster, rec


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[PresenceCluster]:
    c = PresenceCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


DEAD_AFTER = 0.2


async def _reap(reaper) -> list[ReapedAgent]:
    await asyncio.sleep(DEAD_AFTER * 2.5)  # the dead node's last touch ages
    await reaper.touch_node()
    return await reaper.reap_dead_nodes(DEAD_AFTER)


async def test_a_dead_nodes_held_leaves_come_back_to_its_reaper(cluster: PresenceCluster) -> None:
    dead, live = await cluster.node("dead"), await cluster.node("live")
    await dead.touch_node()
    await live.touch_node()
    # x still connected (left room, still in lobby); z had closed altogether.
    await dead.claim_agent(rec("x", "dead", "ws-x"))
    await dead.join_space("lobby", "x", 10)
    await dead.note_departures("room", ["x", "z"])
    await dead.note_departures("other", ["z"])
    await dead.note_departures("told", ["x"])
    await dead.forget_departures("told", ["x"])  # announced: not due any more
    reaped = await _reap(live)
    if not cluster.distributed:
        assert reaped == []
        return
    by_agent = {r.record.agent_id: r for r in reaped}
    assert sorted(by_agent) == ["x", "z"]
    assert by_agent["x"] == ReapedAgent(rec("x", "dead", "ws-x"), ("lobby",), ("room",))
    z = by_agent["z"]
    assert (z.record.agent_id, z.record.node_id, z.record.connection_id) == ("z", "dead", "")
    assert (z.spaces, sorted(z.held)) == ((), ["other", "room"])
    # The notes went with the node: nobody gets them twice.
    await dead.touch_node()
    await live.touch_node()
    assert await _reap(live) == []


async def test_notes_forgotten_or_of_live_nodes_are_not_reaped(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.touch_node()
    await a.note_departures("room", ["x"])
    await a.forget_departures("room", ["x"])
    await a.forget_departures("room", ["never-noted"])
    await a.note_departures("room", [])
    await asyncio.sleep(DEAD_AFTER * 2.5)
    await b.touch_node()
    await a.touch_node()  # alive: nothing of it is reaped
    await b.note_departures("hall", ["y"])
    assert await b.reap_dead_nodes(DEAD_AFTER) == []


async def test_a_restarted_node_hands_its_old_notes_to_the_reapers(
    cluster: PresenceCluster,
) -> None:
    """A node killed holding leaves and started again under its id (before
    anyone reaped it): the previous process's notes still reach a reaper."""
    old = await cluster.node("n")
    await old.touch_node()
    await old.note_departures("room", ["x"])
    if not cluster.distributed:
        return
    from hub.cluster.presence.redis import RedisPresence

    new = RedisPresence(old._redis, prefix=cluster.prefix, node_id="n", ttl=5.0)
    await new.start()  # the previous process's leftovers go to a tombstone
    await new.touch_node()
    live = await cluster.node("live")
    await live.touch_node()
    reaped = await live.reap_dead_nodes(DEAD_AFTER)
    assert [(r.record.agent_id, r.record.node_id, r.spaces, r.held) for r in reaped] == [
        ("x", "n", (), ("room",))
    ]


async def test_leaving_the_cluster_with_notes_hands_them_to_a_reaper(
    cluster: PresenceCluster,
) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.touch_node()
    await a.note_departures("room", ["x"])  # its announcement failed on the way out
    await a.leave_cluster()
    await b.touch_node()
    reaped = await b.reap_dead_nodes(60.0)
    if cluster.distributed:
        assert [(r.record.agent_id, r.spaces, r.held) for r in reaped] == [("x", (), ("room",))]
    else:
        assert reaped == []
