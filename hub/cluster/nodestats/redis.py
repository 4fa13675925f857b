"""The cluster's node stats: one hash of documents, one sorted set of expiries.

Layout (``P`` is the key prefix, default ``agora``)::

    P:nodestats          HASH  node id → its latest document
    P:nodestats:expiry   ZSET  node id, scored by when its document expires (ms)

Both steps of a write, and a read with the removal of expired documents, are
one script each, timed by the Redis server's own clock (``TIME``), so the
nodes' clocks need not agree. Both keys expire with the longest-lived
document, so a cluster that is gone leaves nothing behind. A failed command raises
:class:`~hub.errors.BackplaneUnavailable`.
"""

from __future__ import annotations

import math

from hub.cluster.kvstore.base import check_ttl
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import RedisStore, tagged

# KEYS: hash, zset. ARGV: node id, document, ttl (ms).
PUT_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
-- The keys outlive the longest-lived document (never cut another node's short).
for _, key in ipairs(KEYS) do
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
return 1
"""

# KEYS: hash, zset. Drops expired documents, returns the rest (HGETALL).
READ_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, node in ipairs(dead) do
  redis.call('HDEL', KEYS[1], node)
  redis.call('ZREM', KEYS[2], node)
end
return redis.call('HGETALL', KEYS[1])
"""


class RedisNodeStats(RedisStore):
    """On the node's :class:`~hub.cluster.redis_connection.RedisConnection`;
    on a Redis Cluster both keys carry the hash tag ``{P}`` (one slot)."""

    def __init__(self, redis: RedisConnection, *, prefix: str = "agora"):
        super().__init__(redis, prefix=prefix)
        p = tagged(prefix, redis.clustered)
        self._keys = [f"{p}:nodestats", f"{p}:nodestats:expiry"]
        self._put = self._client.register_script(PUT_LUA)
        self._read = self._client.register_script(READ_LUA)

    async def put(self, node_id: str, document: bytes, ttl: float) -> None:
        check_ttl(ttl)
        px = max(1, math.ceil(ttl * 1000))
        await self._call("node stats put", self._put, self._keys, [node_id, document, px])

    async def read_all(self) -> dict[str, bytes]:
        flat = await self._call("node stats read", self._read, self._keys, [])
        return {bytes(flat[i]).decode(): bytes(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def remove(self, node_id: str) -> None:
        with self._command("node stats remove"):
            pipe = self._client.pipeline(transaction=True)
            pipe.hdel(self._keys[0], node_id)
            pipe.zrem(self._keys[1], node_id)
            await pipe.execute()
