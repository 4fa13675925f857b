"""Receiving streams: putting their deltas back together into whole events.

:class:`StreamAssembler` is a pure bookkeeping object fed with
:class:`~agora_client.models.StreamChunk` values; it returns an
:class:`~agora_client.models.AssembledEvent` when a stream finishes, is
cancelled, or is given up on (no frame for ``incomplete_timeout`` seconds).
:class:`AssembledEvents` drives it from a subscription; it is what
``client.assembled_events()`` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from agora_client.models import AssembledEvent, StreamChunk, StreamStatus
from agora_client.subscriptions import RESET, Subscription

T = TypeVar("T")

# How many streams an assembler remembers having given up on, so that their
# late frames are ignored rather than reported a second time.
_GIVEN_UP_REMEMBERED = 1024


@dataclass(slots=True)
class _Partial:
    space: str
    event_id: str
    sender: str | None
    timestamp: int | None
    fields: dict[str, Any]
    last_active: float
    parts: list[str] = field(default_factory=list)
    size: int = 0
    chunks: int = 0
    seq: int | None = None
    problem: str | None = None  # why it can't be complete, decided early
    to: str | list[str] | None = None

    def result(
        self,
        status: StreamStatus,
        reason: str | None,
        seq: int | None = None,
        request_id: str | int | None = None,
    ) -> AssembledEvent:
        if status == "complete" and self.problem is not None:
            status, reason = "incomplete", self.problem
        return AssembledEvent(
            space=self.space,
            event_id=self.event_id,
            sender=self.sender,
            timestamp=self.timestamp,
            seq=seq if seq is not None else self.seq,
            data={**self.fields, "text": "".join(self.parts)},
            status=status,
            reason=reason,
            request_id=request_id,
            chunks=self.chunks,
            to=self.to,
        )


class StreamAssembler:
    """Turns stream chunks back into whole events. Pure: no I/O, clock injectable.

    ``feed()`` returns an :class:`AssembledEvent` when a chunk ends a stream.
    ``expire()`` gives up on streams with no chunk for ``incomplete_timeout``
    seconds. Text beyond ``max_chars`` per stream is not kept (the stream is
    reported ``incomplete`` with reason ``too_large``), so a runaway stream
    cannot eat the receiver's memory.

    A first delta is recognised by its ``data.from`` (the hub fills it in on
    every stream's first delta); a delta of an unknown stream without it
    means the start was missed, and the stream is reported ``incomplete``
    with reason ``missed_start``. Frames that arrive for a stream already
    reported (given up on by :meth:`expire` or :meth:`abandon`) are ignored.
    """

    def __init__(
        self,
        *,
        incomplete_timeout: float | None = 30.0,
        max_chars: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.incomplete_timeout = incomplete_timeout
        self.max_chars = max_chars
        self.clock = clock
        self._open: dict[str, _Partial] = {}
        self._given_up: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def feed(self, chunk: StreamChunk, now: float | None = None) -> AssembledEvent | None:
        now = self.clock() if now is None else now
        partial = self._open.get(chunk.event_id)
        if partial is None and chunk.event_id in self._given_up:
            if chunk.kind != "delta":
                del self._given_up[chunk.event_id]
            return None
        if chunk.kind == "delta":
            if partial is None:
                fields = {k: v for k, v in chunk.data.items() if k != "text"}
                partial = self._open[chunk.event_id] = _Partial(
                    chunk.space,
                    chunk.event_id,
                    chunk.sender,
                    chunk.timestamp,
                    fields,
                    now,
                    problem=None if "from" in chunk.data else "missed_start",
                    to=chunk.to,
                )
            partial.last_active = now
            partial.chunks += 1
            partial.seq = chunk.seq
            if partial.problem != "too_large":
                text = chunk.text
                if partial.size + len(text) > self.max_chars:
                    partial.problem = "too_large"
                    partial.parts.clear()
                else:
                    partial.parts.append(text)
                    partial.size += len(text)
            return None
        if partial is None:
            if chunk.kind == "done":
                # Every delta of it went missing before this consumer saw it.
                empty = _Partial(
                    chunk.space, chunk.event_id, chunk.sender, chunk.timestamp, {}, now
                )
                empty.problem = "missed_start"
                return empty.result("complete", None, chunk.seq, chunk.request_id)
            return None  # a cancel of a stream never seen: nothing to report
        del self._open[chunk.event_id]
        if chunk.kind == "done":
            return partial.result("complete", None, chunk.seq, chunk.request_id)
        return partial.result("cancelled", chunk.reason or "cancelled", chunk.seq)

    def next_deadline(self) -> float | None:
        """When :meth:`expire` will next have something to give up on."""
        if self.incomplete_timeout is None or not self._open:
            return None
        return min(p.last_active for p in self._open.values()) + self.incomplete_timeout

    def expire(self, now: float | None = None) -> list[AssembledEvent]:
        """Give up on streams silent for longer than ``incomplete_timeout``."""
        if self.incomplete_timeout is None:
            return []
        now = self.clock() if now is None else now
        stale = [
            eid for eid, p in self._open.items() if now - p.last_active >= self.incomplete_timeout
        ]
        return [self._give_up(eid, "incomplete_timeout") for eid in stale]

    def abandon(self, reason: str) -> list[AssembledEvent]:
        """Give up on every open stream (the frames they need will not come)."""
        return [self._give_up(eid, reason) for eid in list(self._open)]

    def _give_up(self, event_id: str, reason: str) -> AssembledEvent:
        self._given_up[event_id] = None
        while len(self._given_up) > _GIVEN_UP_REMEMBERED:
            self._given_up.popitem(last=False)
        return self._open.pop(event_id).result("incomplete", reason)


class AssembledEvents(Generic[T]):
    """Async iterator of whole events built from a subscription's stream chunks.

    Yields :class:`AssembledEvent` values, and what else the subscription
    carries (plain :class:`Event` values, :class:`MembersChanged` …) as it
    comes. Ends like its subscription; ``close()`` or ``async with`` stops it.
    """

    def __init__(self, sub: Subscription[Any], assembler: StreamAssembler):
        self.subscription = sub
        self.assembler = assembler
        self._ready: deque[Any] = deque()
        self._dropped_seen = sub.dropped

    @property
    def dropped(self) -> int:
        """Items the subscription dropped because its queue was full."""
        return self.subscription.dropped

    def __len__(self) -> int:
        """Items waiting to be read (a stream's frames count until it is whole)."""
        return len(self._ready) + len(self.subscription)

    def __aiter__(self) -> AssembledEvents[T]:
        return self

    async def __anext__(self) -> T:
        asm = self.assembler
        while not self._ready:
            deadline = asm.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - asm.clock())
            try:
                item = await self.subscription.get(timeout)
            except TimeoutError:
                self._ready.extend(asm.expire())
                continue
            if self.subscription.dropped != self._dropped_seen:
                self._dropped_seen = self.subscription.dropped
                self._ready.extend(asm.abandon("dropped"))
            if item is RESET:
                self._ready.extend(asm.abandon("connection_lost"))
            elif isinstance(item, StreamChunk):
                done = asm.feed(item)
                if done is not None:
                    self._ready.append(done)
            else:
                self._ready.append(item)
        return self._ready.popleft()  # type: ignore[no-any-return]

    async def get(self, timeout: float | None = None) -> T:
        """The next item; ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    def close(self) -> None:
        self.subscription.close()

    async def __aenter__(self) -> AssembledEvents[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
