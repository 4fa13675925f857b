"""Small cluster-wide state with expiry, for adapters.

:class:`~hub.cluster.kvstore.base.KeyValueStore` is the interface (``get``, ``set``
with a TTL and optional ``if_absent``/``if_present``, ``delete``).
:class:`MemoryKeyValueStore` serves one node,
:class:`~hub.cluster.kvstore.redis.RedisKeyValueStore` a cluster (chosen from
``redis_url``, like the backplane), so what one node stores another reads.
"""

from __future__ import annotations

from hub.cluster.kvstore.base import KeyValueStore, KeyValueStoreFull
from hub.cluster.kvstore.memory import MemoryKeyValueStore
from hub.cluster.redis_connection import RedisConnection

__all__ = ["KeyValueStore", "KeyValueStoreFull", "MemoryKeyValueStore", "create_kv_store"]


def create_kv_store(
    redis: RedisConnection | None, *, prefix: str = "agora", max_entries: int = 100_000
) -> KeyValueStore:
    """In memory without a Redis connection, on it otherwise."""
    if redis is None:
        return MemoryKeyValueStore(max_entries=max_entries)
    from hub.cluster.kvstore.redis import RedisKeyValueStore

    return RedisKeyValueStore(redis, prefix=prefix)
