"""One contract, both node-stats stores: the same bodies in memory and on Redis.

"Nodes" are stores by name: in memory a single node has one store; on Redis
each name is its own :class:`RedisNodeStats` on one private redis-server, as
separate hub nodes would have. In memory time passes on a fake clock; on
Redis the test polls until the document is gone (the store's clock is the
server's own).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.cluster.nodestats import MemoryNodeStats, NodeStatsStore, create_node_stats
from hub.cluster.nodestats.redis import RedisNodeStats
from hub.errors import BackplaneUnavailable
from tests.support.servers import free_port
from tests.support.stores import WAIT, Connections, Nodes


class StatsCluster(Nodes[NodeStatsStore]):
    def __init__(self, url: str | None):
        super().__init__(
            url,
            lambda clock: MemoryNodeStats(clock=clock),
            lambda redis, prefix: RedisNodeStats(redis, prefix=prefix),
        )

    async def until_gone(self, store: NodeStatsStore, node_id: str, ttl: float) -> None:
        """Return once ``node_id``'s document (written with ``ttl``) has expired."""
        if self.url is None:
            self.clock.now += ttl
            assert node_id not in await store.read_all()
            return
        deadline = time.monotonic() + WAIT
        while node_id in await store.read_all():
            assert time.monotonic() < deadline, f"{node_id} never expired"
            await asyncio.sleep(0.05)


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[StatsCluster]:
    c = StatsCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


async def test_put_read_replace_remove(cluster: StatsCluster) -> None:
    store = cluster.node("a")
    assert await store.read_all() == {}
    await store.put("node-a", b'{"connections": 1}', 60)
    assert await store.read_all() == {"node-a": b'{"connections": 1}'}
    await store.put("node-a", b'{"connections": 2}', 60)
    assert await store.read_all() == {"node-a": b'{"connections": 2}'}
    await store.remove("node-a")
    assert await store.read_all() == {}
    await store.remove("node-a")  # idempotent


async def test_every_node_reads_every_node(cluster: StatsCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    await a.put("node-a", b"A", 60)
    await b.put("node-b", b"B", 60)
    for store in (a, b):
        assert await store.read_all() == {"node-a": b"A", "node-b": b"B"}
    await b.remove("node-b")
    assert await a.read_all() == {"node-a": b"A"}


async def test_a_node_that_stops_writing_drops_out(cluster: StatsCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    await a.put("alive", b"A", 60)
    await b.put("dead", b"B", 0.2)
    await cluster.until_gone(a, "dead", 0.2)
    assert await a.read_all() == {"alive": b"A"}
    await b.put("dead", b"back", 60)  # writing again brings it back
    assert (await a.read_all())["dead"] == b"back"


async def test_rewriting_renews_the_ttl(cluster: StatsCluster) -> None:
    store = cluster.node("a")
    await store.put("n", b"1", 0.2)
    await store.put("n", b"2", 60)
    await store.put("other", b"x", 0.2)
    await cluster.until_gone(store, "other", 0.2)
    assert await store.read_all() == {"n": b"2"}


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "6", True])
async def test_a_bad_ttl_is_refused(cluster: StatsCluster, ttl: Any) -> None:
    store = cluster.node("a")
    with pytest.raises(ValueError):
        await store.put("n", b"v", ttl)
    assert await store.read_all() == {}


def test_the_connection_picks_the_store(connect: Connections) -> None:
    assert isinstance(create_node_stats(None), MemoryNodeStats)
    assert isinstance(create_node_stats(connect("redis://127.0.0.1:1/0")), RedisNodeStats)


async def test_redis_unreachable_is_backplane_unavailable(connect: Connections) -> None:
    store = RedisNodeStats(connect(f"redis://127.0.0.1:{free_port()}/0", connect_timeout=0.5))
    try:
        with pytest.raises(BackplaneUnavailable):
            await store.put("n", b"v", 6)
        with pytest.raises(BackplaneUnavailable):
            await store.read_all()
    finally:
        await store.aclose()
    with pytest.raises(BackplaneUnavailable):
        await store.read_all()  # closed
