"""Where a node's subscribed spaces stand, and the check a reconnect runs.

Per subscribed space the node keeps the highest seq acknowledged to one of
its publishers (or read at a join), the last seq delivered, and the epoch its
members are on. After every reconnect of the pub/sub link, before anything
is subscribed again, :meth:`SpacePositions.resync` runs the raise script
(:data:`~hub.cluster.backplane.redis_scripts.RAISE_SEQ_LUA`) for each of
them: a seq that Redis has lost (restarted empty, came back behind, or
failed over to a replica that was behind) is raised to the highest the node
has seen, so seqs never go backwards for its members; and the script answers
each space's epoch. Where a replica may have been promoted (Sentinel,
Cluster) an epoch that is no longer the one the members are on means what
they were owed may be gone: those spaces are returned, and the node makes
their members resume (``DeliveryHandler.lost``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hub.cluster.backplane.redis_scripts import SpaceKeys
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import run_scripts

# Spaces whose seqs one raise script takes on one Redis (a cluster: one each,
# a script touches one slot); raise scripts per pipeline.
RAISE_CHUNK = 500
PIPELINE = 256


class SpacePositions:
    """Floors, delivered seqs and epochs of the subscribed spaces."""

    def __init__(
        self,
        redis: RedisConnection,
        keys: SpaceKeys,
        raise_script: Any,
        *,
        seq_ttl: int,
        candidate: Callable[[], str],
    ):
        self._redis = redis
        self._keys = keys
        self._raise_script = raise_script
        self._seq_ttl = seq_ttl
        self._candidate = candidate
        self.floors: dict[str, int] = {}
        #: The last seq delivered per space (the pump writes it directly).
        self.delivered: dict[str, int] = {}
        self.epochs: dict[str, str] = {}

    def forget(self, space: str) -> None:
        self.floors.pop(space, None)
        self.delivered.pop(space, None)
        self.epochs.pop(space, None)

    def raise_floor(self, space: str, seq: int) -> None:
        if seq > self.floors.get(space, 0):
            self.floors[space] = seq

    async def resync(self, wanted: set[str]) -> list[str]:
        """Raise the seq of every ``wanted`` space this node knows to at least
        what it has seen; the spaces whose epoch changed under their members."""
        highest = dict(self.floors)
        for space, seq in self.delivered.items():
            if seq > highest.get(space, 0):
                highest[space] = seq
        for space in self.epochs:
            highest.setdefault(space, 0)
        floors = [(s, n) for s, n in highest.items() if s in wanted]
        size = 1 if self._redis.clustered else RAISE_CHUNK
        chunks = [floors[i : i + size] for i in range(0, len(floors), size)]
        lost: list[str] = []
        for i in range(0, len(chunks), PIPELINE):
            batch = chunks[i : i + PIPELINE]
            calls = []
            for chunk in batch:
                keys = []
                for s, _ in chunk:
                    keys += self._keys.position(s)
                calls.append((keys, [self._seq_ttl, self._candidate(), *(n for _, n in chunk)]))
            results = await run_scripts(self._redis.client, self._raise_script, calls)
            for chunk, epochs in zip(batch, results, strict=True):
                if isinstance(epochs, BaseException):
                    raise epochs
                for (space, _), epoch in zip(chunk, epochs, strict=True):
                    if self._changed(space, epoch):
                        lost.append(space)
        return lost

    def _changed(self, space: str, epoch: bytes | str) -> bool:
        epoch = epoch.decode() if isinstance(epoch, bytes) else epoch
        known = self.epochs.get(space)
        self.epochs[space] = epoch
        # On one Redis members that stayed connected through a restart carry
        # on (their node's seq floors and gap fills cover them); where a
        # replica was promoted, what the old master acknowledged may never
        # have reached anyone, so they resume and are told.
        return self._redis.failover and known is not None and known != epoch
