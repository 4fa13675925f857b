"""The server API on the HTTP port: ``/api/*``, for backends (docs/api.md).

Mounted as an aiohttp sub-application, with its own middleware: every
request needs the API key (401 ``UNAUTHENTICATED`` otherwise; past
:data:`~hub.ops.api.throttle.MAX_FAILURES` wrong keys from one address in a
window, 429 ``RATE_LIMITED`` until it ends, :mod:`hub.ops.api.throttle`) and every
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

import structlog
from aiohttp import web

from hub.errors import BackplaneUnavailable
from hub.net.bodies import BodyRefused, parse_json, read_body
from hub.net.http import client_gone
from hub.net.proxies import TrustedProxies
from hub.ops.api.auth import Secret, api_key_of
from hub.ops.api.errors import ApiError, json_response
from hub.ops.api.operations import Operations
from hub.ops.api.throttle import FailureThrottle, Throttled, client_of
from protocol.errors import ErrorCode

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLISH_FIELDS = frozenset({"space", "data", "to", "service"})
DISCONNECT_FIELDS = frozenset({"reason"})


def api_app(
    operations: Operations | None,
    api_key: str | None,
    body_limit: int,
    proxies: TrustedProxies | None = None,
) -> web.Application:
    """The ``/api`` sub-application; every path 404s when ``api_key`` is None.
    ``proxies``: whose word on the client's address is believed (the
    throttle of wrong keys counts per address)."""
    log = structlog.get_logger("hub.ops.api")
    key = Secret(api_key) if api_key is not None else None
    trusted = proxies if proxies is not None else TrustedProxies()
    wrong_keys = FailureThrottle()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if key is None or operations is None:
                raise ApiError("NOT_FOUND", "the server API is off on this hub (api_key is unset)")
            if wrong_keys:  # an address past its limit is not even looked at
                wrong_keys.check(client_of(request, trusted))
            presented = api_key_of(request)
            if not key.matches(presented):
                if presented is not None:  # no key at all is no guess
                    wrong_keys.failed(client_of(request, trusted))
                raise ApiError(
                    "UNAUTHENTICATED",
                    "a valid API key is required: Authorization: apikey KEY, or X-API-Key: KEY",
                )
            return await handler(request)
        except ApiError as exc:
            extra = {"WWW-Authenticate": "apikey"} if exc.status == 401 else None
            return exc.response(extra)
        except Throttled as exc:
            return exc.error().response()
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
    try:
        raw = await read_body(request, limit)
        if not raw.strip() and empty_ok:
            return {}
        body = parse_json(raw)  # nesting and integers as a frame's
    except BodyRefused as exc:
        if exc.status == 413:
            raise ApiError("PAYLOAD_TOO_LARGE", f"body over {limit} bytes") from None
        raise ApiError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    if not isinstance(body, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, "the body must be a JSON object")
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
