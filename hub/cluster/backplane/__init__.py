"""How space messages travel between nodes.

:class:`~hub.cluster.backplane.base.Backplane` is the interface; ``memory://`` (one
node, the default) and ``redis://`` implementations are chosen from
``redis_url`` by :func:`create_backplane`.
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
    redis_url: str | None,
    *,
    prefix: str = "agora",
    node_id: str = "",
    history_size: int = 1000,
    history_ttl: float = 300.0,
) -> Backplane:
    if not redis_url or redis_url.startswith("memory://"):
        return MemoryBackplane(history_size=history_size, history_ttl=history_ttl)
    from hub.cluster.backplane.redis import RedisBackplane

    return RedisBackplane(
        redis_url,
        prefix=prefix,
        node_id=node_id,
        history_size=history_size,
        history_ttl=history_ttl,
    )
