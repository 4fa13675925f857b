"""The node-stats interface: one small document per live node.

A node's document is opaque bytes (the node writes JSON) and lives for the
``ttl`` it was written with: a node that stops writing — it died, or lost
Redis — drops out of :meth:`NodeStatsStore.read_all` once that has passed,
without anyone cleaning up after it. A failed Redis command raises
:class:`~hub.errors.BackplaneUnavailable`.
"""

from __future__ import annotations

from typing import Protocol


class NodeStatsStore(Protocol):
    async def put(self, node_id: str, document: bytes, ttl: float) -> None:
        """Store ``node_id``'s latest document, live for ``ttl`` seconds."""
        ...

    async def read_all(self) -> dict[str, bytes]:
        """Every live node's latest document, by node id."""
        ...

    async def remove(self, node_id: str) -> None:
        """The node is leaving: drop its document now."""
        ...

    async def aclose(self) -> None: ...
