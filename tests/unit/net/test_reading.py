"""A hub connection reads a client's bytes exactly as websockets alone would, however they are cut.

The hub reads whole plain frames itself (hub.net.inbox) and hands the rest to
websockets' parser; the two must never share a frame. Random streams of valid
and invalid frames go through the real ``HubConnection.data_received``, cut
into reads at random points, at every header / extended length / mask
boundary, or byte by byte, and what the connection delivers, writes and fails
with is compared with websockets' own server protocol fed the same stream.
"""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.core.counters import Counters
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.outbox import Flusher
from hub.net.ws_internals import HubProtocol
from tests.support.wsframes import (
    FIN,
    OP_PING,
    OP_TEXT,
    Outcome,
    RawFrame,
    cut,
    cut_points,
    failure_of,
    message_of,
    server_frames,
    streams,
    websockets_alone,
)

#: The frame size limits: under 64 KiB (a 16-bit length can be too big) and
#: over it (a 64-bit length can be read).
LIMITS = (1000, 70_000)
LIMIT = LIMITS[1]
LOG = logging.getLogger("websockets.server")
UPGRADE = (
    b"GET /ws?agent_id=a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
FAILURE_CODES = {1002, 1007, 1009}


class Transport:
    """What the connection writes, and its flow control, recorded."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.eof and not self.closed
        self.data += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    abort = close

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


async def open_connection(
    limit: int = LIMIT,
) -> tuple[HubConnection, Transport, asyncio.Task[None]]:
    """A hub connection past its opening handshake, as the server builds it."""
    loop = asyncio.get_running_loop()
    opened = loop.create_future()
    release = loop.create_future()

    async def handler(conn: HubConnection) -> None:
        conn.start_outbox()
        opened.set_result(None)
        await release

    context = ConnectionContext(
        flusher=Flusher(loop),
        counters=Counters(),
        handshakes=HandshakeSlots(10),
        deadlines=HandshakeDeadlines(30.0, loop),
        per_ip=ConnectionsPerIp(0),
        handler=handler,
        process_request=lambda conn, request: None,
    )
    server = SimpleNamespace(handler_tasks=set(), all_connections=set(), is_serving=lambda: True)
    protocol = HubProtocol(extensions=None, max_size=limit, logger=LOG)
    conn = HubConnection(protocol, server, loop, context)  # type: ignore[arg-type]
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(UPGRADE)
    await asyncio.wait_for(opened, 10)
    conn.outbox.flush()  # the 101
    head, _, rest = bytes(transport.data).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101") and not rest
    transport.data.clear()
    # The hub's own reader is on: it follows websockets' frame parser.
    assert conn._frames_read and conn._parser_at is not None
    (task,) = server.handler_tasks
    release.set_result(None)
    return conn, transport, task


async def through_the_hub(reads: list[bytes], limit: int) -> tuple[Outcome, list[str]]:
    """What a hub connection makes of ``reads``; and the hub's own error events."""
    conn, transport, task = await open_connection(limit)
    for data in reads:
        conn.data_received(data)
    out = Outcome()
    inbox = conn.recv_messages
    while len(inbox):
        try:
            message = await inbox.get()
        except UnicodeDecodeError:
            out.messages.append(("invalid utf-8",))
            continue
        if isinstance(message, str):
            out.messages.append(message_of(True, message.encode()))
        else:
            out.messages.append(message_of(False, message))
    errors = []
    for opcode, payload in server_frames(bytes(transport.data)):
        if opcode == OP_TEXT:
            errors.append(payload.decode())  # the hub's error event before a failure close
        else:
            out.control.append((opcode, payload))
    protocol = conn.protocol
    out.eof = transport.eof
    out.close_sent = (
        None
        if protocol.close_sent is None
        else (int(protocol.close_sent.code), protocol.close_sent.reason)
    )
    out.close_rcvd = (
        None
        if protocol.close_rcvd is None
        else (int(protocol.close_rcvd.code), protocol.close_rcvd.reason)
    )
    out.failure = failure_of(protocol.parser_exc)
    conn.connection_lost(None)
    await asyncio.wait_for(task, 10)
    return out, errors


def check(reads: list[bytes], limit: int = LIMIT) -> None:
    stream = b"".join(reads)
    expected = websockets_alone(stream, limit)
    got, errors = asyncio.run(through_the_hub(reads, limit))
    if got != expected:
        pytest.fail(f"the hub read {got}\nwebsockets reads {expected}", pytrace=False)
    failed = expected.close_sent is not None and expected.close_sent[0] in FAILURE_CODES
    # A failure websockets closes for is announced by one error event first.
    assert len(errors) == (1 if failed else 0), errors


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_any_stream_cut_anywhere_reads_as_websockets_alone_reads_it(data):
    limit = data.draw(st.sampled_from(LIMITS))
    frames = data.draw(streams(limit, big=limit > 65600))
    stream = b"".join(f.wire for f in frames)
    check(cut(stream, data.draw(cut_points(frames))), limit)


def _text(payload: bytes, **kw: Any) -> RawFrame:
    return RawFrame(FIN | OP_TEXT, payload, **kw)


# The bytes of a whole masked text frame ("hi" under a zero mask): what a
# reader that thinks it is at a frame's start would take for one.
LOOKALIKE = bytes([0x81, 0x82]) + b"\x00\x00\x00\x00hi"


def test_a_read_ending_after_a_header_extended_length_or_mask():
    """The cases of issue 38, each alone: websockets' parser has taken a
    frame's header (and extended length, and mask) and its buffer is empty;
    the next read is the rest of that frame — here bytes that look like a
    whole frame — not a new one."""
    frames = [
        _text(b'{"type":"space.publish","n":1}'),
        # The mask key looks like a frame header: cut after the header.
        _text(b"payload", key=LOOKALIKE[:4]),
        # A 16-bit length, then a key that looks like a header.
        _text(b"y" * 300, key=LOOKALIKE[:4]),
        # A 64-bit length whose first bytes look like a header (0x8182…
        # would be 33,154 bytes: a 16-bit length, then the key).
        RawFrame(FIN | OP_TEXT, b"z" * 20, length_bytes=8, key=LOOKALIKE[:4]),
        # The payload looks like a whole frame: cut after the mask.
        RawFrame(FIN | 0x2, LOOKALIKE + b"tail", key=b"\x00\x00\x00\x00"),
        RawFrame(FIN | OP_PING, LOOKALIKE, key=b"\x00\x00\x00\x00"),
        _text(b'{"type":"space.publish","n":2}'),
    ]
    stream = b"".join(f.wire for f in frames)
    starts = [0]
    for f in frames:
        starts.append(starts[-1] + len(f.wire))
    for i, f in enumerate(frames):
        for offset in f.cuts():
            at = starts[i] + offset
            check([stream[:at], stream[at:]])
    # Every byte its own read.
    check([stream[i : i + 1] for i in range(len(stream))])
