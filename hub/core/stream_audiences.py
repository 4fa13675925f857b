"""Receiving side of streams: who on this node gets the rest of a stream.

A stream's *audience* on a node is fixed by its first delta: the node's
members of the space at that moment (minus the publisher when it asked for no
echo, or only the addressed ones). Later deltas, the done and the cancel go to
that audience only, so

- a member who joins mid-stream gets nothing of it (contract §5);
- a member who leaves, disconnects or cancels as a receiver is dropped from
  the audience and gets nothing further;
- a node that subscribed after the stream began has no record and relays
  none of it.

**Receivers stopping** (contract §19). The audience's *receivers* are its
members other than the publisher (its own echo copy is not a receiver). When
one stops — a receiver cancel (:meth:`StreamAudiences.stop_receiving`) or a
departure (:meth:`StreamAudiences.forget_member`: a leave, a disconnect) — the
node is told through the ``on_stop`` callback given at construction, so that
the publisher can hear that nobody listens any more:

- of an **addressed** stream, every receiver that stops (the publisher's node
  knows the addressed agents and counts them off);
- of an **unaddressed** one, only the last receiver on this node (the
  publisher's node then asks every node how many they still have: a census,
  which :meth:`StreamAudiences.receivers` answers).

Nothing of this is paid per frame: the receiver count is taken the first time
a receiver of the stream stops. Records are removed by the stream's last frame
(done or cancel) and, should that never come (its publisher's node died), the
node's sweep ends them (:meth:`StreamAudiences.idle`). Memory is O(open
streams × local audience). Pure state: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, Protocol, TypeVar


class StreamOp(IntEnum):
    """Where a message sits in a stream; receivers' nodes track eligibility by it."""

    NONE = 0  # not part of a stream
    OPEN = 1  # first delta: the members present now are the stream's audience
    DELTA = 2
    END = 3  # done or cancel: the last frame of the stream
    #: Not a frame for members: a node-to-node note about a stream's receivers
    #: (hub/handlers/stream_stops.py), carried on the space's channel.
    SIGNAL = 4


class Receiver(Hashable, Protocol):
    agent_id: str


M = TypeVar("M", bound=Receiver)


@dataclass(frozen=True, slots=True)
class ReceiverStop:
    """A receiver of ``stream_id`` stopped: it cancelled, or it ``left`` (the
    space, its connection). ``addressed``: the stream has a ``to``."""

    stream_id: str
    space: str
    publisher: str
    receiver: str
    left: bool
    addressed: bool


#: Where a node hears of receivers stopping. It must not change the audiences
#: there and then (it is called while they are being walked).
OnStop = Callable[[ReceiverStop], None]


@dataclass(slots=True)
class RelayedStream(Generic[M]):
    stream_id: str
    space: str
    publisher: str
    audience: dict[M, None]
    last_active: float
    addressed: bool = False
    #: Members of the audience other than the publisher; counted when the
    #: first of them stops (None until then).
    receivers: int | None = None
    #: When its first frame came (the clock of ``last_active``).
    opened: float = 0.0


class StreamAudiences(Generic[M]):
    def __init__(self, on_stop: OnStop | None = None) -> None:
        self._streams: dict[str, RelayedStream[M]] = {}
        self._on_stop = on_stop

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._streams

    def open(
        self,
        stream_id: str,
        space: str,
        audience: dict[M, None],
        now: float,
        addressed: bool = False,
    ) -> None:
        publisher = stream_id.partition("/")[0] if "/" in stream_id else ""
        self._streams[stream_id] = RelayedStream(
            stream_id, space, publisher, audience, now, addressed, opened=now
        )

    def record(self, stream_id: str) -> RelayedStream[M] | None:
        """The stream's record on this node (None: none, or ended)."""
        return self._streams.get(stream_id)

    def audience(self, stream_id: str, op: StreamOp, now: float) -> dict[M, None] | None:
        """The audience of a later frame of the stream; None if this node has none.

        The stream's last frame (``END``) removes the record.
        """
        record = self._streams.get(stream_id)
        if record is None:
            return None
        record.last_active = now
        if op is StreamOp.END:
            del self._streams[stream_id]
        return record.audience

    def stop_receiving(self, member: M, stream_id: str, space: str, *, report: bool = True) -> bool:
        """Receiver-side cancel: False if ``member`` was not receiving it in ``space``.

        ``report=False``: the member never was a receiver in earnest (a joiner
        whose join position lies past the stream's first frame), nobody is told."""
        record = self._streams.get(stream_id)
        if record is None or record.space != space or member not in record.audience:
            return False
        self._drop(record, member, left=False, report=report)
        return True

    def forget_member(self, space: str, member: M) -> None:
        """``member`` left ``space`` (or disconnected)."""
        # (``on_stop`` never ends a stream there and then: no copy needed.)
        for record in self._streams.values():
            if record.space == space and member in record.audience:
                self._drop(record, member, left=True, report=True)

    def receivers(self, stream_id: str) -> int:
        """How many of this node's members still receive ``stream_id`` (its
        publisher's own copy aside)."""
        record = self._streams.get(stream_id)
        return 0 if record is None else _count(record)

    def idle(self, now: float, idle: float) -> list[RelayedStream[M]]:
        """Streams with no frame for ``idle`` seconds (ended by delivering
        their last frame, :meth:`audience` with ``END``)."""
        return [r for r in self._streams.values() if now - r.last_active > idle]

    def _drop(self, record: RelayedStream[M], member: M, *, left: bool, report: bool) -> None:
        receivers = _count(record)
        del record.audience[member]
        if member.agent_id == record.publisher:
            return  # the publisher's echo copy: not a receiver
        record.receivers = receivers = receivers - 1
        on_stop = self._on_stop
        if on_stop is None or not report or not (record.addressed or receivers == 0):
            return
        on_stop(
            ReceiverStop(
                record.stream_id, record.space, record.publisher, member.agent_id,
                left, record.addressed,
            )
        )  # fmt: skip


def _count(record: RelayedStream[M]) -> int:
    if record.receivers is None:
        publisher = record.publisher
        record.receivers = sum(1 for m in record.audience if m.agent_id != publisher)
    return record.receivers
