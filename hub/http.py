"""The HTTP port (``http_port``): health, metrics, and the adapters' routes.

aiohttp serves the node's :attr:`~hub.node.Node.http_app` on ``host`` and
``http_port`` (TLS with the same certificate settings as the WebSocket port).
``/healthz``, ``/readyz`` and ``/metrics`` answer exactly as on the WebSocket
port, ``/identity`` gives the hub's did:key and public key; bridge adapters
add their routes while the node starts, before the application is frozen.
Every request is counted and timed by route (:func:`request_metrics`).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from hub.identity import HubIdentity
from hub.metrics import CONTENT_TYPE_LATEST, HttpStats, HubRegistry, render

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
        finally:
            stats.observe(_route(request), request.method, status, time.perf_counter() - started)

    return middleware


def _route(request: web.Request) -> str:
    match_info = request.match_info
    resource = match_info.route.resource if match_info.http_exception is None else None
    return resource.canonical if resource is not None else UNMATCHED


def health_routes(
    ready: Callable[[], bool], metrics_registry: HubRegistry, identity: HubIdentity
) -> web.RouteTableDef:
    """``/healthz``, ``/readyz`` (``ready()``), ``/metrics`` and ``/identity``."""
    routes = web.RouteTableDef()

    @routes.get("/healthz")
    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    @routes.get("/readyz")
    async def readyz(request: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="not ready\n")

    @routes.get("/identity")
    async def get_identity(request: web.Request) -> web.Response:
        return web.json_response(identity.public())

    @routes.get("/metrics")
    async def get_metrics(request: web.Request) -> web.Response:
        body = render(metrics_registry)
        headers = {"Content-Type": CONTENT_TYPE_LATEST, **metrics_registry.headers()}
        return web.Response(body=body, headers=headers)

    return routes


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
