"""Whole events out of what a bridge's virtual member receives, for any adapter.

A text longer than ``stream_threshold`` reaches members as ``space.event.delta``
frames (the first carries the other ``data`` fields) and a ``space.event.done``.
An HTTP answer needs the whole text, so :class:`StreamAssembler` puts the
streams a bridge cares about back together — bounded in bytes per stream and in
open streams, because the hub itself never holds a whole stream.

:class:`ReplyWaiters` is the inbound bridge's table of requests waiting for
their answer: the first event (or stream) whose ``data.in_reply_to`` is the
request's ``event_id`` resolves it — assembled (:meth:`ReplyWaiters.expect`),
or piece by piece as it arrives (:meth:`ReplyWaiters.relay`, a :class:`ReplyRelay`)
for a gateway that passes a streamed answer on while it streams.

A wait is keyed by everything that makes an answer legitimate (contract §18),
an :class:`Asked`: the space the request was published in, its ``event_id``,
and the agents it was addressed to. An answer from another space, or in the
space from an agent the request was not addressed to, is not an answer — it
is ignored and does not stand in the real answer's way. (Event ids carry a
random part, :mod:`hub.core.ids`, so nobody can name a request they did not
see; this keeps those who can see one from answering it where they should
not.) The signed-envelope gateway, whose answers name the request's envelope
id instead, matches with the same :class:`Asked`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

MAX_OPEN_STREAMS = 256
STASH_SIZE = 64


@dataclass(slots=True)
class Assembled:
    """A whole event: ``event`` is shaped like a ``space.event`` (a stream's first
    delta with the full text), or ``failure`` says why the stream was lost."""

    event: dict[str, Any]
    failure: str | None = None

    @property
    def data(self) -> dict[str, Any]:
        data = self.event.get("data")
        return data if isinstance(data, dict) else {}


@dataclass(slots=True)
class _Stream:
    first: dict[str, Any]
    parts: list[str] = field(default_factory=list)
    size: int = 0


class StreamAssembler:
    """Streams put back together; only those :meth:`start` was called for."""

    def __init__(self, max_bytes: int, max_streams: int = MAX_OPEN_STREAMS):
        self.max_bytes = max_bytes
        self.max_streams = max_streams
        self._open: dict[str, _Stream] = {}

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._open

    def start(self, delta: dict[str, Any]) -> Assembled | None:
        """Track the stream ``delta`` (its first frame) opens; an :class:`Assembled`
        failure when it cannot be tracked."""
        stream_id = delta.get("event_id")
        if not isinstance(stream_id, str) or stream_id in self._open:
            return None
        if len(self._open) >= self.max_streams:
            return Assembled(delta, f"more than {self.max_streams} streams being assembled")
        self._open[stream_id] = _Stream(delta)
        return self._append(stream_id, delta)

    def feed(self, msg: dict[str, Any]) -> Assembled | None:
        """The next frame of a tracked stream; returns the whole event at its end."""
        stream_id = msg.get("event_id")
        stream = self._open.get(stream_id) if isinstance(stream_id, str) else None
        if stream is None:
            return None
        kind = msg.get("type")
        if kind == "space.event.delta":
            return self._append(stream_id, msg)  # type: ignore[arg-type]
        if kind == "space.event.done":
            del self._open[stream_id]  # type: ignore[arg-type]
            first = stream.first
            data = {**first.get("data", {}), "text": "".join(stream.parts)}
            return Assembled({**first, "type": "space.event", "data": data})
        if kind == "space.event.cancel":
            del self._open[stream_id]  # type: ignore[arg-type]
            reason = msg.get("reason")
            return Assembled(stream.first, f"stream cancelled ({str(reason)[:128]})")
        return None

    def drop(self, stream_id: str) -> None:
        self._open.pop(stream_id, None)

    def _append(self, stream_id: str, delta: dict[str, Any]) -> Assembled | None:
        stream = self._open[stream_id]
        data = delta.get("data")
        text = data.get("text") if isinstance(data, dict) else None
        if not isinstance(text, str):
            return None
        stream.size += len(text.encode("utf-8", "surrogatepass"))
        if stream.size > self.max_bytes:
            del self._open[stream_id]
            return Assembled(stream.first, f"stream larger than {self.max_bytes} bytes")
        stream.parts.append(text)
        return None


@dataclass(frozen=True, slots=True)
class Asked:
    """A request waiting for its answer: the space it was published in, the id
    its answer names (``in_reply_to``), and the agents it was addressed to
    (``None``: unaddressed, any member of the space may answer)."""

    space: str
    event_id: str
    to: frozenset[str] | None = None

    @classmethod
    def of(cls, space: str, event_id: str, to: str | Iterable[str] | None = None) -> Asked:
        if to is None:
            return cls(space, event_id)
        return cls(space, event_id, frozenset([to] if isinstance(to, str) else to))

    def admits(self, msg: Mapping[str, Any]) -> bool:
        """May ``msg`` (a delivered frame: its ``space`` and ``from`` are the
        hub's stamps) answer this request?"""
        if msg.get("space") != self.space:
            return False
        return self.to is None or msg.get("from") in self.to


PieceKind = Literal["event", "delta", "done", "cancel"]
_PIECES: dict[Any, PieceKind] = {
    "space.event.delta": "delta",
    "space.event.done": "done",
    "space.event.cancel": "cancel",
}


@dataclass(frozen=True, slots=True)
class Piece:
    """One part of an answer as it arrives: a whole reply ``event``, or a
    streamed reply's ``delta`` frames and its ``done`` or ``cancel``."""

    kind: PieceKind
    msg: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        data = self.msg.get("data")
        return data if isinstance(data, dict) else {}

    @property
    def final(self) -> bool:
        return self.kind != "delta"


class RelayStopped(Exception):
    """:meth:`ReplyRelay.next` after :meth:`ReplyRelay.stop`: the consumer gave up."""


class ReplyRelay:
    """One request's answer, piece by piece, in arrival order (from
    :meth:`ReplyWaiters.relay`). Nothing is assembled: the consumer sees every
    delta as it comes and bounds what it keeps itself. The pieces wait here
    only until the consumer takes them (it does not block on anything else).
    :meth:`stop` wakes a consumer waiting in :meth:`next` to give up."""

    def __init__(self, event_id: str):
        self.event_id = event_id
        #: The id of the stream answering, once its first delta came.
        self.stream_id: str | None = None
        self.ended = False
        self._pieces: deque[Piece] = deque()
        self._ready = asyncio.Event()
        self._stopped = False

    def put(self, piece: Piece) -> None:
        self._pieces.append(piece)
        self._ready.set()
        if piece.final:
            self.ended = True

    def stop(self) -> None:
        self._stopped = True
        self._ready.set()

    async def next(self) -> Piece:
        """The next piece, waiting for it (wrap in a timeout); raises
        :class:`RelayStopped` once :meth:`stop` was called."""
        while not self._pieces or self._stopped:
            if self._stopped:
                raise RelayStopped(self.event_id)
            self._ready.clear()
            await self._ready.wait()
        return self._pieces.popleft()


def in_reply_to(msg: dict[str, Any]) -> str | None:
    data = msg.get("data")
    if not isinstance(data, dict):
        return None
    answered = data.get("in_reply_to")
    return answered if isinstance(answered, str) else None


class ReplyWaiters:
    """Requests waiting for their answer (:class:`Asked`), by the ``event_id``
    they were published as.

    :meth:`feed` gets every message the bridge member receives, on every node;
    only the node holding the request resolves it, the others ignore it. A reply
    may in principle overtake the acknowledgement of the request's own publish,
    so while a publish is in flight (:meth:`publishing`) unclaimed messages are
    kept in a small bounded stash that :meth:`expect` looks through.
    """

    def __init__(
        self, max_reply_bytes: int, *, stash_size: int = STASH_SIZE, own: str | None = None
    ):
        #: The asking member's id. What it publishes itself never answers its
        #: own requests — its copies on other nodes share the id, and publish
        #: for other callers (an MCP caller's space_publish through another node).
        self._own = own
        self._asked: dict[str, Asked] = {}
        self._pending: dict[str, asyncio.Future[Assembled]] = {}
        self._relays: dict[str, ReplyRelay] = {}
        self._stream_of: dict[str, str] = {}  # request event id -> stream answering it
        self._request_of: dict[str, str] = {}  # stream id -> request event id
        #: stream id -> its producer, for a stream others may receive too
        self._shared: dict[str, str] = {}
        self._streams = StreamAssembler(max_reply_bytes)
        self._stash: deque[dict[str, Any]] = deque(maxlen=stash_size)
        self._publishing = 0

    def __len__(self) -> int:
        return len(self._pending) + len(self._relays)

    @property
    def assembling(self) -> int:
        return len(self._streams)

    @contextlib.contextmanager
    def publishing(self) -> Iterator[None]:
        self._publishing += 1
        try:
            yield
        finally:
            self._publishing -= 1
            if not self._publishing:
                self._stash.clear()

    def expect(self, asked: Asked) -> asyncio.Future[Assembled]:
        """Wait for the whole answer to ``asked`` (a streamed one assembled)."""
        future: asyncio.Future[Assembled] = asyncio.get_running_loop().create_future()
        self._asked[asked.event_id] = asked
        self._pending[asked.event_id] = future
        self._unstash()
        return future

    def relay(self, asked: Asked) -> ReplyRelay:
        """Wait for the answer to ``asked`` piece by piece (:class:`ReplyRelay`)."""
        self._asked[asked.event_id] = asked
        relay = self._relays[asked.event_id] = ReplyRelay(asked.event_id)
        self._unstash()
        return relay

    def _unstash(self) -> None:
        if self._stash:
            stashed, self._stash = self._stash, deque(maxlen=self._stash.maxlen)
            for msg in stashed:
                if not self._route(msg):
                    self._stash.append(msg)

    def stream_of(self, event_id: str) -> str | None:
        """The id (as received) of the stream answering the request
        ``event_id``, once its first delta came and until it ends."""
        return self._stream_of.get(event_id)

    def producer_to_tell(self, event_id: str) -> str | None:
        """The agent streaming the answer to ``event_id`` when others may be
        receiving that stream too (it is unaddressed, or addressed to more than
        this member): a receiver cancel from here then need not reach it."""
        stream_id = self._stream_of.get(event_id)
        return None if stream_id is None else self._shared.get(stream_id)

    def fail_all(self, error: BaseException) -> None:
        """Every waiting request gets ``error`` raised (the hub is shutting down)."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)

    def forget(self, event_id: str) -> None:
        self._asked.pop(event_id, None)
        self._pending.pop(event_id, None)
        self._relays.pop(event_id, None)
        stream_id = self._stream_of.pop(event_id, None)
        if stream_id is not None:
            self._request_of.pop(stream_id, None)
            self._shared.pop(stream_id, None)
            self._streams.drop(stream_id)

    def feed(self, msg: dict[str, Any]) -> None:
        if not self._route(msg) and self._publishing:
            self._stash.append(msg)

    def take(self, msg: dict[str, Any]) -> bool:
        """Hand ``msg`` to the request it answers, if one waits for it here
        (a virtual member's ``take``, in the delivery itself); False leaves it
        to :meth:`feed`. Nothing is stashed: that is :meth:`feed`'s."""
        return self._route(msg)

    def _answers(self, msg: dict[str, Any], answered: str | None) -> bool:
        """Is ``msg`` a legitimate answer to the request ``answered`` we wait for?"""
        asked = self._asked.get(answered) if answered is not None else None
        if asked is None or (self._own is not None and msg.get("from") == self._own):
            return False
        return asked.admits(msg)

    def _in_space_of(self, msg: dict[str, Any], answered: str) -> bool:
        asked = self._asked.get(answered)
        return asked is not None and msg.get("space") == asked.space

    def _route(self, msg: dict[str, Any]) -> bool:
        kind = msg.get("type")
        if kind == "space.event":
            answered = in_reply_to(msg)
            if answered is None or answered in self._stream_of:
                return False  # not a reply, or a stream answered first
            if not self._answers(msg, answered):
                return False  # not from the request's space and addressees
            relay = self._relays.get(answered)
            if relay is not None:
                if relay.ended:
                    return False
                relay.put(Piece("event", msg))
                return True
            return self._resolve(answered, Assembled(msg))
        stream_id = msg.get("event_id")
        if not isinstance(stream_id, str):
            return False
        answered = self._request_of.get(stream_id)
        if answered is not None and not self._in_space_of(msg, answered):
            # The same stream id in another space (stream ids are the
            # publisher's, namespaced by the hub: in one space, one stream).
            return False
        relay = self._relays.get(answered) if answered is not None else None
        if relay is not None and kind in _PIECES:
            relay.put(Piece(_PIECES[kind], msg))
            if relay.ended:
                del self._request_of[stream_id]
                self._shared.pop(stream_id, None)
                self._stream_of.pop(relay.event_id, None)
            return True
        if answered is not None:
            whole = self._streams.feed(msg)
            if whole is not None:
                self._resolve(answered, whole)
            return True
        if kind != "space.event.delta":
            return False
        answered = in_reply_to(msg)
        if not self._answers(msg, answered):
            return False
        relay = self._relays.get(answered) if answered is not None else None
        if relay is not None and not relay.ended and answered not in self._stream_of:
            relay.stream_id = stream_id
            self._stream_of[relay.event_id] = stream_id
            self._request_of[stream_id] = relay.event_id
            self._note_producer(stream_id, msg)
            relay.put(Piece("delta", msg))
            return True
        future = self._pending.get(answered) if answered is not None else None
        if future is None or future.done() or answered in self._stream_of:
            return False
        assert answered is not None
        self._stream_of[answered] = stream_id
        self._request_of[stream_id] = answered
        self._note_producer(stream_id, msg)
        failed = self._streams.start(msg)
        if failed is not None:
            self._resolve(answered, failed)
        return True

    def _note_producer(self, stream_id: str, first: dict[str, Any]) -> None:
        # Delivered here, a stream addressed to one agent is addressed to this member.
        to, producer = first.get("to"), first.get("from")
        alone = isinstance(to, str) or (isinstance(to, list) and len(to) == 1)
        if not alone and isinstance(producer, str):
            self._shared[stream_id] = producer

    def _resolve(self, answered: str, whole: Assembled) -> bool:
        future = self._pending.get(answered)
        if future is None or future.done():
            return False
        future.set_result(whole)
        stream_id = self._stream_of.pop(answered, None)
        if stream_id is not None:
            self._request_of.pop(stream_id, None)
            self._shared.pop(stream_id, None)
        return True
