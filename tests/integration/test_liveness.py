"""Liveness: what keeps a connection, and how fast a dead holder gives its id up."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import socket
import struct

import orjson
import pytest

from agora_client import Client, Event
from protocol.errors import CloseCode, ErrorCode
from tests.support.wsclient import WsClient
from tests.support.wsframes import FIN, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, RawFrame

TIMEOUT = 10.0


async def next_status(sub, agent_id: str, timeout: float = TIMEOUT) -> Event:
    async with asyncio.timeout(timeout):
        while True:
            event = await sub.get()
            if event.data["agent"]["id"] == agent_id:
                return event


async def status_until(sub, agent_id: str, timeout: float = TIMEOUT) -> list[tuple[str, str]]:
    """(event, agent id) of every status event up to ``agent_id``'s online."""
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            event = await sub.get()
            seen.append((event.data["event"], event.data["agent"]["id"]))
            if seen[-1] == ("online", agent_id):
                return seen


async def test_websocket_pings_count_as_liveness(hub):
    """Regression: a client pinging every 150 ms but sending no JSON was closed 4408."""
    server = await hub(heartbeat_interval=0.3, heartbeat_timeout=1.0)
    c = await WsClient.connect(server.url, "pinger")

    async def ping_for(seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await c.ws.ping()
            await asyncio.sleep(0.15)

    await ping_for(3.0)  # three heartbeat timeouts of nothing but pings
    assert c.ws.close_code is None
    assert (await c.request({"type": "agent.heartbeat"}))["type"] == "agent.heartbeat"
    # Silent for real (no frame at all): closed for it.
    code, frames = await c.closed(timeout=TIMEOUT)
    assert code == 4408 and frames[-1]["code"] == "HEARTBEAT_TIMEOUT"


# ── liveness is whole frames, not bytes ─────────────────────────────────────

HEARTBEAT = b'{"type":"agent.heartbeat"}'
KEY = b"\x5a\x13\xc7\x02"


class RawSocket:
    """A client that completes the opening handshake, then writes exactly the
    bytes it is told; it keeps the frames the hub writes, until its close."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.frames: list[tuple[int, bytes]] = []
        self._data = b""
        self._taken = 0  # frames next_message has gone past
        self._new = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, url: str, agent_id: str) -> RawSocket:
        host, port = url.removeprefix("ws://").split("/", 1)[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        writer.write(
            b"GET /ws?agent_id=%s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (agent_id.encode(), host.encode(), port.encode(), key)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        assert head.startswith(b"HTTP/1.1 101"), head
        client = cls(reader, writer)
        registered = await client.next_message()
        assert registered["type"] == "agent.registered", registered
        return client

    async def _read(self) -> None:
        try:
            while chunk := await self.reader.read(65536):
                self._data += chunk
                self._parse()
        except OSError:
            pass
        finally:
            self.frames.append((-1, b""))  # the end of the stream
            self._new.set()

    def _parse(self) -> None:
        data, at = self._data, 0
        while len(data) - at >= 2:
            n, head = data[at + 1] & 0x7F, 2
            if n == 126:
                if len(data) - at < 4:
                    break
                (n,) = struct.unpack("!H", data[at + 2 : at + 4])
                head = 4
            elif n == 127:
                if len(data) - at < 10:
                    break
                (n,) = struct.unpack("!Q", data[at + 2 : at + 10])
                head = 10
            if len(data) - at < head + n:
                break
            self.frames.append((data[at] & 0x0F, data[at + head : at + head + n]))
            self._new.set()
            at += head + n
        self._data = data[at:]

    async def _frame(self, seen: int) -> tuple[int, bytes]:
        """The hub's frame number ``seen``, waiting for it."""
        while len(self.frames) <= seen:
            self._new.clear()
            await self._new.wait()
        return self.frames[seen]

    async def next_message(self, timeout: float = TIMEOUT) -> dict:
        """The next text frame the hub writes after those already taken."""
        async with asyncio.timeout(timeout):
            while True:
                opcode, payload = await self._frame(self._taken)
                self._taken += 1
                assert opcode in (OP_TEXT, OP_PONG), (opcode, payload)
                if opcode == OP_TEXT:
                    return orjson.loads(payload)

    async def closed(self, timeout: float = TIMEOUT) -> tuple[int, list[dict]]:
        """Waits for the hub's close frame: (its code, the text frames before it)."""
        async with asyncio.timeout(timeout):
            index = 0
            while (await self._frame(index))[0] not in (OP_CLOSE, -1):
                index += 1
        opcode, payload = self.frames[index]
        assert opcode == OP_CLOSE, "the hub cut the connection without a close frame"
        texts = [orjson.loads(p) for op, p in self.frames[:index] if op == OP_TEXT]
        return struct.unpack("!H", payload[:2])[0], texts

    @property
    def open(self) -> bool:
        return not any(op in (OP_CLOSE, -1) for op, _ in self.frames)

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    async def aclose(self) -> None:
        self.writer.transport.abort()
        with contextlib.suppress(Exception):
            await self._task


async def _dribble(client: RawSocket, data: bytes, pace: float) -> None:
    """Writes ``data`` one byte at a time, one every ``pace`` seconds."""
    for at in range(len(data)):
        client.write(data[at : at + 1])
        await asyncio.sleep(pace)  # pacing the dribble, not waiting for an event


async def test_a_frame_dribbled_a_byte_at_a_time_is_not_liveness(hub):
    """Regression (slowloris): every socket read counted as liveness, so a client
    writing one byte of a frame every 100 ms, never finishing it, was kept for
    ever. Only whole frames count: it is closed for silence, error then 4408."""
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=0.6)
    c = await RawSocket.connect(server.url, "dribbler")
    # A 1000-byte text frame: header, extended length, mask, payload — 100 s
    # at this pace, so it never completes within the test.
    frame = RawFrame(FIN | OP_TEXT, b" " * 1000, key=KEY).wire
    loop = asyncio.get_running_loop()
    started = loop.time()
    dribbling = loop.create_task(_dribble(c, frame, 0.1))
    try:
        code, texts = await c.closed(timeout=TIMEOUT)
    finally:
        dribbling.cancel()
        await c.aclose()
    assert code == CloseCode.HEARTBEAT_TIMEOUT == 4408
    assert texts[-1]["type"] == "error" and texts[-1]["code"] == "HEARTBEAT_TIMEOUT", texts
    assert loop.time() - started < 5.0


def _keepalive_frames(kind: str) -> list[bytes]:
    """What a client of each kind writes, one whole frame at a time."""
    if kind == "data":
        return [RawFrame(FIN | OP_TEXT, HEARTBEAT, key=KEY).wire]
    if kind == "ping":
        return [RawFrame(FIN | OP_PING, b"are you there", key=KEY).wire]
    if kind == "pong":  # unsolicited: a one-way heartbeat (RFC 6455 §5.5.3)
        return [RawFrame(FIN | OP_PONG, b"", key=KEY).wire]
    # "fragments": one message, a frame of it at a time (never finished).
    return [RawFrame(OP_TEXT, b"{", key=KEY).wire] + [RawFrame(OP_CONT, b" ", key=KEY).wire] * 1000


@pytest.mark.parametrize("kind", ["data", "ping", "pong", "fragments"])
async def test_whole_frames_of_any_kind_are_liveness(hub, kind):
    """A client writing only whole frames — data frames (read by the hub's own
    reader), pings and pongs, or the fragments of a message (read by websockets'
    parser) — stays open past the heartbeat timeout; once it stops, it is closed."""
    timeout = 0.5
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=timeout)
    c = await RawSocket.connect(server.url, f"keeper-{kind}")
    loop = asyncio.get_running_loop()
    frames = iter(_keepalive_frames(kind) * 100)
    try:
        end = loop.time() + 3 * timeout  # three heartbeat timeouts
        while loop.time() < end:
            c.write(next(frames))
            await asyncio.sleep(0.1)  # pacing the frames, not waiting for an event
        assert c.open, c.frames
        if kind == "fragments":  # the message ends: a heartbeat the hub answers
            c.write(RawFrame(FIN | OP_CONT, b'"type":"agent.heartbeat"}', key=KEY).wire)
        else:
            c.write(RawFrame(FIN | OP_TEXT, HEARTBEAT, key=KEY).wire)
        assert (await c.next_message())["type"] == "agent.heartbeat"
        # Silent for real: closed for it.
        code, texts = await c.closed(timeout=TIMEOUT)
    finally:
        await c.aclose()
    assert code == 4408 and texts[-1]["code"] == "HEARTBEAT_TIMEOUT", (code, texts)


async def test_a_half_dead_holder_is_replaced_within_its_allowance(hub):
    """Regression: the newcomer waited out the whole probe timeout (and the closing
    handshake of the holder the hub had already closed for silence)."""
    server = await hub(
        heartbeat_interval=0.5,
        heartbeat_timeout=1.0,
        liveness_probe_timeout=30.0,
        close_timeout=10.0,
    )
    holder = await WsClient.connect(server.url, "alice")
    holder.ws.transport.pause_reading()  # stops reading: no pong, no heartbeat
    loop = asyncio.get_running_loop()
    started = loop.time()
    newcomer = await WsClient.connect(server.url, "alice")
    elapsed = loop.time() - started
    assert newcomer.registered is not None
    # At most the holder's remaining allowance (1 s) plus cleanup; the probe
    # timeout (30 s) and the holder's close timeout (10 s) are not waited out.
    assert elapsed < 5.0, elapsed
    assert (await newcomer.request({"type": "agent.heartbeat"}))["type"] == "agent.heartbeat"
    holder.ws.transport.abort()
    await newcomer.close()


async def test_a_holder_closed_by_the_hub_answers_the_probe_at_once(hub):
    """The holder keeps heartbeating (a long allowance) but never answers pings,
    so the probe runs; when the hub closes the holder meanwhile the probe ends."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=30.0)
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    holder.ws.transport.pause_reading()
    peer = server.node.registry.connections[holder.registered["agent"]["connection_id"]]
    started = asyncio.get_running_loop().time()
    pending = asyncio.ensure_future(WsClient.connect(server.url, "alice"))
    async with asyncio.timeout(TIMEOUT):
        while peer._ending is None:  # noqa: ASYNC110 (the probe of the holder has begun)
            await asyncio.sleep(0.01)  # polling hub state: there is no event for it
    # The hub gives up on the holder for a reason of its own.
    peer.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "closed by the test")
    newcomer = await asyncio.wait_for(pending, TIMEOUT)
    assert asyncio.get_running_loop().time() - started < 10.0
    assert newcomer.registered is not None
    holder.ws.transport.abort()
    await newcomer.close()


async def test_an_evicted_holder_is_told_and_closed_4408(hub):
    """A holder that failed the liveness probe but still reads its socket
    later gets what the docs promise: error HEARTBEAT_TIMEOUT, then 4408."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=0.5)
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    holder.ws.transport.pause_reading()  # deaf to pings for a while
    newcomer = await WsClient.connect(server.url, "alice")
    assert newcomer.registered is not None
    holder.ws.transport.resume_reading()
    code, frames = await holder.closed(timeout=TIMEOUT)
    assert code == 4408, (code, frames)
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "HEARTBEAT_TIMEOUT"
    await newcomer.close()


async def test_a_client_that_gave_up_during_the_claim_is_never_announced(hub, clients):
    """Regression: the hub registered a connection its client had abandoned while the
    id was being claimed: watchers saw a phantom online/offline pair."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=1.0)
    watcher = await clients(server, "watcher")
    await watcher.join("agent.status")
    status = watcher.events("agent.status")
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    assert (await next_status(status, "alice")).data["event"] == "online"
    holder.ws.transport.pause_reading()  # alive by heartbeats, deaf to pings
    quitter = await WsClient.connect(server.url, "alice", registered=False)
    quitter.ws.transport.abort()  # gives up before the probe (1 s) ends
    # The probe fails: the holder is evicted...
    assert (await next_status(status, "alice")).data["event"] == "offline"
    # ...and the newcomer, gone meanwhile, is never announced.
    await clients(server, "marker")
    assert await status_until(status, "marker") == [("online", "marker")]
    # The id is free: the abandoned connection holds nothing.
    back = await clients(server, "alice")
    assert back.connected
    holder.ws.transport.abort()


# ── across nodes ────────────────────────────────────────────────────────────

CLUSTER = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 2.0,
    "rate_limit": 10_000,
    "rate_burst": 10_000,
}


@pytest.mark.redis
async def test_reclaiming_after_the_holders_node_was_killed(redis_server, hub_process, clients):
    """Regression: 11 s to reclaim an id held on a killed node (the SDK gives up after
    10 s), then a phantom online/offline pair and a duplicate offline. The dead
    connection's ``offline`` comes once, before the new one's ``online``."""
    settings = {**CLUSTER, "redis_url": redis_server.url, "liveness_probe_timeout": 5.0}
    n0 = hub_process(node_id="n0", **settings)
    n1 = hub_process(node_id="n1", **settings)
    watcher = await clients(n1.url, "watcher")
    await watcher.join("agent.status")
    await watcher.join("general")
    status = watcher.events("agent.status")
    members = watcher.events("general", members=True)
    victim = Client(n0.url, "alice")
    await victim.connect()
    await victim.join("general")
    assert (await next_status(status, "alice")).data["event"] == "online"
    os.kill(n0.proc.pid, signal.SIGKILL)
    loop = asyncio.get_running_loop()
    started = loop.time()
    back = await clients(n1.url, "alice", open_timeout=10.0)
    assert loop.time() - started < 5.0  # the node is gone: no probe to wait out
    # The reaper takes the dead connection out of "general" (alice did not rejoin).
    async with asyncio.timeout(20):
        while getattr(await members.get(), "left", None) != "alice":
            pass
    await clients(n1.url, "marker")
    seen = await status_until(status, "marker", timeout=20)
    assert seen == [("offline", "alice"), ("online", "alice"), ("online", "marker")]
    assert back.connected and await back.spaces()
    with contextlib.suppress(Exception):
        await victim.aclose()


async def test_the_sdk_heartbeat_is_a_valid_message(hub, clients):
    """Regression: the SDK's heartbeat frame was not JSON (each one got an error)."""
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=5.0)
    counters = server.node.counters
    await clients(server, "idle")
    async with asyncio.timeout(TIMEOUT):
        while counters.messages_in < 3:  # noqa: ASYNC110 (hub counters: no event to wait on)
            await asyncio.sleep(0.05)
    assert sum(counters.errors.values()) == 0
