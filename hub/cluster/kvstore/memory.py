"""The key-value store of a single node: a dict of values and expiries."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from hub.cluster.kvstore.base import KeyValueStoreFull, check_condition, check_ttl


class MemoryKeyValueStore:
    """Bounded: expired keys are evicted on every write, and when ``max_entries``
    live keys are held a new key raises :class:`KeyValueStoreFull` rather than
    forgetting a live one."""

    def __init__(self, *, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic):
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._clock = clock
        self._items: dict[str, tuple[bytes, float]] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        self._evict(self._clock())
        return len(self._items)

    def _evict(self, now: float) -> None:
        heap, items = self._heap, self._items
        while heap and heap[0][0] <= now:
            expiry, key = heapq.heappop(heap)
            item = items.get(key)
            if item is not None and item[1] == expiry:
                del items[key]

    def _live(self, key: str, now: float) -> tuple[bytes, float] | None:
        item = self._items.get(key)
        if item is None or item[1] <= now:
            return None
        return item

    async def get(self, key: str) -> bytes | None:
        item = self._live(key, self._clock())
        return None if item is None else item[0]

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
        now = self._clock()
        self._evict(now)
        exists = self._live(key, now) is not None
        if (if_absent and exists) or (if_present and not exists):
            return False
        if not exists and len(self._items) >= self.max_entries:
            raise KeyValueStoreFull(self.max_entries)
        expiry = now + ttl
        self._items[key] = (bytes(value), expiry)
        heapq.heappush(self._heap, (expiry, key))
        # Keys rewritten many times leave stale heap entries; rebuild when they dominate.
        if len(self._heap) > 2 * len(self._items) + 64:
            self._heap = [(exp, k) for k, (_, exp) in self._items.items()]
            heapq.heapify(self._heap)
        return True

    async def delete(self, key: str) -> bool:
        existed = self._live(key, self._clock()) is not None
        self._items.pop(key, None)
        return existed

    async def aclose(self) -> None:
        self._items.clear()
        self._heap.clear()
