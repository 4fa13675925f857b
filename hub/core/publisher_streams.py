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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from hub.core.actions import Action, Denied, RequestId, StreamCancel, StreamDelta, StreamDone
from hub.core.ratelimit import TokenBucket, Verdict
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


@dataclass(frozen=True, slots=True)
class StreamBudget:
    """The deltas of a connection's open streams: per second, at once, and
    how long an overshoot may last before it is abuse (see the module docstring)."""

    rate: float
    burst: float
    abuse_seconds: float


class PublisherStreams:
    __slots__ = ("_budget", "_finished", "_open", "agent_id", "max_streams")

    def __init__(self, agent_id: str, max_streams: int, budget: StreamBudget, now: float):
        self.agent_id = agent_id
        self.max_streams = max_streams
        self._open: dict[str, OpenStream] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._budget = TokenBucket(budget.rate, budget.burst, budget.abuse_seconds, now)

    def __len__(self) -> int:
        return len(self._open)

    def charge(self, event_id: str, now: float) -> Verdict | None:
        """Charge a delta or done of the open stream ``event_id`` to the stream
        budget; None when ``event_id`` names no open stream of this publisher
        (then it is an ordinary message: a new stream, or an error)."""
        if self._own(event_id) is None:
            return None
        return self._budget.take(now)

    def delta(self, msg: ClientDelta, now: float, admit: Admit) -> Action:
        """A delta: opens a stream (when ``admit`` lets it) or continues one."""
        rid = msg.id
        try:
            event_id = check_event_id(msg.event_id)
        except ProtocolError as exc:
            raise exc.with_request_id(rid) from None
        if not isinstance(msg.data.get("text"), str):
            raise ProtocolError(ErrorCode.INVALID_REQUEST, "data.text must be a string", rid)
        stream = self._open.get(event_id)
        if stream is None:
            if event_id in self._finished:
                raise ProtocolError(
                    ErrorCode.INVALID_REQUEST, f"stream {event_id!r} already ended", rid
                )
            denied = admit(msg.space, msg.data, rid)
            if denied:
                return denied
            if len(self._open) >= self.max_streams:
                raise ProtocolError(
                    ErrorCode.RATE_LIMITED,
                    f"too many open streams (limit {self.max_streams})",
                    rid,
                )
            to = self._audience(msg.to)
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

    def done(self, msg: ClientDone) -> StreamDone:
        own = self._own(msg.event_id)
        if own is None:
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

    def cancel(self, msg: ClientCancel) -> StreamCancel | None:
        """The publisher cancels its own stream; None when ``event_id`` is not
        one of its streams (then it is a receiver's cancel)."""
        own = self._own(msg.event_id)
        if own is not None:
            stream = self._finish(own)
            reason = msg.reason or "cancelled"
            return StreamCancel(stream.space, stream.stream_id, reason, msg.id, stream.to)
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

    def refused(self, stream_id: str) -> None:
        """The node refused the first delta of ``stream_id`` (its ``to`` named
        a non-member): the stream is over, and a later delta of it is refused
        rather than opening it again, unaddressed."""
        own = self._own(stream_id)
        if own is not None:
            self._finish(own)

    # ── helpers ─────────────────────────────────────────────────────────

    def _own(self, event_id: str) -> str | None:
        """The client-side id if ``event_id`` names one of this agent's open streams."""
        if event_id in self._open:
            return event_id
        prefix = f"{self.agent_id}/"
        if event_id.startswith(prefix) and event_id[len(prefix) :] in self._open:
            return event_id[len(prefix) :]
        return None

    def _audience(self, to: str | list[str] | None) -> tuple[str, ...] | None:
        if to is None:
            return None
        recipients = [to] if isinstance(to, str) else to
        return tuple(dict.fromkeys([*recipients, self.agent_id]))

    def _finish(self, event_id: str) -> OpenStream:
        stream = self._open.pop(event_id)
        self._finished[event_id] = None
        while len(self._finished) > FINISHED_STREAMS_REMEMBERED:
            self._finished.popitem(last=False)
        return stream

    def _hub_cancel(self, event_id: str, reason: str) -> StreamCancel:
        stream = self._finish(event_id)
        return StreamCancel(stream.space, stream.stream_id, reason, None, stream.to)
