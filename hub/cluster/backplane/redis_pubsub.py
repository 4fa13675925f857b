"""The Redis backplane's pub/sub link: one dedicated connection per node.

A background task connects, raises each subscribed space's seq to the highest
this node has seen (Redis may have restarted empty, or come back behind),
then subscribes the node channel and every wanted space in one ``SUBSCRIBE``;
the node is ``ready`` once Redis confirmed them all. The pump then reads the
connection and pushes every message to the node's
:class:`~hub.cluster.backplane.base.DeliveryHandler`. A lost link (or one silent
across two pings) is dropped and reconnected with capped, jittered backoff.

The link also keeps, per subscribed space, the highest seq acknowledged to a
publisher of this node and the last one delivered: the floors of the raise,
and how a skipped seq (missed messages) is noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from hub.cluster.backplane.base import DeliveryHandler
from hub.cluster.backplane.redis_client import REDIS_ERRORS, unavailable
from hub.cluster.backplane.redis_scripts import RAISE_SEQ_LUA, SpaceKeys, parse_message
from hub.errors import BackplaneUnavailable


class PubSubLink:
    """The node's subscriptions and the connection that carries them."""

    def __init__(
        self,
        client: Redis,
        keys: SpaceKeys,
        *,
        node_channel: bytes,
        seq_ttl: int,
        candidate: Callable[[], str],
        timeout: float,
        ping_interval: float,
        backoff: tuple[float, float],
        log: Any,
    ):
        self._pool = client.connection_pool
        self._keys = keys
        self._raise_script = client.register_script(RAISE_SEQ_LUA)
        self._node_channel = node_channel
        self._seq_ttl = seq_ttl
        self._candidate = candidate
        self._timeout = timeout
        self._ping_interval = ping_interval
        self._backoff = backoff
        self._log = log

        self._handler: DeliveryHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # The live pub/sub connection, set once its SUBSCRIBE has been sent.
        self.conn: AbstractConnection | None = None
        # Every space channel this node wants, channel -> space.
        self._channels: dict[bytes, str] = {}
        self._confirmed: set[bytes] = set()  # on the current connection
        self._awaiting: set[bytes] = set()  # of the (re)subscribe batch
        self._pending: dict[bytes, asyncio.Future[None]] = {}
        # Highest seq acknowledged, and the last one delivered, per subscribed
        # space: the floors the seq is raised to after a reconnect (Redis may
        # be empty); a delivered seq that skips numbers means missed messages.
        self._floors: dict[str, int] = {}
        self._delivered: dict[str, int] = {}
        self.ready = False
        self._reported: bool | None = None
        self.lag = 0.0
        self._received = 0

    def start(self, handler: DeliveryHandler) -> None:
        if self._task is not None or self._closed:
            return
        self._handler = handler
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.ready = False
        self._fail_pending()

    # ── subscriptions ───────────────────────────────────────────────────

    async def subscribe(self, space: str) -> None:
        """Returns once Redis confirmed the subscription."""
        ch = self._keys.channel(space)
        conn = self.conn
        if conn is None or not conn.is_connected or self._closed:
            raise BackplaneUnavailable("redis unavailable: not connected")
        if ch in self._confirmed and ch in self._channels:
            return
        added = ch not in self._channels
        self._channels[ch] = space
        try:
            future = self._pending.get(ch)
            if future is None:
                # Concurrent subscribes to one channel share one SUBSCRIBE.
                future = self._pending[ch] = asyncio.get_running_loop().create_future()
                await asyncio.wait_for(
                    conn.send_command("SUBSCRIBE", ch, check_health=False), self._timeout
                )
            await asyncio.wait_for(asyncio.shield(future), self._timeout)
        except BaseException as exc:
            # The caller rolls its join back: don't resubscribe this one later.
            # (A failed send also dropped the connection, and the loop then
            # fails every pending confirmation.)
            if added and ch not in self._confirmed:
                self._channels.pop(ch, None)
            if isinstance(exc, REDIS_ERRORS):
                raise unavailable("subscribe", exc) from exc
            raise

    async def unsubscribe(self, space: str) -> None:
        """Best effort: a stale subscription only costs traffic."""
        ch = self._keys.channel(space)
        self._channels.pop(ch, None)
        self._confirmed.discard(ch)
        self._floors.pop(space, None)
        self._delivered.pop(space, None)
        conn = self.conn
        if conn is not None and conn.is_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    conn.send_command("UNSUBSCRIBE", ch, check_health=False), self._timeout
                )

    def acknowledged(self, space: str, seq: int) -> None:
        """A publish of this node got ``seq``: a floor while the space is subscribed."""
        if seq > self._floors.get(space, 0) and self._keys.channel(space) in self._channels:
            self._floors[space] = seq

    def delivered(self, space: str) -> int:
        return self._delivered.get(space, 0)

    # ── the connection loop ─────────────────────────────────────────────

    def _set_ready(self, ready: bool) -> None:
        self.ready = ready
        if ready == self._reported or self._handler is None:
            return
        self._reported = ready
        try:
            self._handler.backplane_ready(ready)
        except Exception:
            self._log.exception("backplane_ready handler failed")

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(BackplaneUnavailable("redis unavailable: connection lost"))
                future.exception()  # mark retrieved: a waiter may have given up

    async def _run(self) -> None:
        low, high = self._backoff
        delay = low
        failures = 0
        while not self._closed:
            conn: AbstractConnection | None = None
            keepalive: asyncio.Task[None] | None = None
            try:
                conn = self._pool.connection_class(
                    **{**self._pool.connection_kwargs, "socket_timeout": None}
                )
                # This connection has no read timeout (it waits for messages),
                # so bound the handshake here: a hung Redis must not stall us.
                await asyncio.wait_for(conn.connect(), 2 * self._timeout)
                await self._raise_sequences()
                channels = [self._node_channel, *self._channels]
                self._confirmed.clear()
                self._awaiting = set(channels)
                await asyncio.wait_for(
                    conn.send_command("SUBSCRIBE", *channels, check_health=False), self._timeout
                )
                self.conn = conn
                keepalive = asyncio.get_running_loop().create_task(self._keepalive(conn))
                await self._pump(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.ready or failures == 0:
                    self._log.warning("redis connection lost", error=str(exc) or type(exc).__name__)
                failures += 1
            finally:
                was_ready = self.ready
                self.conn = None
                self._confirmed.clear()
                self._awaiting.clear()
                if not self._closed:
                    self._set_ready(False)
                self._fail_pending()
                if keepalive is not None:
                    keepalive.cancel()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.disconnect(nowait=True)
            if was_ready:
                delay, failures = low, 1
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, high)

    async def _raise_sequences(self) -> None:
        """Keep seq strictly increasing for this node even if Redis restarted empty."""
        wanted = set(self._channels.values())
        highest = dict(self._floors)
        for space, seq in self._delivered.items():
            if seq > highest.get(space, 0):
                highest[space] = seq
        floors = [(s, n) for s, n in highest.items() if s in wanted]
        for i in range(0, len(floors), 500):
            chunk = floors[i : i + 500]
            keys = []
            for s, _ in chunk:
                keys += self._keys.position(s)
            args = [self._seq_ttl, self._candidate(), *(n for _, n in chunk)]
            await self._raise_script(keys=keys, args=args)

    async def _keepalive(self, conn: AbstractConnection) -> None:
        """Detect a silent dead peer: nothing received across two pings → drop it."""
        seen = -1
        pinged = False
        while True:
            await asyncio.sleep(self._ping_interval)
            if self._received != seen:
                seen, pinged = self._received, False
                continue
            if pinged:
                self._log.warning("redis pub/sub connection silent: reconnecting")
                await conn.disconnect(nowait=True)
                return
            pinged = True
            try:
                await asyncio.wait_for(conn.send_command("PING", check_health=False), self._timeout)
            except Exception:
                await conn.disconnect(nowait=True)
                return

    async def _pump(self, conn: AbstractConnection) -> None:
        """Read the pub/sub connection until it fails; the fan-out hot path."""
        read = conn.read_response
        channels = self._channels
        node_channel = self._node_channel
        delivered = self._delivered
        handler = self._handler
        assert handler is not None
        deliver = handler.deliver
        clock = time.time
        while True:
            msg = await read()
            self._received += 1
            kind = msg[0]
            if kind == b"message":
                channel = msg[1]
                data = msg[2]
                space = channels.get(channel)
                try:
                    if space is not None:
                        message, published_at = parse_message(space, data)
                        seq = message.seq
                        if seq is not None:
                            last = delivered.get(space)
                            delivered[space] = seq
                            if last is not None and seq > last + 1:
                                handler.missed(space, last, seq)
                        self.lag = clock() - published_at
                        deliver(message)
                    elif channel == node_channel:
                        handler.node_message(data)
                except Exception:
                    self._log.exception("delivery failed", channel=channel[:200])
            elif kind == b"subscribe":
                self._on_subscribed(msg[1])

    def _on_subscribed(self, channel: bytes) -> None:
        self._confirmed.add(channel)
        future = self._pending.pop(channel, None)
        if future is not None and not future.done():
            future.set_result(None)
        if self._awaiting:
            self._awaiting.discard(channel)
            if not self._awaiting:
                self._log.info("redis subscribed", channels=len(self._confirmed))
                self._set_ready(True)
