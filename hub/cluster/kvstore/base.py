"""The key-value store interface: small cluster-wide state with expiry.

Adapters keep short-lived shared state here — HTTP Agora conversations, which a
follow-up may reach through any node behind the load balancer. Values are
opaque bytes; every key expires (there is no "forever": whatever a bridge
stores must clean itself up).

Exception tree (under :class:`hub.errors.HubError`)::

    BackplaneUnavailable   Redis could not answer: nothing was read or written
    └── KeyValueStoreFull  the memory store holds max_entries live keys

Both mean "could not be done now"; the caller answers with a transient failure
(HTTP 503), never with a guess.
"""

from __future__ import annotations

import math
from typing import Protocol

from hub.errors import BackplaneUnavailable


class KeyValueStoreFull(BackplaneUnavailable):
    """The memory store is full of keys that have not expired yet."""

    def __init__(self, max_entries: int):
        super().__init__(f"key-value store is full ({max_entries} live keys): try again later")
        self.max_entries = max_entries


class KeyValueStore(Protocol):
    """Keys with values and a time to live, shared by the nodes that share a backplane."""

    async def get(self, key: str) -> bytes | None:
        """The value, or ``None`` when the key is absent or expired."""
        ...

    async def set(
        self,
        key: str,
        value: bytes,
        ttl: float,
        *,
        if_absent: bool = False,
        if_present: bool = False,
    ) -> bool:
        """Store ``value`` for ``ttl`` seconds (replacing value and expiry).

        ``if_absent`` / ``if_present`` make it conditional, atomically (Redis
        ``NX`` / ``XX``); returns whether it was stored.
        """
        ...

    async def delete(self, key: str) -> bool:
        """Remove the key; returns whether it existed (and had not expired)."""
        ...

    async def aclose(self) -> None: ...


def check_ttl(ttl: float) -> None:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise ValueError(f"ttl must be a number of seconds, not {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")


def check_condition(if_absent: bool, if_present: bool) -> None:
    if if_absent and if_present:
        raise ValueError("if_absent and if_present exclude each other")
