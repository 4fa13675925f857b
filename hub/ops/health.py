"""Health, readiness, identity and metrics on the HTTP port.

``/healthz`` (the process answers), ``/readyz`` (200 only while the node is
ready: backplane connected and subscribed, presence settled), ``/metrics``
(Prometheus text, every worker's series with ``--workers``) and
``/identity`` (the hub's did:key and public key). The WebSocket port answers
the first three itself, identically (:mod:`hub.process.server`).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from hub.config.hub_identity import HubIdentity
from hub.ops.metrics import CONTENT_TYPE_LATEST, MetricsRegistry, render


def health_routes(
    ready: Callable[[], bool], metrics_registry: MetricsRegistry, identity: HubIdentity
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
        await metrics_registry.refresh()
        body = render(metrics_registry)
        headers = {"Content-Type": CONTENT_TYPE_LATEST, **metrics_registry.headers()}
        return web.Response(body=body, headers=headers)

    return routes
