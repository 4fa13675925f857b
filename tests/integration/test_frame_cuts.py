"""Frames cut where the hub's reads end, over real TCP, against a hub process (issue 38).

Each client writes its frames in pieces with ``TCP_NODELAY`` and, before the
next piece, waits until the hub has read every byte sent so far — the hub's
socket has nothing unread and the client's nothing unacknowledged (the
sockets' queues, read over sock_diag as ``ss`` does) — so each cut is the end
of a read of the hub's. A third
of the frames are cut right after their header, their extended length or
their mask, where websockets' parser has taken part of a frame and waits with
an empty buffer; half of all frames carry a mask key, or a masked payload,
that looks like the start of a frame. Publishes of 7-, 16- and 64-bit lengths,
fragmented ones with pings between the fragments, pings, and on some
connections then a bad frame. What the hub does must be what websockets
alone makes of the same bytes (:func:`tests.support.wsframes.websockets_alone`):
every publish delivered once, whole and in order, every ping answered with
its payload, and a bad frame failed with websockets' close code after the
hub's ``error`` event.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import socket
import struct
from typing import Any

import orjson
import pytest

from tests.support.wsframes import (
    FIN,
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    RawFrame,
    Unread,
    websockets_alone,
)

HOST = "127.0.0.1"
CONNECTIONS = 8
MESSAGES = 40
MAX_FRAME = 1_048_576  # the default max_frame_bytes
TIMEOUT = 60.0


# ── a client that writes bytes exactly as told ──────────────────────────────


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.port = writer.get_extra_info("sockname")[1]
        self.frames: list[tuple[int, bytes]] = []
        self.closed = False
        self._new = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, port: int, agent_id: str) -> RawClient:
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        key = base64.b64encode(os.urandom(16))
        writer.write(
            b"GET /ws?agent_id=%s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (agent_id.encode(), HOST.encode(), port, key)
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT)
        assert head.startswith(b"HTTP/1.1 101"), head
        return cls(reader, writer)

    async def _read(self) -> None:
        try:
            while True:
                first, second = await self.reader.readexactly(2)
                n = second & 0x7F
                if n == 126:
                    (n,) = struct.unpack("!H", await self.reader.readexactly(2))
                elif n == 127:
                    (n,) = struct.unpack("!Q", await self.reader.readexactly(8))
                self.frames.append((first & 0x0F, await self.reader.readexactly(n)))
                self._new.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed = True
            self._new.set()

    async def wait(self, done: Any) -> None:
        """Until ``done(frames)``, or the connection ends first (a failure)."""
        async with asyncio.timeout(TIMEOUT):
            while not done(self.frames):
                if self.closed:
                    raise AssertionError(f"closed early; received {self.summary()}")
                self._new.clear()
                await self._new.wait()

    def messages(self) -> list[dict[str, Any]]:
        return [orjson.loads(p) for op, p in self.frames if op == OP_TEXT]

    def control(self) -> list[tuple[int, bytes]]:
        return [f for f in self.frames if f[0] in (OP_PONG, OP_CLOSE)]

    def published(self) -> list[tuple[int, str]]:
        """The events of this client's publishes: ``(n, text)`` in order (a
        text over 16 KiB comes as a stream of deltas)."""
        out = []
        streams: dict[str, list[dict[str, Any]]] = {}
        for m in self.messages():
            kind = m.get("type")
            if kind == "space.event":
                out.append((m["data"]["n"], m["data"]["text"]))
            elif kind == "space.event.delta":
                streams.setdefault(m["event_id"], []).append(m["data"])
            elif kind == "space.event.done":
                parts = streams.pop(m["event_id"])
                out.append((parts[0]["n"], "".join(p["text"] for p in parts)))
        return out

    def summary(self) -> list[Any]:
        out: list[Any] = []
        for op, payload in self.frames:
            if op == OP_TEXT:
                msg = orjson.loads(payload)
                out.append(msg if msg.get("type") != "space.event" else ("event", msg["data"]["n"]))
            else:
                out.append((op, payload[:40]))
        return out

    async def send(self, data: bytes, cuts: list[int], unread: Unread) -> None:
        """``data`` in pieces ending at ``cuts``, each read by the hub before the next."""
        bounds = [0, *cuts, len(data)]
        for a, b in itertools.pairwise(bounds):
            if self.closed:
                return  # the hub failed the connection (a bad frame)
            self.writer.write(data[a:b])
            await self.writer.drain()
            await unread.settled(self.port)

    def close(self) -> None:
        self._task.cancel()
        self.writer.transport.abort()


# ── the streams ─────────────────────────────────────────────────────────────


def _key(rng: random.Random, payload: bytes) -> bytes:
    """A fresh mask key; half of them make the bytes after a cut look like a frame."""
    kind = rng.random()
    if kind < 0.5:
        return rng.randbytes(4)
    header = bytes([rng.choice((0x81, 0x82)), 0x80 | rng.choice((0, 1, 2, 5))])
    if kind < 0.75 or len(payload) < 2:
        return header + rng.randbytes(2)  # the key itself: cut after the (extended) length
    # The masked payload: cut after the mask.
    return bytes([payload[0] ^ header[0], payload[1] ^ header[1]]) + rng.randbytes(2)


def _frame(rng: random.Random, first: int, payload: bytes) -> RawFrame:
    # Now and then a longer length encoding than needed (websockets reads it).
    length_bytes = rng.choice((0, 0, 0, 2, 8))
    return RawFrame(first, payload, key=_key(rng, payload), length_bytes=length_bytes)


def _publish(rng: random.Random, space: str, n: int) -> bytes:
    size = rng.random()
    if size < 0.05:
        length = rng.randrange(65_600, 70_000)  # a 64-bit length
    elif size < 0.4:
        length = rng.randrange(100, 3000)  # a 16-bit length
    else:
        length = rng.randrange(0, 40)  # a 7-bit length
    text = "".join(rng.choice("abcdefghij é€") for _ in range(length))
    return orjson.dumps({"type": "space.publish", "space": space, "data": {"n": n, "text": text}})


def _stream(rng: random.Random, space: str) -> tuple[list[RawFrame], list[str]]:
    """Frames of ``MESSAGES`` publishes (some fragmented, pings between
    fragments) and pings; and the texts published."""
    frames: list[RawFrame] = []
    texts: list[str] = []
    for n in range(MESSAGES):
        payload = _publish(rng, space, n)
        texts.append(orjson.loads(payload)["data"]["text"])
        if rng.random() < 0.2:
            cut = sorted(rng.sample(range(1, len(payload)), 2))
            parts = [payload[: cut[0]], payload[cut[0] : cut[1]], payload[cut[1] :]]
            for i, part in enumerate(parts):
                first = (OP_CONT if i else OP_TEXT) | (FIN if i == 2 else 0)
                frames.append(_frame(rng, first, part))
                if i < 2 and rng.random() < 0.5:
                    frames.append(_frame(rng, FIN | OP_PING, rng.randbytes(rng.randrange(0, 30))))
        else:
            frames.append(_frame(rng, FIN | OP_TEXT, payload))
        if rng.random() < 0.1:
            frames.append(_frame(rng, FIN | OP_PING, rng.randbytes(rng.randrange(0, 125))))
    return frames, texts


def _bad(rng: random.Random, kind: str) -> RawFrame:
    """A frame websockets fails the connection over."""
    if kind == "opcode":
        return _frame(rng, FIN | 0x3, b"bad")
    if kind == "reserved":
        return _frame(rng, FIN | 0x40 | OP_TEXT, b"{}")
    if kind == "unmasked":
        return RawFrame(FIN | OP_TEXT, b"{}", masked=False)
    if kind == "oversize":
        return RawFrame(FIN | OP_BINARY, b"", key=_key(rng, b"xx"), announced=2**62)
    return _frame(rng, FIN | OP_TEXT, b'{"type":"\xff"}')  # not UTF-8


def _cuts(rng: random.Random, frames: list[RawFrame]) -> list[int]:
    """A third of the frames cut after their header, extended length or mask;
    some elsewhere; the rest written with their neighbours."""
    cuts = []
    at = 0
    for f in frames:
        size = len(f.wire)
        roll = rng.random()
        if roll < 1 / 3:
            cuts.append(at + rng.choice(f.cuts()))
        elif roll < 0.6 and size > 1:
            cuts.append(at + rng.randrange(1, size))
        at += size
        if rng.random() < 0.3:
            cuts.append(at)
    return sorted({c for c in cuts if 0 < c < at})


async def _drive(port: int, unread: Unread, i: int, seed: int, bad: str | None) -> None:
    rng = random.Random(seed * 100 + i)
    space = f"cuts-{i}"
    client = await RawClient.connect(port, f"cutter-{i}")
    try:
        await client.wait(lambda frames: any(op == OP_TEXT for op, _ in frames))
        assert client.messages()[0]["type"] == "agent.registered"
        join = orjson.dumps({"type": "space.join", "id": "j", "space": space})
        client.writer.write(RawFrame(FIN | OP_TEXT, join, key=rng.randbytes(4)).wire)
        await client.wait(lambda _: any(m.get("type") == "space.joined" for m in client.messages()))
        client.frames.clear()
        frames, texts = _stream(rng, space)
        stream = b"".join(f.wire for f in frames)
        expected = websockets_alone(stream, MAX_FRAME)
        assert expected.close_sent is None and len(expected.messages) == MESSAGES
        pongs = [(op, p) for op, p in expected.control if op == OP_PONG]
        await client.send(stream, _cuts(rng, frames), unread)
        await client.wait(
            lambda _: len(client.published()) >= MESSAGES and len(client.control()) >= len(pongs)
        )
        assert client.published() == list(enumerate(texts)), f"connection {i}: {client.summary()}"
        assert client.control() == pongs
        assert not any(m.get("type") == "error" for m in client.messages()), client.summary()
        if bad is None:
            return
        # Then a bad frame, cut after its header, extended length or mask:
        # websockets' close for it (1007 for text that is not UTF-8 comes from
        # recv(), where websockets decodes a message), after the hub's error.
        frame = _bad(rng, bad)
        client.frames.clear()
        await client.send(frame.wire, [rng.choice(frame.cuts())], unread)
        await client.wait(lambda frames: any(op == OP_CLOSE for op, _ in frames))
        verdict = websockets_alone(stream + frame.wire, MAX_FRAME).close_sent
        code = 1007 if bad == "utf-8" else verdict[0] if verdict is not None else None
        kinds = [op for op, _ in client.frames]
        assert kinds == [OP_TEXT, OP_CLOSE], client.summary()
        assert client.messages()[0]["code"] == "INVALID_REQUEST", client.summary()
        assert struct.unpack("!H", client.frames[1][1][:2])[0] == code, client.summary()
    finally:
        client.close()


@pytest.mark.parametrize("seed", [1, 2])
async def test_frames_cut_at_the_hubs_reads_arrive_as_websockets_alone_reads_them(
    hub_process, seed
):
    proc = hub_process(rate_limit=100_000, rate_burst=100_000)
    port = int(proc.url.rsplit(":", 1)[1].split("/")[0])
    unread = Unread(port)
    bad = [None, None, None, "opcode", "reserved", "unmasked", "oversize", "utf-8"]
    async with asyncio.TaskGroup() as group:
        for i in range(CONNECTIONS):
            group.create_task(_drive(port, unread, i, seed, bad[i % len(bad)]))
