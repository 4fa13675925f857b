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
timeouts, ``reuse_port``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import Server
from websockets.extensions.permessage_deflate import enable_server_permessage_deflate
from websockets.typing import LoggerLike

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
    kwargs: dict[str, Any] = {"backlog": backlog}
    if ssl_context is not None:
        kwargs.update(
            ssl=ssl_context,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=context.close_timeout,
        )
    if reuse_port:
        kwargs["reuse_port"] = True

    def connection(server: Server, loop: asyncio.AbstractEventLoop) -> HubConnection:
        protocol = HubProtocol(extensions=extensions, max_size=max_size, logger=logger)
        return HubConnection(protocol, server, loop, context)

    async def create_server(factory: Callable[[], HubConnection]) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(factory, host, port, **kwargs)

    return make_server(connection, create_server, logger)
