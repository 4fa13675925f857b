"""One contract, every store under the replay cache: the same bodies in
memory and on Redis.

"Nodes" come from a cluster by name. In memory a single node has one store
(every name is that store); on Redis each name is its own
:class:`RedisKeyValueStore` on one private redis-server, as separate hub
nodes would have. Time passes on a fake clock in memory; on Redis the test
waits for Redis's own ``expired`` keyspace event. (Bounds, TTL rounding,
prefixes and outages are the store's own contract: test_kvstore_contract.)
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.cluster.kvstore import KeyValueStore, KeyValueStoreFull, MemoryKeyValueStore
from hub.cluster.kvstore.redis import RedisKeyValueStore
from hub.errors import BackplaneUnavailable
from hub.handlers.seen_ids import SeenIds
from tests.support.stores import WAIT, Connections, FakeClock, Nodes, until_expired


class ReplayCluster:
    """Replay caches by node name, each over a store of :class:`Nodes`."""

    def __init__(self, url: str | None):
        self.stores: Nodes[KeyValueStore] = Nodes(
            url,
            lambda clock: MemoryKeyValueStore(clock=clock),
            lambda redis, prefix: RedisKeyValueStore(redis, prefix=prefix),
        )
        self.caches: dict[str, SeenIds] = {}

    @property
    def url(self) -> str | None:
        return self.stores.url

    @property
    def clock(self) -> FakeClock:
        return self.stores.clock

    def node(self, name: str) -> SeenIds:
        store = self.stores.node(name)
        name = "only" if self.url is None else name  # in memory: one node
        if name not in self.caches:
            self.caches[name] = SeenIds(store)
        return self.caches[name]

    async def record_and_outlive(self, cache: SeenIds, key: str, ttl: float) -> None:
        """Record ``key`` with ``ttl`` and return once it has expired."""
        if self.url is None:
            assert await cache.seen(key, ttl) is False
            self.clock.now += ttl
            return

        async def write() -> None:
            assert await cache.seen(key, ttl) is False

        await until_expired(self.url, f"{self.stores.prefix}:kv:replay:{key}", write)

    async def aclose(self) -> None:
        for cache in self.caches.values():
            await cache.aclose()
        await self.stores.aclose()


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[ReplayCluster]:
    c = ReplayCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


# ── the contract ────────────────────────────────────────────────────────────


async def test_a_key_is_new_once_then_seen(cluster: ReplayCluster) -> None:
    cache = cluster.node("a")
    assert await cache.seen("agora/1.0|did:key:z6Mk…|id-1", 60) is False
    assert await cache.seen("agora/1.0|did:key:z6Mk…|id-1", 60) is True
    assert await cache.seen("agora/1.0|did:key:z6Mk…|id-2", 60) is False
    assert await cache.seen("é \U0001f600 | spaces and unicode", 60) is False
    assert await cache.seen("é \U0001f600 | spaces and unicode", 60) is True


async def test_two_nodes_see_each_others_ids(cluster: ReplayCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    assert await a.seen("k1", 60) is False
    assert await b.seen("k1", 60) is True
    assert await b.seen("k2", 60) is False
    assert await a.seen("k2", 60) is True


async def test_concurrent_checks_let_exactly_one_through(cluster: ReplayCluster) -> None:
    nodes = [cluster.node("a"), cluster.node("b"), cluster.node("c")]
    answers = await asyncio.gather(*(nodes[i % 3].seen("race", 60) for i in range(60)))
    assert answers.count(False) == 1


async def test_an_expired_key_is_new_again(cluster: ReplayCluster) -> None:
    cache = cluster.node("a")
    await cluster.record_and_outlive(cache, "short", 0.05)
    assert await cache.seen("short", 60) is False
    assert await cluster.node("b").seen("short", 60) is True


async def test_a_forgotten_key_is_new_again_on_every_node(cluster: ReplayCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    assert await a.seen("undone", 60) is False
    assert await a.seen("kept", 60) is False
    await a.forget("undone")
    await a.forget("never-recorded")  # nothing to forget: no error
    assert await b.seen("undone", 60) is False
    assert await a.seen("undone", 60) is True
    assert await b.seen("kept", 60) is True


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "60", True, None])
async def test_a_bad_ttl_is_refused_and_records_nothing(cluster: ReplayCluster, ttl: Any) -> None:
    cache = cluster.node("a")
    with pytest.raises(ValueError):
        await cache.seen("k", ttl)
    assert await cache.seen("k", 60) is False


# ── what the store's failures mean here ─────────────────────────────────────


async def test_a_full_store_refuses_rather_than_lets_through() -> None:
    cache = SeenIds(MemoryKeyValueStore(max_entries=2))
    assert await cache.seen("a", 60) is False
    assert await cache.seen("b", 60) is False
    with pytest.raises(KeyValueStoreFull) as err:
        await cache.seen("c", 60)
    assert isinstance(err.value, BackplaneUnavailable)  # answered UNAVAILABLE
    assert await cache.seen("a", 60) is True


@pytest.mark.redis
async def test_redis_killed_mid_use_is_unavailable_not_new(
    redis_server: Any, connect: Connections
) -> None:
    store = RedisKeyValueStore(connect(redis_server.url, socket_timeout=1.0, connect_timeout=1.0))
    cache = SeenIds(store)
    try:
        assert await cache.seen("k", 60) is False
        redis_server.kill()
        with pytest.raises(BackplaneUnavailable):
            await asyncio.wait_for(cache.seen("k", 60), WAIT)
    finally:
        await store.aclose()
