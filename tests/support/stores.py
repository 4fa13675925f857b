"""What the stores' contract tests share: "nodes" by name, a fake clock, and
waiting for Redis to expire a key.

In memory a single node has one store (every name is that store); on Redis
each name is its own store on its own :class:`RedisConnection` to one Redis
(one redis-server, a Sentinel-watched primary or a Redis Cluster, by the
URL), as separate hub nodes would have. In memory time passes on a
:class:`FakeClock`; on Redis a test waits for Redis's own ``expired`` keyspace
event (:func:`until_expired`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from hub.cluster.redis_connection import RedisConnection

WAIT = 10.0

S = TypeVar("S")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Nodes(Generic[S]):
    """Stores by node name, made by ``memory(clock)`` or ``redis(connection, prefix)``."""

    url: str | None  # None: memory
    memory: Callable[[FakeClock], S]
    redis: Callable[[RedisConnection, str], S]
    prefix: str = field(default_factory=lambda: f"t{secrets.token_hex(3)}")
    clock: FakeClock = field(default_factory=FakeClock)
    stores: dict[str, S] = field(default_factory=dict)
    connections: list[RedisConnection] = field(default_factory=list)

    def node(self, name: str) -> S:
        if self.url is None:
            name = "only"
        store = self.stores.get(name)
        if store is None:
            if self.url is None:
                store = self.memory(self.clock)
            else:
                self.connections.append(RedisConnection(self.url))
                store = self.redis(self.connections[-1], self.prefix)
            self.stores[name] = store
        return store

    async def aclose(self) -> None:
        for store in self.stores.values():
            await store.aclose()  # type: ignore[attr-defined]
        for connection in self.connections:
            await connection.aclose()


async def until_expired(url: str, key: str, write: Callable[[], Awaitable[Any]]) -> None:
    """Run ``write`` (which stores Redis key ``key`` with a TTL) and return
    once Redis has expired that key."""
    from tests.support.redis_ha import direct_client

    client = await direct_client(url, key)
    try:
        await client.config_set("notify-keyspace-events", "Ex")
        pubsub = client.pubsub()
        await pubsub.subscribe("__keyevent@0__:expired")
        await write()

        async def expired() -> None:
            async for message in pubsub.listen():
                if message["type"] == "message" and message["data"] == key.encode():
                    return

        await asyncio.wait_for(expired(), WAIT)
        await pubsub.aclose()
    finally:
        await client.aclose()


class Connections:
    """Redis connections a test opens, closed at its end (a store never
    closes the connection it is given)."""

    def __init__(self) -> None:
        self.made: list[RedisConnection] = []

    def __call__(self, url: str, **options: Any) -> RedisConnection:
        self.made.append(RedisConnection(url, **options))
        return self.made[-1]

    async def aclose(self) -> None:
        for connection in self.made:
            await connection.aclose()
