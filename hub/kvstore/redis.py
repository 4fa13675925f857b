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

from redis.asyncio import Redis

from hub.backplane.redis import REDIS_ERRORS, redis_pool, unavailable
from hub.kvstore.base import check_condition, check_ttl


class RedisKeyValueStore:
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agora",
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int = 8,
    ):
        self._prefix = f"{prefix}:kv:"
        self._client = Redis.from_pool(
            redis_pool(
                url,
                socket_timeout=socket_timeout,
                connect_timeout=connect_timeout,
                max_connections=max_connections,
            )
        )
        self._closed = False

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise unavailable(what, RuntimeError("store is closed"))

    async def get(self, key: str) -> bytes | None:
        self._check_open("key-value get")
        try:
            value = await self._client.get(self._prefix + key)
        except REDIS_ERRORS as exc:
            raise unavailable("key-value get", exc) from exc
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
        self._check_open("key-value set")
        px = max(1, math.ceil(ttl * 1000))
        try:
            stored = await self._client.set(
                self._prefix + key, value, px=px, nx=if_absent, xx=if_present
            )
        except REDIS_ERRORS as exc:
            raise unavailable("key-value set", exc) from exc
        return bool(stored)

    async def delete(self, key: str) -> bool:
        self._check_open("key-value delete")
        try:
            removed = await self._client.delete(self._prefix + key)
        except REDIS_ERRORS as exc:
            raise unavailable("key-value delete", exc) from exc
        return bool(removed)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._client.aclose()
