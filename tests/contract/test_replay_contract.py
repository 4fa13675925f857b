"""One contract, every replay cache: the same bodies in memory and on Redis.

"Nodes" come from a cluster by name. In memory a single node has one cache
(every name is that cache); on Redis each name is its own
:class:`RedisReplayCache` on one private redis-server, as separate hub
nodes would have. Time passes on a fake clock in memory; on Redis the test
waits for Redis's own ``expired`` keyspace event.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from redis.asyncio import Redis

from hub.errors import BackplaneUnavailable, HubError
from hub.replay import MemoryReplayCache, ReplayCache, ReplayCacheFull, create_replay_cache
from hub.replay.redis import RedisReplayCache
from tests.support.servers import free_port

WAIT = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class ReplayCluster:
    url: str | None  # None: memory
    prefix: str = field(default_factory=lambda: f"t{secrets.token_hex(3)}")
    clock: FakeClock = field(default_factory=FakeClock)
    caches: dict[str, Any] = field(default_factory=dict)

    def node(self, name: str) -> ReplayCache:
        if self.url is None:
            name = "only"
        cache = self.caches.get(name)
        if cache is None:
            if self.url is None:
                cache = MemoryReplayCache(clock=self.clock)
            else:
                cache = RedisReplayCache(self.url, prefix=self.prefix)
            self.caches[name] = cache
        return cache

    async def record_and_outlive(self, cache: ReplayCache, key: str, ttl: float) -> None:
        """Record ``key`` with ``ttl`` and return once it has expired."""
        if self.url is None:
            assert await cache.seen(key, ttl) is False
            self.clock.now += ttl
            return
        client = Redis.from_url(self.url)
        try:
            await client.config_set("notify-keyspace-events", "Ex")
            pubsub = client.pubsub()
            await pubsub.subscribe("__keyevent@0__:expired")
            assert await cache.seen(key, ttl) is False
            expected = f"{self.prefix}:replay:{key}".encode()

            async def expired() -> None:
                async for message in pubsub.listen():
                    if message["type"] == "message" and message["data"] == expected:
                        return

            await asyncio.wait_for(expired(), WAIT)
            await pubsub.aclose()
        finally:
            await client.aclose()

    async def aclose(self) -> None:
        for cache in self.caches.values():
            await cache.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return None
    return request.getfixturevalue("redis_server")


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


# ── memory only ─────────────────────────────────────────────────────────────


async def test_memory_cache_when_full_refuses_rather_than_forgets() -> None:
    clock = FakeClock()
    cache = MemoryReplayCache(max_entries=3, clock=clock)
    for key, ttl in [("a", 10), ("b", 20), ("c", 30)]:
        assert await cache.seen(key, ttl) is False
    with pytest.raises(ReplayCacheFull) as err:
        await cache.seen("d", 10)
    assert isinstance(err.value, BackplaneUnavailable) and isinstance(err.value, HubError)
    assert await cache.seen("a", 10) is True  # known keys are still answered
    clock.now += 10  # "a" expires and is evicted: room for one
    assert await cache.seen("d", 10) is False
    assert len(cache) == 3
    with pytest.raises(ReplayCacheFull):
        await cache.seen("e", 10)
    clock.now += 100
    assert await cache.seen("e", 10) is False
    assert len(cache) == 1


async def test_memory_cache_evicts_expired_keys() -> None:
    clock = FakeClock()
    cache = MemoryReplayCache(clock=clock)
    for i in range(1000):
        await cache.seen(f"k{i}", 1 + i % 5)
    clock.now += 3
    await cache.seen("tick", 1)
    assert len(cache) == 1 + 400  # keys with ttl 4 and 5 remain
    clock.now += 10
    await cache.seen("tick2", 1)
    assert len(cache) == 1
    with pytest.raises(ValueError):
        MemoryReplayCache(max_entries=0)


# ── Redis only ──────────────────────────────────────────────────────────────


@pytest.mark.redis
async def test_redis_keys_carry_their_ttl(redis_server: Any) -> None:
    cache = RedisReplayCache(redis_server.url, prefix="ttl")
    client = Redis.from_url(redis_server.url)
    try:
        await cache.seen("k", 2.5)
        assert 0 < await client.pttl("ttl:replay:k") <= 2500
        await cache.seen("tiny", 0.0001)  # rounds up to 1 ms, never "no expiry"
        assert await client.pttl("ttl:replay:tiny") in (-2, 0, 1)
    finally:
        await client.aclose()
        await cache.aclose()


@pytest.mark.redis
async def test_redis_prefixes_are_separate_namespaces(redis_server: Any) -> None:
    a = RedisReplayCache(redis_server.url, prefix="one")
    b = RedisReplayCache(redis_server.url, prefix="two")
    try:
        assert await a.seen("k", 60) is False
        assert await b.seen("k", 60) is False
    finally:
        await a.aclose()
        await b.aclose()


async def test_redis_down_is_unavailable_not_new() -> None:
    cache = RedisReplayCache(
        f"redis://127.0.0.1:{free_port()}/0", socket_timeout=1.0, connect_timeout=1.0
    )
    with pytest.raises(BackplaneUnavailable):
        await asyncio.wait_for(cache.seen("k", 60), WAIT)
    await cache.aclose()
    await cache.aclose()  # idempotent
    with pytest.raises(BackplaneUnavailable):
        await cache.seen("k", 60)


@pytest.mark.redis
async def test_redis_server_killed_mid_use_is_unavailable(redis_server: Any) -> None:
    cache = RedisReplayCache(redis_server.url, socket_timeout=1.0, connect_timeout=1.0)
    try:
        assert await cache.seen("k", 60) is False
        redis_server.kill()
        with pytest.raises(BackplaneUnavailable):
            await asyncio.wait_for(cache.seen("k", 60), WAIT)
    finally:
        await cache.aclose()


async def test_factory_picks_the_backend_from_the_url() -> None:
    assert isinstance(create_replay_cache(None), MemoryReplayCache)
    assert isinstance(create_replay_cache("memory://"), MemoryReplayCache)
    assert create_replay_cache(None, max_entries=5).max_entries == 5  # type: ignore[attr-defined]
    redis_cache = create_replay_cache("redis://127.0.0.1:1/0", prefix="p")
    assert isinstance(redis_cache, RedisReplayCache)
    await redis_cache.aclose()
