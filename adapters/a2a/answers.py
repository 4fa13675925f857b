"""The inbound gateway's HTTP answers: JSON-RPC results and errors, and refusals.

A JSON-RPC error is answered HTTP 200 like the a2a-sdk server does; what is
refused before a call can be made — no or a bad token (401), a forbidden
space (403), an unknown agent (404), a caller naming the hub's own agent (409),
a body too big (413), a busy node or an unreachable cluster (503,
``Retry-After``), the gateway's own rate limit or a caller holding its share
of the node's tasks or streams (429, ``Retry-After``) — gets that HTTP status,
with a JSON-RPC error body (id null when the request was not read).
:class:`Refused` carries such an answer out of the code that decided it.
:func:`stream` writes a ``SendStreamingMessage`` answer as it comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from protocol.a2a import jsonrpc, sse
from protocol.a2a.jsonrpc import RequestId, RpcError

JSON = "application/json"


class Refused(Exception):
    """A request answered at the HTTP level (401, 404, 413, 503 …)."""

    def __init__(self, response: web.Response):
        super().__init__(response.status)
        self.response = response


def result(rpc_id: RequestId, value: Any) -> web.Response:
    return web.Response(body=jsonrpc.response(rpc_id, value), content_type=JSON)


def rpc_error(error: RpcError, status: int | None = None, *, retry: bool = False) -> web.Response:
    headers = {"Retry-After": "1"} if retry else None
    return web.Response(
        status=status or error.http_status,
        body=jsonrpc.error_response(error),
        content_type=JSON,
        headers=headers,
    )


def busy(rpc_id: RequestId, message: str) -> web.Response:
    return rpc_error(RpcError(jsonrpc.INTERNAL_ERROR, message, rpc_id), 503, retry=True)


def unavailable(rpc_id: RequestId = None) -> web.Response:
    return busy(rpc_id, "Hub unavailable: try again")


def rate_limited(rpc_id: RequestId) -> web.Response:
    error = RpcError(jsonrpc.INTERNAL_ERROR, "Rate limited: try again", rpc_id)
    return rpc_error(error, 429, retry=True)


def over_share(rpc_id: RequestId, message: str) -> web.Response:
    """The caller holds its share of one of the node's bounds: 429."""
    return rpc_error(RpcError(jsonrpc.INTERNAL_ERROR, message, rpc_id), 429, retry=True)


def not_found(message: str) -> web.Response:
    return rpc_error(RpcError(jsonrpc.INVALID_REQUEST, message), 404)


def unauthorized() -> web.Response:
    response = rpc_error(
        RpcError(jsonrpc.INVALID_REQUEST, "Unauthorized: a valid bearer token is required"), 401
    )
    response.headers["WWW-Authenticate"] = 'Bearer realm="agora-hub"'
    return response


def conflict(message: str) -> web.Response:
    return rpc_error(RpcError(jsonrpc.INVALID_REQUEST, message), 409)


_SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def stream_error(error: RpcError) -> web.Response:
    """A streaming method's error as its stream: one SSE event holding the
    JSON-RPC error (the A2A TCK reads a streaming method's answer as SSE; the
    a2a-sdk client takes the error from either form)."""
    return web.Response(
        body=sse.event(jsonrpc.error_response(error)),
        headers={"Content-Type": sse.CONTENT_TYPE, **_SSE_HEADERS},
    )


async def stream(
    request: web.Request,
    rpc_id: RequestId,
    updates: asyncio.Queue[dict[str, Any] | None],
    *,
    keepalive: float,
    gone: Callable[[], None],
) -> web.StreamResponse:
    """An SSE response: each update as one event (a JSON-RPC response), until
    None; a comment line after ``keepalive`` seconds of silence. A client that
    leaves mid-answer calls ``gone`` — no error, nothing logged."""
    response = web.StreamResponse(
        headers={
            "Content-Type": sse.CONTENT_TYPE,
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",
        }
    )
    try:
        await response.prepare(request)
        while True:
            try:
                async with asyncio.timeout(keepalive):
                    update = await updates.get()
            except TimeoutError:
                await response.write(sse.KEEPALIVE)
                continue
            if update is None:
                break
            await response.write(sse.event(jsonrpc.response(rpc_id, update)))
        await response.write_eof()
    except ConnectionResetError:
        gone()
    return response
