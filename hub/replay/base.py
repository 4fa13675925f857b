"""The replay-cache interface and its exceptions.

Exception tree (under :class:`hub.errors.HubError`)::

    BackplaneUnavailable   Redis could not answer: nothing was recorded
    └── ReplayCacheFull    the memory cache holds max_entries live ids

Both mean "cannot tell whether this is a replay", so the envelope must be
refused (``UNAVAILABLE`` / 503), never let through.
"""

from __future__ import annotations

import math
from typing import Protocol

from hub.errors import BackplaneUnavailable


class ReplayCacheFull(BackplaneUnavailable):
    """The cache is full of ids still inside their window."""

    def __init__(self, max_entries: int):
        super().__init__(f"replay cache is full ({max_entries} live ids): try again later")
        self.max_entries = max_entries


class ReplayCache(Protocol):
    """A cluster-wide (or node-wide) set of recently seen keys."""

    async def seen(self, key: str, ttl: float) -> bool:
        """True if ``key`` was recorded within the last ``ttl`` seconds; else
        record it for ``ttl`` seconds and return False. Atomic: of concurrent
        callers with one key, exactly one gets False."""
        ...

    async def forget(self, key: str) -> None:
        """Drop ``key``: the envelope it recorded was not carried out after
        all (its publish failed), so the sender may send it again."""
        ...

    async def aclose(self) -> None: ...


def check_ttl(ttl: float) -> None:
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise ValueError(f"ttl must be a number of seconds, not {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"ttl must be a positive number of seconds, not {ttl!r}")
