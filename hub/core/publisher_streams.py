"""The publisher's side of client streams, for one connection. Pure state.

An agent opens a stream with its first ``space.event.delta`` (its own
``event_id``), sends more deltas, then ``space.event.done`` — or cancels it,
or the hub does (idle, disconnect, leaving the space). This keeps the open
streams (at most ``max_streams``) and the ids of recently finished ones, so a
late delta is refused rather than opening a new stream. Hub-side ids are
namespaced ``<agent>/<event_id>`` so two agents cannot collide.

**An addressed stream.** ``to`` on the first delta (never on a later one)
fixes who gets every frame of the stream: those recipients and the publisher
(its echo). Each action of the stream carries that audience, so every frame is
routed and recorded in history as addressed.

**The stream budget.** The first delta opens a stream and is charged to the
connection's message bucket like any publish; the later deltas and the done of
an open stream are charged to a bucket of their own (:meth:`charge`,
``stream_rate_limit`` / ``stream_rate_burst``, shared by the connection's open
streams), so a model's token stream outlives the message rate while a flood of
separate publishes does not. That bucket has its own abuse score: a flood of
deltas far above it for ``rate_abuse_seconds`` still closes 4429.

**Nobody listens any more** (contract §19). When every receiver of a stream
has cancelled it or left, the node tells the session
(:meth:`PublisherStreams.receiver_stopped`, then
:meth:`PublisherStreams.receivers_gone`) and the producer gets one
``space.event.cancel`` with its own ``event_id``. The stream is over at the
hub, but the producer is not punished for the deltas it sent before it heard:
those are dropped without a word (still charged to the stream budget), and its
done or cancel of the stream is answered with the same notice. Only after that
is the id ended like any other (a delta → ``INVALID_REQUEST``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from hub.core.actions import (
    Action,
    Denied,
    RequestId,
    Send,
    StreamCancel,
    StreamDelta,
    StreamDone,
)
from hub.core.ratelimit import TokenBucket, Verdict
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import ClientCancel, ClientDelta, ClientDone
from protocol.names import check_event_id

# How many finished stream ids a session remembers to refuse late deltas.
FINISHED_STREAMS_REMEMBERED = 256

#: Decides whether a stream may open: None, a Denied action, or raises.
Admit = Callable[[str, dict, RequestId], Denied | None]


@dataclass(slots=True)
class OpenStream:
    space: str
    stream_id: str
    last_active: float
    #: An addressed stream's audience (recipients, then the publisher), else None.
    to: tuple[str, ...] | None = None
    #: The addressed recipients still receiving, once the first one stopped.
    waiting: set[str] | None = None
    #: The last receiver heard to stop, and whether it left (else it cancelled).
    last_stop: tuple[str, bool] | None = None


class Heard(Enum):
    """What a receiver's stop means for an open stream
    (:meth:`PublisherStreams.receiver_stopped`)."""

    NOT_OPEN = "not_open"  # no open stream of this publisher: nothing to do
    HEARD = "heard"  # addressed recipients still receive it
    NOBODY = "nobody"  # the last addressed recipient stopped
    ASK = "ask"  # unaddressed: only a census of the nodes can tell


@dataclass(frozen=True, slots=True)
class Unheard:
    """A stream the hub ended because nobody receives it any more."""

    space: str
    stream_id: str  # hub-side, namespaced
    event_id: str  # the producer's own
    #: The receiver whose cancel or departure ended the audience.
    receiver: str
    reason: str  # "receiver_cancelled" | "receivers_left"
    to: tuple[str, ...] | None

    def notice(self, request_id: RequestId = None) -> bytes:
        """The producer's ``space.event.cancel`` (its own id, ``from`` the receiver)."""
        return codec.receivers_gone(
            self.space, self.event_id, self.receiver, self.reason, request_id
        )

    def relayed(self) -> StreamCancel:
        """The stream's end for whoever still holds a copy (the producer's echo, history)."""
        return StreamCancel(self.space, self.stream_id, self.reason, None, self.to)


@dataclass(frozen=True, slots=True)
class StreamBudget:
    """The deltas of a connection's open streams: per second, at once, and
    how long an overshoot may last before it is abuse (see the module docstring)."""

    rate: float
    burst: float
    abuse_seconds: float


class PublisherStreams:
    __slots__ = (
        "_addressed",
        "_budget",
        "_finished",
        "_open",
        "_unheard",
        "agent_id",
        "max_streams",
    )

    def __init__(self, agent_id: str, max_streams: int, budget: StreamBudget, now: float):
        self.agent_id = agent_id
        self.max_streams = max_streams
        self._open: dict[str, OpenStream] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        #: Streams ended because nobody receives them, until the producer's
        #: done or cancel of each (see the module docstring).
        self._unheard: OrderedDict[str, Unheard] = OrderedDict()
        #: Streams whose addressed first delta was refused: they open only
        #: addressed, never for every member (:meth:`refused_addressed`).
        self._addressed: OrderedDict[str, None] = OrderedDict()
        self._budget = TokenBucket(budget.rate, budget.burst, budget.abuse_seconds, now)

    def __len__(self) -> int:
        return len(self._open)

    def charge(self, event_id: str, now: float) -> Verdict | None:
        """Charge a delta or done of the open stream ``event_id`` to the stream
        budget; None when ``event_id`` names no open stream of this publisher
        (then it is an ordinary message: a new stream, or an error). A stream
        ended for want of receivers still takes from the budget: its deltas
        in flight are dropped, not refused."""
        if self._own(event_id) is None and self._unheard_id(event_id) is None:
            return None
        return self._budget.take(now)

    def delta(self, msg: ClientDelta, now: float, admit: Admit) -> Action | None:
        """A delta: opens a stream (when ``admit`` lets it) or continues one;
        None for a delta of a stream nobody receives any more (dropped)."""
        rid = msg.id
        try:
            event_id = check_event_id(msg.event_id)
        except ProtocolError as exc:
            raise exc.with_request_id(rid) from None
        stream = self._open.get(event_id)
        if stream is None and event_id in self._unheard:
            return None
        if not isinstance(msg.data.get("text"), str):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "data.text must be a string", rid)
        if stream is None:
            if event_id in self._finished:
                raise ProtocolError(
                    ErrorCode.INVALID_REQUEST, f"stream {event_id!r} already ended", rid
                )
            if msg.to is None and self._addressed and event_id in self._addressed:
                raise ProtocolError(
                    ErrorCode.INVALID_REQUEST,
                    f"stream {event_id!r} was addressed when its first delta was refused: "
                    "send that delta again, with its to",
                    rid,
                )
            denied = admit(msg.space, msg.data, rid)
            if denied:
                if msg.to is not None:  # not a member: it opens addressed or not at all
                    self.refused_addressed(event_id)
                return denied
            if len(self._open) >= self.max_streams:
                raise ProtocolError(
                    ErrorCode.RATE_LIMITED,
                    f"too many open streams (limit {self.max_streams})",
                    rid,
                )
            to = self._audience(msg.to)
            self._addressed.pop(event_id, None)
            stream = OpenStream(msg.space, f"{self.agent_id}/{event_id}", now, to)
            self._open[event_id] = stream
            return StreamDelta(
                msg.space, stream.stream_id, msg.data, msg.echo, True, rid, to, msg.to
            )
        if stream.space != msg.space:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"stream {event_id!r} belongs to space {stream.space!r}",
                rid,
            )
        if msg.to is not None:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"to goes on the first delta of a stream only (stream {event_id!r} is open)",
                rid,
            )
        if msg.data.get("from", self.agent_id) != self.agent_id:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"data.from must be the connection's agent_id {self.agent_id!r}",
                rid,
            )
        stream.last_active = now
        return StreamDelta(msg.space, stream.stream_id, msg.data, msg.echo, False, rid, stream.to)

    def done(self, msg: ClientDone) -> StreamDone | Send:
        own = self._own(msg.event_id)
        if own is None:
            unheard = self._unheard_id(msg.event_id)
            if unheard is not None:
                return Send(self._settle(unheard).notice(msg.id))
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST, f"no open stream {msg.event_id[:128]!r}", msg.id
            )
        stream = self._open[own]
        if stream.space != msg.space:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"stream {own!r} belongs to space {stream.space!r}",
                msg.id,
            )
        self._finish(own)
        return StreamDone(stream.space, stream.stream_id, msg.id, stream.to)

    def cancel(self, msg: ClientCancel) -> StreamCancel | Send | None:
        """The publisher cancels its own stream; None when ``event_id`` is not
        one of its streams (then it is a receiver's cancel)."""
        own = self._own(msg.event_id)
        if own is not None:
            stream = self._finish(own)
            reason = msg.reason or "cancelled"
            return StreamCancel(stream.space, stream.stream_id, reason, msg.id, stream.to)
        unheard = self._unheard_id(msg.event_id)
        if unheard is not None:
            return Send(self._settle(unheard).notice(msg.id))
        if msg.event_id in self._finished:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST, f"stream {msg.event_id!r} already ended", msg.id
            )
        return None

    # ── the hub ends streams ────────────────────────────────────────────

    def expire(self, now: float, idle_timeout: float) -> list[StreamCancel]:
        idle = [eid for eid, s in self._open.items() if now - s.last_active > idle_timeout]
        return [self._hub_cancel(eid, "idle_timeout") for eid in idle]

    def cancel_in(self, space: str, reason: str) -> list[StreamCancel]:
        ids = [eid for eid, s in self._open.items() if s.space == space]
        return [self._hub_cancel(eid, reason) for eid in ids]

    def cancel_all(self, reason: str) -> list[StreamCancel]:
        return [self._hub_cancel(eid, reason) for eid in list(self._open)]

    def open_in(self, space: str) -> list[str]:
        """Hub-side ids of the open streams in ``space``."""
        return [s.stream_id for s in self._open.values() if s.space == space]

    def not_opened(self, stream_id: str) -> None:
        """The first delta of ``stream_id`` was not carried out (the backplane
        was unavailable): as if it never came — the same delta may open it."""
        own = self._own(stream_id)
        if own is not None:
            del self._open[own]

    def refused(self, stream_id: str) -> None:
        """The node refused the first delta of ``stream_id`` (its ``to`` named
        a non-member): the stream is over, and a later delta of it is refused
        rather than opening it again, unaddressed."""
        own = self._own(stream_id)
        if own is not None:
            self._finish(own)

    def refused_addressed(self, event_id: str) -> None:
        """A first delta of ``event_id`` that carried ``to`` was refused (its
        ``to`` malformed, a rate limit, the space…): a later delta of it opens
        the stream only with a ``to`` again, never for every member (what its
        publisher meant for a few would go to all)."""
        if event_id in self._open or event_id in self._unheard:
            return
        self._addressed[event_id] = None
        while len(self._addressed) > FINISHED_STREAMS_REMEMBERED:
            self._addressed.popitem(last=False)

    # ── receivers stop ──────────────────────────────────────────────────

    def receiver_stopped(self, stream_id: str, receiver: str, left: bool) -> Heard:
        """``receiver`` no longer receives ``stream_id``: it ``left``, or cancelled."""
        own = self._own(stream_id)
        if own is None:
            return Heard.NOT_OPEN
        stream = self._open[own]
        if stream.to is None:
            stream.last_stop = (receiver, left)
            return Heard.ASK
        if receiver == self.agent_id or receiver not in stream.to:
            return Heard.HEARD  # not one of its recipients: nothing changes
        stream.last_stop = (receiver, left)
        waiting = stream.waiting
        if waiting is None:
            waiting = stream.waiting = set(stream.to)
            waiting.discard(self.agent_id)
        waiting.discard(receiver)
        return Heard.HEARD if waiting else Heard.NOBODY

    def receivers_gone(self, stream_id: str) -> Unheard | None:
        """Nobody receives ``stream_id`` any more: the stream ends, in the name
        of the receiver last heard to stop (its ``from``, and its reason). None
        when it is not open, or no receiver of it ever stopped."""
        own = self._own(stream_id)
        if own is None:
            return None
        last = self._open[own].last_stop
        if last is None:
            return None
        stream = self._open.pop(own)
        receiver, left = last
        reason = "receivers_left" if left else "receiver_cancelled"
        unheard = Unheard(stream.space, stream.stream_id, own, receiver, reason, stream.to)
        self._unheard[own] = unheard
        while len(self._unheard) > FINISHED_STREAMS_REMEMBERED:
            self._remember(self._unheard.popitem(last=False)[0])
        return unheard

    # ── helpers ─────────────────────────────────────────────────────────

    def _own(self, event_id: str) -> str | None:
        """The client-side id if ``event_id`` names one of this agent's open streams."""
        return self._client_id(event_id, self._open)

    def _unheard_id(self, event_id: str) -> str | None:
        """The client-side id if ``event_id`` names a stream ended for want of receivers."""
        return self._client_id(event_id, self._unheard)

    def _client_id(self, event_id: str, table: Mapping[str, object]) -> str | None:
        """``event_id`` as the client sent it, or namespaced, if it is in ``table``."""
        if event_id in table:
            return event_id
        prefix = f"{self.agent_id}/"
        if event_id.startswith(prefix) and event_id[len(prefix) :] in table:
            return event_id[len(prefix) :]
        return None

    def _settle(self, event_id: str) -> Unheard:
        """The producer ended a stream nobody received: from now on it is
        ended like any other."""
        unheard = self._unheard.pop(event_id)
        self._remember(event_id)
        return unheard

    def _audience(self, to: str | list[str] | None) -> tuple[str, ...] | None:
        if to is None:
            return None
        recipients = [to] if isinstance(to, str) else to
        return tuple(dict.fromkeys([*recipients, self.agent_id]))

    def _finish(self, event_id: str) -> OpenStream:
        stream = self._open.pop(event_id)
        self._remember(event_id)
        return stream

    def _remember(self, event_id: str) -> None:
        self._finished[event_id] = None
        while len(self._finished) > FINISHED_STREAMS_REMEMBERED:
            self._finished.popitem(last=False)

    def _hub_cancel(self, event_id: str, reason: str) -> StreamCancel:
        stream = self._finish(event_id)
        return StreamCancel(stream.space, stream.stream_id, reason, None, stream.to)
