"""Where the nodes of a cluster publish their figures for operators.

:class:`~hub.cluster.nodestats.base.NodeStatsStore` is the interface: each node
``put``\\ s a small document about itself every few seconds, with a time to
live; ``read_all`` returns every live node's latest one. It feeds ``GET
/api/nodes`` and the status page. :class:`MemoryNodeStats` serves one node,
:class:`~hub.cluster.nodestats.redis.RedisNodeStats` a cluster (chosen from
``redis_url``, like the backplane).
"""

from __future__ import annotations

from hub.cluster.nodestats.base import NodeStatsStore
from hub.cluster.nodestats.memory import MemoryNodeStats
from hub.cluster.redis_connection import RedisConnection

__all__ = ["MemoryNodeStats", "NodeStatsStore", "create_node_stats"]


def create_node_stats(redis: RedisConnection | None, *, prefix: str = "agora") -> NodeStatsStore:
    """In memory without a Redis connection, on it otherwise."""
    if redis is None:
        return MemoryNodeStats()
    from hub.cluster.nodestats.redis import RedisNodeStats

    return RedisNodeStats(redis, prefix=prefix)
