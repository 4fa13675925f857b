"""A lean WebSocket client for load generation.

The load generator has one core to itself and must receive faster than the
server sends, so it cannot afford a full client library per connection (the
websockets client spends more CPU per received message than the server
spends per delivery). :class:`LoadClient` is a bare ``asyncio.Protocol``:
it writes the upgrade request itself, then splits the byte stream into
frames by their headers. While measuring it only counts data frames (and,
for latency runs, reads the send timestamp embedded in each one); only during
setup does it decode JSON. With permessage-deflate negotiated it inflates
every compressed frame, as a real client must (context takeover).

It speaks just enough of RFC 6455 for a benchmark against a trusted server
on 127.0.0.1: unfragmented server messages, pings answered, close frames
acknowledged. Client frames are masked as the RFC requires. Like a real
client library it keeps an idle connection alive with WebSocket pings
(:meth:`LoadClient.keep_alive`): the hub runs with its default 60 s heartbeat
timeout, and pings count as liveness without adding data frames to count.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
import zlib
from collections import deque
from typing import Any

import orjson
from websockets.frames import Frame, Opcode

monotonic_ns = time.monotonic_ns
STAMP_KEY = b'"sent_ns":'
_STAMP_LEN = len(STAMP_KEY)
_DEFLATE_TAIL = b"\x00\x00\xff\xff"


class HandshakeError(Exception):
    pass


def masked_text_frame(payload: bytes) -> bytes:
    """One client → server text frame (masked, as RFC 6455 requires)."""
    return Frame(Opcode.TEXT, payload).serialize(mask=True)


class LoadClient(asyncio.Protocol):
    """One WebSocket connection of the load generator."""

    def __init__(self, host: str, port: int, path: str, deflate: bool) -> None:
        self.host, self.port, self.path = host, port, path
        self.offer_deflate = deflate
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.upgraded = False
        self.closed = False
        self.inflater: Any = None
        self._buf = bytearray()
        # Setup phase: decoded JSON messages wait here for recv().
        self.collect = True
        self.inbox: deque[bytes] = deque()
        self._inbox_waiter: asyncio.Future[None] | None = None
        # Measuring phase.
        self.frames = 0  # data frames received since reset()
        self.reads = 0  # data_received calls since reset(): frames/reads shows coalescing
        self.latencies: list[int] | None = None  # ns, when measuring latency
        self.last_ns = 0  # when the frame that met the target arrived
        self._target = 0
        self._target_waiter: asyncio.Future[None] | None = None
        # Since the connection opened, never reset: data frames, bytes, last arrival.
        self.total_frames = 0
        self.total_bytes = 0
        self.last_rx_ns = 0
        self._keepalive: asyncio.TimerHandle | None = None
        # Setup phase: messages containing one of these markers are counted
        # but not kept (membership chatter that thousands of clients would
        # otherwise hold in memory).
        self.skip: tuple[bytes, ...] = ()
        self.pongs = 0  # pongs received (the baseline's liveness probe)
        self._pong_waiter: asyncio.Future[None] | None = None
        self.close_code: int | None = None  # from the server's close frame

    # ── connecting ───────────────────────────────────────────────────────

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        path: str,
        *,
        deflate: bool = False,
        timeout: float = 30.0,
        source: str | None = None,
        skip: tuple[bytes, ...] = (),
    ) -> LoadClient:
        """Open and upgrade; ``source`` binds the local address (127.0.0.x:
        each source address has its own ~28k ephemeral ports)."""
        loop = asyncio.get_running_loop()
        local = (source, 0) if source else None
        client: LoadClient | None = None
        try:
            async with asyncio.timeout(timeout):
                _, client = await loop.create_connection(
                    lambda: cls(host, port, path, deflate), host, port, local_addr=local
                )
                client.skip = skip
                await client.opened
        except BaseException:
            if client is not None:
                client.abort()  # a handshake given up on must not stay open
            raise
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {self.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {self._key}",
            "Sec-WebSocket-Version: 13",
        ]
        if self.offer_deflate:
            lines.append("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits")
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        if not self.opened.done():
            self.opened.set_exception(HandshakeError(f"connection lost during handshake: {exc}"))
        self._wake_inbox()
        if self._target_waiter is not None and not self._target_waiter.done():
            self._target_waiter.set_exception(ConnectionError("connection lost"))
        if self._pong_waiter is not None and not self._pong_waiter.done():
            self._pong_waiter.set_exception(ConnectionError("connection lost"))

    def _handshake(self) -> None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > 65536:
                self._fail("oversized HTTP response")
            return
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        status = head[0].split(" ", 2)
        if len(status) < 2 or status[1] != "101":
            self._fail(f"upgrade refused: {head[0]}")
            return
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "sec-websocket-extensions" and "permessage-deflate" in value:
                # A decoder with the largest window reads any smaller window.
                self.inflater = zlib.decompressobj(wbits=-15)
        self.upgraded = True
        if not self.opened.done():  # not given up on meanwhile
            self.opened.set_result(None)

    def _fail(self, reason: str) -> None:
        if not self.opened.done():
            self.opened.set_exception(HandshakeError(reason))
        self.abort()

    # ── receiving ────────────────────────────────────────────────────────

    def data_received(self, data: bytes) -> None:
        now = monotonic_ns()
        self.reads += 1
        self.total_bytes += len(data)
        if self._buf or not self.upgraded:
            # Rare: a frame split across reads, or the handshake. Usually the
            # chunk holds whole frames and is parsed in place, without a copy.
            self._buf += data
            if not self.upgraded:
                self._handshake()
                if not self.upgraded:
                    return
            data = bytes(self._buf)
            self._buf.clear()
        buf = data
        n = len(buf)
        pos = 0
        frames = 0
        inflater = self.inflater
        latencies = self.latencies
        keep = self.collect or latencies is not None or inflater is not None
        while n - pos >= 2:
            b0 = buf[pos]
            length = buf[pos + 1] & 0x7F
            if length < 126:
                start = pos + 2
            elif length == 126:
                if n - pos < 4:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 4], "big")
                start = pos + 4
            else:
                if n - pos < 10:
                    break
                length = int.from_bytes(buf[pos + 2 : pos + 10], "big")
                start = pos + 10
            end = start + length
            if end > n:
                break
            opcode = b0 & 0x0F
            if opcode <= 2:  # text, binary (continuation is not expected)
                frames += 1
                if keep:
                    payload = buf[start:end]
                    if b0 & 0x40 and inflater is not None:
                        payload = inflater.decompress(payload + _DEFLATE_TAIL)
                    if latencies is not None:
                        i = payload.find(STAMP_KEY)
                        if i >= 0:
                            i += _STAMP_LEN
                            j = i
                            while 48 <= payload[j] <= 57:
                                j += 1
                            latencies.append(now - int(payload[i:j]))
                    if self.collect and not (self.skip and self._skipped(payload)):
                        self.inbox.append(payload)
            else:
                self._control(opcode, buf[start:end])
            pos = end
        if pos < n:
            self._buf += buf[pos:]
        if frames:
            self.frames += frames
            self.total_frames += frames
            self.last_rx_ns = now
            if self.collect:
                self._wake_inbox()
            if self._target_waiter is not None and self.frames >= self._target:
                self.last_ns = now
                if not self._target_waiter.done():
                    self._target_waiter.set_result(None)
                self._target_waiter = None

    def _skipped(self, payload: bytes) -> bool:
        return any(marker in payload for marker in self.skip)

    def _control(self, opcode: int, payload: bytes) -> None:
        if opcode == 9:  # ping
            self._write(Frame(Opcode.PONG, payload).serialize(mask=True))
        elif opcode == 10:  # pong
            self.pongs += 1
            waiter, self._pong_waiter = self._pong_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif opcode == 8:  # close: acknowledge, then drop the connection
            if len(payload) >= 2:
                self.close_code = int.from_bytes(payload[:2], "big")
            self._write(Frame(Opcode.CLOSE, payload[:2]).serialize(mask=True))
            if self.transport is not None:
                self.transport.close()

    def _wake_inbox(self) -> None:
        waiter = self._inbox_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def recv(self, timeout: float = 30.0) -> dict[str, Any]:
        """Next message as JSON (setup phase only)."""
        async with asyncio.timeout(timeout):
            while not self.inbox:
                if self.closed:
                    raise ConnectionError("connection closed")
                self._inbox_waiter = self.loop.create_future()
                await self._inbox_waiter
        return orjson.loads(self.inbox.popleft())

    async def expect(self, kind: str, timeout: float = 30.0) -> dict[str, Any]:
        """Skip messages until one of type ``kind``."""
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.recv(timeout)
                if msg.get("type") == kind:
                    return msg
                if msg.get("type") == "error":
                    raise RuntimeError(f"server error while waiting for {kind}: {msg}")

    # ── measuring ────────────────────────────────────────────────────────

    def start_counting(self, latencies: bool = False) -> None:
        """Leave the setup phase: count frames from zero from now on."""
        self.collect = False
        self.inbox.clear()
        self.frames = 0
        self.reads = 0
        self.last_ns = 0
        self.latencies = [] if latencies else None

    def wait_frames(self, n: int) -> asyncio.Future[None]:
        """A future done once ``n`` data frames were counted."""
        fut: asyncio.Future[None] = self.loop.create_future()
        if self.frames >= n:
            self.last_ns = self.last_ns or monotonic_ns()
            fut.set_result(None)
        elif self.closed:
            fut.set_exception(ConnectionError("connection closed"))
        else:
            self._target = n
            self._target_waiter = fut
        return fut

    # ── sending ──────────────────────────────────────────────────────────

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def send_json(self, msg: dict[str, Any]) -> None:
        self._write(masked_text_frame(orjson.dumps(msg)))

    def send_raw(self, data: bytes) -> None:
        """Already-framed bytes (one or several frames)."""
        self._write(data)

    async def ping(self, timeout: float = 30.0) -> None:
        """A WebSocket ping, answered by a pong (a bare server's liveness)."""
        if self.closed:
            raise ConnectionError("connection closed")
        fut: asyncio.Future[None] = self.loop.create_future()
        self._pong_waiter = fut
        self._write(Frame(Opcode.PING, b"probe").serialize(mask=True))
        async with asyncio.timeout(timeout):
            await fut

    def keep_alive(self, interval: float) -> None:
        """Send a WebSocket ping every ``interval`` seconds while open."""

        def ping() -> None:
            if self.closed:
                return
            self._write(Frame(Opcode.PING, b"ka").serialize(mask=True))
            self._keepalive = self.loop.call_later(interval, ping)

        self._keepalive = self.loop.call_later(interval, ping)

    def abort(self) -> None:
        """Drop the connection at once (RST: no TIME_WAIT left behind)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        waiter, self._target_waiter = self._target_waiter, None
        if waiter is not None and not waiter.done():
            waiter.cancel()  # nobody waits any more (a run that failed or was stopped)
        if self.transport is not None:
            self.transport.abort()
