"""The server API on the HTTP port: ``/api/*``, for backends (docs/api.md).

Mounted as an aiohttp sub-application, with its own middleware: every
request needs the API key (401 ``UNAUTHENTICATED`` otherwise) and every
refusal is a JSON error with a code — unknown paths (404 ``NOT_FOUND``),
wrong methods (405 ``METHOD_NOT_ALLOWED``) and bodies over
``max_frame_bytes`` (413 ``PAYLOAD_TOO_LARGE``) too. Without ``api_key`` the
API is off: every ``/api/*`` path answers 404 ``NOT_FOUND``, saying so.

=======  =================================  ====================================
method   path                               does
=======  =================================  ====================================
POST     /api/publish                       publish ``{space, data, to?, service?}``
GET      /api/spaces                        every space, cluster-wide
GET      /api/spaces/{space}/members        a page of members (``cursor``, ``limit``)
GET      /api/agents                        the agent directory (``capability``,
                                            ``space``, ``cursor``, ``limit``)
POST     /api/agents/{id}/disconnect        close an agent's connection: 4403
GET      /api/nodes                         every node's figures
=======  =================================  ====================================
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from hub.errors import BackplaneUnavailable
from hub.net.http import client_gone
from hub.ops.api.auth import Secret, api_key_of
from hub.ops.api.errors import ApiError, json_response
from hub.ops.api.operations import Operations
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLISH_FIELDS = frozenset({"space", "data", "to", "service"})
DISCONNECT_FIELDS = frozenset({"reason"})


def api_app(operations: Operations | None, api_key: str | None, body_limit: int) -> web.Application:
    """The ``/api`` sub-application; every path 404s when ``api_key`` is None."""
    log = structlog.get_logger("hub.ops.api")
    key = Secret(api_key) if api_key is not None else None

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if key is None or operations is None:
                raise ApiError("NOT_FOUND", "the server API is off on this hub (api_key is unset)")
            if not key.matches(api_key_of(request)):
                raise ApiError(
                    "UNAUTHENTICATED",
                    "a valid API key is required: Authorization: apikey KEY, or X-API-Key: KEY",
                )
            return await handler(request)
        except ApiError as exc:
            extra = {"WWW-Authenticate": "apikey"} if exc.status == 401 else None
            return exc.response(extra)
        except web.HTTPRequestEntityTooLarge:
            return ApiError("PAYLOAD_TOO_LARGE", f"body over {body_limit} bytes").response()
        except web.HTTPMethodNotAllowed as exc:
            allowed = ", ".join(sorted(exc.allowed_methods))
            return ApiError(
                "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here (allowed: {allowed})"
            ).response({"Allow": allowed})
        except web.HTTPNotFound:
            return ApiError("NOT_FOUND", f"no API route {request.path[:200]!r}").response()
        except BackplaneUnavailable as exc:
            return ApiError(ErrorCode.UNAVAILABLE, f"{exc}: request not carried out").response()
        except web.HTTPException:
            raise
        except Exception as exc:
            if isinstance(exc, ConnectionResetError) and client_gone(request):
                raise  # nobody to answer: the HTTP port's middleware ends it quietly
            log.exception("API request failed", path=request.path[:200])
            return ApiError(ErrorCode.INTERNAL_ERROR, "internal error").response()

    app = web.Application(middlewares=[guard])
    if operations is None:
        return app
    ops = operations

    async def publish(request: web.Request) -> web.Response:
        body = await _json_object(request, body_limit, PUBLISH_FIELDS)
        if "space" not in body or "data" not in body:
            raise ApiError(ErrorCode.INVALID_REQUEST, "space and data are required")
        event = await ops.publish(body["space"], body["data"], body.get("to"), body.get("service"))
        return json_response(event)

    async def spaces(request: web.Request) -> web.Response:
        return json_response({"spaces": await ops.spaces()})

    async def members(request: web.Request) -> web.Response:
        q = request.query
        page = await ops.members(
            request.match_info["space"], q.get("cursor"), _int(q.get("limit"), "limit")
        )
        return json_response(page)

    async def agents(request: web.Request) -> web.Response:
        q = request.query
        page = await ops.agents(
            q.get("capability"), q.get("space"), q.get("cursor"), _int(q.get("limit"), "limit")
        )
        return json_response(page)

    async def disconnect(request: web.Request) -> web.Response:
        body = await _json_object(request, body_limit, DISCONNECT_FIELDS, empty_ok=True)
        result = await ops.disconnect(request.match_info["agent_id"], body.get("reason"))
        return json_response(result)

    async def nodes(request: web.Request) -> web.Response:
        return json_response({"nodes": await ops.nodes()})

    app.add_routes(
        [
            web.post("/publish", publish),
            web.get("/spaces", spaces, allow_head=False),
            web.get("/spaces/{space}/members", members, allow_head=False),
            web.get("/agents", agents, allow_head=False),
            web.post("/agents/{agent_id}/disconnect", disconnect),
            web.get("/nodes", nodes, allow_head=False),
        ]
    )
    return app


async def _json_object(
    request: web.Request, limit: int, fields: frozenset[str], *, empty_ok: bool = False
) -> dict[str, Any]:
    """The body: one JSON object with only ``fields``, at most ``limit`` bytes."""
    if request.content_length is not None and request.content_length > limit:
        raise ApiError("PAYLOAD_TOO_LARGE", f"body over {limit} bytes")
    raw = await request.read()  # bounded: client_max_size of the HTTP port's app
    if not raw.strip() and empty_ok:
        return {}
    try:
        text = raw.decode()
        body = orjson.loads(text)
    except (UnicodeDecodeError, orjson.JSONDecodeError) as exc:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, "the body must be a JSON object")
    try:
        codec.check_json_bounds(text, body)
    except ProtocolError as exc:
        raise ApiError(exc.code, exc.message) from None
    unknown = sorted(set(body) - fields)
    if unknown:
        shown = ", ".join(repr(u[:40]) for u in unknown[:5])
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            f"unknown field(s) {shown}; expected {', '.join(sorted(fields))}",
        )
    return body


def _int(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise ApiError(ErrorCode.INVALID_REQUEST, f"{name} must be a whole number")
    return int(value)
