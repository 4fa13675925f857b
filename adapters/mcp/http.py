"""The HTTP side of ``/mcp``: reading a body, answering in JSON or SSE.

A request's answer is JSON (``application/json``) unless the client accepts
only ``text/event-stream``; then it is one SSE ``message`` event. Errors
the transport decides (401, 403, 404, 405, 413, 503) carry a JSON-RPC error
object too, so a client that reads every body gets a reason.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web

from hub.adapter_host import check_json
from hub.adapter_host import read_body as host_read_body
from protocol.mcp import jsonrpc

#: The custom JSON-RPC code of transport refusals (no session, not allowed…).
REFUSED = -32600
#: A JSON answer's header (aiohttp copies the headers it is given).
_JSON = {"Content-Type": "application/json"}


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body; :class:`BodyRefused` past ``limit`` (413) or
    when it cannot be decoded (400). The one place ``/mcp`` reads a body."""
    return await host_read_body(request, limit)


def check_depth(body: bytes, decoded: object) -> None:
    """:class:`BodyRefused` (400) for JSON nested deeper than a frame may be:
    what a call carries is published one event's worth of levels down."""
    check_json(body.decode("utf-8", "replace"), decoded)


def wants_sse(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    if not accept or "application/json" in accept or "*/*" in accept:
        return False
    return "text/event-stream" in accept


def answer(
    request: web.Request,
    message: dict[str, Any],
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A JSON-RPC message as the response body, in the form the client prefers."""
    if status == 200 and wants_sse(request):
        return web.Response(
            body=jsonrpc.sse_event(message),
            content_type="text/event-stream",
            headers={"Cache-Control": "no-cache", **(headers or {})},
        )
    json_headers = {**headers, **_JSON} if headers else _JSON
    return web.Response(status=status, body=orjson.dumps(message), headers=json_headers)


def refused(
    status: int,
    message: str,
    *,
    code: int = REFUSED,
    request_id: Any = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A transport-level refusal: ``status`` with a JSON-RPC error body."""
    body = jsonrpc.error_response(request_id, code, message)
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )


def accepted() -> web.Response:
    """A notification or a client's response: nothing to answer."""
    return web.Response(status=202)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_allowed(origin: str, allowed: frozenset[str], own: str) -> bool:
    """May a browser page from ``origin`` call ``/mcp``? Those in ``allowed``
    when the operator lists them; otherwise only the hub's own origin
    (``own``: ``scheme://host[:port]`` as the client reached the hub): the
    same host and port, and a host that is an address (an IP, ``localhost``).

    Why the second condition: in a DNS rebinding attack a page of another
    site has its name rebound to the hub's address, so its requests say
    ``Host: evil.example`` and ``Origin: http://evil.example`` — the same
    origin, by name. Only a name can be rebound; an address cannot. A hub
    reached under a domain name by browser clients lists their origins in
    ``allowed_origins``."""
    if allowed:
        return origin in allowed
    found = _host_port(origin)
    return found is not None and found == _host_port(own) and _is_address(found[0])


def _is_address(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _host_port(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[parts.scheme]


def unauthorized() -> web.Response:
    return refused(
        401,
        "Unauthorized: send Authorization: Bearer TOKEN (an agent's token)",
        code=jsonrpc.UNAUTHORIZED,
        headers={"WWW-Authenticate": 'Bearer realm="agora-hub"'},
    )


def busy(what: str, request_id: Any = None, *, status: int = 503) -> web.Response:
    """The node is busy (503), or the caller holds its share already (429)."""
    headers = {"Retry-After": "1"}
    return refused(
        status, f"{what}: try again", code=jsonrpc.SERVER_BUSY, request_id=request_id,
        headers=headers,
    )  # fmt: skip


def session_not_found(request_id: Any = None) -> web.Response:
    return refused(404, "Session not found: initialize again", request_id=request_id)
