"""The cluster's replay cache: one Redis key per seen id.

Layout (``P`` is the key prefix, default ``agora``)::

    P:replay:{key}   STRING "1", expiring after the id's window (PX)

``SET … NX PX`` is one atomic command, so of two nodes that receive the same
envelope at once exactly one records it; the other sees it as a replay.
Redis expires the keys itself, so memory is bounded by the ids seen in one
window. A failed command raises :class:`BackplaneUnavailable` and the
caller refuses the envelope: an unknown answer is never taken as "new".
"""

from __future__ import annotations

import math

from redis.asyncio import Redis

from hub.backplane.redis import REDIS_ERRORS, redis_pool, unavailable
from hub.replay.base import check_ttl


class RedisReplayCache:
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agora",
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int = 16,
    ):
        self._prefix = f"{prefix}:replay:"
        self._client = Redis.from_pool(
            redis_pool(
                url,
                socket_timeout=socket_timeout,
                connect_timeout=connect_timeout,
                max_connections=max_connections,
            )
        )
        self._closed = False

    async def seen(self, key: str, ttl: float) -> bool:
        check_ttl(ttl)
        if self._closed:
            raise unavailable("replay check", RuntimeError("cache is closed"))
        px = max(1, math.ceil(ttl * 1000))
        try:
            created = await self._client.set(self._prefix + key, b"1", nx=True, px=px)
        except REDIS_ERRORS as exc:
            raise unavailable("replay check", exc) from exc
        return not created

    async def forget(self, key: str) -> None:
        if self._closed:
            raise unavailable("replay forget", RuntimeError("cache is closed"))
        try:
            await self._client.delete(self._prefix + key)
        except REDIS_ERRORS as exc:
            raise unavailable("replay forget", exc) from exc

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._client.aclose()
