"""Redis backplane: one atomic script sequences, records and publishes.

Layout (``P`` is the key prefix, default ``agora``; lifetimes, the channel
message and epochs: :mod:`hub.cluster.backplane.redis_scripts`)::

    P:seq:{space}       STRING  the space's last seq (INCR)
    P:epoch:{space}     STRING  the space's history epoch
    P:history:{space}   STREAM  the last history_size messages
    P:once:{space}:{h}  STRING  idempotency receipts
    P:space:{space}     channel the space's messages
    P:node:{node_id}    channel messages for one node (send_to_node)

(On one Redis ``{space}`` stands for the name; on a Redis Cluster the braces
are in the key — a hash tag — and the channels are sharded.)

:class:`RedisBackplane` puts together the parts, each in its module::

    redis_scripts    the layout: key names, the channel message, the Lua scripts
    redis_pubsub     PubSubLink: subscriptions, the connection loop, the pump
    redis_publisher  RedisPublisher: publishes, pipelined in submission order
    redis_history    HistoryReader: position and history reads
    redis_positions  SpacePositions: floors, delivered seqs, epochs; the reconnect's raise

It runs on the node's :class:`~hub.cluster.redis_connection.RedisConnection`
(which it does not close). One dedicated pub/sub connection per node (one per
master on a cluster), driven by a background task that
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

import structlog
from redis.asyncio.connection import AbstractConnection

from hub.cluster.backplane.base import Delivery, DeliveryHandler, Draft, History, Position
from hub.cluster.backplane.redis_history import HistoryReader
from hub.cluster.backplane.redis_publisher import MAX_BATCH, RedisPublisher
from hub.cluster.backplane.redis_pubsub import PubSubLink
from hub.cluster.backplane.redis_scripts import (
    SEQ_TTL,
    EpochCandidates,
    Scripts,
    SpaceKeys,
    routing,
)
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import REDIS_ERRORS, as_unavailable, unavailable
from hub.errors import BackplaneUnavailable

__all__ = ["MAX_BATCH", "REDIS_ERRORS", "RedisBackplane", "unavailable"]

_NOT_READY_TEXT = "redis unavailable: the node is not connected and subscribed"


class RedisBackplane:
    """The backplane of a cluster node."""

    def __init__(
        self,
        redis: RedisConnection,
        *,
        prefix: str = "agora",
        node_id: str,
        history_size: int = 1000,
        history_ttl: float = 300.0,
        ping_interval: float = 5.0,
        backoff_min: float = 0.05,
        backoff_max: float = 2.0,
    ):
        self.node_id = node_id
        history_ttl_s = max(1, round(history_ttl))
        seq_ttl = max(SEQ_TTL, history_ttl_s)
        self._redis = redis
        self._client = client = redis.client
        self._keys = keys = SpaceKeys(prefix, redis.clustered)
        scripts = Scripts(clustered=redis.clustered, failover=redis.failover)
        # Node messages: sharded on a cluster too, so a publish's receiver
        # count is the subscribers of that node's channel (0: it is gone).
        self._publish_command = "SPUBLISH" if redis.clustered else "PUBLISH"
        candidate = EpochCandidates()
        self._link = PubSubLink(
            redis,
            keys,
            client.register_script(scripts.raise_seq),
            node_channel=keys.node_channel(node_id).encode(),
            seq_ttl=seq_ttl,
            candidate=candidate,
            ping_interval=ping_interval,
            backoff=(backoff_min, backoff_max),
            log=structlog.get_logger("hub.cluster.backplane").bind(node=node_id),
        )
        self._publisher = RedisPublisher(
            client,
            keys,
            client.register_script(scripts.publish),
            self._link,
            history_size=int(history_size),
            history_ttl=history_ttl_s,
            seq_ttl=seq_ttl,
            candidate=candidate,
        )
        self._reads = HistoryReader(
            client,
            keys,
            scripts,
            seq_ttl=seq_ttl,
            candidate=candidate,
            observed=self._link.observed,
        )
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
        """Stop the loop, close the pub/sub connections and fail what was not
        sent; the command client is the connection owner's. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._link.aclose()
        await self._publisher.aclose()

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

    async def send(self, message: Delivery) -> int:
        self._refuse_unless_ready()
        seq = b"" if message.seq is None else b"%d" % message.seq
        msg = seq + routing(message) + message.frame
        with as_unavailable("send"):
            # Each node subscribes a space's channel once: the receiver count
            # is the number of nodes (a stream census counts on it).
            return int(
                await self._client.execute_command(
                    self._publish_command, self._keys.channel(message.space), msg
                )
            )

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        self._refuse_unless_ready()
        with as_unavailable("send_to_node"):
            channel = self._keys.node_channel(node_id)
            return int(await self._client.execute_command(self._publish_command, channel, payload))

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
