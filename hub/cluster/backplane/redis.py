"""Redis backplane: one atomic script sequences, records and publishes.

Layout (``P`` is the key prefix, default ``agora``; lifetimes, the channel
message and epochs: :mod:`hub.cluster.backplane.redis_scripts`)::

    P:seq:{space}       STRING  the space's last seq (INCR)
    P:epoch:{space}     STRING  the space's history epoch
    P:history:{space}   STREAM  the last history_size messages
    P:once:{space}:{h}  STRING  idempotency receipts
    P:space:{space}     channel the space's messages
    P:node:{node_id}    channel messages for one node (send_to_node)

:class:`RedisBackplane` puts together the parts, each in its module::

    redis_scripts    the layout: key names, the channel message, the Lua scripts
    redis_pubsub     PubSubLink: subscriptions, the connection loop, the pump
    redis_publisher  RedisPublisher: publishes, pipelined in submission order
    redis_history    HistoryReader: position and history reads
    redis_client     the pool and the errors, shared with the other Redis stores

One dedicated pub/sub connection per node, driven by a background task that
reconnects with capped, jittered backoff, raises each subscribed space's seq
to the highest this node has seen (Redis may have restarted empty), then
resubscribes everything; only then is the node ``ready``. Commands (publish,
send, reads) go through a small bounded pool with short socket timeouts and
no automatic retries, and are refused while the node is not ready, so a
publish either ran once or its caller got :class:`BackplaneUnavailable`.
See ``docs/cluster.md`` (Redis layout) for the delivery guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from redis.asyncio.connection import AbstractConnection

from hub.cluster.backplane.base import Delivery, DeliveryHandler, Draft, History, Position
from hub.cluster.backplane.redis_client import (
    REDIS_ERRORS,
    as_unavailable,
    redis_client,
    redis_pool,
    unavailable,
)
from hub.cluster.backplane.redis_history import HistoryReader
from hub.cluster.backplane.redis_publisher import MAX_BATCH, RedisPublisher
from hub.cluster.backplane.redis_pubsub import PubSubLink
from hub.cluster.backplane.redis_scripts import SEQ_TTL, EpochCandidates, SpaceKeys, routing
from hub.errors import BackplaneUnavailable

__all__ = ["MAX_BATCH", "REDIS_ERRORS", "RedisBackplane", "redis_pool", "unavailable"]

_NOT_READY_TEXT = "redis unavailable: the node is not connected and subscribed"


class RedisBackplane:
    """The backplane of a cluster node."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agora",
        node_id: str,
        history_size: int = 1000,
        history_ttl: float = 300.0,
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int = 64,
        ping_interval: float = 5.0,
        backoff_min: float = 0.05,
        backoff_max: float = 2.0,
    ):
        self.node_id = node_id
        history_ttl_s = max(1, round(history_ttl))
        seq_ttl = max(SEQ_TTL, history_ttl_s)
        self._keys = keys = SpaceKeys(prefix)
        self._client = client = redis_client(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
        candidate = EpochCandidates()
        self._link = PubSubLink(
            client,
            keys,
            node_channel=keys.node_channel(node_id).encode(),
            seq_ttl=seq_ttl,
            candidate=candidate,
            timeout=socket_timeout,
            ping_interval=ping_interval,
            backoff=(backoff_min, backoff_max),
            log=structlog.get_logger("hub.cluster.backplane").bind(node=node_id),
        )
        self._publisher = RedisPublisher(
            client,
            keys,
            self._link,
            history_size=int(history_size),
            history_ttl=history_ttl_s,
            seq_ttl=seq_ttl,
            candidate=candidate,
        )
        self._reads = HistoryReader(client, keys, seq_ttl=seq_ttl, candidate=candidate)
        self._closed = False

    # ── properties and lifecycle ────────────────────────────────────────

    @property
    def ready(self) -> bool:
        return self._link.ready

    @property
    def lag(self) -> float:
        return self._link.lag

    @property
    def _conn(self) -> AbstractConnection | None:
        """The live pub/sub connection (a test drops it to cut the link)."""
        return self._link.conn

    async def start(self, handler: DeliveryHandler) -> None:
        """Start the connection loop; never fails because Redis is down."""
        self._link.start(handler)

    async def aclose(self) -> None:
        """Stop the loop and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._link.aclose()
        await self._publisher.aclose()
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def __aenter__(self) -> RedisBackplane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ── subscriptions ───────────────────────────────────────────────────

    async def subscribe(self, space: str) -> None:
        """Returns once Redis confirmed the subscription."""
        await self._link.subscribe(space)

    async def unsubscribe(self, space: str) -> None:
        """Best effort: a stale subscription only costs traffic."""
        await self._link.unsubscribe(space)

    async def forget(self, space: str) -> None:
        # Nothing: the keys expire (the history after history_ttl, seq and
        # epoch after a day). Deleting the seq here could race a concurrent
        # first join elsewhere, and a member that lost its connection may
        # still resume.
        return None

    def delivered(self, space: str) -> int:
        return self._link.delivered(space)

    # ── sending ─────────────────────────────────────────────────────────
    # Only a ready node sends: while its own pub/sub link is down its members
    # (the publisher's echo included) would miss the message, and the seq
    # floors of a reconnect are not in place yet. Not ready means UNAVAILABLE.

    @property
    def backlog(self) -> int:
        """Publishes accepted but not yet answered by Redis."""
        return self._publisher.backlog

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        """Queue a publish; the future gives its seq or BackplaneUnavailable.

        Publishes are sent in submission order, as pipelines of up to
        ``MAX_BATCH`` scripts on one connection with one pipeline in flight, so
        a burst costs one round trip and reaches every node in one read.
        """
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if not self._link.ready:
            future.set_exception(BackplaneUnavailable(_NOT_READY_TEXT))
            return future
        self._publisher.submit(space, draft, future)
        return future

    async def publish(self, space: str, draft: Draft) -> int:
        return await self.publish_nowait(space, draft)

    async def send(self, message: Delivery) -> None:
        self._refuse_unless_ready()
        seq = b"" if message.seq is None else b"%d" % message.seq
        msg = seq + routing(message) + message.frame
        with as_unavailable("send"):
            await self._client.publish(self._keys.channel(message.space), msg)

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        self._refuse_unless_ready()
        with as_unavailable("send_to_node"):
            return int(await self._client.publish(self._keys.node_channel(node_id), payload))

    # ── history ─────────────────────────────────────────────────────────

    async def position(self, space: str) -> Position:
        self._refuse_unless_ready()
        return await self._reads.position(space)

    async def history(
        self,
        space: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int,
        streams: bool = False,
    ) -> History:
        self._refuse_unless_ready()
        return await self._reads.history(
            space, after=after, before=before, limit=limit, streams=streams
        )

    def _refuse_unless_ready(self) -> None:
        if not self._link.ready:
            raise BackplaneUnavailable(_NOT_READY_TEXT)
