r"""The Redis backplane's pub/sub link: the node's subscriptions and the
connections that carry them.

On one Redis (or behind Sentinel) one dedicated connection carries every
channel (``SUBSCRIBE``). On a Redis Cluster space traffic is sharded pub/sub:
each channel lives on the master that owns its hash slot, so the link holds
one connection per master and ``SSUBSCRIBE``\ s each channel on its owner.
The link is one unit either way: a background task reads the slot map (on a
cluster), connects every connection, raises each subscribed space's seq to
the highest this node has seen (Redis may have restarted empty, come back
behind, or failed over to a replica that was behind), then subscribes every
wanted channel; the node is ``ready`` once Redis confirmed them all. The
pumps then read the connections and push every message to the node's
:class:`~hub.cluster.backplane.base.DeliveryHandler`. When any connection is
lost (or silent across two pings), or a cluster tells it a channel's slot
moved (``sunsubscribe`` unasked), all are dropped and the whole is
reconnected with capped, jittered backoff — a master failover or a slot move
costs one resubscription, and every message missed meanwhile is noticed by
its seq. (redis-py's own cluster pub/sub is not used: it builds a dict per
message and polls one connection per node in turn, where this pump reads
each connection's raw replies as they come; and the link must raise seqs
before it subscribes and be ready only once every shard confirmed.)

The link also keeps, per subscribed space, the highest seq acknowledged to a
publisher of this node (or read at a join) and the last one delivered: the
floors of the raise, and how a skipped seq (missed messages) is noticed; and
the epoch its members are on: when the raise finds another one, what they
received may be gone from Redis (``lost``), and they must resume. They resume
too when a space's seq goes back while the link stands (Redis lost its keys
without restarting: ``FLUSHALL``, eviction), before that message is delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot

from hub.cluster.backplane.base import DeliveryHandler
from hub.cluster.backplane.redis_positions import SpacePositions
from hub.cluster.backplane.redis_scripts import SpaceKeys, parse_message
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import REDIS_ERRORS, unavailable
from hub.errors import BackplaneUnavailable


class _Shard:
    """One pub/sub connection and what the keepalive needs to know of it."""

    __slots__ = ("conn", "name", "received")

    def __init__(self, name: str, conn: AbstractConnection):
        self.name = name
        self.conn = conn
        self.received = 0


class PubSubLink:
    """The node's subscriptions and the connection(s) that carry them."""

    def __init__(
        self,
        redis: RedisConnection,
        keys: SpaceKeys,
        raise_script: Any,
        *,
        node_channel: bytes,
        seq_ttl: int,
        candidate: Callable[[], str],
        ping_interval: float,
        backoff: tuple[float, float],
        log: Any,
    ):
        self._redis = redis
        self._keys = keys
        self._node_channel = node_channel
        #: Floors, delivered seqs and epochs of the subscribed spaces.
        self.positions = SpacePositions(
            redis, keys, raise_script, seq_ttl=seq_ttl, candidate=candidate
        )
        self._timeout = redis.socket_timeout
        self._ping_interval = ping_interval
        self._backoff = backoff
        self._log = log
        sharded = redis.clustered
        self._subscribe_command = "SSUBSCRIBE" if sharded else "SUBSCRIBE"
        self._unsubscribe_command = "SUNSUBSCRIBE" if sharded else "UNSUBSCRIBE"
        self._message_kind = b"smessage" if sharded else b"message"
        self._confirm_kind = b"ssubscribe" if sharded else b"subscribe"

        self._handler: DeliveryHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._dropped = asyncio.Event()
        # The live connections by shard (one, named "", unless sharded), set
        # once their SUBSCRIBEs have been sent, and which shard owns a channel.
        self._shards: dict[str, _Shard] = {}
        self._owner: Callable[[bytes], str] = lambda channel: ""
        # Every space channel this node wants, channel -> space.
        self._channels: dict[bytes, str] = {}
        self._confirmed: set[bytes] = set()  # on the current connections
        self._awaiting: set[bytes] = set()  # of the (re)subscribe batch
        self._pending: dict[bytes, asyncio.Future[None]] = {}
        # Unsubscribes sent and not yet confirmed (a cluster also unsubscribes
        # by itself, when a channel's slot moves: that one is not ours).
        self._leaving: dict[bytes, int] = {}
        self.ready = False
        self._reported: bool | None = None
        self.lag = 0.0
        # The catch-up after a (re)subscribe (:meth:`_catch_up`), and the
        # barrier it waits for on this node's own channel.
        self._catching_up: asyncio.Task[None] | None = None
        self._barrier: tuple[bytes, asyncio.Future[None]] | None = None

    @property
    def conn(self) -> AbstractConnection | None:
        """A live pub/sub connection (a test drops it to cut the link)."""
        for shard in self._shards.values():
            return shard.conn
        return None

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

    def _shard_of(self, channel: bytes) -> _Shard | None:
        try:
            shard = self._shards.get(self._owner(channel))
        except Exception:  # the slot map is being refreshed
            return None
        if shard is None or not shard.conn.is_connected or self._closed:
            return None
        return shard

    async def subscribe(self, space: str) -> None:
        """Returns once Redis confirmed the subscription."""
        ch = self._keys.channel(space)
        shard = self._shard_of(ch)
        if shard is None:
            if self._shards:  # connected, but the slot's master is not ours
                self._drop("a channel's slot has a master this node is not connected to")
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
                    shard.conn.send_command(self._subscribe_command, ch, check_health=False),
                    self._timeout,
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
        self.positions.forget(space)
        shard = self._shard_of(ch)
        if shard is not None:
            self._leaving[ch] = self._leaving.get(ch, 0) + 1
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    shard.conn.send_command(self._unsubscribe_command, ch, check_health=False),
                    self._timeout,
                )

    def acknowledged(self, space: str, seq: int) -> None:
        """A publish of this node got ``seq``: a floor while the space is subscribed."""
        if self._keys.channel(space) in self._channels:
            self.positions.raise_floor(space, seq)

    def observed(self, space: str, epoch: str, seq: int) -> None:
        """A read of a subscribed space found it at ``epoch``/``seq``: what its
        members are on. (Ignored while not ready: the read may have reached a
        Redis the link has not checked yet.)"""
        if self.ready and self._keys.channel(space) in self._channels:
            self.positions.epochs[space] = epoch
            self.positions.raise_floor(space, seq)

    def delivered(self, space: str) -> int:
        return self.positions.delivered.get(space, 0)

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

    def _drop(self, why: str) -> None:
        """Cut every connection: the loop reconnects the whole link."""
        self._log.warning("redis pub/sub reconnecting", reason=why)
        self._dropped.set()

    async def _connect(self) -> None:
        if self._redis.clustered:
            conns, owner = await asyncio.wait_for(self._redis.shards(), 2 * self._timeout)
        else:
            conns, owner = {"": self._redis.subscriber()}, (lambda channel: "")
        shards = {name: _Shard(name, conn) for name, conn in conns.items()}
        try:
            # These connections have no read timeout (they wait for
            # messages), so bound the handshake here: a hung Redis must not
            # stall us.
            await asyncio.wait_for(
                asyncio.gather(*(s.conn.connect() for s in shards.values())), 2 * self._timeout
            )
            for space in await self.positions.resync(set(self._channels.values())):
                self._lost(space)
            channels = [self._node_channel, *self._channels]
            # One SUBSCRIBE per connection; sharded, one SSUBSCRIBE per hash
            # slot (its channels must share one), all sent in one write.
            groups: dict[str, dict[object, list[bytes]]] = {}
            for ch in channels:
                slot = key_slot(ch) if self._redis.clustered else 0
                groups.setdefault(owner(ch), {}).setdefault(slot, []).append(ch)
            self._confirmed.clear()
            self._awaiting = set(channels)
            for name, by_slot in groups.items():
                conn = shards[name].conn
                packed = conn.pack_commands(
                    [(self._subscribe_command, *chs) for chs in by_slot.values()]
                )
                await asyncio.wait_for(
                    conn.send_packed_command(packed, check_health=False), self._timeout
                )
        except BaseException:
            for shard in shards.values():
                with contextlib.suppress(Exception):
                    await shard.conn.disconnect(nowait=True)
            raise
        self._shards, self._owner = shards, owner

    async def _run(self) -> None:
        low, high = self._backoff
        delay = low
        failures = 0
        while not self._closed:
            tasks: list[asyncio.Task[None]] = []
            try:
                await self._connect()
                loop = asyncio.get_running_loop()
                self._dropped.clear()
                tasks.append(loop.create_task(self._dropped.wait()))  # type: ignore[arg-type]
                for shard in self._shards.values():
                    tasks.append(loop.create_task(self._pump(shard)))
                    tasks.append(loop.create_task(self._keepalive(shard)))
                done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # a pump's error
                raise ConnectionError("a pub/sub connection was dropped")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.ready or failures == 0:
                    self._log.warning("redis connection lost", error=str(exc) or type(exc).__name__)
                failures += 1
            finally:
                was_ready = self.ready
                if self._catching_up is not None:
                    self._catching_up.cancel()
                    self._catching_up = None
                shards, self._shards = self._shards, {}
                self._leaving.clear()
                self._confirmed.clear()
                self._awaiting.clear()
                if not self._closed:
                    self._set_ready(False)
                self._fail_pending()
                for task in tasks:
                    task.cancel()
                for shard in shards.values():
                    with contextlib.suppress(Exception):
                        await shard.conn.disconnect(nowait=True)
            if was_ready:
                delay, failures = low, 1
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, high)

    async def _keepalive(self, shard: _Shard) -> None:
        """Detect a silent dead peer: nothing received across two pings → drop it."""
        seen = -1
        pinged = False
        conn = shard.conn
        while True:
            await asyncio.sleep(self._ping_interval)
            if shard.received != seen:
                seen, pinged = shard.received, False
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

    async def _pump(self, shard: _Shard) -> None:
        """Read one pub/sub connection until it fails; the fan-out hot path."""
        read = shard.conn.read_response
        channels = self._channels
        node_channel = self._node_channel
        delivered = self.positions.delivered
        handler = self._handler
        assert handler is not None
        deliver = handler.deliver
        clock = time.time
        message_kind = self._message_kind
        while True:
            msg = await read()
            shard.received += 1
            kind = msg[0]
            if kind == message_kind:
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
                            if last is not None and seq != last + 1:
                                if seq > last:
                                    handler.missed(space, last, seq)
                                else:
                                    self._restarted(space, last, seq)
                        self.lag = clock() - published_at
                        deliver(message)
                    elif channel == node_channel:
                        barrier = self._barrier
                        if barrier is not None and data == barrier[0]:
                            if not barrier[1].done():
                                barrier[1].set_result(None)
                        else:
                            handler.node_message(data)
                except Exception:
                    self._log.exception("delivery failed", channel=channel[:200])
            elif kind == self._confirm_kind:
                self._on_subscribed(msg[1])
            elif kind == b"sunsubscribe" and not self._left(msg[1]):
                # Unasked: the channel's slot moved to another master.
                raise ConnectionError("a sharded channel's slot moved")

    async def _catch_up(self) -> None:
        """Subscribed again: what was published in a space while this node was
        not subscribed never arrives, and would be found missing only when the
        space's next message does — never, in a quiet space. So read each
        space's seq, then wait for a barrier sent on this node's own channel
        (same connection: every message published before it that this
        subscription gets has arrived by then); what is still missing up to
        that seq is reported as missed, and filled from history. (One
        connection only: sharded channels have no common order.)"""
        spaces = list(self._channels.values())
        token = b"catch-up:" + random.randbytes(12)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        try:
            client = self._redis.client
            seqs = await asyncio.wait_for(
                client.mget([self._keys.seq(space) for space in spaces]), self._timeout
            )
            self._barrier = (token, waiter)
            await asyncio.wait_for(
                client.execute_command("PUBLISH", self._node_channel, token), self._timeout
            )
            await asyncio.wait_for(waiter, 2 * self._timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the link's own checks notice a dead Redis
            self._log.warning("redis catch-up skipped", error=str(exc) or type(exc).__name__)
            return
        finally:
            self._barrier = None
        positions, handler = self.positions, self._handler
        assert handler is not None
        channels = set(self._channels.values())
        for space, raw in zip(spaces, seqs, strict=True):
            seq = int(raw or 0)
            base = positions.delivered.get(space, positions.floors.get(space))
            if base is None or seq <= base or space not in channels:
                continue
            positions.delivered[space] = seq  # what arrives next comes after it
            try:
                handler.missed(space, base, seq + 1)
            except Exception:
                self._log.exception("missed handler failed", space=space)

    def _restarted(self, space: str, last: int, seq: int) -> None:
        """A space's seq went back while this link stood: Redis lost its keys
        (``FLUSHALL``, eviction) and the scripts began the space again under a
        new epoch. Its members cannot get this event in order: they resume
        (:meth:`_lost`, before the event is delivered) and learn ``recovered:
        false``; the node's floor follows the new epoch, so a later raise does
        not push it back up to the old one."""
        self._log.warning(
            "space seq went back: its keys were lost", space=space, last=last, seq=seq
        )
        positions = self.positions
        positions.floors[space] = seq
        positions.epochs.pop(space, None)
        self._lost(space)

    def _lost(self, space: str) -> None:
        self._log.warning("space history may have been lost", space=space)
        if self._handler is not None:
            try:
                self._handler.lost(space)
            except Exception:
                self._log.exception("lost handler failed")

    def _left(self, channel: bytes) -> bool:
        """Whether this unsubscribe confirms one this link sent."""
        n = self._leaving.get(channel, 0)
        if n <= 1:
            self._leaving.pop(channel, None)
        else:
            self._leaving[channel] = n - 1
        return n > 0

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
                if not self._redis.clustered and self._channels:
                    self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())
