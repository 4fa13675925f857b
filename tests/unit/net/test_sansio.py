"""The hub builds websockets' protocol and connection objects itself
(hub.net.sansio, HubConnection.__init__): every attribute websockets' own
constructors set must read the same on the hub's — so a websockets release
that adds or changes one fails here, not in production."""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request
from websockets.server import ServerProtocol

from hub.core.counters import Counters
from hub.net.connection import HubConnection
from hub.net.outbox import Flusher
from hub.net.sansio import HubProtocol

LOG = logging.getLogger("websockets.server")
LIMIT = 65536


def both_protocols() -> tuple[ServerProtocol, HubProtocol]:
    theirs = ServerProtocol(max_size=LIMIT, logger=LOG)
    mine = HubProtocol(extensions=None, max_size=LIMIT, logger=LOG)
    return theirs, mine


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


def test_the_request_parser_starts_when_websockets_is_fed():
    theirs, mine = both_protocols()
    request = (
        b"GET /ws?agent_id=a HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    for protocol in (theirs, mine):
        protocol.receive_data(request[:20])
        protocol.receive_data(request[20:])
    (a,), (b,) = theirs.events_received(), mine.events_received()
    assert (a.path, a.headers, a.method) == (b.path, b.headers, b.method)
    # The end of the stream before any request: both fail the same way.
    theirs, mine = both_protocols()
    theirs.receive_eof()
    mine.receive_eof()
    assert type(mine.handshake_exc) is type(theirs.handshake_exc)
    assert mine.data_to_send() == theirs.data_to_send()


def test_only_the_bearer_subprotocol_the_token_came_in_is_selected():
    _, mine = both_protocols()
    assert mine.select_subprotocol(["bearer.abc"]) is None  # no token in a subprotocol
    mine.bearer_subprotocol = "bearer.abc"
    assert mine.select_subprotocol(["chat", "bearer.abc"]) == "bearer.abc"
    assert mine.select_subprotocol(["chat"]) is None
    request = Request(
        "/ws",
        Headers(
            [
                ("Host", "h"),
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Protocol", "chat, bearer.abc"),
            ]
        ),
    )
    response = mine.accept(request)
    assert response.status_code == 101
    assert response.headers["Sec-WebSocket-Protocol"] == "bearer.abc"


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
    cls = type(
        "TestConnection",
        (HubConnection,),
        {"flusher": Flusher(), "counters": Counters(), "close_timeout": 7.0, "loop": loop},
    )
    mine = cls(HubProtocol(extensions=None, max_size=LIMIT, logger=LOG), server)  # type: ignore[arg-type]
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
            assert got is not getattr(cls, name, None)  # one per connection
        elif isinstance(value, deque):
            assert list(got) == list(value)
        else:
            assert got == value, name
    # What is mutated must be the connection's own.
    other = cls(HubProtocol(extensions=None, max_size=LIMIT, logger=LOG), server)  # type: ignore[arg-type]
    for name in ("pending_pings", "drain_waiters", "connection_lost_waiter", "request_rcvd"):
        assert getattr(mine, name) is not getattr(other, name), name
