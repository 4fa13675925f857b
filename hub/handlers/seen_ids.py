"""The seen-id cache that refuses replayed envelopes, on the key-value store.

``seen(key, ttl)`` atomically answers "was this key recorded in the last
``ttl`` seconds?" and records it when not — one conditional write
(``if_absent``, Redis ``SET NX PX``) on the node's
:class:`~hub.cluster.kvstore.base.KeyValueStore`. In memory on a single node; in
Redis in a cluster, so an envelope replayed to another node is refused too.

A store that cannot answer (Redis down: ``BackplaneUnavailable``; the memory
store full: ``KeyValueStoreFull``, a subclass) means "cannot tell whether this
is a replay": the envelope is refused (``UNAVAILABLE`` / 503), never let
through.
"""

from __future__ import annotations

from hub.cluster.kvstore import KeyValueStore

PREFIX = "replay:"


class SeenIds:
    __slots__ = ("_store",)

    def __init__(self, store: KeyValueStore):
        self._store = store

    async def seen(self, key: str, ttl: float) -> bool:
        """True if ``key`` was recorded within its window; else record it for
        ``ttl`` seconds and return False. Of concurrent callers with one key
        (on any node), exactly one gets False."""
        return not await self._store.set(PREFIX + key, b"1", ttl, if_absent=True)

    async def forget(self, key: str) -> None:
        """Drop ``key``: the envelope it recorded was not carried out after all
        (its publish failed), so the sender may send it again."""
        await self._store.delete(PREFIX + key)

    async def aclose(self) -> None:
        """The store belongs to the node, which closes it."""
