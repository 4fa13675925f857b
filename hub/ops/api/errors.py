"""Errors of the server API and the status page: a code, a message, an HTTP status.

Every refusal is a JSON body ``{"error": {"code": "...", "message": "..."}}``.
Codes are the hub's protocol error codes where the request was refused the
way an agent's would be (``INVALID_REQUEST``, ``SPACE_NOT_FOUND``,
``RATE_LIMITED``, ``UNAVAILABLE`` …) and a few of the API's own, listed in
:data:`API_STATUS`.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from protocol.errors import ErrorCode

#: HTTP status of each code; anything else is 400.
API_STATUS: dict[str, int] = {
    ErrorCode.INVALID_REQUEST: 400,
    # A valid key whose request is refused (a system space, a bad signature).
    ErrorCode.UNAUTHORIZED: 403,
    ErrorCode.SPACE_NOT_FOUND: 404,
    ErrorCode.SPACE_FULL: 409,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.INTERNAL_ERROR: 500,
    # The API's own.
    "UNAUTHENTICATED": 401,
    "NOT_FOUND": 404,
    "AGENT_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "CONFLICT": 409,
    "PAYLOAD_TOO_LARGE": 413,
}


class ApiError(Exception):
    """A refused API request."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.code = str(code)
        self.message = message
        self.status = status or API_STATUS.get(self.code, 400)
        #: Headers of its answer (a ``Retry-After`` other than 1 s).
        self.headers = headers or {}

    def response(self, headers: dict[str, str] | None = None) -> web.Response:
        headers = {**self.headers, **(headers or {})}
        if self.status in (429, 503):  # worth retrying shortly
            headers = {"Retry-After": "1", **headers}
        return json_response(
            {"error": {"code": self.code, "message": self.message}}, self.status, headers
        )


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=orjson.dumps(body),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", **(headers or {})},
    )


def from_error_frame(frame: dict[str, Any]) -> ApiError:
    """The hub's ``error`` event for the API's pseudo-agent, as an API error."""
    return ApiError(str(frame.get("code", ErrorCode.INTERNAL_ERROR)), str(frame.get("message")))
