"""The HTTP port (``http_port``): the server that runs the node's application.

aiohttp serves the node's :attr:`~hub.node.node.Node.http_app` on ``host`` and
``http_port`` (TLS with the same certificate settings as the WebSocket port):
health and metrics (:mod:`hub.ops.health`), the server API and status page,
and the routes adapters mount while the node starts, before the application
is frozen. Every request is counted and timed by route (:func:`request_metrics`).

The port enforces its deadlines and fixed error pages for every route itself
(:mod:`hub.net.http_guard`); routes read their bodies with :mod:`hub.net.bodies`.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from hub.core.counters import HttpStats
from hub.net.http_guard import (
    REQUEST_TIMEOUT,
    GuardedAppRunner,
    GuardedRequestHandler,
    HttpDeadlines,
    describe_parse_error,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: The route label of a request no route matched (so scanners cannot grow the labels).
UNMATCHED = "unmatched"
#: Status recorded for a request whose client went away before the answer.
CLIENT_GONE = 499


def request_metrics(stats: HttpStats) -> Callable[[web.Request, Handler], Awaitable[Any]]:
    """A middleware counting and timing every request by its route's pattern
    (``/agora/{space}``, not the path: the labels stay few)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        stats.in_progress += 1
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_GONE
            raise
        except web.RequestPayloadError:
            # A body aiohttp could not decode (chunked framing, Content-Encoding)
            # reached a route that did not read it through hub.net.bodies: still the
            # client's fault. Close: what follows it on the connection is unknown.
            status = 400
            response = web.Response(status=400, text="400 Bad Request: malformed request body\n")
            response.force_close()
            return response
        except ConnectionResetError:
            if not client_gone(request):
                raise
            # The client went away mid-request (while sending its body, say), or
            # its body was too slow and the port closed the connection: nobody to
            # answer and nothing to log (aiohttp would log an ERROR).
            timed_out = isinstance(request.protocol, GuardedRequestHandler) and (
                request.protocol.timed_out
            )
            status = REQUEST_TIMEOUT if timed_out else CLIENT_GONE
            return web.Response(status=status)
        finally:
            stats.in_progress -= 1
            stats.observe(_route(request), request.method, status, time.perf_counter() - started)

    return middleware


def websocket_elsewhere(ws_port: int, *, tls: bool = False) -> Handler:
    """``/ws`` on the HTTP port: a WebSocket client pointed at this port (an
    easy slip: the two ports differ by one) hears where WebSockets are served,
    as the WebSocket port's own 404 lists its paths."""
    body = (
        f"not found: this is the hub's HTTP port; WebSocket connections go to "
        f"port {ws_port}, path /ws ({'wss' if tls else 'ws'}://HOST:{ws_port}/ws)\n"
    )

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=404, text=body)

    return handler


def client_gone(request: web.Request) -> bool:
    """Has the client of ``request`` closed its connection? (Reading the body
    of such a request raises ``ConnectionResetError``: not a hub error.)"""
    transport = request.transport
    return transport is None or transport.is_closing()


def until_client_gone(request: web.Request) -> asyncio.Future[None]:
    """Done once the client of ``request`` has closed its connection (never,
    for a request the HTTP port's own protocol did not read)."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        return protocol.gone()
    return asyncio.get_running_loop().create_future()


def _route(request: web.Request) -> str:
    match_info = request.match_info
    resource = match_info.route.resource if match_info.http_exception is None else None
    return resource.canonical if resource is not None else UNMATCHED


def _quiet_unparsable_requests(record: logging.LogRecord) -> bool:
    """A filter for aiohttp's server logger. aiohttp logs a request it cannot
    parse (line too long, too many headers, no Host…) at ERROR with a
    traceback, though the fault is the client's and it is answered 400: keep
    it as one debug line, like the WebSocket port's handshake failures."""
    exc = record.exc_info[1] if record.exc_info else None
    if not isinstance(exc, HttpProcessingError | web.RequestPayloadError):
        return True
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        return False
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    # Not exc.message: it quotes the offending header line, secrets and all.
    record.msg, record.args = "unparsable HTTP request refused: %s", (describe_parse_error(exc),)
    record.exc_info = record.exc_text = None
    return True


class HttpServer:
    """Runs an aiohttp application on one port; ``aclose`` is idempotent."""

    def __init__(
        self,
        app: web.Application,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool = False,
        backlog: int = 128,
        shutdown_timeout: float = 5.0,
        deadlines: HttpDeadlines | None = None,
        stats: HttpStats | None = None,
    ):
        self._app = app
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._reuse_port = reuse_port
        self._backlog = backlog
        self._runner = GuardedAppRunner(
            app, deadlines or HttpDeadlines(), stats, handle_signals=False,
            shutdown_timeout=shutdown_timeout,
        )  # fmt: skip
        logging.getLogger("aiohttp.server").addFilter(_quiet_unparsable_requests)
        self._site: web.TCPSite | None = None

    @property
    def port(self) -> int:
        server = self._site._server if self._site is not None else None
        sockets = getattr(server, "sockets", None)
        if not sockets:
            raise RuntimeError("HTTP server not started")
        return int(sockets[0].getsockname()[1])

    async def start(self) -> None:
        await self._runner.setup()
        self._site = web.TCPSite(
            self._runner,
            self._host,
            self._port,
            ssl_context=self._ssl,
            reuse_port=self._reuse_port or None,
            backlog=self._backlog,
        )
        await self._site.start()

    async def aclose(self) -> None:
        await self._runner.cleanup()
