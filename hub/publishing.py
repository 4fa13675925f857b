"""Publishing and streaming: what a publish, a delta, a done or a cancel does.

Every frame is encoded once, here, as a head and a tail around its ``seq``
(see :func:`protocol.codec.sequenced`); the backplane assigns the seq and
delivers the finished bytes to every node, whose fan-out hands them to each
member unchanged.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from hub.backplane import Draft, StreamOp
from hub.session import Denied, Publish, ReceiverCancel, StreamCancel, StreamDelta, StreamDone
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from hub.connection import HubConnection
    from hub.node import Node

# Publishes a connection may leave queued on the backplane without waiting
# for their seq; beyond it the connection waits (backpressure).
MAX_UNAWAITED = 1024


class Publishing:
    def __init__(self, node: Node):
        self._node = node
        self.settings = node.settings
        self.backplane = node.backplane
        self.counters = node.counters
        self.streams = node.streams

    async def publish(self, conn: HubConnection, a: Publish) -> None:
        agent = conn.agent_id
        data = a.data
        if "from" not in data:
            data["from"] = agent
        text = data.get("text")
        threshold = self.settings.stream_threshold
        if type(text) is str and len(text) * 4 > threshold and len(text.encode()) > threshold:
            await self._publish_streamed(conn, a, text)
            return
        event_id = self._node.new_event_id()
        ts = codec.now_ms()
        rest: dict[str, Any] = {"from": agent, "timestamp": ts, "data": data}
        if a.request_id is not None:
            rest["request_id"] = a.request_id
        head, tail = codec.sequenced("space.event", a.space, event_id, rest)
        pending = self.backplane.publish_nowait(
            a.space, Draft(head, tail, None if a.echo else agent)
        )
        self.counters.published += 1
        if a.echo:
            # The echo is the acknowledgement: the connection's next message
            # needn't wait for Redis (a failure is still reported).
            await self._unless_queued(conn, pending, a.request_id)
            return
        seq = await pending
        conn.send_frame(codec.published(a.request_id, a.space, event_id, seq, ts))

    async def _unless_queued(
        self, conn: HubConnection, pending: asyncio.Future[int], request_id: str | int | None
    ) -> None:
        """Await a publish only if it is already settled or the backlog is long."""
        if pending.done() or self.backplane.backlog > MAX_UNAWAITED:
            await pending  # BackplaneUnavailable becomes an UNAVAILABLE answer
        else:
            pending.add_done_callback(functools.partial(self._report, conn, request_id))

    def _report(
        self, conn: HubConnection, request_id: str | int | None, pending: asyncio.Future[int]
    ) -> None:
        if pending.cancelled() or pending.exception() is None:
            return
        self.counters.backplane_errors += 1
        if not conn.closing:
            self._node.send_error(
                conn,
                ErrorCode.UNAVAILABLE,
                f"{pending.exception()}: request not carried out",
                request_id,
            )

    async def _publish_streamed(self, conn: HubConnection, a: Publish, text: str) -> None:
        """A publish too big for one event goes out as deltas and a done."""
        agent = conn.agent_id
        stream_id = f"{agent}/{self._node.new_event_id()}"
        exclude = None if a.echo else agent
        ts = codec.now_ms()
        first = {k: v for k, v in a.data.items() if k != "text"}
        for i, chunk in enumerate(codec.split_utf8(text, self.settings.stream_chunk)):
            data = {**first, "text": chunk} if i == 0 else {"text": chunk}
            head, tail = codec.sequenced(
                "space.event.delta",
                a.space,
                stream_id,
                {"from": agent, "timestamp": ts, "data": data},
            )
            op = StreamOp.OPEN if i == 0 else StreamOp.DELTA
            await self.backplane.publish(a.space, Draft(head, tail, exclude, stream_id, op))
        rest: dict[str, Any] = {"from": agent, "timestamp": ts}
        if a.request_id is not None:
            rest["request_id"] = a.request_id
        head, tail = codec.sequenced("space.event.done", a.space, stream_id, rest)
        seq = await self.backplane.publish(
            a.space, Draft(head, tail, exclude, stream_id, StreamOp.END)
        )
        self.counters.published += 1
        if not a.echo:
            conn.send_frame(codec.published(a.request_id, a.space, stream_id, seq, ts))

    async def denied(self, conn: HubConnection, a: Denied) -> None:
        if await self._node.membership.space_exists(a.space):
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED, f"not a member of space {a.space!r}", a.request_id
            )
        raise ProtocolError(
            ErrorCode.SPACE_NOT_FOUND, f"space {a.space!r} does not exist", a.request_id
        )

    async def stream_delta(self, conn: HubConnection, a: StreamDelta) -> None:
        agent = conn.agent_id
        data = a.data
        if a.first and "from" not in data:
            data["from"] = agent
        head, tail = codec.sequenced(
            "space.event.delta",
            a.space,
            a.stream_id,
            {"from": agent, "timestamp": codec.now_ms(), "data": data},
        )
        op = StreamOp.OPEN if a.first else StreamOp.DELTA
        exclude = None if a.echo else agent
        pending = self.backplane.publish_nowait(
            a.space, Draft(head, tail, exclude, a.stream_id, op)
        )
        await self._unless_queued(conn, pending, a.request_id)

    async def stream_done(self, conn: HubConnection, a: StreamDone) -> None:
        rest: dict[str, Any] = {"from": conn.agent_id, "timestamp": codec.now_ms()}
        if a.request_id is not None:
            rest["request_id"] = a.request_id
        head, tail = codec.sequenced("space.event.done", a.space, a.stream_id, rest)
        await self.backplane.publish(a.space, Draft(head, tail, None, a.stream_id, StreamOp.END))
        self.counters.published += 1

    async def stream_cancel(self, conn: HubConnection, a: StreamCancel) -> None:
        """End a publisher's stream early; the publisher always hears of it."""
        agent = conn.agent_id
        rest: dict[str, Any] = {"from": agent, "timestamp": codec.now_ms(), "reason": a.reason}
        if a.request_id is not None:
            rest["request_id"] = a.request_id
        head, tail = codec.sequenced("space.event.cancel", a.space, a.stream_id, rest)
        seq = await self.backplane.publish(
            a.space, Draft(head, tail, agent, a.stream_id, StreamOp.END)
        )
        if not conn.closing:
            conn.send_frame(codec.complete(head, seq, tail))

    def receiver_cancel(self, conn: HubConnection, a: ReceiverCancel) -> None:
        if not self.streams.stop_receiving(conn, a.stream_id):
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"not receiving a stream {a.stream_id[:260]!r}",
                a.request_id,
            )
        conn.send_frame(codec.receiver_cancelled(a.request_id, a.space, a.stream_id))
