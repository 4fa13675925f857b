"""The HTTP side of ``/mcp``: reading a body, answering in JSON or SSE.

A request's answer is JSON (``application/json``) unless the client accepts
only ``text/event-stream``; then it is one SSE ``message`` event. Errors
the transport decides (401, 403, 404, 405, 413, 503) carry a JSON-RPC error
object too, so a client that reads every body gets a reason.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from hub.adapter_host import check_json
from hub.adapter_host import read_body as host_read_body
from protocol.mcp import jsonrpc

#: The custom JSON-RPC code of transport refusals (no session, not allowed…).
REFUSED = -32600


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
    return web.Response(
        status=status,
        body=orjson.dumps(message),
        content_type="application/json",
        headers=headers,
    )


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


def bearer_token(request: web.Request) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def unauthorized() -> web.Response:
    return refused(
        401,
        "Unauthorized: send Authorization: Bearer TOKEN (an agent's token)",
        code=jsonrpc.UNAUTHORIZED,
        headers={"WWW-Authenticate": 'Bearer realm="agora-hub"'},
    )


def busy(what: str, request_id: Any = None) -> web.Response:
    headers = {"Retry-After": "1"}
    return refused(
        503, f"{what}: try again", code=jsonrpc.SERVER_BUSY, request_id=request_id, headers=headers
    )


def session_not_found(request_id: Any = None) -> web.Response:
    return refused(404, "Session not found: initialize again", request_id=request_id)
