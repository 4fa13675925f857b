"""Handing what arrives to whoever is reading: bounded, never blocking the reader.

Every :class:`Subscription` owns a bounded queue. The client's reader task
puts into it without waiting; when a subscription is full the **oldest**
item is dropped and counted (``Subscription.dropped``). Backpressure was the
alternative and was rejected: a reader that waited for a slow consumer would
also stop answering requests and heartbeats, and the hub would close the
connection as a slow consumer (4008) or dead (4408) — one slow loop would
take the whole agent down.

Items that arrive while no subscription wants them go to a *backlog* of the
same bound (oldest dropped). A new subscription first takes the backlog
items it matches, so ``await c.join("x")`` followed by ``async for e in
c.events("x")`` misses nothing that arrived in between.

Subscriptions are held weakly: one that is no longer referenced (the
``async for`` ended with ``break``) stops receiving.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, Literal, TypeVar

log = logging.getLogger("agora_client")

Kind = Literal["event", "members", "delta", "done", "cancel", "resumed"]
ALL_KINDS: frozenset[str] = frozenset({"event", "members", "delta", "done", "cancel", "resumed"})
EVENT_KINDS: frozenset[str] = frozenset({"event"})
STREAM_KINDS: frozenset[str] = frozenset({"delta", "done", "cancel"})

T = TypeVar("T")


class _Reset:
    """Put into subscriptions that asked for it when the connection was replaced."""

    def __repr__(self) -> str:
        return "RESET"


RESET = _Reset()


class Subscription(Generic[T]):
    """An async iterator over what the hub sends, filtered by space and kind.

    Use it as ``async for item in sub`` or ``item = await sub.get(timeout=…)``;
    ``close()`` (or ``async with``) ends it. Iteration stops when the client is
    closed, and raises :class:`~agora_client.errors.ConnectionClosed` when the
    connection is lost for good (no reconnect, or reconnect gave up).
    """

    def __init__(
        self, space: str | None, kinds: frozenset[str], maxsize: int, *, wants_reset: bool = False
    ):
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.space = space
        self.kinds = kinds
        self.maxsize = maxsize
        self.dropped = 0
        self.wants_reset = wants_reset
        self._queue: deque[Any] = deque()
        self._wakeup: asyncio.Event | None = None
        self._ended = False
        self._error: BaseException | None = None
        self._router: weakref.ref[Router] | None = None

    def matches(self, space: str, kind: str) -> bool:
        return kind in self.kinds and (self.space is None or self.space == space)

    def __len__(self) -> int:
        return len(self._queue)

    # ── producer side (the client's reader) ─────────────────────────────

    def put(self, item: Any) -> None:
        if self._ended:
            return
        if len(self._queue) >= self.maxsize:
            self._queue.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "subscription full (%d): dropped %d item(s) so far; read faster or "
                    "raise queue_size",
                    self.maxsize,
                    self.dropped,
                )
        self._queue.append(item)
        if self._wakeup is not None:
            self._wakeup.set()

    def end(self, error: BaseException | None = None) -> None:
        """No more items: iteration ends (or raises ``error``) once the queue is drained."""
        if self._ended:
            return
        self._ended = True
        self._error = error
        if self._wakeup is not None:
            self._wakeup.set()

    # ── consumer side ───────────────────────────────────────────────────

    async def get(self, timeout: float | None = None) -> T:
        """The next item; ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            return await self._next()

    async def _next(self) -> T:
        while not self._queue:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            if self._wakeup is None:
                self._wakeup = asyncio.Event()
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._queue.popleft()  # type: ignore[no-any-return]

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> T:
        return await self._next()

    def close(self) -> None:
        """Stop receiving; what is queued can still be read."""
        router = self._router() if self._router is not None else None
        if router is not None:
            router.remove(self)
        self.end()

    async def __aenter__(self) -> Subscription[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Router:
    """The client's table of subscriptions, plus the backlog."""

    def __init__(self, backlog_size: int):
        self._subs: weakref.WeakSet[Subscription[Any]] = weakref.WeakSet()
        self._backlog: deque[tuple[str, str, Any]] = deque(maxlen=backlog_size)
        self._ended = False
        self._error: BaseException | None = None

    def subscribe(self, sub: Subscription[Any]) -> None:
        sub._router = weakref.ref(self)
        if self._ended:
            sub.end(self._error)
            return
        if self._backlog:
            keep: list[tuple[str, str, Any]] = []
            for entry in self._backlog:
                space, kind, item = entry
                if sub.matches(space, kind):
                    sub.put(item)
                else:
                    keep.append(entry)
            self._backlog.clear()
            self._backlog.extend(keep)
        self._subs.add(sub)

    def remove(self, sub: Subscription[Any]) -> None:
        self._subs.discard(sub)

    def dispatch(self, space: str, kind: str, item: Any) -> None:
        taken = False
        for sub in list(self._subs):
            if sub.matches(space, kind):
                sub.put(item)
                taken = True
        if not taken:
            self._backlog.append((space, kind, item))

    def reset(self) -> None:
        """The connection was replaced: tell the subscriptions that asked."""
        for sub in list(self._subs):
            if sub.wants_reset:
                sub.put(RESET)

    def end(self, error: BaseException | None = None) -> None:
        """End every subscription, now and future ones."""
        self._ended = True
        self._error = error
        for sub in list(self._subs):
            sub.end(error)
        self._subs = weakref.WeakSet()

    def backlog(self) -> Iterable[tuple[str, str, Any]]:
        return tuple(self._backlog)
