"""hub.net.listener: websockets' Server listening with the hub's connections.

On a loopback socket (port 0) with websockets' own client: every accepted
socket becomes a HubConnection handed the server's ConnectionContext, checked
by its ``process_request`` and run by its ``handler``; what ``serve()`` passes
to the event loop is passed the same way (TLS, ``reuse_port``); the frame
size limit and permessage-deflate are the ones given; ``close()`` closes every
connection 1001 and ``wait_closed()`` waits for their handlers.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from hub.core.counters import Counters
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.listener import listen
from hub.net.outbox import Flusher
from hub.net.tls import ServerTls
from tests.support.certs import client_context, make_cert

LOG = logging.getLogger("websockets.server")
WAIT = 10.0


class Echo:
    """A context whose handler answers each message with the connection's agent id."""

    def __init__(self, **options: Any) -> None:
        loop = asyncio.get_running_loop()
        self.connections: list[HubConnection] = []
        self.handled: list[HubConnection] = []
        refuse: Callable[[Any, Any], Any] | None = options.pop("refuse", None)

        def process_request(conn: HubConnection, request: Any) -> Any:
            self.connections.append(conn)
            if refuse is not None:
                return refuse(conn, request)
            conn.agent_id = request.path.partition("agent_id=")[2]
            return None

        self.context = ConnectionContext(
            flusher=Flusher(loop),
            counters=Counters(),
            handshakes=HandshakeSlots(10),
            deadlines=HandshakeDeadlines(30.0, loop),
            per_ip=ConnectionsPerIp(0),
            handler=self._handler,
            process_request=process_request,
            **options,
        )

    async def _handler(self, conn: HubConnection) -> None:
        conn.start_outbox()
        self.handled.append(conn)
        while (message := await conn.receive()) is not None:
            conn.send_frame(orjson.dumps({"from": conn.agent_id, "got": message}))


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    """``server, port = await serve(echo, **listen_options)``; closed after the test."""
    servers: list[Server] = []

    async def start(echo: Echo, **options: Any) -> tuple[Server, int]:
        kwargs: dict[str, Any] = {
            "logger": LOG, "max_size": 65536, "compression": False, "backlog": 16,
        }  # fmt: skip
        kwargs.update(options)
        port = kwargs.pop("port", 0)
        server = listen(echo.context, "127.0.0.1", port, **kwargs)
        await server
        servers.append(server)
        return server, server.sockets[0].getsockname()[1]

    yield start
    for server in servers:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)


async def test_each_connection_is_checked_then_run_by_the_contexts_handler(serve: Any) -> None:
    echo = Echo(server_header="agora-test")
    server, port = await serve(echo)
    async with connect(f"ws://127.0.0.1:{port}/ws?agent_id=alice") as ws:
        assert ws.response.headers["Server"] == "agora-test"
        await ws.send("hi")
        assert orjson.loads(await asyncio.wait_for(ws.recv(), WAIT)) == {
            "from": "alice", "got": "hi",
        }  # fmt: skip
        (conn,) = echo.handled
        assert isinstance(conn, HubConnection) and conn.context is echo.context
        assert echo.connections == [conn] and server.connections == {conn}


async def test_a_refused_handshake_is_an_http_answer_and_never_runs_the_handler(
    serve: Any,
) -> None:
    echo = Echo(refuse=lambda conn, request: conn.respond(403, "not you\n"))
    _, port = await serve(echo)
    with pytest.raises(InvalidStatus) as refused:
        await connect(f"ws://127.0.0.1:{port}/ws?agent_id=alice")
    assert refused.value.response.status_code == 403
    assert refused.value.response.body == b"not you\n"
    assert len(echo.connections) == 1 and echo.handled == []


async def test_a_frame_over_max_size_closes_1009_after_an_error_event(serve: Any) -> None:
    echo = Echo()
    _, port = await serve(echo, max_size=1000)
    async with connect(f"ws://127.0.0.1:{port}/ws?agent_id=a", max_size=None) as ws:
        await ws.send("x" * 999)
        assert orjson.loads(await asyncio.wait_for(ws.recv(), WAIT))["got"] == "x" * 999
        await ws.send("x" * 1001)
        error = orjson.loads(await asyncio.wait_for(ws.recv(), WAIT))
        assert error["type"] == "error" and error["message"].startswith("frame too big")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT)
        assert ws.close_code == 1009


@pytest.mark.parametrize("compression", [True, False])
async def test_permessage_deflate_only_when_asked_for(serve: Any, compression: bool) -> None:
    echo = Echo(compress_frames=compression)
    _, port = await serve(echo, compression=compression)
    async with connect(f"ws://127.0.0.1:{port}/ws?agent_id=a", compression="deflate") as ws:
        offered = ws.response.headers.get("Sec-WebSocket-Extensions", "")
        assert ("permessage-deflate" in offered) is compression
        await ws.send("z" * 5000)
        assert orjson.loads(await asyncio.wait_for(ws.recv(), WAIT))["got"] == "z" * 5000


async def test_tls_is_served_with_the_context_given(serve: Any, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path, "localhost")
    echo = Echo()
    _, port = await serve(echo, ssl_context=ServerTls(cert, key).context, ssl_handshake_timeout=5.0)
    async with connect(f"wss://localhost:{port}/ws?agent_id=a", ssl=client_context(cert)) as ws:
        await ws.send("secret")
        assert orjson.loads(await asyncio.wait_for(ws.recv(), WAIT))["got"] == "secret"
    with pytest.raises(InvalidHandshake):
        # The same port in plain text is no WebSocket.
        await connect(f"ws://127.0.0.1:{port}/ws?agent_id=a", open_timeout=5)


async def test_reuse_port_lets_two_servers_share_a_port(serve: Any) -> None:
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("no SO_REUSEPORT here")
    _, port = await serve(Echo(), reuse_port=True)
    _, same = await serve(Echo(), reuse_port=True, port=port)
    assert same == port
    with pytest.raises(OSError):
        await serve(Echo(), port=port)


async def test_close_ends_every_connection_1001_and_waits_for_its_handler(serve: Any) -> None:
    echo = Echo()
    server, port = await serve(echo)
    async with connect(f"ws://127.0.0.1:{port}/ws?agent_id=a") as ws:
        await ws.send("hello")
        await asyncio.wait_for(ws.recv(), WAIT)
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT)
        assert ws.close_code == 1001
    assert not server.connections and not server.is_serving()
    with pytest.raises(OSError):
        await connect(f"ws://127.0.0.1:{port}/ws?agent_id=b", open_timeout=5)
