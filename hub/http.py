"""The HTTP port (``http_port``): health, metrics, and the adapters' routes.

aiohttp serves the node's :attr:`~hub.node.Node.http_app` on ``host`` and
``http_port`` (TLS with the same certificate settings as the WebSocket port).
``/healthz``, ``/readyz`` and ``/metrics`` answer exactly as on the WebSocket
port, ``/identity`` gives the hub's did:key and public key; bridge adapters
add their routes while the node starts, before the application is frozen.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from aiohttp import web

from hub.identity import HubIdentity
from hub.metrics import CONTENT_TYPE_LATEST, HubRegistry, render


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
