"""Single-node stats: a dictionary with expiry times."""

from __future__ import annotations

import time
from collections.abc import Callable

from hub.cluster.kvstore.base import check_ttl


class MemoryNodeStats:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._documents: dict[str, tuple[bytes, float]] = {}

    async def put(self, node_id: str, document: bytes, ttl: float) -> None:
        check_ttl(ttl)
        self._documents[node_id] = (document, self._clock() + ttl)

    async def read_all(self) -> dict[str, bytes]:
        now = self._clock()
        for node_id in [n for n, (_, expires) in self._documents.items() if expires <= now]:
            del self._documents[node_id]
        return {node_id: document for node_id, (document, _) in self._documents.items()}

    async def remove(self, node_id: str) -> None:
        self._documents.pop(node_id, None)

    async def aclose(self) -> None:
        self._documents.clear()
