"""Streams: publishing one (:class:`OutgoingStream`) and reassembling received ones.

Publishing: ``async with client.stream(space) as s: await s.send("tok")``
sends ``space.event.delta`` frames under an ``event_id`` of the client's
choosing and ``space.event.done`` on a clean exit. An exception inside the
block, or ``await s.cancel()``, sends ``space.event.cancel`` instead.

Receiving: :class:`StreamAssembler` is a pure bookkeeping object fed with
:class:`~hub.client.models.StreamChunk` values; it returns an
:class:`~hub.client.models.AssembledEvent` when a stream finishes, is
cancelled, or is given up on (no frame for ``incomplete_timeout`` seconds).
:class:`AssembledEvents` drives it from a subscription; it is what
``client.assembled_events()`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hub.client.errors import (
    HubClientError,
    HubRejected,
    StreamCancelled,
)
from hub.client.models import AssembledEvent, Event, StreamChunk, StreamStatus
from hub.client.subscriptions import RESET, Subscription
from protocol.messages import MessageType


class StreamOwner(Protocol):
    """What an outgoing stream needs of its :class:`~hub.client.Client`."""

    agent_id: str
    _generation: int

    def _new_stream_prefix(self) -> str: ...

    def _open_stream(self, stream: OutgoingStream) -> int: ...

    def _close_stream(self, stream: OutgoingStream) -> None: ...

    async def _send(self, msg: dict[str, Any], *, generation: int | None = None) -> None: ...

    async def _request(self, msg: dict[str, Any]) -> Any: ...

    async def _barrier(self) -> None: ...


log = logging.getLogger("hub.client")

StreamState = Literal["new", "open", "done", "cancelled", "failed"]

# How long a cancel sent on the way out of a failing ``async with`` may take.
_EXIT_CANCEL_TIMEOUT = 5.0

# How many streams an assembler remembers having given up on, so that their
# late frames are ignored rather than reported a second time.
_GIVEN_UP_REMEMBERED = 1024


class OutgoingStream:
    """A stream this client publishes. Made by :meth:`Client.stream`.

    Nothing goes on the wire until the first :meth:`send`. The first send
    waits one round trip so that a refusal (not a member, too many open
    streams …) is raised right there; later sends do not wait. An error the
    hub reports for a later delta is raised by the next :meth:`send` or
    :meth:`close`. When the hub ends the stream (``idle_timeout``,
    ``publisher_left_space``) or the connection drops, the next call raises
    :class:`~hub.client.errors.StreamCancelled`.
    """

    def __init__(
        self,
        client: StreamOwner,
        space: str,
        event_id: str,
        fields: dict[str, Any] | None,
        echo: bool,
    ):
        self.space = space
        self.event_id = event_id
        self.hub_event_id = f"{client.agent_id}/{event_id}"
        self.echo = echo
        self.state: StreamState = "new"
        self.reason: str | None = None
        self.sent = 0
        self.seq: int | None = None
        self._client = client
        self._fields = dict(fields or {})
        self._prefix = client._new_stream_prefix()
        self._n = 0
        self._error: HubClientError | None = None
        self._generation = -1
        self._cancelled_here = False  # by cancel(), not by the hub or a lost connection

    def __repr__(self) -> str:
        return f"<OutgoingStream {self.hub_event_id} in {self.space} {self.state}>"

    @property
    def request_prefix(self) -> str:
        """Request ids of this stream's frames start with this (``"s3."``)."""
        return self._prefix

    def _next_rid(self) -> str:
        rid = f"{self._prefix}{self._n}"
        self._n += 1
        return rid

    # ── sending ─────────────────────────────────────────────────────────

    async def send(self, text: str, **fields: Any) -> None:
        """Send one delta. ``fields`` are extra ``data`` fields for this delta."""
        if not isinstance(text, str):
            raise TypeError("a delta's text must be a str")
        self._raise_if_unusable()
        first = self.state == "new"
        data = {**self._fields, **fields, "text": text} if first else {**fields, "text": text}
        msg = {
            "type": MessageType.SPACE_EVENT_DELTA,
            "id": self._next_rid(),
            "space": self.space,
            "event_id": self.event_id,
            "data": data,
            "echo": self.echo,
        }
        if first:
            self.state = "open"
            self._generation = self._client._open_stream(self)
        await self._client._send(msg, generation=self._generation)
        self.sent += 1
        if first:
            await self._client._barrier()
            self._raise_if_unusable()

    async def close(self) -> int | None:
        """End the stream with ``space.event.done``; returns the done's ``seq``.

        With ``echo=True`` this waits for the hub to relay the done back;
        with ``echo=False`` the hub sends nothing back, so only a refusal is
        waited for and ``None`` is returned. Closing a stream that never sent
        a delta, or that :meth:`cancel` ended, does nothing. Raises
        :class:`~hub.client.errors.StreamCancelled` when the hub or a lost
        connection ended it. Idempotent.
        """
        if self.state == "done" or (self.state == "cancelled" and self._cancelled_here):
            return self.seq
        if self.state == "new":
            self.state = "done"
            return None
        self._raise_if_unusable()
        try:
            if self.echo:
                reply = await self._client._request(
                    {
                        "type": MessageType.SPACE_EVENT_DONE,
                        "space": self.space,
                        "event_id": self.event_id,
                    }
                )
                seq = reply.get("seq")
                self.seq = seq if isinstance(seq, int) else None
            else:
                msg = {
                    "type": MessageType.SPACE_EVENT_DONE,
                    "id": self._next_rid(),
                    "space": self.space,
                    "event_id": self.event_id,
                }
                await self._client._send(msg, generation=self._generation)
                await self._client._barrier()
                self._raise_if_unusable()
        except HubRejected:
            self._raise_if_unusable()  # a cancel that crossed the done explains it better
            raise
        self.state = "done"
        self._client._close_stream(self)
        return self.seq

    async def cancel(self, reason: str = "cancelled") -> None:
        """Cancel the stream: every receiver gets ``space.event.cancel`` with ``reason``.

        Does nothing when the stream already ended.
        """
        if self.state == "new":
            self.state, self.reason, self._cancelled_here = "cancelled", reason, True
            return
        if self.state != "open":
            return
        self.state, self.reason, self._cancelled_here = "cancelled", reason, True
        try:
            if self._generation == self._client._generation:
                reply = await self._client._request(
                    {
                        "type": MessageType.SPACE_EVENT_CANCEL,
                        "space": self.space,
                        "event_id": self.event_id,
                        "reason": reason[:256],
                    }
                )
                seq = reply.get("seq")
                self.seq = seq if isinstance(seq, int) else None
        except HubRejected as exc:
            # The hub had already ended it (idle timeout crossing our cancel).
            log.debug("cancel of %s refused: %s", self.hub_event_id, exc)
        finally:
            self._client._close_stream(self)

    async def __aenter__(self) -> OutgoingStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: object, tb: object
    ) -> None:
        if exc_type is None:
            await self.close()
            return
        if self.state != "open":
            return
        reason = (
            "cancelled" if exc_type is asyncio.CancelledError else f"error: {exc_type.__name__}"
        )
        try:
            async with asyncio.timeout(_EXIT_CANCEL_TIMEOUT):
                await self.cancel(reason)
        except BaseException as cancel_exc:  # the original exception matters more
            log.debug("cancel of %s on exit failed: %r", self.hub_event_id, cancel_exc)
            self._client._close_stream(self)

    # ── state, driven by the client ─────────────────────────────────────

    def _raise_if_unusable(self) -> None:
        if self._error is not None:
            raise self._error
        if self.state == "open" and self._generation != self._client._generation:
            self._mark_cancelled("connection_lost")
        if self.state == "cancelled":
            raise StreamCancelled(
                f"stream {self.event_id!r} in {self.space!r} was cancelled: {self.reason}",
                reason=self.reason or "cancelled",
            )
        if self.state in ("done", "failed"):
            raise RuntimeError(f"stream {self.event_id!r} has already ended")

    def _mark_cancelled(self, reason: str) -> None:
        if self.state in ("new", "open"):
            self.state, self.reason = "cancelled", reason
            self._client._close_stream(self)

    def _failed(self, request_id: str, error: HubClientError) -> None:
        """The hub refused one of this stream's frames."""
        if self._error is None:
            self._error = error
        if request_id == f"{self._prefix}0":  # the first delta: the hub has no such stream
            self.state = "failed"
            self._client._close_stream(self)


# ── receiving ───────────────────────────────────────────────────────────────


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


class AssembledEvents:
    """Async iterator of whole events built from a subscription's stream chunks.

    Yields :class:`AssembledEvent` values, and, when the subscription also
    carries plain events, :class:`Event` values as they come. Ends like its
    subscription; ``close()`` or ``async with`` stops it.
    """

    def __init__(self, sub: Subscription[Any], assembler: StreamAssembler):
        self.subscription = sub
        self.assembler = assembler
        self._ready: deque[AssembledEvent | Event] = deque()
        self._dropped_seen = sub.dropped

    def __aiter__(self) -> AssembledEvents:
        return self

    async def __anext__(self) -> AssembledEvent | Event:
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
            elif isinstance(item, Event):
                self._ready.append(item)
        return self._ready.popleft()

    async def get(self, timeout: float | None = None) -> AssembledEvent | Event:
        """The next item; ``TimeoutError`` after ``timeout`` seconds."""
        async with asyncio.timeout(timeout):
            return await self.__anext__()

    def close(self) -> None:
        self.subscription.close()

    async def __aenter__(self) -> AssembledEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
