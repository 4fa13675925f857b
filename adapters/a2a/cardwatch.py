"""The remote agent's card, as an outbound bridge keeps it up to date.

:class:`CardWatch` reads the card at start and again: while it cannot be read
(the remote is down: after ``retry`` seconds, doubling up to ``retry_max``),
as soon as a call could not reach the remote (:meth:`CardWatch.want`), and
every ``refresh`` seconds otherwise. A card that changed is handed to
``on_change`` (the bridge registers its skills and name with the hub). The
last card read is kept while the remote is down: calls are still tried, and
fail fast, rather than refused on a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from adapters.a2a.remote import RemoteFailure
from protocol.a2a.card import RemoteCard

log = structlog.get_logger("adapters.a2a")


class CardWatch:
    def __init__(
        self,
        read: Callable[[], Awaitable[RemoteCard]],
        on_change: Callable[[RemoteCard], Awaitable[None]],
        *,
        retry: float,
        retry_max: float,
        refresh: float,
        name: str,
    ):
        self.card: RemoteCard | None = None
        #: Set whenever a card was read and handed on (tests wait on it).
        self.read = asyncio.Event()
        self._read = read
        self._on_change = on_change
        self._retry, self._retry_max, self._refresh = retry, retry_max, refresh
        self._name = name
        self._wanted = asyncio.Event()

    def want(self) -> None:
        """Read the card again now (a call could not reach the remote)."""
        self._wanted.set()

    async def run(self) -> None:
        delay = self._retry
        while True:
            try:
                card = await self._read()
            except RemoteFailure as exc:
                log.warning("a2a remote card not read", agent_id=self._name, reason=exc.reason)
                wait, delay = delay, min(delay * 2, self._retry_max)
            else:
                wait, delay = self._refresh, self._retry
                if card != self.card:
                    self.card = card
                    await self._on_change(card)
                self.read.set()
            self._wanted.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wanted.wait()
