"""One contract, every key-value store: the same bodies in memory and on Redis.

"Nodes" come from a cluster by name. In memory a single node has one store
(every name is that store); on Redis each name is its own
:class:`RedisKeyValueStore` on one private redis-server, as separate hub nodes
would have. Time passes on a fake clock in memory; on Redis the test waits for
Redis's own ``expired`` keyspace event.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from hub.cluster.kvstore import (
    KeyValueStore,
    KeyValueStoreFull,
    MemoryKeyValueStore,
    create_kv_store,
)
from hub.cluster.kvstore.redis import RedisKeyValueStore
from hub.errors import BackplaneUnavailable, HubError
from tests.support.servers import free_port
from tests.support.stores import WAIT, Connections, FakeClock, Nodes, until_expired


class StoreCluster(Nodes[KeyValueStore]):
    def __init__(self, url: str | None):
        super().__init__(
            url,
            lambda clock: MemoryKeyValueStore(clock=clock),
            lambda redis, prefix: RedisKeyValueStore(redis, prefix=prefix),
        )

    async def outlive(self, store: KeyValueStore, key: str, value: bytes, ttl: float) -> None:
        """Store ``key`` with ``ttl`` and return once it has expired."""
        if self.url is None:
            assert await store.set(key, value, ttl)
            self.clock.now += ttl
            return

        async def write() -> None:
            assert await store.set(key, value, ttl)

        await until_expired(self.url, f"{self.prefix}:kv:{key}", write)


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[StoreCluster]:
    c = StoreCluster(None if backend is None else backend.url)
    yield c
    await c.aclose()


# ── the contract ────────────────────────────────────────────────────────────


async def test_set_get_replace_delete(cluster: StoreCluster) -> None:
    store = cluster.node("a")
    assert await store.get("k") is None
    assert await store.set("k", b"one", 60) is True
    assert await store.get("k") == b"one"
    assert await store.set("k", b"two", 60) is True
    assert await store.get("k") == b"two"
    assert await store.delete("k") is True
    assert await store.get("k") is None
    assert await store.delete("k") is False
    key = "é \U0001f600 | spaces:and:colons"
    assert await store.set(key, b"\x00\xff binary", 60)
    assert await store.get(key) == b"\x00\xff binary"


async def test_two_nodes_share_the_keys(cluster: StoreCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    await a.set("conv", b"state", 60)
    assert await b.get("conv") == b"state"
    assert await b.delete("conv") is True
    assert await a.get("conv") is None


async def test_conditional_writes(cluster: StoreCluster) -> None:
    a, b = cluster.node("a"), cluster.node("b")
    assert await a.set("k", b"first", 60, if_present=True) is False
    assert await a.get("k") is None
    assert await a.set("k", b"first", 60, if_absent=True) is True
    assert await b.set("k", b"second", 60, if_absent=True) is False
    assert await b.get("k") == b"first"
    assert await b.set("k", b"third", 60, if_present=True) is True
    assert await a.get("k") == b"third"
    with pytest.raises(ValueError):
        await a.set("k", b"x", 60, if_absent=True, if_present=True)
    assert await a.get("k") == b"third"


async def test_concurrent_if_absent_writes_have_one_winner(cluster: StoreCluster) -> None:
    nodes = [cluster.node("a"), cluster.node("b"), cluster.node("c")]
    wins = await asyncio.gather(
        *(nodes[i % 3].set("race", str(i).encode(), 60, if_absent=True) for i in range(60))
    )
    assert wins.count(True) == 1
    assert await nodes[0].get("race") == str(wins.index(True)).encode()


async def test_an_expired_key_is_gone(cluster: StoreCluster) -> None:
    store = cluster.node("a")
    await cluster.outlive(store, "short", b"v", 0.05)
    assert await store.get("short") is None
    assert await cluster.node("b").delete("short") is False
    assert await store.set("short", b"again", 60, if_present=True) is False
    assert await store.set("short", b"again", 60, if_absent=True) is True


async def test_rewriting_a_key_renews_its_ttl(cluster: StoreCluster) -> None:
    store = cluster.node("a")
    await store.set("k", b"v", 0.05)
    await store.set("k", b"v2", 60)
    await cluster.outlive(store, "other", b"v", 0.05)  # time passes past the first ttl
    assert await store.get("k") == b"v2"


@pytest.mark.parametrize("ttl", [0, -1, math.nan, math.inf, "60", True, None])
async def test_a_bad_ttl_is_refused_and_stores_nothing(cluster: StoreCluster, ttl: Any) -> None:
    store = cluster.node("a")
    with pytest.raises(ValueError):
        await store.set("k", b"v", ttl)
    assert await store.get("k") is None


# ── memory only ─────────────────────────────────────────────────────────────


async def test_memory_store_when_full_refuses_rather_than_forgets() -> None:
    clock = FakeClock()
    store = MemoryKeyValueStore(max_entries=3, clock=clock)
    for key, ttl in [("a", 10), ("b", 20), ("c", 30)]:
        assert await store.set(key, b"v", ttl)
    with pytest.raises(KeyValueStoreFull) as err:
        await store.set("d", b"v", 10)
    assert isinstance(err.value, BackplaneUnavailable) and isinstance(err.value, HubError)
    assert await store.set("a", b"new", 10)  # a live key may still be rewritten
    assert await store.get("a") == b"new"
    clock.now += 20  # "a" and "b" expire: room again
    assert await store.set("d", b"v", 10)
    assert len(store) == 2
    with pytest.raises(ValueError):
        MemoryKeyValueStore(max_entries=0)


async def test_memory_store_rewrites_do_not_grow_memory() -> None:
    clock = FakeClock()
    store = MemoryKeyValueStore(clock=clock)
    for i in range(10_000):
        await store.set("same", str(i).encode(), 60)
    assert len(store) == 1
    assert len(store._heap) <= 2 * 1 + 64 + 1


# ── Redis only ──────────────────────────────────────────────────────────────


@pytest.mark.redis
async def test_redis_keys_carry_their_ttl(redis_server: Any, connect: Connections) -> None:
    store = RedisKeyValueStore(connect(redis_server.url), prefix="ttl")
    client = Redis.from_url(redis_server.url)
    try:
        await store.set("k", b"v", 2.5)
        assert 0 < await client.pttl("ttl:kv:k") <= 2500
        # A tiny TTL rounds up to 1 ms, never "no expiry": the key is written,
        # given an expiry, and expires (keyspace notifications say each).
        await client.config_set("notify-keyspace-events", "Kgx$")
        watch = client.pubsub()
        await watch.subscribe("__keyspace@0__:ttl:kv:tiny")
        await watch.get_message(timeout=5)  # the subscription's confirmation
        await store.set("tiny", b"v", 0.0001)
        seen: list[bytes] = []
        while b"expired" not in seen:
            message = await watch.get_message(ignore_subscribe_messages=True, timeout=10)
            assert message is not None, f"notifications so far: {seen}"
            seen.append(message["data"])
        assert seen[0] == b"set" and b"expire" in seen, seen
        await watch.aclose()
    finally:
        await client.aclose()
        await store.aclose()


@pytest.mark.redis
async def test_redis_prefixes_are_separate_namespaces(
    redis_server: Any, connect: Connections
) -> None:
    a = RedisKeyValueStore(connect(redis_server.url), prefix="one")
    b = RedisKeyValueStore(connect(redis_server.url), prefix="two")
    try:
        await a.set("k", b"a", 60)
        assert await b.get("k") is None
    finally:
        await a.aclose()
        await b.aclose()


async def test_redis_down_is_unavailable(connect: Connections) -> None:
    store = RedisKeyValueStore(
        connect(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=1.0, connect_timeout=1.0)
    )
    for call in (store.get("k"), store.set("k", b"v", 60), store.delete("k")):
        with pytest.raises(BackplaneUnavailable):
            await asyncio.wait_for(call, WAIT)
    await store.aclose()
    await store.aclose()  # idempotent
    with pytest.raises(BackplaneUnavailable):
        await store.get("k")


@pytest.mark.redis
async def test_redis_server_killed_mid_use_is_unavailable(
    redis_server: Any, connect: Connections
) -> None:
    store = RedisKeyValueStore(connect(redis_server.url, socket_timeout=1.0, connect_timeout=1.0))
    try:
        await store.set("k", b"v", 60)
        redis_server.kill()
        with pytest.raises(BackplaneUnavailable):
            await asyncio.wait_for(store.get("k"), WAIT)
    finally:
        await store.aclose()


async def test_factory_picks_the_backend_from_the_connection(connect: Connections) -> None:
    assert isinstance(create_kv_store(None), MemoryKeyValueStore)
    assert create_kv_store(None, max_entries=5).max_entries == 5  # type: ignore[attr-defined]
    redis_store = create_kv_store(connect("redis://127.0.0.1:1/0"), prefix="p")
    assert isinstance(redis_store, RedisKeyValueStore)
    await redis_store.aclose()
