"""Who is connected and who is in which space, cluster-wide.

:class:`~hub.cluster.presence.base.Presence` is the interface; the in-memory one
serves a single node, the Redis one a cluster (chosen from ``redis_url``).
"""

from __future__ import annotations

from hub.cluster.presence.base import (
    AgentClaims,
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    Directory,
    InvalidQuery,
    Memberships,
    MembersPage,
    NodeLiveness,
    Presence,
    ReapedAgent,
)
from hub.cluster.presence.memory import MemoryPresence
from hub.cluster.redis_connection import RedisConnection

__all__ = [
    "AgentClaims",
    "AgentRecord",
    "AgentsPage",
    "CapabilityFilter",
    "Directory",
    "InvalidQuery",
    "MembersPage",
    "Memberships",
    "MemoryPresence",
    "NodeLiveness",
    "Presence",
    "ReapedAgent",
    "create_presence",
]


def create_presence(
    redis: RedisConnection | None, *, prefix: str = "agora", node_id: str = "", ttl: float = 60.0
) -> Presence:
    """In memory without a Redis connection, on it otherwise."""
    if redis is None:
        return MemoryPresence()
    from hub.cluster.presence.redis import RedisPresence

    return RedisPresence(redis, prefix=prefix, node_id=node_id, ttl=ttl)
