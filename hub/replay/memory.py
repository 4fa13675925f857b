"""The replay cache of a single node: a dict of expiries and a heap to evict them."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from hub.replay.base import ReplayCacheFull, check_ttl


class MemoryReplayCache:
    """Bounded: expired keys are evicted on every call, and when
    ``max_entries`` live keys are held a new key raises
    :class:`ReplayCacheFull` rather than forgetting one (forgetting a live
    id would let its replay through)."""

    def __init__(self, *, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _evict(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            expiry, key = heapq.heappop(heap)
            if self._expiry.get(key) == expiry:
                del self._expiry[key]

    async def seen(self, key: str, ttl: float) -> bool:
        check_ttl(ttl)
        now = self._clock()
        self._evict(now)
        if key in self._expiry:
            return True
        if len(self._expiry) >= self.max_entries:
            raise ReplayCacheFull(self.max_entries)
        expiry = now + ttl
        self._expiry[key] = expiry
        heapq.heappush(self._heap, (expiry, key))
        return False

    async def forget(self, key: str) -> None:
        # Its heap entry stays behind and is skipped when it comes up.
        self._expiry.pop(key, None)

    async def aclose(self) -> None:
        self._expiry.clear()
        self._heap.clear()
