"""How space messages travel between nodes.

:class:`~hub.cluster.backplane.base.Backplane` is the interface; in memory (one
node, the default) or on the node's Redis connection (a cluster), chosen by
:func:`create_backplane`.
"""

from __future__ import annotations

from hub.cluster.backplane.base import (
    Backplane,
    Broker,
    Channels,
    Delivery,
    DeliveryHandler,
    Draft,
    Duplicate,
    History,
    Once,
    Position,
    SpaceHistory,
    StreamOp,
)
from hub.cluster.backplane.memory import MemoryBackplane
from hub.cluster.redis_connection import RedisConnection

__all__ = [
    "Backplane",
    "Broker",
    "Channels",
    "Delivery",
    "DeliveryHandler",
    "Draft",
    "Duplicate",
    "History",
    "MemoryBackplane",
    "Once",
    "Position",
    "SpaceHistory",
    "StreamOp",
    "create_backplane",
]


def create_backplane(
    redis: RedisConnection | None,
    *,
    prefix: str = "agora",
    node_id: str = "",
    history_size: int = 1000,
    history_ttl: float = 300.0,
) -> Backplane:
    """In memory without a Redis connection, on it otherwise."""
    if redis is None:
        return MemoryBackplane(history_size=history_size, history_ttl=history_ttl)
    from hub.cluster.backplane.redis import RedisBackplane

    return RedisBackplane(
        redis,
        prefix=prefix,
        node_id=node_id,
        history_size=history_size,
        history_ttl=history_ttl,
    )
