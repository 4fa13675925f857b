"""Redis backplane: one atomic script sequences, records and publishes.

Layout (``P`` is the key prefix, default ``agora``)::

    P:seq:{space}       STRING  the space's last seq (INCR)
    P:epoch:{space}     STRING  the space's history epoch
    P:history:{space}   STREAM  the last history_size messages
    P:once:{space}:{h}  STRING  idempotency receipts
    P:space:{space}     channel the space's messages
    P:node:{node_id}    channel messages for one node (send_to_node)

(History, epochs and idempotency: :mod:`hub.backplane.redis_history`.)

A message on a space channel is a short text header, a newline, the excluded
agent id, the stream id and the addressed agent ids (space-separated; lengths
given in the header), then the frame::

    {seq} {op} {published_at} {len(exclude)} {len(stream)} {len(to)}\\n{exclude}{stream}{to}{frame}

``seq`` is empty for unsequenced messages. The receiver finds the newline,
splits five numbers and slices: the frame is never parsed here.

One dedicated pub/sub connection per node, driven by a background task that
reconnects with capped, jittered backoff, raises each subscribed space's seq
to the highest this node has seen (Redis may have restarted empty), then
resubscribes everything; only then is the node ``ready``. Commands (publish,
send) go through a small bounded pool with short socket timeouts and no
automatic retries, and are refused while the node is not ready, so a publish
either ran once or its caller got :class:`BackplaneUnavailable`.
See ``docs/cluster.md`` (Redis layout) for the delivery guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections import deque

import structlog
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisError

from hub.backplane.base import (
    DeliveryHandler,
    Draft,
    Duplicate,
    Envelope,
    History,
    Position,
    StreamOp,
)
from hub.backplane.redis_history import (
    HISTORY_LUA,
    POSITION_FN,
    POSITION_LUA,
    SEQ_TTL,
    candidate_epoch,
    history_from,
    position_from,
)
from hub.errors import BackplaneUnavailable
from hub.idempotency import receipt, redis_key

# Errors that mean "Redis could not do it": every one becomes BackplaneUnavailable.
REDIS_ERRORS = (RedisError, OSError)

_OPS = tuple(StreamOp)
# Most publish scripts sent in one pipeline.
MAX_BATCH = 256
_NOT_READY_TEXT = "redis unavailable: the node is not connected and subscribed"

# KEYS: seq, history, epoch[, once]. ARGV: head, tail, channel, header rest,
# history_size, history_ttl, seq_ttl, candidate epoch, stream id, stream op
# code[, receipt]. A known idempotency key returns its receipt (a string)
# and publishes nothing; otherwise the seq (an integer).
PUBLISH_LUA = (
    POSITION_FN
    + """
if KEYS[4] then
  local receipt = redis.call('GET', KEYS[4])
  if receipt then return receipt end
end
position(KEYS[1], KEYS[2], KEYS[3], ARGV[8], ARGV[7])
local seq = redis.call('INCR', KEYS[1])
local msg = seq .. ARGV[4] .. ARGV[1] .. seq .. ARGV[2]
local ttl = tonumber(ARGV[6])
if tonumber(ARGV[5]) > 0 then
  local id = seq .. '-0'
  if ARGV[9] ~= '' then
    redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], id, 'm', msg, 's', ARGV[9], 'o', ARGV[10])
  else
    redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], id, 'm', msg)
  end
  redis.call('EXPIRE', KEYS[2], ttl)
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('EXPIRE', KEYS[3], ARGV[7])
redis.call('PUBLISH', ARGV[3], msg)
if KEYS[4] then redis.call('SET', KEYS[4], seq .. ' ' .. ARGV[11], 'EX', ttl) end
return seq
"""
)

# KEYS: seq and epoch key of each space, in pairs. ARGV[1]: ttl, ARGV[i + 1]:
# the floor for the i-th space. Raising a seq means Redis came back behind
# what was delivered: its history may have lost messages, so the epoch goes.
RAISE_SEQ_LUA = """
local ttl = ARGV[1]
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local floor = tonumber(ARGV[i + 1])
  local cur = tonumber(redis.call('GET', key) or '0') or 0
  if cur < floor then
    redis.call('SET', key, floor, 'EX', ttl)
    redis.call('DEL', KEYS[2 * i])
  end
end
return 0
"""

# Stream op codes in a history entry: StreamOp, with the end split in two.
_DONE_CODE = b"3"
_CANCEL_CODE = b"4"
_CANCEL_HEAD = b'{"type":"space.event.cancel"'


def redis_pool(
    url: str,
    *,
    socket_timeout: float,
    connect_timeout: float,
    max_connections: int,
) -> BlockingConnectionPool:
    """A bounded pool with short timeouts and no automatic retries.

    A retried script could run twice (a publish with two seqs), so a failed
    command is reported, never repeated. Dead pooled connections are replaced
    when they are checked out, so one failure doesn't poison the pool.
    """
    return BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=socket_timeout,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
        # RESP2 on every redis-py version: pub/sub replies are plain arrays
        # that the pump reads itself (RESP3 would turn them into push frames).
        protocol=2,
    )


def unavailable(what: str, exc: BaseException) -> BackplaneUnavailable:
    err = BackplaneUnavailable(f"redis unavailable: {what} failed ({exc.__class__.__name__})")
    err.__cause__ = exc
    return err


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
        self._prefix = prefix
        self._history_size = int(history_size)
        self._history_ttl = max(1, round(history_ttl))
        self._seq_ttl = max(SEQ_TTL, self._history_ttl)
        self._timeout = socket_timeout
        self._ping_interval = ping_interval
        self._backoff = (backoff_min, backoff_max)
        self._pool = redis_pool(
            url,
            socket_timeout=socket_timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
        )
        self._client = Redis.from_pool(self._pool)
        self._publish_script = self._client.register_script(PUBLISH_LUA)
        self._raise_script = self._client.register_script(RAISE_SEQ_LUA)
        self._position_script = self._client.register_script(POSITION_LUA)
        # Candidate epochs: unique across nodes (random prefix) and time (counter).
        self._epoch_prefix = candidate_epoch()
        self._epochs = itertools.count(1)
        self._history_script = self._client.register_script(HISTORY_LUA)
        self._node_channel = f"{prefix}:node:{node_id}".encode()
        self._log = structlog.get_logger("hub.backplane").bind(node=node_id)

        self._handler: DeliveryHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # The live pub/sub connection, set once its SUBSCRIBE has been sent.
        self._conn: AbstractConnection | None = None
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
        self._ready = False
        self._reported: bool | None = None
        self._lag = 0.0
        self._received = 0
        # Publishes not yet sent, in order, and the task that pipelines them.
        self._outgoing: deque[tuple[str, tuple[object, ...], asyncio.Future[int]]] = deque()
        self._in_flight = 0
        self._drainer: asyncio.Task[None] | None = None

    # ── properties and lifecycle ────────────────────────────────────────

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def lag(self) -> float:
        return self._lag

    async def start(self, handler: DeliveryHandler) -> None:
        """Start the connection loop; never fails because Redis is down."""
        if self._task is not None or self._closed:
            return
        self._handler = handler
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        """Stop the loop and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._ready = False
        self._fail_pending()
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._drainer
        self._fail_batch(list(self._outgoing), ConnectionError("backplane closed"))
        self._outgoing.clear()
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def __aenter__(self) -> RedisBackplane:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ── names ───────────────────────────────────────────────────────────

    def _space_channel(self, space: str) -> bytes:
        return f"{self._prefix}:space:{space}".encode()

    def _seq_key(self, space: str) -> str:
        return f"{self._prefix}:seq:{space}"

    def _history_key(self, space: str) -> str:
        return f"{self._prefix}:history:{space}"

    def _epoch_key(self, space: str) -> str:
        return f"{self._prefix}:epoch:{space}"

    # ── subscriptions ───────────────────────────────────────────────────

    async def subscribe(self, space: str) -> None:
        """Returns once Redis confirmed the subscription."""
        ch = self._space_channel(space)
        conn = self._conn
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
        ch = self._space_channel(space)
        self._channels.pop(ch, None)
        self._confirmed.discard(ch)
        self._floors.pop(space, None)
        self._delivered.pop(space, None)
        conn = self._conn
        if conn is not None and conn.is_connected:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    conn.send_command("UNSUBSCRIBE", ch, check_health=False), self._timeout
                )

    async def forget(self, space: str) -> None:
        # Nothing: the keys expire (the history after history_ttl, seq and
        # epoch after a day). Deleting the seq here could race a concurrent
        # first join elsewhere, and a member that lost its connection may
        # still resume.
        return None

    # ── sending ─────────────────────────────────────────────────────────
    # Only a ready node sends: while its own pub/sub link is down its members
    # (the publisher's echo included) would miss the message, and the seq
    # floors of a reconnect are not in place yet. Not ready means UNAVAILABLE.

    @property
    def backlog(self) -> int:
        """Publishes accepted but not yet answered by Redis."""
        return len(self._outgoing) + self._in_flight

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        """Queue a publish; the future gives its seq or BackplaneUnavailable.

        Publishes are sent in submission order, as pipelines of up to
        ``MAX_BATCH`` scripts on one connection with one pipeline in flight, so
        a burst costs one round trip and reaches every node in one read.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        if not self._ready:
            future.set_exception(BackplaneUnavailable(_NOT_READY_TEXT))
            return future
        exclude = draft.exclude.encode() if draft.exclude else b""
        stream = draft.stream.encode() if draft.stream else b""
        to = " ".join(draft.to).encode() if draft.to is not None else b""
        rest = b" %d %.6f %d %d %d\n%s%s%s" % (
            draft.op,
            time.time(),
            len(exclude),
            len(stream),
            len(to) if draft.to is not None else -1,
            exclude,
            stream,
            to,
        )
        code = b"%d" % draft.op if draft.stream is not None else b""
        if code == _DONE_CODE and draft.head.startswith(_CANCEL_HEAD):
            code = _CANCEL_CODE
        args: tuple[object, ...] = (
            self._seq_key(space),
            self._history_key(space),
            self._epoch_key(space),
            draft.head,
            draft.tail,
            self._space_channel(space),
            rest,
            self._history_size,
            self._history_ttl,
            self._seq_ttl,
            self._candidate(),
            stream,
            code,
        )
        once = draft.once
        if once is not None:
            key = redis_key(self._prefix, space, once.key)
            args = (*args[:3], key, *args[3:], receipt(once))
        self._outgoing.append((space, args, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return future

    async def publish(self, space: str, draft: Draft) -> int:
        return await self.publish_nowait(space, draft)

    async def _drain(self) -> None:
        outgoing = self._outgoing
        while outgoing:
            batch = [outgoing.popleft() for _ in range(min(len(outgoing), MAX_BATCH))]
            self._in_flight = len(batch)
            try:
                results = await self._run_publishes([args for _, args, _ in batch])
            except asyncio.CancelledError:
                self._fail_batch(batch, asyncio.CancelledError())
                raise
            finally:
                self._in_flight = 0
            floors = self._floors
            for (space, _, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # the caller gave up waiting
                if isinstance(result, BaseException):
                    future.set_exception(unavailable("publish", result))
                    continue
                if isinstance(result, bytes):  # an idempotency key seen before
                    future.set_result(Duplicate.parse(result))
                    continue
                seq = int(result)  # type: ignore[call-overload]
                if seq > floors.get(space, 0) and self._space_channel(space) in self._channels:
                    floors[space] = seq
                future.set_result(seq)

    async def _run_publishes(self, batch: list[tuple[object, ...]]) -> list[object]:
        """EVALSHA each publish in one pipeline; reload the script after NOSCRIPT.

        A NOSCRIPT reply means that script did not run, so running it again
        cannot publish twice.
        """
        results: list[object] = [None] * len(batch)
        todo = list(range(len(batch)))
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for i in todo:
                args = batch[i]
                pipe.evalsha(self._publish_script.sha, 3 if len(args) == 13 else 4, *args)
            try:
                replies = await pipe.execute(raise_on_error=False)
            except REDIS_ERRORS as exc:
                for i in todo:
                    results[i] = exc
                return results
            missing = []
            for i, reply in zip(todo, replies, strict=True):
                if isinstance(reply, NoScriptError) and attempt == 0:
                    missing.append(i)
                else:
                    results[i] = reply
            if not missing:
                break
            try:
                await self._client.script_load(PUBLISH_LUA)
            except REDIS_ERRORS as exc:
                for i in missing:
                    results[i] = exc
                break
            todo = missing
        return results

    def _fail_batch(
        self, batch: list[tuple[str, tuple[object, ...], asyncio.Future[int]]], exc: BaseException
    ) -> None:
        for _, _, future in batch:
            if not future.done():
                future.set_exception(unavailable("publish", exc))
                future.exception()

    async def send(self, envelope: Envelope) -> None:
        if not self._ready:
            raise BackplaneUnavailable(_NOT_READY_TEXT)
        exclude = envelope.exclude.encode() if envelope.exclude else b""
        stream = envelope.stream.encode() if envelope.stream else b""
        to = " ".join(envelope.to).encode() if envelope.to is not None else b""
        msg = b"%s %d %.6f %d %d %d\n%s%s%s%s" % (
            b"" if envelope.seq is None else b"%d" % envelope.seq,
            envelope.op,
            time.time(),
            len(exclude),
            len(stream),
            len(to) if envelope.to is not None else -1,
            exclude,
            stream,
            to,
            envelope.frame,
        )
        try:
            await self._client.publish(self._space_channel(envelope.space), msg)
        except REDIS_ERRORS as exc:
            raise unavailable("send", exc) from exc

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        if not self._ready:
            raise BackplaneUnavailable(_NOT_READY_TEXT)
        try:
            return int(await self._client.publish(f"{self._prefix}:node:{node_id}", payload))
        except REDIS_ERRORS as exc:
            raise unavailable("send_to_node", exc) from exc

    # ── history ─────────────────────────────────────────────────────────

    def _space_keys(self, space: str) -> list[str]:
        return [self._seq_key(space), self._history_key(space), self._epoch_key(space)]

    def _candidate(self) -> str:
        return f"{self._epoch_prefix}{next(self._epochs):x}"

    def delivered(self, space: str) -> int:
        return self._delivered.get(space, 0)

    async def position(self, space: str) -> Position:
        if not self._ready:
            raise BackplaneUnavailable(_NOT_READY_TEXT)
        try:
            reply = await self._position_script(
                keys=self._space_keys(space), args=[self._candidate(), self._seq_ttl]
            )
        except REDIS_ERRORS as exc:
            raise unavailable("position", exc) from exc
        return position_from(reply)

    async def history(
        self,
        space: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int,
        streams: bool = False,
    ) -> History:
        if not self._ready:
            raise BackplaneUnavailable(_NOT_READY_TEXT)
        if after is not None:
            mode, bound = "after", after
        elif before is not None:
            mode, bound = "before", before
        else:
            mode, bound = "newest", 0
        scan = "1" if streams and after is not None else "0"
        args = [self._candidate(), self._seq_ttl, mode, bound, max(0, limit), scan]
        try:
            reply = await self._history_script(keys=self._space_keys(space), args=args)
        except REDIS_ERRORS as exc:
            raise unavailable("history", exc) from exc
        return history_from(space, reply, newest_first=mode != "after", streams=scan == "1")

    # ── the connection loop ─────────────────────────────────────────────

    def _set_ready(self, ready: bool) -> None:
        self._ready = ready
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
                self._conn = conn
                keepalive = asyncio.get_running_loop().create_task(self._keepalive(conn))
                await self._pump(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._ready or failures == 0:
                    self._log.warning("redis connection lost", error=str(exc) or type(exc).__name__)
                failures += 1
            finally:
                was_ready = self._ready
                self._conn = None
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
                keys += [self._seq_key(s), self._epoch_key(s)]
            await self._raise_script(keys=keys, args=[self._seq_ttl, *(n for _, n in chunk)])

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
                        i = data.index(b"\n")
                        seq_b, op_b, at_b, xlen_b, slen_b, tlen_b = data[:i].split(b" ")
                        i += 1
                        xlen = int(xlen_b)
                        slen = int(slen_b)
                        tlen = int(tlen_b)
                        j = i + xlen
                        k = j + slen
                        m = k + tlen if tlen > 0 else k
                        seq = int(seq_b) if seq_b else None
                        if seq is not None:
                            last = delivered.get(space)
                            delivered[space] = seq
                            if last is not None and seq > last + 1:
                                handler.missed(space, last, seq)
                        self._lag = clock() - float(at_b)
                        deliver(
                            Envelope(
                                space,
                                data[m:],
                                seq,
                                data[i:j].decode() if xlen else None,
                                data[j:k].decode() if slen else None,
                                _OPS[int(op_b)],
                                None if tlen < 0 else tuple(data[k:m].decode().split()),
                            )
                        )
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
