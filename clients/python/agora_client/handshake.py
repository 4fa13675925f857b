"""Opening one connection: the hub's URL, the WebSocket handshake, the first frame.

The agent id rides in the handshake query, and so do its details (``type``,
one ``capability`` each, ``metadata`` as JSON) while the query stays under
:data:`MAX_DETAILS_QUERY` — so the hub's first ``online`` on ``agent.status``
already shows them; longer ones are registered right after connecting
instead. The hub answers the upgrade with ``agent.registered``, or with an
``error`` and a close when it refuses the agent. :func:`handshake` turns
every way that can fail into a :class:`~agora_client.errors.ConnectionFailed`
or the :class:`~agora_client.errors.HubRejected` subclass of the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsClosed
from websockets.exceptions import InvalidMessage, InvalidStatus, WebSocketException

from agora_client._version import __version__
from agora_client.errors import AgentExists, ConnectionFailed, InvalidRequest, rejected
from agora_client.models import Registration, parse_registration
from agora_client.wire import MessageType

# Agent details ride in the handshake query (so the hub's first ``online``
# shows them) while the query stays this short; longer ones are registered
# right after connecting instead.
MAX_DETAILS_QUERY = 4096


@dataclass(frozen=True, slots=True)
class Opened:
    """A connection the hub registered."""

    ws: ClientConnection
    registration: Registration
    #: The agent's details rode in the query (False: none, or too long).
    details_sent: bool


async def handshake(
    url: str,
    agent_id: str,
    *,
    token: str | None,
    agent_info: dict[str, Any] | None,
    open_timeout: float,
    max_size: int | None,
    connect_kwargs: dict[str, Any],
) -> Opened:
    """Connect to ``url`` as ``agent_id`` and wait for ``agent.registered``."""
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    sep = "&" if urlsplit(url).query else "?"
    query = [("agent_id", agent_id)]
    details = details_query(agent_info)
    if details is not None:
        query += details
    uri = f"{url}{sep}{urlencode(query)}"
    kwargs: dict[str, Any] = {
        "open_timeout": open_timeout,
        "max_size": max_size,
        "ping_interval": None,  # the protocol's own heartbeat does this
        "compression": None,
        "user_agent_header": f"agora-hub-client/{__version__}",
        "close_timeout": 5.0,
        **connect_kwargs,
    }
    try:
        ws = await ws_connect(uri, additional_headers=headers, **kwargs)
    except InvalidStatus as exc:
        status = exc.response.status_code
        body = (exc.response.body or b"").decode(errors="replace").strip()
        if status == 400 and details:
            # The agent id is checked here already: the hub refused the details.
            raise InvalidRequest(f"agent details refused: {body[:200]}") from None
        raise ConnectionFailed(
            f"hub at {url} refused the connection: HTTP {status}"
            + (f": {body[:200]}" if body else ""),
            status=status,
        ) from None
    except (OSError, TimeoutError, WebSocketException) as exc:
        raise ConnectionFailed(
            f"cannot connect to {url}: {describe(exc)}{scheme_hint(url, exc)}"
        ) from None
    try:
        async with asyncio.timeout(open_timeout):
            first = orjson.loads(await ws.recv())
    except WsClosed as exc:
        raise ConnectionFailed(f"hub at {url} closed the connection: {exc}") from None
    except (TimeoutError, orjson.JSONDecodeError) as exc:
        await ws.close()
        raise ConnectionFailed(
            f"hub at {url} did not register the connection: {describe(exc)}"
        ) from None
    if isinstance(first, dict) and first.get("type") == MessageType.ERROR:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2):
                await ws.wait_closed()
        refusal = rejected(first)
        if isinstance(refusal, AgentExists):
            raise AgentExists(
                f"{refusal.message}: the agent id {agent_id!r} is taken on this hub; "
                "connect with another agent_id, or stop the client that holds it",
                code=refusal.code,
            )
        raise refusal
    registration = parse_registration(first) if isinstance(first, dict) else None
    if registration is None:
        await ws.close()
        raise ConnectionFailed(f"hub at {url} sent {first!r} instead of agent.registered")
    return Opened(ws, registration, details is not None)


def ws_url(url: str) -> str:
    """``url`` checked to be ``ws://`` or ``wss://``; without a path it gets ``/ws``."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"hub URL must start with ws:// or wss://, got {url!r}")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if port == 0 and parts.netloc.rpartition("@")[2].rpartition("]")[2].count(":"):
        raise ValueError(f"hub URL has no valid port: {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/ws"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def agent_info(
    agent_id: str,
    type: str | None,
    capabilities: list[str] | None,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    """The ``agent`` object of ``agent.register`` declaring these details."""
    info: dict[str, Any] = {"id": agent_id}
    if type is not None:
        info["type"] = type
    info["capabilities"] = list(capabilities or [])
    info["metadata"] = dict(metadata or {})
    return info


def details_query(info: dict[str, Any] | None) -> list[tuple[str, str]] | None:
    """``type``, ``capability`` (one each) and ``metadata`` (JSON) for the
    handshake query; None when there are none or they are too long for it."""
    if info is None:
        return None
    query: list[tuple[str, str]] = []
    if info.get("type") is not None:
        query.append(("type", info["type"]))
    query += [("capability", c) for c in info.get("capabilities") or ()]
    if info.get("metadata"):
        query.append(("metadata", orjson.dumps(info["metadata"]).decode()))
    if len(urlencode(query)) > MAX_DETAILS_QUERY:
        return None
    return query


def scheme_hint(url: str, exc: BaseException) -> str:
    """When a failed connection looks like the wrong scheme for the port, which to try."""
    parts = urlsplit(url)
    if parts.scheme == "wss" and _tls_refused(exc):
        plain = urlunsplit(("ws", *parts[1:]))
        return f" (the TLS handshake failed: is this port serving plain ws://? try {plain})"
    if parts.scheme == "ws" and isinstance(exc, InvalidMessage):
        tls = urlunsplit(("wss", *parts[1:]))
        return f" (the answer was not HTTP: is this port serving TLS? try {tls})"
    return ""


def _tls_refused(exc: BaseException) -> bool:
    """A TLS handshake that a plain-text server broke off (not a certificate problem)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return False
    return isinstance(exc, ssl.SSLError | ConnectionResetError | ConnectionAbortedError | EOFError)


def describe(exc: BaseException) -> str:
    """A short reason for a failed connection attempt."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
