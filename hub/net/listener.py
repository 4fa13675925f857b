"""The WebSocket listening socket: websockets' ``Server``, the hub's connections.

websockets' ``serve()`` builds, for every accepted socket, a
``ServerProtocol``, a closure for ``select_subprotocol`` and a
``ServerConnection`` with a ``LoggerAdapter`` of its own, then runs its
``protocol_handler`` task. :func:`listen` keeps websockets' ``Server`` (its
connection sets, handler tasks, ``close()`` and ``wait_closed()``) and gives
``loop.create_server`` the hub's factory: a :class:`~hub.net.sansio.HubProtocol`
and the server's :class:`~hub.net.connection.HubConnection` class, which
runs its own task (``HubConnection._serve``). What ``serve()`` passes on to
the event loop is passed the same way: the backlog, TLS with its handshake
and shutdown timeouts, ``reuse_port``.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from websockets.asyncio.server import Server
from websockets.extensions.permessage_deflate import enable_server_permessage_deflate
from websockets.typing import LoggerLike

from hub.net.connection import HubConnection
from hub.net.sansio import HubProtocol

__all__ = ["listen"]


def listen(
    connection_class: type[HubConnection],
    handler: Callable[[HubConnection], Awaitable[None]],
    host: str | None,
    port: int,
    *,
    process_request: Callable[..., Any],
    server_header: str | None,
    logger: LoggerLike,
    max_size: int | None,
    compression: bool,
    backlog: int,
    close_timeout: float,
    ssl_context: ssl.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
    reuse_port: bool = False,
) -> Server:
    """A server that listens once awaited (as ``await serve(...)``). Its
    connections run ``handler`` after a handshake checked by ``process_request``
    (``HubConnection._serve``)."""
    connection_class.hub_handler = handler
    connection_class.hub_process_request = process_request
    connection_class.hub_server_header = server_header
    extensions = enable_server_permessage_deflate(None) if compression else None
    kwargs: dict[str, Any] = {"backlog": backlog}
    if ssl_context is not None:
        kwargs.update(
            ssl=ssl_context,
            ssl_handshake_timeout=ssl_handshake_timeout,
            ssl_shutdown_timeout=close_timeout,
        )
    if reuse_port:
        kwargs["reuse_port"] = True

    def factory() -> HubConnection:
        protocol = HubProtocol(extensions=extensions, max_size=max_size, logger=logger)
        return connection_class(protocol, server)

    async def create_server() -> asyncio.Server:
        loop = asyncio.get_running_loop()
        connection_class.loop = loop
        return await loop.create_server(factory, host, port, **kwargs)

    server = Server(create_server, handler, logger)  # type: ignore[arg-type]
    return server
