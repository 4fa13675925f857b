"""One contract, every presence store: the same bodies in memory and on Redis.

Nodes come from a *cluster* by id. In memory every node shares the one
store (a single node is never dead and never loses data, so touch, restore
and reaping are no-ops there); on Redis each id is its own
:class:`RedisPresence` on one private redis-server.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hub.cluster.presence import AgentRecord, MemoryPresence, Presence, ReapedAgent
from hub.cluster.presence.redis import RedisPresence
from hub.cluster.redis_connection import RedisConnection
from hub.errors import SpaceFull
from tests.support.redis_ha import flush_all


@dataclass
class PresenceCluster:
    url: str | None  # None: memory
    prefix: str = field(default_factory=lambda: f"t{secrets.token_hex(3)}")
    nodes: dict[str, Any] = field(default_factory=dict)
    shared: MemoryPresence = field(default_factory=MemoryPresence)
    connections: list[RedisConnection] = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        return self.url is not None

    async def node(self, node_id: str) -> Any:
        if self.url is None:
            return self.shared
        presence = self.nodes.get(node_id)
        if presence is None:
            redis = RedisConnection(self.url)
            self.connections.append(redis)
            presence = RedisPresence(redis, prefix=self.prefix, node_id=node_id, ttl=5.0)
            await presence.start()
            self.nodes[node_id] = presence
        return presence

    async def lose_data(self) -> None:
        """The store restarts empty (memory: a single node never loses data)."""
        if self.url is not None:
            await flush_all(self.url)

    async def aclose(self) -> None:
        for presence in self.nodes.values():
            await presence.aclose()
        for redis in self.connections:
            await redis.aclose()


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[PresenceCluster]:
    c = PresenceCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


def rec(agent_id: str, node: str, conn: str, **kwargs: Any) -> AgentRecord:
    return AgentRecord(agent_id, node, conn, **kwargs)


# ── agents ─────────────────────────────────────────────────────────────────


async def test_satisfies_the_protocol(cluster: PresenceCluster) -> None:
    p: Presence = await cluster.node("a")  # static check of the Protocol
    assert await p.get_agent("nobody") is None


async def test_claim_is_exclusive_across_nodes(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    first = rec(
        "agent-1",
        "a",
        "ws-1",
        type="llm",
        capabilities=("chat", "code"),
        metadata={"model": "x", "n": [1, {"k": None}]},
    )
    assert await a.claim_agent(first) is None
    assert await b.get_agent("agent-1") == first
    # Anyone else, on any node, is told who holds it.
    assert await b.claim_agent(rec("agent-1", "b", "ws-9")) == first
    assert await a.claim_agent(rec("agent-1", "a", "ws-2")) == first
    assert await a.get_agent("agent-1") == first
    # Other ids are independent.
    assert await b.claim_agent(rec("agent-2", "b", "ws-3")) is None


async def test_replace_only_the_named_holder(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    old = rec("agent-1", "a", "ws-old")
    new = rec("agent-1", "b", "ws-new")
    await a.claim_agent(old)
    assert await b.claim_agent(new, replace="ws-someone-else") == old
    assert await b.claim_agent(new, replace="ws-old") is None
    assert await a.get_agent("agent-1") == new
    # The replaced connection can no longer release or update it.
    await a.release_agent("agent-1", "ws-old")
    await a.update_agent(rec("agent-1", "a", "ws-old", type="stale"))
    assert await b.get_agent("agent-1") == new


async def test_release_only_by_the_holding_connection(cluster: PresenceCluster) -> None:
    a = await cluster.node("a")
    mine = rec("agent-1", "a", "ws-1")
    await a.claim_agent(mine)
    await a.release_agent("agent-1", "ws-2")
    assert await a.get_agent("agent-1") == mine
    await a.release_agent("agent-1", "ws-1")
    assert await a.get_agent("agent-1") is None
    await a.release_agent("agent-1", "ws-1")  # twice: nothing happens
    assert await a.claim_agent(rec("agent-1", "a", "ws-3")) is None


async def test_update_agent(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.claim_agent(rec("agent-1", "a", "ws-1"))
    updated = rec("agent-1", "a", "ws-1", type="tool", capabilities=("x",), metadata={"v": 2})
    await a.update_agent(updated)
    assert await b.get_agent("agent-1") == updated
    await a.update_agent(rec("unclaimed", "a", "ws-1", type="x"))
    assert await a.get_agent("unclaimed") is None


# ── membership ─────────────────────────────────────────────────────────────


async def test_join_counts_and_is_idempotent(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    assert await a.join_space("room", "x", 10) == 1
    assert await b.join_space("room", "y", 10) == 2
    assert await a.join_space("room", "x", 10) == 2  # again: no change
    assert await b.space_members("room", 10) == (["x", "y"], 2)


async def test_capacity(cluster: PresenceCluster) -> None:
    a = await cluster.node("a")
    assert await a.join_space("small", "x", 2) == 1
    assert await a.join_space("small", "y", 2) == 2
    with pytest.raises(SpaceFull) as info:
        await a.join_space("small", "z", 2)
    assert (info.value.space, info.value.capacity) == ("small", 2)
    assert await a.join_space("small", "x", 2) == 2  # a member rejoining is not refused
    assert await a.space_members("small", 10) == (["x", "y"], 2)
    with pytest.raises(SpaceFull):
        await a.join_space("closed", "x", 0)
    assert "closed" not in await a.space_sizes()


async def test_capacity_holds_under_concurrent_joins(cluster: PresenceCluster) -> None:
    nodes = [await cluster.node(n) for n in ("a", "b", "c")]

    async def join(i: int) -> bool:
        try:
            await nodes[i % 3].join_space("crowd", f"agent-{i}", 5)
            return True
        except SpaceFull:
            return False

    joined = await asyncio.gather(*(join(i) for i in range(30)))
    assert sum(joined) == 5
    members, count = await nodes[0].space_members("crowd", 100)
    assert count == 5
    assert sorted(members) == sorted(f"agent-{i}" for i, ok in enumerate(joined) if ok)


async def test_leave(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.join_space("room", "x", 10)
    await b.join_space("room", "y", 10)
    assert await a.leave_space("room", "nobody") == 2
    assert await b.leave_space("room", "x") == 1
    assert await a.space_members("room", 10) == (["y"], 1)
    assert await a.leave_space("room", "y") == 0
    assert await a.space_members("room", 10) == ([], 0)
    assert "room" not in await b.space_sizes()
    assert await a.leave_space("never-existed", "x") == 0


async def test_members_oldest_first_with_limit_and_exact_count(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    for i, agent in enumerate(["d", "b", "a", "c"]):
        await (a if i % 2 else b).join_space("room", agent, 100)
    assert await a.space_members("room", 100) == (["d", "b", "a", "c"], 4)
    assert await b.space_members("room", 2) == (["d", "b"], 4)
    assert await b.space_members("room", 0) == ([], 4)
    await a.leave_space("room", "b")
    await a.join_space("room", "b", 100)  # rejoining goes to the end
    assert await b.space_members("room", 100) == (["d", "a", "c", "b"], 4)
    assert await a.space_members("nowhere", 10) == ([], 0)


async def test_missing_members_cluster_wide(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.join_space("room", "x", 10)
    await b.join_space("room", "y", 10)
    assert await a.missing_members("room", ("y", "x")) == []
    assert await b.missing_members("room", ("z", "x", "w")) == ["z", "w"]
    assert await a.missing_members("nowhere", ("x",)) == ["x"]
    assert await a.missing_members("room", ()) == []
    await b.leave_space("room", "x")
    assert await a.missing_members("room", ("x", "y")) == ["x"]


async def test_space_sizes_cluster_wide(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    assert await a.space_sizes() == {}
    await a.join_space("one", "x", 10)
    await b.join_space("one", "y", 10)
    await b.join_space("task.two", "y", 10)
    for p in (a, b):
        assert await p.space_sizes() == {"one": 2, "task.two": 1}
    await a.leave_space("task.two", "y")
    assert await b.space_sizes() == {"one": 2}


# ── node liveness ──────────────────────────────────────────────────────────


async def test_touch_reports_a_missing_registration(cluster: PresenceCluster) -> None:
    a = await cluster.node("a")
    first = await a.touch_node()
    assert first is cluster.distributed  # memory: a single node is never missing
    assert await a.touch_node() is False
    await cluster.lose_data()
    assert await a.touch_node() is cluster.distributed
    assert await a.reaped() is False  # lost, not reaped: nobody was told it left
    assert await a.touch_node() is False


async def test_restore_after_data_loss(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.touch_node()
    x = rec("x", "a", "ws-x", type="llm", metadata={"k": 1})
    y = rec("y", "a", "ws-y")
    for r in (x, y):
        await a.claim_agent(r)
    await a.join_space("s1", "x", 10)
    await a.join_space("s1", "y", 10)
    await a.join_space("s2", "x", 10)
    await cluster.lose_data()
    lost = await a.touch_node()
    assert lost is cluster.distributed
    thief = rec("y", "b", "ws-other")
    if lost:  # while the store was empty, y connected elsewhere
        assert await b.claim_agent(thief) is None
    conflicts = await a.restore([x, y], {"s1": ["x", "y"], "s2": ["x"]})
    assert conflicts == ([thief] if lost else [])
    assert await b.get_agent("x") == x
    assert await b.get_agent("y") == (thief if lost else y)
    s1 = await b.space_members("s1", 10)
    assert s1 == ((["x"], 1) if lost else (["x", "y"], 2))
    assert await b.space_members("s2", 10) == (["x"], 1)
    # Restoring again changes nothing, and ignores capacity.
    assert await a.restore([x], {"s1": ["x"], "s2": ["x"]}) == []
    assert await b.space_members("s2", 10) == (["x"], 1)


async def test_reaping_by_exactly_one_of_concurrent_reapers(cluster: PresenceCluster) -> None:
    dead = [await cluster.node(f"dead-{i}") for i in range(3)]
    reapers = [await cluster.node(f"live-{i}") for i in range(4)]
    survivor = rec("z", "live-0", "ws-z")
    await reapers[0].claim_agent(survivor)
    await reapers[0].join_space("s1", "z", 100)
    expected: dict[str, set[str]] = {}
    for i, p in enumerate(dead):
        await p.touch_node()
        for j in range(3):
            aid = f"agent-{i}-{j}"
            await p.claim_agent(rec(aid, f"dead-{i}", f"ws-{i}-{j}", type="t", metadata={"j": j}))
            await p.join_space("s1", aid, 100)
            spaces = {"s1"}
            if j == 0:
                await p.join_space(f"only-{i}", aid, 100)
                spaces.add(f"only-{i}")
            expected[aid] = spaces
    dead_after = 0.2
    await asyncio.sleep(dead_after * 2.5)  # let the dead nodes' last touch age
    for p in reapers:
        await p.touch_node()
    results = await asyncio.gather(*(p.reap_dead_nodes(dead_after) for p in reapers))
    reaped: list[ReapedAgent] = [r for result in results for r in result]
    if not cluster.distributed:
        assert reaped == []
        return
    ids = [r.record.agent_id for r in reaped]
    assert sorted(ids) == sorted(expected), "every agent reaped exactly once"
    for r in reaped:
        i, j = (int(n) for n in r.record.agent_id.split("-")[1:])
        assert r.record == rec(
            r.record.agent_id, f"dead-{i}", f"ws-{i}-{j}", type="t", metadata={"j": j}
        )
        assert set(r.spaces) == expected[r.record.agent_id]
    # Each dead node went to a single reaper.
    for i in range(3):
        holders = [
            k
            for k, result in enumerate(results)
            if any(r.record.node_id == f"dead-{i}" for r in result)
        ]
        assert len(holders) == 1
    assert await reapers[1].space_members("s1", 100) == (["z"], 1)
    assert await reapers[1].space_sizes() == {"s1": 1}
    assert await reapers[1].get_agent("agent-0-0") is None
    assert await reapers[1].get_agent("z") == survivor
    # Nothing is reaped twice, and live nodes (beating, as they do) are not reaped.
    for p in reapers:
        await p.touch_node()
    assert await reapers[2].reap_dead_nodes(dead_after) == []
    assert await reapers[0].touch_node() is False
    # A reaped node that comes back finds its registration gone (and restores),
    # and learns, once, that its agents were announced gone.
    assert await dead[0].touch_node() is True
    assert await dead[0].reaped() is True
    assert await dead[0].reaped() is False
    assert await reapers[0].reaped() is False


async def test_reaping_spares_an_agent_that_moved(cluster: PresenceCluster) -> None:
    """A dead node's agent already replaced elsewhere keeps its new record and spaces."""
    dead, live = await cluster.node("dead"), await cluster.node("live")
    await dead.touch_node()
    await dead.claim_agent(rec("x", "dead", "ws-old"))
    await dead.join_space("stale", "x", 10)
    await dead.join_space("both", "x", 10)
    moved = rec("x", "live", "ws-new")
    assert await live.claim_agent(moved, replace="ws-old") is None
    await live.join_space("both", "x", 10)
    await live.join_space("fresh", "x", 10)
    await asyncio.sleep(0.5)
    await live.touch_node()
    reaped = await live.reap_dead_nodes(0.2)
    assert await live.get_agent("x") == moved
    assert (await live.space_members("both", 10))[1] == 1
    assert (await live.space_members("fresh", 10))[1] == 1
    if cluster.distributed:
        # Only what the dead connection alone had joined is taken away.
        assert [(r.record.agent_id, r.record.connection_id, r.spaces) for r in reaped] == [
            ("x", "ws-old", ("stale",))
        ]
        assert await live.space_members("stale", 10) == ([], 0)
    else:
        assert reaped == []


async def test_leave_cluster(cluster: PresenceCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.touch_node()
    await a.leave_cluster()
    assert await a.touch_node() is cluster.distributed  # registered anew
    # Leaving with agents still registered hands them to the next reaper.
    await a.claim_agent(rec("x", "a", "ws-x"))
    await a.join_space("s", "x", 10)
    await a.leave_cluster()
    await b.touch_node()
    reaped = await b.reap_dead_nodes(60.0)
    if cluster.distributed:
        assert reaped == [ReapedAgent(rec("x", "a", "ws-x"), ("s",))]
        assert await b.get_agent("x") is None
    else:
        assert reaped == []
