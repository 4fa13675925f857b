"""The HTTP port (``http_port``): the server that runs the node's application.

aiohttp serves the node's :attr:`~hub.node.node.Node.http_app` on ``host`` and
``http_port`` (TLS with the same certificate settings as the WebSocket port):
health and metrics (:mod:`hub.ops.health`), the server API and status page,
and the routes adapters mount while the node starts, before the application
is frozen. Every request is counted and timed by route (:func:`request_metrics`).
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
        except ConnectionResetError:
            if not client_gone(request):
                raise
            # The client went away mid-request (while sending its body, say):
            # nobody to answer and nothing to log (aiohttp would log an ERROR).
            status = CLIENT_GONE
            return web.Response(status=CLIENT_GONE)
        finally:
            stats.observe(_route(request), request.method, status, time.perf_counter() - started)

    return middleware


def client_gone(request: web.Request) -> bool:
    """Has the client of ``request`` closed its connection? (Reading the body
    of such a request raises ``ConnectionResetError``: not a hub error.)"""
    transport = request.transport
    return transport is None or transport.is_closing()


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
    if not isinstance(exc, HttpProcessingError):
        return True
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        return False
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    record.msg, record.args = "unparsable HTTP request refused: %s", (exc.message,)
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
        shutdown_timeout: float = 5.0,
    ):
        self._app = app
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._reuse_port = reuse_port
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=shutdown_timeout
        )
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
        )
        await self._site.start()

    async def aclose(self) -> None:
        await self._runner.cleanup()
