"""The WebSocket listening socket: websockets' ``Server``, the hub's connections.

websockets' ``serve()`` builds, for every accepted socket, a
``ServerProtocol``, a closure for ``select_subprotocol`` and a
``ServerConnection`` with a ``LoggerAdapter`` of its own, then runs its
``protocol_handler`` task. :func:`listen` keeps websockets' ``Server`` (its
connection sets, handler tasks, ``close()`` and ``wait_closed()``) and gives
the event loop the hub's factory: a :class:`~hub.net.ws_internals.HubProtocol`
and a :class:`~hub.net.connection.HubConnection` handed the server's
:class:`~hub.net.connection.ConnectionContext`, which runs its own task
(:mod:`hub.net.ws_internals`). What ``serve()`` passes on to the event loop
is passed the same way: the backlog, TLS with its handshake and shutdown
timeouts, ``reuse_port``. The listening sockets are read by the hub's
:class:`~hub.net.acceptor.Acceptor`, which accepts only while a handshake
slot or a place in line is free.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import Server
from websockets.extensions.permessage_deflate import enable_server_permessage_deflate
from websockets.typing import LoggerLike

from hub.net.acceptor import Acceptor
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.ws_internals import HubProtocol, make_server

__all__ = ["listen"]


def listen(
    context: ConnectionContext,
    host: str | None,
    port: int,
    *,
    logger: LoggerLike,
    max_size: int | None,
    compression: bool,
    backlog: int,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
    reuse_port: bool = False,
) -> Server:
    """A server that listens once awaited (as ``await serve(...)``). Its
    connections run ``context.handler`` after a handshake checked by
    ``context.process_request``."""
    extensions = enable_server_permessage_deflate(None) if compression else None

    def connection(server: Server, loop: asyncio.AbstractEventLoop) -> HubConnection:
        protocol = HubProtocol(extensions=extensions, max_size=max_size, logger=logger)
        return HubConnection(protocol, server, loop, context)

    async def create_server(factory: Callable[[], HubConnection]) -> Any:
        loop = asyncio.get_running_loop()
        sockets = await _bind(loop, host, port, backlog, reuse_port)
        slots = context.handshakes
        acceptor = Acceptor(
            loop,
            sockets,
            factory,
            slots.room,
            ssl_context=ssl_context,
            ssl_handshake_timeout=ssl_handshake_timeout if ssl_context is not None else None,
            ssl_shutdown_timeout=context.close_timeout if ssl_context is not None else None,
        )
        slots.on_room(acceptor.resume)
        await acceptor.start_serving()
        return acceptor

    return make_server(connection, create_server, logger)


async def _bind(
    loop: asyncio.AbstractEventLoop, host: str | None, port: int, backlog: int, reuse_port: bool
) -> list[socket.socket]:
    """Listening sockets on every address of ``host`` (None: all), as
    ``loop.create_server`` binds them."""
    infos = await loop.getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                # Each family on its own socket, as asyncio does.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets
