"""hub.net.connection: a HubConnection's promises, on a recording transport.

What its docstring promises and its methods say: handshakes beyond the
slots wait unread in a bounded line, beyond it are cut; the hub's frames and
websockets' own writes never overtake each other; every close the hub makes is
an ``error`` event, then the close, counted once; a connection over its
outbound bound is a slow consumer (4008); a bad frame is announced before
websockets' close; any inbound bytes are liveness; a lost connection gives its
per-IP slot back; a probe answers "alive" only for a pong in time.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from hub.core.counters import Counters
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.outbox import Flusher
from hub.net.proxies import ClientAddress
from hub.net.ws_internals import HubProtocol
from protocol.errors import CloseCode, ErrorCode
from tests.support.wsframes import FIN, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, RawFrame
from tests.support.wsframes import server_frames as frames_of

LOG = logging.getLogger("websockets.server")
LIMIT = 65536
REQUEST = (
    b"GET /ws?agent_id=a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
WAIT = 10.0  # bound of every wait for an event


class Transport:
    """An event loop transport that records what is written and how it ends."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.reading = True
        self.closed = False
        self.aborted = False
        self.eof = False
        self.buffered = 0
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.data += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        # As an event loop's transport: the protocol hears of it soon after.
        if not self.closed and self.protocol is not None:
            asyncio.get_running_loop().call_soon(self._lost)
        self.closed = True

    def abort(self) -> None:
        self.aborted = True
        self.close()

    def _lost(self) -> None:
        protocol, self.protocol = self.protocol, None
        protocol.connection_lost(None)

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default

    def frames(self) -> list[tuple[int, bytes]]:
        """The frames written since the last call (the 101 left out)."""
        data = bytes(self.data)
        self.data.clear()
        if data.startswith(b"HTTP/1.1 101"):
            data = data[data.index(b"\r\n\r\n") + 4 :]
        return frames_of(data)


class Rig:
    """One server's shared parts and a handler that holds each connection open."""

    def __init__(self, *, slots: int = 10, line: int | None = None, **options: Any) -> None:
        loop = asyncio.get_running_loop()
        self.counters = Counters()
        self.opened: asyncio.Queue[HubConnection] = asyncio.Queue()
        self.release = loop.create_future()
        self.transports: list[Transport] = []
        self.server = SimpleNamespace(
            handler_tasks=set(), all_connections=set(), is_serving=lambda: True
        )
        self.context = ConnectionContext(
            flusher=Flusher(loop),
            counters=self.counters,
            handshakes=HandshakeSlots(slots, line),
            deadlines=HandshakeDeadlines(30.0, loop),
            per_ip=ConnectionsPerIp(options.pop("per_ip", 0)),
            handler=self._handler,
            process_request=lambda conn, request: None,
            **options,
        )

    async def _handler(self, conn: HubConnection) -> None:
        conn.start_outbox()
        self.opened.put_nowait(conn)
        await self.release

    def accept(self, max_size: int = LIMIT) -> tuple[HubConnection, Transport]:
        """A TCP connection accepted, nothing read yet."""
        conn = HubConnection(
            HubProtocol(extensions=None, max_size=max_size, logger=LOG),
            self.server,  # type: ignore[arg-type]
            asyncio.get_running_loop(),
            self.context,
        )
        transport = Transport()
        transport.protocol = conn
        self.transports.append(transport)
        conn.connection_made(transport)  # type: ignore[arg-type]
        return conn, transport

    async def open(self, max_size: int = LIMIT) -> tuple[HubConnection, Transport]:
        """A connection past its handshake, its handler running."""
        conn, transport = self.accept(max_size)
        conn.data_received(REQUEST)
        assert await asyncio.wait_for(self.opened.get(), WAIT) is conn
        conn.outbox.flush()
        assert bytes(transport.data).startswith(b"HTTP/1.1 101")
        transport.frames()
        return conn, transport

    async def aclose(self) -> None:
        """Every socket lost, every handler ended."""
        for transport in self.transports:
            transport.abort()
        if not self.release.done():
            self.release.set_result(None)
        tasks = list(self.server.handler_tasks)
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT)


@pytest.fixture
async def make_rig() -> Any:
    rigs: list[Rig] = []

    def make(**options: Any) -> Rig:
        rig = Rig(**options)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        await rig.aclose()


def close_frame(code: int) -> bytes:
    return RawFrame(FIN | OP_CLOSE, struct.pack("!H", code), key=b"abcd").wire


def closed_with(payload: bytes) -> int:
    return struct.unpack("!H", payload[:2])[0]


async def until(predicate: Any) -> None:
    """Let the event loop run until ``predicate()`` holds (at most ``WAIT`` s)."""
    for _ in range(int(WAIT / 0.002)):
        if predicate():
            return
        await asyncio.sleep(0.002)
    assert predicate(), "not reached"


# ── handshakes: slots, a waiting line, deadlines ─────────────────────────────


async def test_handshakes_beyond_the_slots_wait_unread_and_beyond_the_line_are_cut(
    make_rig: Any,
) -> None:
    """A slot is taken with the request's first bytes; beyond the slots a
    request waits in line, kept and not parsed; beyond the line it is cut."""
    rig = make_rig(slots=1, line=1)
    first, first_t = rig.accept()
    waiting, waiting_t = rig.accept()
    cut, cut_t = rig.accept()
    _silent, silent_t = rig.accept()
    slots = rig.context.handshakes
    assert slots.in_progress == 0, "no slot before the first bytes"
    first.data_received(REQUEST[:10])
    waiting.data_received(REQUEST)
    cut.data_received(REQUEST)
    assert first_t.reading and slots.in_progress == 1
    assert not waiting_t.reading and slots.waiting == 1, "in line, unread"
    assert cut_t.aborted and slots.refused == 1, "the line is full: cut"
    assert silent_t.reading and not silent_t.aborted, "a client that has not written holds no slot"

    first.data_received(REQUEST[10:])
    assert await asyncio.wait_for(rig.opened.get(), WAIT) is first
    assert await asyncio.wait_for(rig.opened.get(), WAIT) is waiting, "its kept request read"
    assert waiting_t.reading and slots.waiting == 0 and slots.in_progress == 0
    assert silent_t.reading


async def test_one_that_leaves_the_line_is_never_admitted(make_rig: Any) -> None:
    rig = make_rig(slots=1, line=4)
    first, _ = rig.accept()
    first.data_received(REQUEST[:10])
    gone, gone_t = rig.accept()
    gone.data_received(REQUEST)
    assert rig.context.handshakes.waiting == 1
    gone_t.abort()
    await until(lambda: rig.context.handshakes.waiting == 0)
    first.data_received(REQUEST[10:])
    await asyncio.wait_for(rig.opened.get(), WAIT)
    assert not gone_t.reading and rig.context.handshakes.in_progress == 0


async def test_the_handshake_deadline_runs_until_the_handshake_is_over(make_rig: Any) -> None:
    rig = make_rig()
    conn, transport = rig.accept()
    assert len(rig.context.deadlines) == 1
    conn.handshake_timed_out()
    assert transport.aborted
    await until(lambda: len(rig.context.deadlines) == 0)
    opened, _ = await rig.open()
    assert len(rig.context.deadlines) == 0 and not opened.closing


# ── the write path ───────────────────────────────────────────────────────────


async def test_frames_go_out_in_order_and_websockets_own_writes_wait_for_them(
    make_rig: Any,
) -> None:
    rig = make_rig()
    conn, transport = await rig.open()
    assert conn.send_frame(b'{"n":1}') and conn.send_frame(b'{"n":2}')
    assert transport.data == b"", "written once per loop pass, not per frame"
    conn.data_received(RawFrame(FIN | OP_PING, b"p", key=b"abcd").wire)  # websockets pongs
    assert transport.frames() == [(OP_TEXT, b'{"n":1}'), (OP_TEXT, b'{"n":2}'), (OP_PONG, b"p")]
    conn.send_frame(b'{"n":3}')
    await until(lambda: transport.data != b"")
    assert transport.frames() == [(OP_TEXT, b'{"n":3}')]
    assert conn.frames_out == 3


async def test_a_connection_over_its_outbound_bound_is_closed_as_a_slow_consumer(
    make_rig: Any,
) -> None:
    rig = make_rig(outbox_limit=1000, close_timeout=0.05)
    conn, transport = await rig.open()
    conn.pause_writing()  # the socket's buffer is past its high-water mark
    transport.buffered = 900
    assert conn.send_frame(b'{"x":"' + b"y" * 50 + b'"}')
    assert not conn.send_frame(b'{"x":"' + b"y" * 100 + b'"}'), "over the bound: dropped"
    await until(lambda: any(op == OP_CLOSE for op, _ in frames_of(bytes(transport.data))))
    (error, close) = transport.frames()
    assert orjson.loads(error[1])["code"] == ErrorCode.SLOW_CONSUMER
    assert close[0] == OP_CLOSE and closed_with(close[1]) == CloseCode.SLOW_CONSUMER
    assert rig.counters.slow_consumer_closes == 1 and rig.counters.closes[4008] == 1
    assert conn.closing and not conn.send_frame(b"{}")


# ── closing ──────────────────────────────────────────────────────────────────


async def test_a_hub_close_is_an_error_event_then_the_close_counted_once(
    make_rig: Any,
) -> None:
    rig = make_rig()
    conn, transport = await rig.open()
    conn.send_frame(b'{"before":1}')
    conn.close_for(CloseCode.RATE_LIMIT_ABUSE, ErrorCode.RATE_LIMITED, "too fast")
    conn.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "and late")
    await until(lambda: any(op == OP_CLOSE for op, _ in frames_of(bytes(transport.data))))
    before, error, close = transport.frames()
    assert before == (OP_TEXT, b'{"before":1}'), "what was queued goes first"
    assert orjson.loads(error[1]) == {
        "type": "error", "code": "RATE_LIMITED", "message": "too fast", "request_id": None,
    }  # fmt: skip
    assert closed_with(close[1]) == 4429 and close[1][2:] == b"too fast"
    assert conn.hub_close_code == 4429
    assert dict(rig.counters.closes) == {4429: 1}
    assert rig.counters.errors[ErrorCode.RATE_LIMITED] == 1
    assert rig.counters.errors[ErrorCode.HEARTBEAT_TIMEOUT] == 0, "the second close did nothing"
    assert not conn.send_frame(b'{"after":1}'), "nothing after the error event"
    conn.data_received(close_frame(4429))  # the client answers: the handshake ends
    await until(lambda: transport.eof)  # and the server half-closes, as RFC 6455 has it
    assert not transport.aborted and transport.frames() == []


async def test_a_peer_that_never_answers_the_close_is_cut_after_close_timeout(
    make_rig: Any,
) -> None:
    rig = make_rig(close_timeout=0.05)
    conn, transport = await rig.open()
    conn.close_for(CloseCode.DISCONNECTED, ErrorCode.DISCONNECTED, "bye")
    await until(lambda: transport.aborted)


async def test_a_long_reason_is_cut_to_fit_a_close_frame(make_rig: Any) -> None:
    rig = make_rig()
    conn, transport = await rig.open()
    reason = "é" * 200  # 400 bytes: a close frame's reason may have 123
    conn.close_for(CloseCode.DISCONNECTED, ErrorCode.DISCONNECTED, reason)
    await until(lambda: any(op == OP_CLOSE for op, _ in frames_of(bytes(transport.data))))
    error, close = transport.frames()
    assert orjson.loads(error[1])["message"] == reason, "the event carries it whole"
    assert close[1][2:].decode() == "é" * 60


@pytest.mark.parametrize(
    ("frame", "code", "message"),
    [
        (RawFrame(FIN | OP_TEXT, b"x" * 200, key=b"abcd"), 1009, "frame too big: "),
        (RawFrame(FIN | OP_TEXT, b"\xff\xfe", key=b"abcd"), 1007, "invalid UTF-8 in a text frame"),
        (RawFrame(FIN | OP_TEXT, b"x", masked=False), 1002, "WebSocket protocol error: "),
    ],
    ids=["too-big", "bad-utf8", "unmasked"],
)
async def test_a_bad_frame_is_announced_before_websockets_closes(
    make_rig: Any, frame: RawFrame, code: int, message: str
) -> None:
    rig = make_rig()
    conn, transport = await rig.open(max_size=100)
    # The handler waits for the next message (text is decoded when taken).
    receiving = asyncio.ensure_future(conn.receive())
    conn.data_received(frame.wire)
    await until(lambda: any(op == OP_CLOSE for op, _ in frames_of(bytes(transport.data))))
    receiving.cancel()
    error, close = transport.frames()
    event = orjson.loads(error[1])
    assert event["code"] == "INVALID_REQUEST" and event["message"].startswith(message)
    assert close[0] == OP_CLOSE and closed_with(close[1]) == code
    assert conn.hub_close_code == code and rig.counters.closes[code] == 1
    assert rig.counters.errors[ErrorCode.INVALID_REQUEST] == 1


# ── liveness and cleanup ─────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "frame",
    [
        RawFrame(FIN | OP_PING, b"ping", key=b"abcd"),
        RawFrame(FIN | OP_TEXT, b'{"n":1}', key=b"abcd"),
    ],
    ids=["control frame (websockets' parser)", "data frame (the hub's reader)"],
)
async def test_whole_inbound_frames_are_liveness_their_bytes_are_not(
    make_rig: Any, frame: RawFrame
) -> None:
    rig = make_rig()
    conn, _ = await rig.open()
    conn.forget_handshake(LIMIT)  # from here the hub's reader takes plain frames
    conn.session = SimpleNamespace(last_seen=0.0)  # type: ignore[assignment]
    wire = frame.wire
    conn.data_received(wire[:3])  # a frame under way: not liveness
    assert conn.session.last_seen == 0.0
    conn.data_received(wire[3:])  # the frame completed, as it arrives
    assert conn.session.last_seen > 0.0
    conn.session.last_seen = 0.0
    conn.data_received(wire)  # whole in one read (a data frame: the hub's reader)
    assert conn.session.last_seen > 0.0


async def test_a_lost_connection_gives_its_per_ip_slot_back_once(make_rig: Any) -> None:
    rig = make_rig(per_ip=2)
    per_ip = rig.context.per_ip
    conn, transport = await rig.open()
    per_ip.acquire("10.0.0.7")  # this connection's slot, taken at its handshake
    per_ip.acquire("10.0.0.7")  # another connection's from the same address
    conn.client, conn.holds_ip_slot = ClientAddress("10.0.0.7", 5555), True
    transport.abort()
    await until(lambda: len(per_ip) == 1)
    conn.connection_gone()  # told twice: released once
    assert len(per_ip) == 1, "the other connection's slot stays counted"


# ── probes ───────────────────────────────────────────────────────────────────


async def test_a_probe_answered_by_a_pong_is_alive(make_rig: Any) -> None:
    rig = make_rig()
    conn, transport = await rig.open()
    probe = asyncio.ensure_future(conn.probe(WAIT))
    await until(lambda: any(op == OP_PING for op, _ in frames_of(bytes(transport.data))))
    ((_, payload),) = transport.frames()
    conn.data_received(RawFrame(FIN | OP_PONG, payload, key=b"abcd").wire)
    assert await asyncio.wait_for(probe, WAIT) is True


async def test_a_probe_without_a_pong_in_time_is_dead(make_rig: Any) -> None:
    rig = make_rig()
    conn, _ = await rig.open()
    assert await asyncio.wait_for(conn.probe(0.05), WAIT) is False
    assert await conn.probe(0) is False


async def test_a_probe_ends_at_once_when_the_hub_closes_the_connection(make_rig: Any) -> None:
    rig = make_rig()
    conn, _ = await rig.open()
    probe = asyncio.ensure_future(conn.probe(3600))  # would wait an hour for its pong
    await asyncio.sleep(0)
    conn.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "gone quiet")
    assert await asyncio.wait_for(probe, WAIT) is False
    assert await conn.probe(WAIT) is False, "a closing connection is dead"


async def test_a_probe_ends_at_once_when_the_connection_is_lost(make_rig: Any) -> None:
    rig = make_rig()
    conn, transport = await rig.open()
    probe = asyncio.ensure_future(conn.probe(3600))
    await asyncio.sleep(0)
    transport.abort()
    assert await asyncio.wait_for(probe, WAIT) is False
