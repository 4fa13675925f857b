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

Records are removed by the stream's last frame (done or cancel) and, should
that never come (its publisher's node died), by :meth:`StreamAudiences.expire`.
Memory is O(open streams × local audience). Pure state: no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar


class StreamOp(IntEnum):
    """Where a message sits in a stream; receivers' nodes track eligibility by it."""

    NONE = 0  # not part of a stream
    OPEN = 1  # first delta: the members present now are the stream's audience
    DELTA = 2
    END = 3  # done or cancel: the last frame of the stream


M = TypeVar("M", bound=Hashable)


@dataclass(slots=True)
class RelayedStream(Generic[M]):
    stream_id: str
    space: str
    publisher: str
    audience: dict[M, None]
    last_active: float


class StreamAudiences(Generic[M]):
    def __init__(self) -> None:
        self._streams: dict[str, RelayedStream[M]] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._streams

    def open(self, stream_id: str, space: str, audience: dict[M, None], now: float) -> None:
        publisher = stream_id.partition("/")[0] if "/" in stream_id else ""
        self._streams[stream_id] = RelayedStream(stream_id, space, publisher, audience, now)

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

    def stop_receiving(self, member: M, stream_id: str, space: str) -> bool:
        """Receiver-side cancel: False if ``member`` was not receiving it in ``space``."""
        record = self._streams.get(stream_id)
        if record is None or record.space != space or member not in record.audience:
            return False
        del record.audience[member]
        return True

    def forget_member(self, space: str, member: M) -> None:
        """``member`` left ``space`` (or disconnected)."""
        for record in self._streams.values():
            if record.space == space:
                record.audience.pop(member, None)

    def idle(self, now: float, idle: float) -> list[RelayedStream[M]]:
        """Streams with no frame for ``idle`` seconds (ended by delivering
        their last frame, :meth:`audience` with ``END``)."""
        return [r for r in self._streams.values() if now - r.last_active > idle]
