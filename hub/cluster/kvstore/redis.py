"""The cluster's key-value store: one Redis string per key, expiring by itself.

Layout (``P`` is the key prefix, default ``agora``)::

    P:kv:{key}   STRING  the value, with a PX expiry

Conditional writes are ``SET … NX`` / ``SET … XX``: one atomic command, so of
two nodes racing on one key exactly one wins. Redis expires keys itself, so
memory is bounded by what is live. A failed command raises
:class:`~hub.errors.BackplaneUnavailable`; commands are never retried (a
retried conditional write could report the wrong winner).
"""

from __future__ import annotations

import math

from hub.cluster.kvstore.base import check_condition, check_ttl
from hub.cluster.redis_store import RedisStore


class RedisKeyValueStore(RedisStore):
    """On the node's :class:`~hub.cluster.redis_connection.RedisConnection`.

    Each key is its own command, so on a Redis Cluster the keys spread over
    every slot (a key containing ``{…}`` is placed by that hash tag)."""

    def _key(self, key: str) -> str:
        return f"{self._prefix}:kv:{key}"

    async def get(self, key: str) -> bytes | None:
        with self._command("key-value get"):
            value = await self._client.get(self._key(key))
        return None if value is None else bytes(value)

    async def set(
        self,
        key: str,
        value: bytes,
        ttl: float,
        *,
        if_absent: bool = False,
        if_present: bool = False,
    ) -> bool:
        check_ttl(ttl)
        check_condition(if_absent, if_present)
        px = max(1, math.ceil(ttl * 1000))
        with self._command("key-value set"):
            stored = await self._client.set(
                self._key(key), value, px=px, nx=if_absent, xx=if_present
            )
        return bool(stored)

    async def delete(self, key: str) -> bool:
        with self._command("key-value delete"):
            removed = await self._client.delete(self._key(key))
        return bool(removed)
