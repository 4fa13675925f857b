"""MCP sessions (the ``initialize`` handshake revisions), kept cluster-wide.

``initialize`` opens a session under an unguessable id (``Mcp-Session-Id``)
that records the caller and the negotiated revision; behind a load balancer
the next request may reach any node, so the session lives in the cluster's
key-value store. Expiry slides: a request more than halfway through the
session's time to live extends it. ``DELETE /mcp`` ends it everywhere.

Bounded per node: a node counts the sessions it opened that have not expired
or been ended through it (one ended through another node is counted until
it would have expired) and refuses more than ``max_open``, and more than
``share`` of them to one caller (:class:`~adapters.kit.shares.ShareExceeded`).
"""

from __future__ import annotations

import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from adapters.kit.shares import ShareExceeded
from adapters.kit.stored import json_object
from hub.adapter_host import KeyValueStore

PREFIX = "mcp:session:"


@dataclass(frozen=True, slots=True)
class McpSession:
    id: str
    caller: str
    revision: str
    expires: float


class Sessions:
    def __init__(
        self,
        store: KeyValueStore,
        ttl: float,
        max_open: int,
        *,
        share: float = 1.0,
        clock: Callable[[], float] = time.time,
    ):
        if not ttl > 0:
            raise ValueError("the session TTL must be positive")
        self.store = store
        self.ttl = ttl
        self.max_open = max_open
        self.per_caller = max(1, int(max_open * share))
        self._clock = clock
        self._opened: dict[str, tuple[float, str]] = {}  # id -> latest expiry, caller's key
        self._per_key: Counter[str] = Counter()

    @property
    def open_here(self) -> int:
        return len(self._opened)

    async def open(
        self, caller: str, revision: str, *, key: str | None = None
    ) -> McpSession | None:
        """A new session, or ``None`` when this node has ``max_open`` already;
        :class:`ShareExceeded` when the caller (``key``, else its id) holds
        its share of them."""
        now = self._clock()
        key = key or caller
        if len(self._opened) >= self.max_open or self._per_key[key] >= self.per_caller:
            self._prune(now)
            if len(self._opened) >= self.max_open:
                return None
            if self._per_key[key] >= self.per_caller:
                raise ShareExceeded("MCP sessions", self.per_caller)
        while True:  # 192 random bits do not collide; never overwrite anyway
            session = McpSession(secrets.token_urlsafe(24), caller, revision, now + self.ttl)
            if await self._save(session, if_absent=True):
                self._opened[session.id] = (session.expires, key)
                self._per_key[key] += 1
                return session

    async def find(self, session_id: str) -> McpSession | None:
        """The live session ``session_id`` (its expiry extended when due)."""
        if not 0 < len(session_id) <= 64 or not session_id.isascii():
            return None
        raw = await self.store.get(PREFIX + session_id)
        session = _load(session_id, raw)
        if session is None:
            return None
        now = self._clock()
        if session.expires - now < self.ttl / 2:
            extended = McpSession(session.id, session.caller, session.revision, now + self.ttl)
            if await self._save(extended, if_present=True):
                opened = self._opened.get(session.id)
                if opened is not None:
                    self._opened[session.id] = (extended.expires, opened[1])
                return extended
            return None  # ended meanwhile
        return session

    async def end(self, session_id: str) -> bool:
        """End the session; whether it was live."""
        self._forget(session_id)
        if not 0 < len(session_id) <= 64:
            return False
        return await self.store.delete(PREFIX + session_id)

    async def _save(self, session: McpSession, **condition: bool) -> bool:
        value = orjson.dumps(
            {"caller": session.caller, "revision": session.revision, "expires": session.expires}
        )
        keep = max(session.expires - self._clock(), 1.0)
        return await self.store.set(PREFIX + session.id, value, keep, **condition)

    def _prune(self, now: float) -> None:
        for session_id in [s for s, (expires, _) in self._opened.items() if expires <= now]:
            self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        opened = self._opened.pop(session_id, None)
        if opened is not None:
            key = opened[1]
            self._per_key[key] -= 1
            if self._per_key[key] <= 0:
                del self._per_key[key]


def _load(session_id: str, raw: bytes | None) -> McpSession | None:
    value = json_object(raw)
    if value is None:
        return None
    caller, revision, expires = value.get("caller"), value.get("revision"), value.get("expires")
    if not (isinstance(caller, str) and isinstance(revision, str)):
        return None
    if isinstance(expires, bool) or not isinstance(expires, int | float):
        return None
    return McpSession(session_id, caller, revision, float(expires))
