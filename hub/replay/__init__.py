"""Seen-id caches that refuse replayed envelopes.

:class:`~hub.replay.base.ReplayCache` is the interface: ``seen(key, ttl)``
atomically answers "was this key recorded in the last ``ttl`` seconds?" and
records it when not. :class:`MemoryReplayCache` serves one node,
:class:`~hub.replay.redis.RedisReplayCache` a cluster, so an envelope
replayed to another node is refused too (chosen from ``redis_url``, like
the backplane).
"""

from __future__ import annotations

from hub.replay.base import ReplayCache, ReplayCacheFull, check_ttl
from hub.replay.memory import MemoryReplayCache

__all__ = [
    "MemoryReplayCache",
    "ReplayCache",
    "ReplayCacheFull",
    "check_ttl",
    "create_replay_cache",
]


def create_replay_cache(
    redis_url: str | None, *, prefix: str = "agora", max_entries: int = 100_000
) -> ReplayCache:
    if not redis_url or redis_url.startswith("memory://"):
        return MemoryReplayCache(max_entries=max_entries)
    from hub.replay.redis import RedisReplayCache

    return RedisReplayCache(redis_url, prefix=prefix)
