"""Streams this client publishes: :class:`OutgoingStream`, and the table of open ones.

``async with client.stream(space) as s: await s.send("tok")`` sends
``space.event.delta`` frames under an ``event_id`` of the client's choosing
and ``space.event.done`` on a clean exit. An exception inside the block, or
``await s.cancel()``, sends ``space.event.cancel`` instead.

**Coalescing.** A model emits 150–300 tokens a second; a frame per token
would spend the receivers' CPU on framing and the hub's on fan-out (the hub
gives deltas a budget of their own, ``stream_rate_limit``, so it would not be
refused). So what is sent within :data:`COALESCE_SECONDS`
of the first unsent text goes out as one delta — in order, at most
:data:`MAX_DELTA_CHARS` characters, and flushed at once by ``close()``,
``cancel()`` and a delta with fields of its own. A stream then costs at most
about 50 deltas a second, whatever the token rate, for 20 ms of added latency.
The first delta is never held: it opens the stream and waits for the hub's
verdict.

Each stream's frames carry request ids of its own (``s3.0``, ``s3.1`` …), so
that the hub's refusal of any of them — which may come after later deltas
were sent, since only the first waits — finds its stream
(:class:`OutgoingStreams`). Receiving streams is :mod:`agora_client.assembly`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol

from agora_client.assembly import AssembledEvents, StreamAssembler
from agora_client.errors import (
    HubClientError,
    HubRejected,
    StreamCancelled,
)
from agora_client.wire import MessageType

__all__ = ["AssembledEvents", "OutgoingStream", "OutgoingStreams", "StreamAssembler"]


class StreamOwner(Protocol):
    """What an outgoing stream needs of its :class:`~agora_client.Client`."""

    agent_id: str
    _generation: int

    def _new_stream_prefix(self) -> str: ...

    def _open_stream(self, stream: OutgoingStream) -> int: ...

    def _close_stream(self, stream: OutgoingStream) -> None: ...

    async def _send(self, msg: dict[str, Any], *, generation: int | None = None) -> None: ...

    async def _request(self, msg: dict[str, Any]) -> Any: ...

    async def _barrier(self) -> None: ...


log = logging.getLogger("agora_client")

#: Text sent within this many seconds of the first unsent text is one delta.
COALESCE_SECONDS = 0.02
#: Most characters one coalesced delta carries (far below the hub's 1 MiB frame limit).
MAX_DELTA_CHARS = 64 * 1024

StreamState = Literal["new", "open", "done", "cancelled", "failed"]

# How long a cancel sent on the way out of a failing ``async with`` may take.
_EXIT_CANCEL_TIMEOUT = 5.0


class OutgoingStream:
    """A stream this client publishes. Made by :meth:`Client.stream`.

    Nothing goes on the wire until the first :meth:`send`. The first send
    waits one round trip so that a refusal (not a member, too many open
    streams …) is raised right there; later sends do not wait. An error the
    hub reports for a later delta is raised by the next :meth:`send` or
    :meth:`close`. When the stream is ended by others — every receiver
    cancelled it (``receiver_cancelled``) or left (``receivers_left``), the
    hub ended it (``idle_timeout``, ``publisher_left_space``), or the
    connection dropped (``connection_lost``) — :attr:`cancelled` turns true,
    ``on_cancel`` (when given) is called with the reason at once, and the
    next call raises :class:`~agora_client.errors.StreamCancelled`.
    """

    def __init__(
        self,
        client: StreamOwner,
        space: str,
        event_id: str,
        fields: dict[str, Any] | None,
        echo: bool,
        *,
        to: str | list[str] | None = None,
        coalesce: float = COALESCE_SECONDS,
        on_cancel: Callable[[str], object] | None = None,
    ):
        self.space = space
        self.event_id = event_id
        self.hub_event_id = f"{client.agent_id}/{event_id}"
        self.echo = echo
        self.to = to
        self.coalesce = coalesce
        self.state: StreamState = "new"
        self.reason: str | None = None
        #: Delta frames sent, and ``send()`` calls made (coalesced into those frames).
        self.sent = 0
        self.written = 0
        self.seq: int | None = None
        self._client = client
        self._fields = dict(fields or {})
        self._prefix = client._new_stream_prefix()
        self._n = 0
        self._error: HubClientError | None = None
        self._generation = -1
        self._cancelled_here = False  # by cancel(), not by the hub or a lost connection
        self._pending: list[str] = []  # text written and not sent yet
        self._pending_chars = 0
        self._flusher: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()  # keeps the deltas in the order written
        self._on_cancel = on_cancel

    def __repr__(self) -> str:
        return f"<OutgoingStream {self.hub_event_id} in {self.space} {self.state}>"

    @property
    def cancelled(self) -> bool:
        """True once the stream was cancelled: by :meth:`cancel`, by its
        receivers, by the hub or by a lost connection (``reason`` says which)."""
        return self.state == "cancelled"

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
        """Send ``text``; ``fields`` are extra ``data`` fields for its delta.

        Text sent within ``coalesce`` seconds goes out as one delta (see the
        module's docstring); a ``send`` with ``fields`` is a delta of its own.
        """
        if not isinstance(text, str):
            raise TypeError("a delta's text must be a str")
        self._raise_if_unusable()
        self.written += 1
        if self.state == "new":
            self.state = "open"
            self._generation = self._client._open_stream(self)
            async with self._sending:
                await self._send_delta({**self._fields, **fields, "text": text}, first=True)
            await self._client._barrier()
            self._raise_if_unusable()
            return
        if fields or self.coalesce <= 0:
            await self.flush()
            async with self._sending:
                await self._send_delta({**fields, "text": text})
            return
        if self._pending and self._pending_chars + len(text) > MAX_DELTA_CHARS:
            await self.flush()
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= MAX_DELTA_CHARS:
            await self.flush()
        elif self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    async def flush(self) -> None:
        """Send what was written and not sent yet, as one delta, now."""
        async with self._sending:
            if not self._pending:
                return
            text = "".join(self._pending)
            self._pending.clear()
            self._pending_chars = 0
            self._raise_if_unusable()
            await self._send_delta({"text": text})

    async def _flush_later(self) -> None:
        try:
            await asyncio.sleep(self.coalesce)
            self._flusher = None
            await self.flush()
        except HubClientError as exc:  # raised by the next send() or close()
            if self._error is None and not isinstance(exc, StreamCancelled):
                self._error = exc
        except RuntimeError:
            pass  # the stream ended meanwhile; close() or cancel() had the last word

    def _stop_flusher(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None

    async def _send_delta(self, data: dict[str, Any], *, first: bool = False) -> None:
        msg: dict[str, Any] = {
            "type": MessageType.SPACE_EVENT_DELTA,
            "id": self._next_rid(),
            "space": self.space,
            "event_id": self.event_id,
            "data": data,
            "echo": self.echo,
        }
        if first and self.to is not None:
            msg["to"] = self.to
        await self._client._send(msg, generation=self._generation)
        self.sent += 1

    async def close(self) -> int | None:
        """End the stream with ``space.event.done``; returns the done's ``seq``.

        With ``echo=True`` this waits for the hub to relay the done back;
        with ``echo=False`` the hub sends nothing back, so only a refusal is
        waited for and ``None`` is returned. Closing a stream that never sent
        a delta, or that :meth:`cancel` ended, does nothing. Raises
        :class:`~agora_client.errors.StreamCancelled` when the hub or a lost
        connection ended it. Idempotent.
        """
        if self.state == "done" or (self.state == "cancelled" and self._cancelled_here):
            return self.seq
        if self.state == "new":
            self.state = "done"
            return None
        self._raise_if_unusable()
        await self.flush()
        self._stop_flusher()
        try:
            if self.echo:
                await self._end(MessageType.SPACE_EVENT_DONE)
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
        try:  # what was written goes out before the cancel
            await self.flush()
        except HubClientError as exc:
            log.debug("flushing %s before its cancel failed: %s", self.hub_event_id, exc)
        self._stop_flusher()
        self.state, self.reason, self._cancelled_here = "cancelled", reason, True
        try:
            if self._generation == self._client._generation:
                await self._end(MessageType.SPACE_EVENT_CANCEL, reason=reason[:256])
        except HubRejected as exc:
            # The hub had already ended it (idle timeout crossing our cancel).
            log.debug("cancel of %s refused: %s", self.hub_event_id, exc)
        finally:
            self._client._close_stream(self)

    async def _end(self, kind: str, **fields: Any) -> None:
        """Send the done or cancel ``kind`` and wait for the hub's relay of it."""
        reply = await self._client._request(
            {"type": kind, "space": self.space, "event_id": self.event_id, **fields}
        )
        if kind == MessageType.SPACE_EVENT_DONE and reply.get("type") != kind:
            # The receivers had stopped it: the hub answers the done with its notice.
            reason = reply.get("reason")
            self._mark_cancelled(reason if isinstance(reason, str) else "cancelled")
            self._raise_if_unusable()
        seq = reply.get("seq")
        self.seq = seq if isinstance(seq, int) else None

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
            self._pending.clear()
            self._stop_flusher()
            self._client._close_stream(self)
            if self._on_cancel is not None:
                try:
                    self._on_cancel(reason)
                except Exception:
                    log.exception("on_cancel of %s failed", self.hub_event_id)

    def _failed(self, request_id: str, error: HubClientError) -> None:
        """The hub refused one of this stream's frames."""
        if self._error is None:
            self._error = error
        if request_id == f"{self._prefix}0":  # the first delta: the hub has no such stream
            self.state = "failed"
            self._pending.clear()
            self._stop_flusher()
            self._client._close_stream(self)


class OutgoingStreams:
    """The streams this client has open, found by the ids of the hub's frames."""

    def __init__(self) -> None:
        self._prefixes = itertools.count(1)
        self._by_event_id: dict[str, OutgoingStream] = {}
        self._by_prefix: dict[str, OutgoingStream] = {}

    def new_prefix(self) -> str:
        """The request-id prefix of a new stream (``"s3."``)."""
        return f"s{next(self._prefixes)}."

    def add(self, stream: OutgoingStream) -> None:
        self._by_event_id[stream.hub_event_id] = stream
        self._by_prefix[stream.request_prefix] = stream

    def remove(self, stream: OutgoingStream) -> None:
        if self._by_event_id.get(stream.hub_event_id) is stream:
            del self._by_event_id[stream.hub_event_id]
        self._by_prefix.pop(stream.request_prefix, None)

    def cancelled(self, hub_event_id: str, reason: str) -> None:
        """The hub relayed a cancel of ``hub_event_id``, or told us that every
        receiver of it stopped: if it is ours, it ended."""
        stream = self._by_event_id.get(hub_event_id)
        if stream is not None:
            stream._mark_cancelled(reason)

    def refused(self, request_id: str, error: HubClientError) -> bool:
        """The hub refused the frame ``request_id``; False when no stream of ours sent it."""
        prefix, dot, _ = request_id.partition(".")
        stream = self._by_prefix.get(prefix + dot) if dot else None
        if stream is None:
            return False
        stream._failed(request_id, error)
        return True

    def connection_lost(self) -> None:
        """Every open stream ended with the connection it was on."""
        for stream in list(self._by_event_id.values()):
            stream._mark_cancelled("connection_lost")
