"""Single-node backplane: sequencing, history and delivery are a function call.

Each space has a log: its epoch (random, made when the log is made, so a
restarted process has new epochs), its last seq, and a ring of its last
``history_size`` messages, emptied ``history_ttl`` seconds after the last
publish. A space whose last member left keeps its log (a member that lost its
connection can still resume) until it has been empty for ``history_ttl``;
then the log is dropped, and a space of that name made later starts with a
new epoch — so a (space, epoch) pair never reuses a seq.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable

from hub.cluster.backplane.base import (
    Delivery,
    DeliveryHandler,
    Draft,
    History,
    Position,
    complete_streams,
)
from hub.cluster.backplane.idempotency import OnceCache
from protocol.codec import complete


def new_epoch() -> str:
    return secrets.token_hex(6)


class SpaceLog:
    """One space's epoch, seq and recent messages."""

    __slots__ = ("epoch", "events", "last_publish", "seq")

    def __init__(self, size: int, now: float):
        self.epoch = new_epoch()
        self.seq = 0
        self.events: deque[Delivery] = deque(maxlen=size)
        self.last_publish = now

    def trimmed(self, now: float, ttl: float) -> deque[Delivery]:
        if self.events and now - self.last_publish > ttl:
            self.events.clear()
        return self.events


class MemoryBackplane:
    """The default backplane of a single node; always ready."""

    def __init__(
        self,
        *,
        history_size: int = 1000,
        history_ttl: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler: DeliveryHandler | None = None
        self._subscribed: set[str] = set()
        self._size = history_size
        self._ttl = history_ttl
        self._clock = clock
        self._logs: dict[str, SpaceLog] = {}
        # Spaces without members, by when they emptied (oldest first).
        self._empty: dict[str, float] = {}
        self._once = OnceCache(history_ttl, clock=clock)

    @property
    def ready(self) -> bool:
        return self._handler is not None

    @property
    def lag(self) -> float:
        return 0.0

    async def start(self, handler: DeliveryHandler) -> None:
        self._handler = handler
        handler.backplane_ready(True)

    async def aclose(self) -> None:
        self._handler = None

    async def subscribe(self, space: str) -> None:
        self._subscribed.add(space)
        emptied = self._empty.pop(space, None)
        if emptied is not None and self._clock() - emptied > self._ttl:
            # Empty past history_ttl (no other space's emptying swept it yet):
            # it starts afresh, under a new epoch.
            self._logs.pop(space, None)

    async def unsubscribe(self, space: str) -> None:
        self._subscribed.discard(space)

    @property
    def backlog(self) -> int:
        return 0

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(self._publish(space, draft))
        return future

    async def publish(self, space: str, draft: Draft) -> int:
        return self._publish(space, draft)

    def _log(self, space: str, now: float) -> SpaceLog:
        log = self._logs.get(space)
        if log is None:
            log = self._logs[space] = SpaceLog(self._size, now)
        return log

    def _publish(self, space: str, draft: Draft) -> int:
        once = draft.once
        if once is not None and not once.settle:
            duplicate = self._once.get(space, once.key)
            if duplicate is not None:
                return duplicate
        now = self._clock()
        log = self._log(space, now)
        if self._empty:
            self._empty.pop(space, None)
        seq = log.seq = log.seq + 1
        env = Delivery(
            space,
            complete(draft.head, seq, draft.tail),
            seq,
            draft.exclude,
            draft.stream,
            draft.op,
            draft.to,
        )
        if self._size:
            log.trimmed(now, self._ttl).append(env)
        log.last_publish = now
        if once is not None:
            self._once.put(space, once.key, seq, once)
        if self._handler is not None and space in self._subscribed:
            self._handler.deliver(env)
        return seq

    async def send(self, message: Delivery) -> int:
        if self._handler is not None and message.space in self._subscribed:
            self._handler.deliver(message)
            return 1
        return 0

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        # One node: a message to "another node" has nowhere to go.
        return 0

    async def forget(self, space: str) -> None:
        now = self._clock()
        self._empty.pop(space, None)
        self._empty[space] = now
        self._drop_abandoned(now)

    def _drop_abandoned(self, now: float) -> None:
        empty = self._empty
        while empty:
            space = next(iter(empty))
            if now - empty[space] <= self._ttl:
                return
            del empty[space]
            if space not in self._subscribed:
                self._logs.pop(space, None)

    # ── history ─────────────────────────────────────────────────────────

    def delivered(self, space: str) -> int:
        # A publish is delivered before it returns.
        log = self._logs.get(space)
        return log.seq if log is not None else 0

    async def position(self, space: str) -> Position:
        log = self._log(space, self._clock())
        return Position(log.epoch, log.seq)

    async def history(
        self,
        space: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int,
        streams: bool = False,
    ) -> History:
        now = self._clock()
        self._drop_abandoned(now)
        log = self._log(space, now)
        events = log.trimmed(now, self._ttl)
        oldest = events[0].seq if events else None
        found: list[Delivery]
        if after is not None:
            window = [e for e in events if e.seq is not None and e.seq > after]
            found = window[:limit]
            done = complete_streams(window) if streams else frozenset()
            return History(log.epoch, log.seq, found, oldest, done)
        if before is not None:
            found = [e for e in events if e.seq is not None and e.seq < before][-limit:]
        else:
            found = list(events)[-limit:]
        return History(log.epoch, log.seq, found, oldest)
