"""Idempotent publish: a retry with the same key is answered, not published again.

A ``space.publish`` may carry ``idempotency_key``. The key is scoped to the
publishing agent and the space; for ``history_ttl`` seconds after the first
publish with it, another publish with the same key is not carried out and is
answered with the first one's ``event_id``, ``seq`` and ``timestamp``
(``space.published`` with ``duplicate: true``). A retry whose data differs
from the original's is refused (``INVALID_REQUEST``): the key was reused for
something else.

The check and the publish are one atomic step of the backplane — one
function call in memory, one script in Redis — so two retries racing on two
nodes publish exactly once. This module holds what both share: how a key is
scoped, the digest that tells a true retry from a reused key, and the
in-memory store.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import orjson

from hub.cluster.backplane.base import Duplicate, Once

# Most keys the in-memory store holds; beyond it the oldest are forgotten early.
MAX_REMEMBERED = 100_000


def once(agent_id: str, key: str, event_id: str, timestamp: int, sent: Any) -> Once:
    """The :class:`Once` of a publish; ``sent`` is what makes it this publish
    (its data and recipients)."""
    # A newline cannot occur in an agent id, so the scope is unambiguous.
    return Once(f"{agent_id}\n{key}", event_id, timestamp, digest(sent))


def digest(sent: Any) -> str:
    encoded = orjson.dumps(sent, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(encoded, digest_size=8).hexdigest()


def redis_key(prefix: str, space: str, key: str) -> str:
    """A short Redis key for a scoped idempotency key, whatever its length."""
    return f"{prefix}:once:{space}:{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}"


def receipt(once: Once) -> bytes:
    """What Redis stores after the seq: ``"{timestamp} {digest} {event_id}"``."""
    return f"{once.timestamp} {once.digest} {once.event_id}".encode()


class OnceCache:
    """The in-memory backplane's keys: bounded, each forgotten after ``ttl``."""

    def __init__(
        self,
        ttl: float,
        max_entries: int = MAX_REMEMBERED,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        # Insertion order is expiry order: every entry lives ``ttl``.
        self._entries: dict[tuple[str, str], tuple[float, Duplicate]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, space: str, key: str) -> Duplicate | None:
        self._expire()
        found = self._entries.get((space, key))
        return found[1] if found is not None else None

    def put(self, space: str, key: str, seq: int, once: Once) -> None:
        entries = self._entries
        entries.pop((space, key), None)
        entries[(space, key)] = (
            self._clock() + self.ttl,
            Duplicate(seq, once.event_id, once.timestamp, once.digest),
        )
        while len(entries) > self.max_entries:
            del entries[next(iter(entries))]

    def _expire(self) -> None:
        entries = self._entries
        now = self._clock()
        while entries:
            first = next(iter(entries))
            if entries[first][0] > now:
                return
            del entries[first]
