"""What hub.net.ws_internals relies on in websockets 17, checked by behaviour.

Each test names a reliance on websockets' private API and fails when a
websockets release changes it — what websockets does with it, not only
whether an attribute of that name exists.
"""

from __future__ import annotations

import asyncio
import email.utils
import gc
import logging
import weakref
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import Server, ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CONT, TEXT, Frame
from websockets.http11 import Request
from websockets.protocol import CONNECTING, OPEN
from websockets.server import ServerProtocol

from hub.core.counters import Counters
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.outbox import Flusher
from hub.net.ws_internals import HubProtocol, handler_tasks, http_date, make_server, plain_request
from tests.support.wsframes import FIN, OP_CLOSE, OP_PING, OP_TEXT, RawFrame, server_frames

LOG = logging.getLogger("websockets.server")
LIMIT = 65536
REQUEST = (
    b"GET /ws?agent_id=a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)


def both_protocols() -> tuple[ServerProtocol, HubProtocol]:
    theirs = ServerProtocol(max_size=LIMIT, logger=LOG)
    mine = HubProtocol(extensions=None, max_size=LIMIT, logger=LOG)
    return theirs, mine


# ── HubProtocol: websockets' ServerProtocol with its constants on the class ──


def test_hub_protocol_reads_as_websockets_server_protocol():
    theirs, mine = both_protocols()
    own = {"id", "reader", "parser", "events", "writes"}  # compared below, by kind
    for name, value in vars(theirs).items():
        if name in own:
            continue
        assert hasattr(mine, name), name
        got = getattr(mine, name)
        if name == "extensions":
            assert list(got) == value == []
        else:
            assert got == value, name
    assert set(own) <= set(vars(theirs))
    assert type(mine.id) is type(theirs.id) and mine.id == mine.id  # drawn once, then kept
    assert type(mine.reader) is type(theirs.reader)
    assert mine.events == theirs.events == [] and mine.writes == theirs.writes == []


def test_hub_protocol_parses_requests_answers_and_frames_as_websockets_does():
    theirs, mine = both_protocols()
    for protocol in (theirs, mine):
        protocol.receive_data(REQUEST[:20])
        protocol.receive_data(REQUEST[20:])
    (a,), (b,) = theirs.events_received(), mine.events_received()
    assert (a.path, a.headers, a.method) == (b.path, b.headers, b.method)
    for protocol, request in ((theirs, a), (mine, b)):
        protocol.send_response(protocol.accept(request))
    assert theirs.state is mine.state is OPEN
    frames = Frame(TEXT, b"par", fin=False).serialize(mask=True, extensions=[]) + Frame(
        CONT, b"ts"
    ).serialize(mask=True, extensions=[])
    theirs.receive_data(frames)
    mine.receive_data(frames)
    assert [(f.opcode, f.data, f.fin) for f in theirs.events_received()] == [
        (f.opcode, f.data, f.fin) for f in mine.events_received()
    ]
    # The end of the stream before any request: both fail the same way.
    theirs, mine = both_protocols()
    theirs.receive_eof()
    mine.receive_eof()
    assert type(mine.handshake_exc) is type(theirs.handshake_exc)
    assert mine.data_to_send() == theirs.data_to_send()


def test_websockets_parser_takes_exactly_one_frame_s_bytes_and_tracks_a_fragmented_message():
    """ParserPosition assumes websockets' parser reads a frame's bytes and no
    more (it waits, its buffer empty, for the rest); the hub's reader waits
    while current_size says a fragmented message is under way."""
    _, mine = both_protocols()
    mine.receive_data(REQUEST)
    (request,) = mine.events_received()
    mine.send_response(mine.accept(request))
    first = RawFrame(OP_TEXT, b"a" * 300).wire  # a 16-bit length, not final
    for i in range(len(first) - 1):
        mine.receive_data(first[i : i + 1])
        assert mine.events_received() == []
        if i + 1 in (2, 4, 8):
            # After the header, the extended length, the mask: the parser
            # took them and waits mid-frame with an empty buffer (issue 38).
            assert not mine.reader.buffer
    assert mine.current_size is None
    mine.receive_data(first[-1:])
    assert len(mine.events_received()) == 1 and not mine.reader.buffer
    assert mine.current_size == 300
    mine.receive_data(RawFrame(FIN | 0x0, b"b").wire)
    mine.events_received()
    assert mine.current_size is None


def _answers(request: bytes, server_header: str | None = "agora-hub", extensions: Any = None):
    """websockets' answer (accept, the Server header, send_response) and the
    hub's upgrade() to ``request``, each with its protocol after."""
    theirs = ServerProtocol(max_size=LIMIT, logger=LOG, extensions=extensions)
    mine = HubProtocol(extensions=extensions, max_size=LIMIT, logger=LOG)
    for protocol in (theirs, mine):
        protocol.receive_data(request)
    (a,), (b,) = theirs.events_received(), mine.events_received()
    response = theirs.accept(a)
    if server_header is not None:
        response.headers["Server"] = server_header
    theirs.send_response(response)
    return theirs, b"".join(theirs.data_to_send()), mine, mine.upgrade(b, server_header)


def _dateless(answer: bytes) -> bytes:
    return b"\r\n".join(line for line in answer.split(b"\r\n") if not line.startswith(b"Date: "))


PLAIN_VARIANTS = [
    REQUEST,
    REQUEST.replace(b"Connection: Upgrade", b"Connection: upgrade"),
    REQUEST.replace(b"Upgrade: websocket", b"Upgrade: WebSocket"),
    REQUEST.replace(b"\r\n\r\n", b"\r\nOrigin: https://app.example\r\n\r\n"),
    REQUEST.replace(b"\r\n\r\n", b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"),
]
OTHER_VARIANTS = [
    REQUEST.replace(b"GET", b"POST"),
    REQUEST.replace(b"HTTP/1.1", b"HTTP/1.0"),
    REQUEST.replace(b"Connection: Upgrade", b"Connection: keep-alive, Upgrade"),
    REQUEST.replace(b"Connection: Upgrade", b"Connection: close"),
    REQUEST.replace(b"Upgrade: websocket", b"Upgrade: h2c"),
    REQUEST.replace(b"Upgrade: websocket\r\n", b""),
    REQUEST.replace(b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", b"Sec-WebSocket-Key: abc"),
    REQUEST.replace(b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", b"Sec-WebSocket-Key: !!!!"),
    REQUEST.replace(b"\r\n\r\n", b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"),
    REQUEST.replace(b"Sec-WebSocket-Version: 13", b"Sec-WebSocket-Version: 8"),
    REQUEST.replace(b"\r\n\r\n", b"\r\nSec-WebSocket-Protocol: chat\r\n\r\n"),
    REQUEST.replace(b"\r\n\r\n", b"\r\nOrigin: a\r\nOrigin: b\r\n\r\n"),
]


@pytest.mark.parametrize("server_header", ["agora-hub", None])
@pytest.mark.parametrize("request_bytes", PLAIN_VARIANTS)
def test_upgrade_answers_a_plain_request_as_websockets_accept_and_send_response(
    request_bytes: bytes, server_header: str | None
):
    theirs, their_answer, mine, my_answer = _answers(request_bytes, server_header)
    assert my_answer is not None
    assert _dateless(my_answer) == _dateless(their_answer)
    assert my_answer.index(b"\r\nDate: ") == their_answer.index(b"\r\nDate: ")
    assert theirs.state is mine.state is OPEN and mine.accept_called
    assert (mine.origin, mine.subprotocol, list(mine.extensions)) == (
        theirs.origin, theirs.subprotocol, theirs.extensions,
    )  # fmt: skip
    assert mine.data_to_send() == []  # the hub writes the answer itself


@pytest.mark.parametrize("request_bytes", OTHER_VARIANTS)
def test_upgrade_leaves_any_other_request_to_websockets_untouched(request_bytes: bytes):
    _, _, mine, my_answer = _answers(request_bytes)
    assert my_answer is None
    assert mine.state is CONNECTING and not mine.accept_called and mine.origin is None


def test_upgrade_leaves_extensions_to_negotiate_to_websockets():
    from websockets.extensions.permessage_deflate import enable_server_permessage_deflate

    offered = REQUEST.replace(
        b"\r\n\r\n", b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
    )
    extensions = enable_server_permessage_deflate(None)
    assert _answers(offered, extensions=extensions)[3] is None
    _, their_answer, _, my_answer = _answers(REQUEST, extensions=extensions)
    assert my_answer is not None and _dateless(my_answer) == _dateless(their_answer)


def test_http_date_is_websockets_date():
    for _ in range(3):
        before = email.utils.formatdate(usegmt=True)
        mine = http_date()
        if email.utils.formatdate(usegmt=True) == before:
            assert mine == before
            return
    raise AssertionError("the second changed three times in a row")


def test_the_bearer_subprotocol_is_selected_only_as_the_token_came():
    _, mine = both_protocols()
    assert mine.select_subprotocol(["bearer.abc"]) is None
    mine.bearer_subprotocol = "bearer.abc"
    offered = b"\r\nSec-WebSocket-Protocol: chat, bearer.abc\r\n\r\n"
    mine.receive_data(REQUEST.replace(b"\r\n\r\n", offered))
    (request,) = mine.events_received()
    response = mine.accept(request)
    assert response.status_code == 101
    assert response.headers["Sec-WebSocket-Protocol"] == "bearer.abc"


# ── WebSocketsConnection: websockets' connection as the hub builds it ───────


class Transport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.eof = False
        self.reading = True
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        self.data += data

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        # As an event loop's transport: the protocol hears it soon after.
        protocol = self.protocol
        if not self.closed and protocol is not None and not protocol.connection_lost_waiter.done():
            asyncio.get_running_loop().call_soon(self._lost)
        self.closed = True

    def _lost(self) -> None:
        protocol, self.protocol = self.protocol, None  # as asyncio's transports let go
        protocol.connection_lost(None)

    abort = close

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1234) if name == "peername" else default


def context(handler: Any, **kw: Any) -> ConnectionContext:
    loop = asyncio.get_running_loop()
    return ConnectionContext(
        flusher=Flusher(loop),
        counters=Counters(),
        handshakes=HandshakeSlots(10),
        deadlines=HandshakeDeadlines(30.0, loop),
        per_ip=ConnectionsPerIp(0),
        handler=handler,
        process_request=lambda conn, request: None,
        **kw,
    )


async def opened(**kw: Any) -> tuple[HubConnection, Transport, asyncio.Future[None]]:
    """A connection past its handshake whose handler waits until released."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    release: asyncio.Future[None] = loop.create_future()

    async def handler(conn: HubConnection) -> None:
        conn.start_outbox()
        ready.set_result(None)
        await release

    server = SimpleNamespace(handler_tasks=set(), all_connections=set(), is_serving=lambda: True)
    conn = HubConnection(
        HubProtocol(extensions=None, max_size=LIMIT, logger=LOG),
        server,
        loop,
        context(handler, **kw),
    )  # type: ignore[arg-type]
    transport = Transport()
    transport.protocol = conn
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(REQUEST)
    await asyncio.wait_for(ready, 10)
    conn.outbox.flush()
    assert bytes(transport.data).startswith(b"HTTP/1.1 101")
    transport.data.clear()
    return conn, transport, release


async def test_hub_connection_reads_as_websockets_server_connection():
    loop = asyncio.get_running_loop()
    server = object()
    theirs = ServerConnection(
        ServerProtocol(max_size=LIMIT, logger=LOG),
        server,  # type: ignore[arg-type]
        ping_interval=None,
        ping_timeout=None,
        close_timeout=7.0,
        max_queue=16,
    )
    mine = HubConnection(
        HubProtocol(extensions=None, max_size=LIMIT, logger=LOG),
        server,
        loop,
        context(None, close_timeout=7.0),
    )  # type: ignore[arg-type]
    for name, value in vars(theirs).items():
        assert hasattr(mine, name), name
        got = getattr(mine, name)
        if name in ("protocol", "server"):
            continue
        if name == "logger":  # websockets wraps it per connection; the hub does not
            assert got is value.logger
        elif name == "id":
            assert got == mine.protocol.id
        elif isinstance(value, asyncio.Future):
            assert isinstance(got, asyncio.Future) and not got.done()
        elif isinstance(value, deque):
            assert list(got) == list(value)
        else:
            assert got == value, name
    other = HubConnection(
        HubProtocol(extensions=None, max_size=LIMIT, logger=LOG), server, loop, context(None)
    )  # type: ignore[arg-type]
    for name in ("pending_pings", "drain_waiters", "connection_lost_waiter", "request_rcvd"):
        assert getattr(mine, name) is not getattr(other, name), name


async def test_a_request_websockets_parsed_resolves_request_rcvd_and_opens():
    """A request in two reads goes to websockets' parser, whose
    process_event resolves request_rcvd; the handshake then runs websockets'
    accept() and the connection opens and receives frames."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    received: asyncio.Future[Any] = loop.create_future()

    async def handler(conn: HubConnection) -> None:
        conn.start_outbox()
        ready.set_result(None)
        received.set_result(await conn.receive())

    server = SimpleNamespace(handler_tasks=set(), all_connections=set(), is_serving=lambda: True)
    conn = HubConnection(
        HubProtocol(extensions=None, max_size=LIMIT, logger=LOG), server, loop, context(handler)
    )  # type: ignore[arg-type]
    transport = Transport()
    transport.protocol = conn
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.data_received(REQUEST[:30])
    assert not conn.request_rcvd.done()
    conn.data_received(REQUEST[30:])
    assert conn.request_rcvd.done() and conn.request is not None
    await asyncio.wait_for(ready, 10)
    conn.outbox.flush()
    assert bytes(transport.data).startswith(b"HTTP/1.1 101")
    conn.data_received(RawFrame(FIN | OP_TEXT, b"hello", key=b"abcd").wire)
    assert await asyncio.wait_for(received, 10) == "hello"
    conn.connection_lost(None)


async def test_websockets_delivers_frames_through_the_inbox_and_ends_it_when_lost():
    """recv_messages is the hub's Inbox: websockets' process_event puts its
    frames there and recv() takes them; connection_lost closes it."""
    conn, _, release = await opened()
    fragments = RawFrame(OP_TEXT, b"frag").wire + RawFrame(FIN | OP_PING, b"p").wire
    conn.data_received(fragments + RawFrame(FIN | 0x0, b"ment").wire)  # through websockets
    assert await asyncio.wait_for(conn.receive(), 5) == "fragment"
    conn.connection_lost(None)
    assert await asyncio.wait_for(conn.receive(), 5) is None
    release.set_result(None)


async def test_websockets_writes_only_through_send_data_after_the_hubs_pending_bytes():
    """A pong and a close frame are websockets' own writes: the outbox's
    pending frames go out first, and a close over a bad frame is announced by
    the hub's error event."""
    conn, transport, release = await opened()
    conn.send_frame(b'{"type":"first"}')
    conn.data_received(RawFrame(FIN | OP_PING, b"p").wire)
    frames = server_frames(bytes(transport.data))
    assert frames == [(OP_TEXT, b'{"type":"first"}'), (0xA, b"p")]
    transport.data.clear()
    conn.data_received(RawFrame(FIN | 0x3, b"").wire)  # an unknown opcode: 1002
    (error, close) = server_frames(bytes(transport.data))
    assert error[0] == OP_TEXT and b"WebSocket protocol error: invalid opcode" in error[1]
    assert close[0] == OP_CLOSE and close[1][:2] == b"\x03\xea"
    assert transport.eof and conn.closing
    release.set_result(None)


async def test_the_hubs_own_handshake_leaves_websockets_open_and_closing_as_usual():
    """The hub answers a plain upgrade itself (protocol.state = OPEN, the 101
    through its outbox): websockets' close() then runs its closing handshake,
    with close_timeout read from the context."""
    conn, transport, release = await opened(close_timeout=0.2)
    assert conn.protocol.state is OPEN and conn.request is not None
    # The handshake is over for websockets: a frame is a frame, not a request.
    conn.data_received(RawFrame(FIN | OP_TEXT, b"x").wire)
    assert await asyncio.wait_for(conn.receive(), 5) == "x"
    started = asyncio.get_running_loop().time()
    # No answer comes: websockets gives up after close_timeout and cuts.
    await asyncio.wait_for(conn.close(1000), 8)
    assert asyncio.get_running_loop().time() - started < 5
    assert server_frames(bytes(transport.data))[-1][0] == OP_CLOSE
    assert transport.closed
    release.set_result(None)


async def test_a_paused_connection_drains_when_resumed():
    """drain_waiters is a list: websockets appends, iterates and removes."""
    conn, _, release = await opened()
    conn.pause_writing()
    waiting = asyncio.ensure_future(conn.drain())
    await asyncio.sleep(0)
    assert not waiting.done()
    conn.resume_writing()
    await asyncio.wait_for(waiting, 5)
    release.set_result(None)


async def test_a_closed_connection_is_freed_without_the_cycle_collector():
    """websockets leaves its protocol in a cycle (its parser generator): the
    hub breaks it when the connection is lost."""
    conn, _, release = await opened(close_timeout=0.1)
    freed = asyncio.Event()
    ref = weakref.ref(conn, lambda _: freed.set())
    tasks = list(conn.server.handler_tasks)
    gc.disable()
    try:
        # The handler returns; the closing handshake gets no answer: cut.
        release.set_result(None)
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        del conn, tasks
        await asyncio.wait_for(freed.wait(), 10)
    finally:
        gc.enable()
    assert ref() is None


async def test_make_server_serves_hub_connections_and_closes_them():
    """websockets' Server around the hub's factory: its connections set,
    its handler tasks, close() with 1001 and wait_closed()."""
    opened_: asyncio.Future[HubConnection] = asyncio.get_running_loop().create_future()

    async def handler(conn: HubConnection) -> None:
        conn.start_outbox()
        opened_.set_result(conn)
        await conn.receive()

    ctx = context(handler, close_timeout=0.5)

    def connection(server: Server, loop: asyncio.AbstractEventLoop) -> HubConnection:
        return HubConnection(
            HubProtocol(extensions=None, max_size=LIMIT, logger=LOG), server, loop, ctx
        )

    async def create_server(factory: Any) -> asyncio.Server:
        return await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)

    server = make_server(connection, create_server, LOG)
    await server
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    conn = await asyncio.wait_for(opened_, 10)
    assert server.connections == {conn} and len(handler_tasks(server)) == 1
    server.close()
    await asyncio.wait_for(server.wait_closed(), 10)
    assert conn.protocol.close_sent.code == 1001 and not handler_tasks(server)
    writer.close()


async def test_receive_is_none_once_closed_as_recv_raises():
    conn, _, release = await opened()
    conn.connection_lost(None)
    with pytest.raises(ConnectionClosed):
        await conn.recv()
    assert await conn.receive() is None
    release.set_result(None)


# ── plain_request: a whole request read as websockets' Request.parse reads it ──


def _parsed_by(protocol: ServerProtocol, data: bytes) -> tuple[Any, ...]:
    """What ``protocol`` made of ``data``: the request (all of it), or how it failed."""
    protocol.receive_data(data)
    events = protocol.events_received()
    requests = [
        (r.method, r.path, r.protocol, list(r.headers.raw_items()))
        for r in events
        if isinstance(r, Request)
    ]
    return (
        requests,
        type(protocol.handshake_exc),
        str(protocol.handshake_exc),
        _dateless(b"".join(protocol.data_to_send())),
        bytes(protocol.reader.buffer),
        protocol.state,
    )


def _same_as_websockets(data: bytes) -> bool:
    """Parsed the same by websockets and the hub; True when the hub read it itself."""
    theirs, mine = both_protocols()
    read_whole = plain_request(bytearray(data)) is not None
    assert _parsed_by(mine, data) == _parsed_by(theirs, data), data
    return read_whole


def test_plain_request_reads_a_whole_request_as_websockets_does():
    assert _same_as_websockets(REQUEST)
    frame = Frame(TEXT, b"hi").serialize(mask=True, extensions=[])
    assert _same_as_websockets(REQUEST + frame)  # frames right after it, in the same read
    buffer = bytearray(REQUEST + frame)
    request = plain_request(buffer)
    assert request is not None and buffer == frame  # taken from the buffer, the frame left


@pytest.mark.parametrize(
    "data",
    [
        REQUEST.replace(b"Host: h\r\n", b"Host: h\n"),  # a bare LF
        REQUEST.replace(b"HTTP/1.1", b"HTTP/2.0"),
        REQUEST.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\r\n"),
        REQUEST.replace(b"GET ", b"G\xc3\xa9T "),
        REQUEST.replace(b"/ws?", b"/w\xc3\xa9?"),
        REQUEST.replace(b"Host:", b"Ho st:"),
        REQUEST.replace(b"Host: h", b"Host h"),
        REQUEST.replace(b"Host: h", b"Host: h\x01"),
        REQUEST.replace(b"Host: h", b"Host: caf\xe9"),  # obs-text: ISO-8859-1
        REQUEST.replace(b"Host: h", b"Host: \t h \t"),
        REQUEST.replace(b"Host: h", b"Transfer-Encoding: chunked"),
        REQUEST.replace(b"Host: h", b"Content-Length: 0\r\nContent-Length: 0"),
        REQUEST.replace(b"Host: h", b"Content-Length: 5"),
        REQUEST.replace(b"Host: h", b"X: " + b"a" * 8200),
        REQUEST.replace(b"Host: h", b"X: " + b"a" * (8192 - 5)),
        REQUEST.replace(b"Host: h", b"X: " + b"a" * (8192 - 4)),
        REQUEST.replace(b"Host: h\r\n", b"X: 1\r\n" * 126),
        REQUEST.replace(b"Host: h\r\n", b"X: 1\r\n" * 127),
        REQUEST.replace(b"Host: h\r\n", b"X: 1\r\n" * 128),
        b"GET / HTTP/1.1\r\n\r\n",
        b"\r\n\r\n",
        b"GET /\r\n\r\n",
        REQUEST[:-2],  # not whole yet
    ],
)
def test_plain_request_leaves_what_websockets_would_refuse_or_read_otherwise(data: bytes):
    _same_as_websockets(data)


_LINE_PARTS = st.sampled_from(
    [b"Host", b"X-a", b"Upgrade", b": ", b":", b" ", b"\t", b"websocket", b"\r", b"\n",
     b"\r\n", b"\x00", b"\x7f", b"\xe9", b"(", b"Content-Length", b"0", b"Transfer-Encoding"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([b"GET /ws?agent_id=a HTTP/1.1", b"GET / HTTP/1.0", b"GET  / HTTP/1.1",
                     b"POST /x HTTP/1.1", b"GET /\xe9 HTTP/1.1", b"GET / HTTP/1.1 x"]),
    st.lists(st.lists(_LINE_PARTS, max_size=6).map(b"".join), max_size=8),
    st.sampled_from([b"\r\n\r\n", b"\r\n\n", b""]),
)  # fmt: skip
def test_plain_request_reads_generated_requests_as_websockets_does(
    request_line: bytes, header_lines: list[bytes], end: bytes
):
    _same_as_websockets(b"\r\n".join([request_line, *header_lines]) + end)


def _read_in_parts(protocol: ServerProtocol, reads: list[bytes]) -> tuple[Any, ...]:
    """What ``protocol`` made of ``reads``, each fed as one read."""
    events: list[Any] = []
    for data in reads:
        protocol.receive_data(data)
        events += protocol.events_received()
    requests = [
        (r.method, r.path, r.protocol, list(r.headers.raw_items()))
        for r in events
        if isinstance(r, Request)
    ]
    frames = [(e.opcode, e.data) for e in events if isinstance(e, Frame)]
    return (
        requests, frames, type(protocol.handshake_exc), str(protocol.handshake_exc),
        _dateless(b"".join(protocol.data_to_send())), bytes(protocol.reader.buffer),
        protocol.state,
    )  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(
        [REQUEST, REQUEST.replace(b"Host: h\r\n", b"Host: h\n"), b"GET / HTTP/1.1\r\n\r\n"]
    ),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=400), max_size=4),
)  # fmt: skip
def test_a_request_cut_anywhere_reads_as_websockets_reads_it(
    request: bytes, with_frame: bool, cuts: list[int]
):
    """Through the real entry point (``receive_data``), a request — and a frame
    sent right after it — cut into reads anywhere: the hub's one-pass parser
    (a request whole in the first read) or websockets' (any other) leave the
    protocol exactly as websockets alone does."""
    data = request + (Frame(TEXT, b"hi").serialize(mask=True, extensions=[]) if with_frame else b"")
    points = sorted({min(c, len(data)) for c in cuts})
    reads = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if b > a]
    theirs, mine = both_protocols()
    assert _read_in_parts(mine, reads) == _read_in_parts(theirs, reads), reads
