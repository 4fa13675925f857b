"""Receiving side of streams: who on this node gets the rest of a stream.

A stream's *audience* on a node is fixed by its first delta: the node's
members of the space at that moment (minus the publisher when it asked for no
echo). Later deltas, the done and the cancel go to that audience only, so

- a member who joins mid-stream gets nothing of it (contract §5);
- a member who leaves, disconnects or cancels as a receiver is dropped from
  the audience and gets nothing further;
- a node that subscribed after the stream began has no record and relays
  none of it.

Records are removed by the stream's last frame (done or cancel) and, should
that never come (its publisher's node died), by :meth:`expire`. Memory is
O(open streams × local audience).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hub.backplane.base import Envelope, StreamOp
from hub.outbox import OutFrame

if TYPE_CHECKING:
    from hub.connection import HubConnection


@dataclass(slots=True)
class RelayedStream:
    stream_id: str
    space: str
    publisher: str
    audience: dict[HubConnection, None]
    last_active: float


class StreamRouter:
    def __init__(self) -> None:
        self._streams: dict[str, RelayedStream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def __contains__(self, stream_id: str) -> bool:
        return stream_id in self._streams

    def route(
        self, env: Envelope, members: dict[HubConnection, None], out: OutFrame, now: float
    ) -> int:
        """Push a stream frame to its audience; returns the number of deliveries."""
        stream_id = env.stream
        assert stream_id is not None
        if env.op is StreamOp.OPEN:
            exclude = env.exclude
            audience = (
                dict.fromkeys(members)
                if exclude is None
                else {c: None for c in members if c.agent_id != exclude}
            )
            publisher = stream_id.partition("/")[0] if "/" in stream_id else ""
            record = RelayedStream(stream_id, env.space, publisher, audience, now)
            self._streams[stream_id] = record
        else:
            found = self._streams.get(stream_id)
            if found is None:
                return 0
            record = found
            record.last_active = now
            if env.op is StreamOp.END:
                del self._streams[stream_id]
        exclude = env.exclude if env.op is StreamOp.END else None
        n = 0
        for conn in record.audience:
            if exclude is not None and conn.agent_id == exclude:
                continue
            conn.push(out)
            n += 1
        return n

    def stop_receiving(self, conn: HubConnection, stream_id: str) -> bool:
        """Receiver-side cancel: False if ``conn`` was not receiving it."""
        record = self._streams.get(stream_id)
        if record is None or conn not in record.audience:
            return False
        del record.audience[conn]
        return True

    def forget_member(self, space: str, conn: HubConnection) -> None:
        """``conn`` left ``space`` (or disconnected)."""
        for record in self._streams.values():
            if record.space == space:
                record.audience.pop(conn, None)

    def expire(self, now: float, idle: float) -> list[RelayedStream]:
        """Drop and return streams with no frame for ``idle`` seconds."""
        stale = [r for r in self._streams.values() if now - r.last_active > idle]
        for record in stale:
            del self._streams[record.stream_id]
        return stale
