"""Redis presence between its steps: on a Redis Cluster no script may touch
two hash slots, so a join, a leave and a reaping are sequences of scripts
(hub/cluster/presence/redis.py). These tests stop a sequence where a node
or a reaper would die, or interleave two of them as concurrency would, and
check that nothing is left behind and nothing is taken away: a membership
the cluster keeps has an intent the reaper finds; the indexes list too much,
never too little, once a reaper has passed. One Redis, Sentinel and a
Redis Cluster alike (the memory store has no steps)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.cluster.presence import AgentRecord
from hub.cluster.presence.redis import RedisPresence
from hub.cluster.redis_connection import RedisConnection

pytestmark = pytest.mark.redis

DEAD_AFTER = 0.2


class Nodes:
    """Presence stores by node id, each on its own connection."""

    def __init__(self, url: str):
        self.url = url
        self.prefix = f"t{secrets.token_hex(3)}"
        self.stores: dict[str, RedisPresence] = {}
        self.connections: list[RedisConnection] = []

    async def __call__(self, node_id: str) -> RedisPresence:
        store = self.stores.get(node_id)
        if store is None:
            self.connections.append(RedisConnection(self.url))
            store = RedisPresence(self.connections[-1], prefix=self.prefix, node_id=node_id)
            await store.start()
            await store.touch_node()
            self.stores[node_id] = store
        return store

    async def aclose(self) -> None:
        for store in self.stores.values():
            await store.aclose()
        for connection in self.connections:
            await connection.aclose()


@pytest.fixture(params=["redis_server", "redis_sentinel", "redis_cluster"])
async def node(request: pytest.FixtureRequest) -> AsyncIterator[Nodes]:
    nodes = Nodes(request.getfixturevalue(request.param).url)
    yield nodes
    await nodes.aclose()


async def intend(p: RedisPresence, space: str, agent_id: str) -> Any:
    """A join's first step alone: the agent's slot records the intent."""
    keys = p._keys
    return await p._call(
        "intend", p._intend, [keys.agent(agent_id), keys.member_of(agent_id)], [space]
    )


async def add_member(p: RedisPresence, space: str, agent_id: str, conn: Any) -> None:
    """A join's second step alone: the membership, without its space index."""
    keys = p._keys
    await p._call(
        "join", p._join, [keys.members(space), keys.member_conns(space)], [agent_id, 100, conn]
    )


async def reap(reaper: RedisPresence) -> list[Any]:
    """Let the dead nodes' last touch age, then reap (the reaper beats first)."""
    await asyncio.sleep(DEAD_AFTER * 2.5)
    await reaper.touch_node()
    return await reaper.reap_dead_nodes(DEAD_AFTER)


async def test_a_node_dying_between_intent_and_join_leaves_nothing(node: Nodes) -> None:
    dying, live = await node("dying"), await node("live")
    await dying.claim_agent(AgentRecord("x", "dying", "ws-x"))
    await intend(dying, "room", "x")  # ... and the node dies
    reaped = await reap(live)
    assert [(r.record.agent_id, r.spaces) for r in reaped] == [("x", ())]
    assert await live.space_members("room", 10) == ([], 0)
    assert await live.get_agent("x") is None
    listing = await live.list_agents(capability=None, space=None, cursor=None, limit=10)
    assert listing.agents == []


async def test_a_node_dying_before_indexing_a_space_is_healed_by_its_reaper(node: Nodes) -> None:
    """The first joiner's node dies before listing the space; a second member
    joins (not first: it lists nothing). The reaper lists the space again."""
    dying, live = await node("dying"), await node("live")
    await dying.claim_agent(AgentRecord("x", "dying", "ws-x"))
    conn = await intend(dying, "room", "x")
    await add_member(dying, "room", "x", conn)  # ... and the node dies
    await live.claim_agent(AgentRecord("y", "live", "ws-y"))
    assert await live.join_space("room", "y", 100) == 2
    assert "room" not in await live.space_sizes(), "the lost step, as it would be"
    reaped = await reap(live)
    assert [(r.record.agent_id, r.spaces) for r in reaped] == [("x", ("room",))]
    assert await live.space_sizes() == {"room": 1}
    assert await live.space_members("room", 10) == (["y"], 1)


async def test_an_old_connections_leave_keeps_the_new_connections_join(node: Nodes) -> None:
    """x moves from node a to node b; b's join of the room interleaves with a's
    departure of it. The room keeps x (b's), and when b dies its reaper finds
    and removes that membership: no ghost member."""
    a, b, live = await node("a"), await node("b"), await node("live")
    await a.claim_agent(AgentRecord("x", "a", "ws-old"))
    await a.join_space("room", "x", 100)
    assert await b.claim_agent(AgentRecord("x", "b", "ws-new"), replace="ws-old") is None
    conn = await intend(b, "room", "x")  # b's join, first step
    await a.leave_space("room", "x")  # a's departure of its membership
    await add_member(b, "room", "x", conn)  # b's join, second step
    assert await live.space_members("room", 10) == (["x"], 1)
    await live.touch_node()
    await a.touch_node()
    reaped = await reap(live)  # a and b fell silent: both reaped
    by_conn = {r.record.connection_id: r.spaces for r in reaped}
    assert by_conn == {"ws-new": ("room",)}, "ws-old held nothing any more"
    assert await live.space_members("room", 10) == ([], 0)
    assert await live.space_sizes() == {}


async def test_a_reaper_dying_after_its_lease_leaves_the_node_to_the_next(node: Nodes) -> None:
    dead, first, second = await node("dead"), await node("first"), await node("second")
    await dead.claim_agent(AgentRecord("x", "dead", "ws-x"))
    await dead.join_space("room", "x", 100)
    await asyncio.sleep(DEAD_AFTER * 2.5)
    await first.touch_node()
    lease = first._liveness._lease
    leased = await first._call(
        "lease", lease, [first._keys.nodes], [round(DEAD_AFTER * 1000), "first"]
    )
    assert b"dead" in leased  # ... and the first reaper dies
    await second.touch_node()
    assert await second.reap_dead_nodes(DEAD_AFTER) == [], "leased: not yet"
    reaped = await reap(second)
    assert [(r.record.agent_id, r.spaces) for r in reaped] == [("x", ("room",))]
    assert await second.space_members("room", 10) == ([], 0)
    assert await second.reap_dead_nodes(DEAD_AFTER) == [], "reaped once"
