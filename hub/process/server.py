"""The network face of a node: the WebSocket port and the HTTP port.

:class:`HubServer` wraps ``websockets.asyncio.server.serve``. HTTP requests
to the WebSocket port are answered in ``process_request`` before any upgrade:
``/healthz``, ``/readyz`` and ``/metrics``; ``/ws`` validates ``agent_id``
(HTTP 400 when missing or invalid) and proceeds to the upgrade. The HTTP port
(:mod:`hub.net.http`, aiohttp) serves the same health routes and the adapters'.

Start order: the node (backplane, presence, adapters), the WebSocket port,
the HTTP port. Both ports serve TLS from one :class:`~hub.net.tls.ServerTls`, whose
certificate :mod:`hub.process.reload` can replace (SIGHUP) without touching open
connections. Shutdown order (:meth:`HubServer.aclose`): stop accepting,
close the HTTP port, stop the adapters (a bridge's calls in flight are
answered while their senders are still connected), send every connection an
``error`` (UNAVAILABLE) and close 1001, wait up to ``shutdown_timeout`` for
handlers to finish their cleanup, abort what is left, then close the rest of
the node (backplane, presence).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
from typing import Any
from urllib.parse import parse_qs

from websockets.asyncio.server import Server
from websockets.datastructures import Headers, MultipleValuesError
from websockets.http11 import Request, Response

from hub import __version__
from hub.net.connection import ConnectionContext, HubConnection
from hub.net.handshake import (
    ConnectionsPerIp,
    HandshakeDeadlines,
    HandshakeRefused,
    HandshakeSlots,
    OriginPolicy,
    credentials,
)
from hub.net.http import HttpDeadlines, HttpServer, websocket_elsewhere
from hub.net.listener import listen
from hub.net.outbox import Flusher
from hub.net.proxies import ClientAddress, TrustedProxies
from hub.net.tls import ServerTls
from hub.net.ws_internals import handler_tasks
from hub.node.node import Node
from hub.ops.metrics import CONTENT_TYPE_LATEST, MetricsRegistry, render
from protocol import codec
from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.names import is_valid_agent_id

SERVER_HEADER = f"agora-hub/{__version__}"
# Given to every connection, not looked up by name for each.
_WEBSOCKETS_LOG = logging.getLogger("websockets.server")


class HubServer:
    """A node served on a socket. ``async with HubServer(node):`` runs it."""

    def __init__(self, node: Node, *, reuse_port: bool = False):
        self.node = node
        self._reuse_port = reuse_port
        self._server: Server | None = None
        self._http: HttpServer | None = None
        self._closed = False
        #: TLS of both ports (None without tls_certfile); reloadable.
        self.tls: ServerTls | None = None
        s = node.settings
        self.proxies = TrustedProxies(s.trusted_proxies)
        self.origins = OriginPolicy(s.allowed_origins)
        self.per_ip = ConnectionsPerIp(s.max_connections_per_ip)
        self.handshakes = HandshakeSlots(s.max_handshakes)
        self.deadlines = HandshakeDeadlines(s.handshake_timeout)
        #: Writes every connection's pending frames once per loop iteration.
        self.flusher = Flusher()
        #: What every WebSocket connection of this server is handed when built.
        self.connection_context = ConnectionContext(
            flusher=self.flusher,
            counters=node.counters,
            handshakes=self.handshakes,
            deadlines=self.deadlines,
            per_ip=self.per_ip,
            handler=node.lifecycle.handle,
            process_request=self._process_request,
            server_header=SERVER_HEADER,
            outbox_limit=s.outbox_max_bytes,
            compress_frames=s.compression != "none",
            close_timeout=s.close_timeout,
        )

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    @property
    def http_port(self) -> int:
        assert self._http is not None
        return self._http.port

    @property
    def http_url(self) -> str:
        s = self.node.settings
        scheme = "https" if s.tls_certfile else "http"
        return f"{scheme}://{s.host}:{self.http_port}"

    @property
    def url(self) -> str:
        s = self.node.settings
        scheme = "wss" if s.tls_certfile else "ws"
        return f"{scheme}://{s.host}:{self.port}/ws"

    async def start(self) -> None:
        s = self.node.settings
        if s.tls_certfile and s.tls_keyfile:
            self.tls = ServerTls(s.tls_certfile, s.tls_keyfile)  # ConfigError: unusable files
        ctx = self.tls.context if self.tls is not None else None
        await self.node.start()
        self._server = await listen(
            self.connection_context,
            s.host,
            s.port,
            logger=_WEBSOCKETS_LOG,
            max_size=s.max_frame_bytes,
            compression=s.compression == "deflate",
            # Room for a reconnect storm (asyncio's default is 100).
            backlog=s.listen_backlog,
            # The TLS handshake has handshake_timeout too; the WebSocket
            # handshake's is kept by HubConnection (HandshakeDeadlines): one
            # timer for all handshakes, not one per connection.
            ssl_context=ctx,
            ssl_handshake_timeout=s.handshake_timeout,
            reuse_port=self._reuse_port,
        )
        # Before the HTTP port freezes its application, as adapters mount theirs.
        self.node.http_app.router.add_get(
            "/ws", websocket_elsewhere(self.port, tls=ctx is not None)
        )
        self._http = HttpServer(
            self.node.http_app,
            s.host,
            s.http_port,
            ssl_context=ctx,
            reuse_port=self._reuse_port,
            backlog=s.listen_backlog,
            shutdown_timeout=s.close_timeout,
            deadlines=HttpDeadlines.from_settings(s),
            stats=self.node.counters.http,
        )
        try:
            await self._http.start()
        except BaseException:
            self._server.close()
            await self._server.wait_closed()
            raise

    async def aclose(self) -> None:
        """Graceful shutdown; idempotent."""
        if self._closed:
            return
        self._closed = True
        node = self.node
        node.accepting = False
        server = self._server
        if server is not None:
            server.close(close_connections=False)  # no more listening; connections stay
        if self._http is not None:
            with contextlib.suppress(Exception):
                await self._http.aclose()
        await node.close_adapters()
        if server is not None:
            for conn in list(server.connections):
                hub_conn = conn if isinstance(conn, HubConnection) else None
                if hub_conn is not None:
                    hub_conn.close_for(
                        CloseCode.GOING_AWAY, ErrorCode.UNAVAILABLE, "hub shutting down; reconnect"
                    )
            try:
                async with asyncio.timeout(node.settings.shutdown_timeout):
                    await server.wait_closed()
            except TimeoutError:
                node.log.warning("shutdown timeout: aborting connections")
                for conn in list(server.connections):
                    conn.transport.abort()
                for task in list(handler_tasks(server)):
                    task.cancel()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2):
                        await server.wait_closed()
        await node.aclose()

    async def __aenter__(self) -> HubServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ── HTTP ────────────────────────────────────────────────────────────

    def _process_request(self, connection: Any, request: Request) -> Response | None:
        path, _, query = request.path.partition("?")
        if request.method != "GET":
            # As on the HTTP port: these routes (and the upgrade) are GET only.
            body = f"method {request.method[:16]} not allowed: GET only\n".encode()
            status = http.HTTPStatus.METHOD_NOT_ALLOWED
            return _response(status, body, "text/plain; charset=utf-8", {"Allow": "GET"})
        if path == "/ws":
            return self._upgrade(connection, request, query)
        if path == "/healthz":
            return _text(http.HTTPStatus.OK, "ok\n")
        if path == "/readyz":
            if self.node.ready and self.node.accepting:
                return _text(http.HTTPStatus.OK, "ready\n")
            return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, "not ready\n")
        if path == "/metrics":
            registry = self.node.metrics_registry
            if registry.asks_workers:  # websockets awaits what it is handed
                return self._metrics_of_every_worker(registry)  # type: ignore[return-value]
            return _metrics(registry)
        return _text(
            http.HTTPStatus.NOT_FOUND, "not found: use /ws, /healthz, /readyz or /metrics\n"
        )

    async def _metrics_of_every_worker(self, registry: MetricsRegistry) -> Response:
        await registry.refresh()
        return _metrics(registry)

    def _upgrade(self, connection: Any, request: Request, query: str) -> Response | None:
        headers = request.headers
        try:
            # Parsed once: the credentials and the declared details both read it.
            params = parse_qs(query, keep_blank_values=True)
            creds = credentials(params, _one(headers, "Authorization"), _subprotocols(headers))
            if creds is None or not is_valid_agent_id(creds.agent_id):
                return _text(
                    http.HTTPStatus.BAD_REQUEST,
                    "agent_id is required: 1-128 characters of [A-Za-z0-9._:-], "
                    "starting with a letter or digit\n",
                )
            if not self.node.accepting:
                return _text(http.HTTPStatus.SERVICE_UNAVAILABLE, "hub shutting down\n")
            declared = codec.handshake_info(creds.agent_id, params)
            self.origins.check(_one(headers, "Origin"))
            client = self.client_address(connection, request)
            self.per_ip.acquire(client.ip)
        except HandshakeRefused as exc:
            return _text(http.HTTPStatus(exc.status), exc.reason + "\n")
        except MultipleValuesError as exc:
            # Two Authorization or Origin headers: ambiguous, as websockets
            # itself answers two Origins.
            return _text(http.HTTPStatus.BAD_REQUEST, f"more than one {exc} header\n")
        except ProtocolError as exc:
            return _text(http.HTTPStatus.BAD_REQUEST, f"{exc.message}\n")
        if self.per_ip.limit > 0:
            connection.holds_ip_slot = True
        connection.declared = declared
        connection.agent_id = creds.agent_id
        connection.token = creds.token
        connection.protocol.bearer_subprotocol = creds.subprotocol
        connection.client = client
        return None

    def client_address(self, connection: Any, request: Request) -> ClientAddress:
        """Who is opening this WebSocket: the TCP peer, or — when the peer is one
        of ``trusted_proxies`` — the client it forwards for (``X-Forwarded-For``,
        ``Forwarded``). Per-client limits key on its ``ip``; see
        :mod:`hub.net.proxies`."""
        return self.proxies.client_address(connection.remote_address, request.headers)


def _one(headers: Headers, name: str) -> str | None:
    """The header's one value, None when absent (``Headers.get`` raises and
    catches a KeyError for an absent header: most handshakes have no
    ``Authorization`` and no ``Origin``)."""
    values = headers.get_all(name)
    if len(values) > 1:
        raise MultipleValuesError(name)
    return values[0] if values else None


def _subprotocols(headers: Headers) -> list[str]:
    return [
        p.strip()
        for value in headers.get_all("Sec-WebSocket-Protocol")
        for p in value.split(",")
        if p.strip()
    ]


def _metrics(registry: MetricsRegistry) -> Response:
    body = render(registry)
    return _response(http.HTTPStatus.OK, body, CONTENT_TYPE_LATEST, registry.headers())


def _text(status: http.HTTPStatus, body: str) -> Response:
    return _response(status, body.encode(), "text/plain; charset=utf-8")


def _response(
    status: http.HTTPStatus, body: bytes, content_type: str, extra: dict[str, str] | None = None
) -> Response:
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
            *(extra or {}).items(),
        ]
    )
    return Response(status.value, status.phrase, headers, body)
