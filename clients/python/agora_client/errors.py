"""Exceptions of the client SDK.

Exception tree::

    HubClientError                 root of everything agora_client raises;
    │                              carries code, message, request_id
    ├── HubConnectionError         the connection can't be used
    │   ├── ConnectionFailed       could not open (refused, DNS, TLS, HTTP status)
    │   └── ConnectionClosed       closed after opening; close_code, close_reason
    ├── RequestTimeout             no reply within the request timeout (also a TimeoutError)
    │   └── ReplyTimeout           request(): no answer to the event within its timeout
    ├── StreamCancelled            a stream this client publishes ended early; reason
    └── HubRejected                the hub answered ``error`` (a request, or the connection)
        ├── InvalidRequest         INVALID_REQUEST
        ├── Unauthorized           UNAUTHORIZED
        ├── AgentExists            AGENT_EXISTS
        ├── SpaceNotFound          SPACE_NOT_FOUND
        ├── SpaceFull              SPACE_FULL
        ├── RateLimited            RATE_LIMITED
        ├── Unavailable            UNAVAILABLE
        └── InternalError          INTERNAL_ERROR

:func:`rejected` maps an ``error`` event to its class; a code this SDK does not
know yet becomes a plain :class:`HubRejected`. :func:`closed` makes the
:class:`ConnectionClosed` of a lost connection.
"""

from __future__ import annotations

from typing import Any

from agora_client.wire import ErrorCode


class HubClientError(Exception):
    """Root of the SDK's exceptions.

    ``code`` is the hub's error code (``"UNAUTHORIZED"`` …) when the hub sent
    one, otherwise a local one (``"CONNECTION_FAILED"``, ``"CONNECTION_CLOSED"``,
    ``"TIMEOUT"``, ``"STREAM_CANCELLED"``). ``request_id`` is the ``id`` of the
    request it answers, when there is one.
    """

    default_code = "CLIENT_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        request_id: str | int | None = None,
    ):
        super().__init__(message)
        self.code: str = code or self.default_code
        self.message = message
        self.request_id = request_id

    def __str__(self) -> str:
        rid = f" (request {self.request_id})" if self.request_id is not None else ""
        return f"{self.code}: {self.message}{rid}"


class HubConnectionError(HubClientError):
    """The connection to the hub could not be opened or was lost."""

    default_code = "CONNECTION_ERROR"


class ConnectionFailed(HubConnectionError):
    """Opening the connection failed before the hub accepted it.

    ``status`` is the HTTP status when the hub (or a proxy) answered the
    upgrade request with one, e.g. 400 for an invalid ``agent_id``.
    """

    default_code = "CONNECTION_FAILED"

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class ConnectionClosed(HubConnectionError):
    """The connection closed while it was needed.

    ``close_code`` and ``close_reason`` come from the WebSocket close frame
    (``None`` when the TCP connection just dropped). When the hub sent an
    ``error`` event right before closing, ``code`` and ``message`` are that
    event's (``HEARTBEAT_TIMEOUT``, ``SLOW_CONSUMER`` …).
    """

    default_code = "CONNECTION_CLOSED"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        close_code: int | None = None,
        close_reason: str = "",
    ):
        super().__init__(message, code=code)
        self.close_code = close_code
        self.close_reason = close_reason

    def __str__(self) -> str:
        close = f" (close code {self.close_code})" if self.close_code is not None else ""
        return f"{self.code}: {self.message}{close}"


class RequestTimeout(HubClientError, TimeoutError):
    """The hub did not answer a request in time.

    The request may still have been carried out.
    """

    default_code = "TIMEOUT"


class ReplyTimeout(RequestTimeout):
    """:meth:`Client.request`: nobody answered the request in time.

    The request itself was published: ``event_id`` is its id, to match a
    late answer (``data.in_reply_to``) by hand.
    """

    default_code = "REPLY_TIMEOUT"

    def __init__(self, message: str, *, event_id: str):
        super().__init__(message)
        self.event_id = event_id


class StreamCancelled(HubClientError):
    """A stream this client publishes was cancelled: by itself or by the hub.

    ``reason`` is the hub's (``idle_timeout``, ``publisher_left_space`` …) or
    ``"connection_lost"`` when the connection dropped mid-stream.
    """

    default_code = "STREAM_CANCELLED"

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


class HubRejected(HubClientError):
    """The hub refused a request (or the connection) with an ``error`` event."""

    default_code = "REJECTED"
    #: The HTTP status, when the refusal came from the server API (HubAPI).
    status: int | None = None


class InvalidRequest(HubRejected):
    default_code = ErrorCode.INVALID_REQUEST


class Unauthorized(HubRejected):
    default_code = ErrorCode.UNAUTHORIZED


class AgentExists(HubRejected):
    default_code = ErrorCode.AGENT_EXISTS


class SpaceNotFound(HubRejected):
    default_code = ErrorCode.SPACE_NOT_FOUND


class SpaceFull(HubRejected):
    default_code = ErrorCode.SPACE_FULL


class RateLimited(HubRejected):
    default_code = ErrorCode.RATE_LIMITED


class Unavailable(HubRejected):
    default_code = ErrorCode.UNAVAILABLE


class InternalError(HubRejected):
    default_code = ErrorCode.INTERNAL_ERROR


_BY_CODE: dict[str, type[HubRejected]] = {
    cls.default_code: cls
    for cls in (
        InvalidRequest,
        Unauthorized,
        AgentExists,
        SpaceNotFound,
        SpaceFull,
        RateLimited,
        Unavailable,
        InternalError,
    )
}


def rejected(frame: dict[str, Any]) -> HubRejected:
    """The exception for an ``error`` event."""
    code = frame.get("code")
    code = code if isinstance(code, str) and code else "UNKNOWN"
    message = frame.get("message")
    rid = frame.get("request_id")
    cls = _BY_CODE.get(code, HubRejected)
    return cls(
        message if isinstance(message, str) else "(no message)",
        code=code,
        request_id=rid if isinstance(rid, str | int) else None,
    )


def closed(code: int | None, reason: str, last_error: dict[str, Any] | None) -> ConnectionClosed:
    """The exception for a lost connection: ``code`` and ``reason`` of the
    hub's close frame (None and "" when there was none), and the ``error``
    the hub sent just before closing, which explains it better, if any."""
    if last_error is not None:
        return ConnectionClosed(
            str(last_error.get("message") or "connection closed by the hub"),
            code=str(last_error.get("code") or "CONNECTION_CLOSED"),
            close_code=code,
            close_reason=reason,
        )
    what = f"connection closed by the hub: {reason}" if reason else "connection lost"
    return ConnectionClosed(what, close_code=code, close_reason=reason)


def token_expired(frame: dict[str, Any]) -> bool:
    """The hub's notice that this connection's token expired (``agent.refresh`` is due)."""
    message = frame.get("message")
    return (
        frame.get("code") == "UNAUTHORIZED"
        and isinstance(message, str)
        and message.startswith("token expired:")
    )
