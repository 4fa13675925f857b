"""Error codes, close codes and the package's one exception.

Exception tree::

    ProtocolError            any message the hub must refuse; carries an
                             ErrorCode, a human message and the request id
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` event.

    The first six come from the protocol seed; the rest are the hub's own and
    are documented in ``docs/operations.md``.
    """

    INVALID_REQUEST = "INVALID_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    AGENT_EXISTS = "AGENT_EXISTS"
    SPACE_NOT_FOUND = "SPACE_NOT_FOUND"
    SPACE_FULL = "SPACE_FULL"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    UNAVAILABLE = "UNAVAILABLE"
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    SLOW_CONSUMER = "SLOW_CONSUMER"
    DISCONNECTED = "DISCONNECTED"


class CloseCode(IntEnum):
    """WebSocket close codes the hub uses.

    1000–1999 are RFC 6455 codes; 4000–4999 are the hub's own. A client should
    reconnect after 1001, 1013, 4008 and 4408; 4401, 4409 and 4429 need a change on
    the client's side first; 4403 means an operator disconnected the agent.
    """

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    INVALID_DATA = 1007
    MESSAGE_TOO_BIG = 1009
    TRY_AGAIN_LATER = 1013
    SLOW_CONSUMER = 4008
    UNAUTHORIZED = 4401
    #: An operator disconnected the agent (server API or status page).
    DISCONNECTED = 4403
    HEARTBEAT_TIMEOUT = 4408
    AGENT_EXISTS = 4409
    RATE_LIMIT_ABUSE = 4429


class ProtocolError(Exception):
    """A message the hub refuses; becomes an ``error`` event on the wire."""

    def __init__(self, code: ErrorCode, message: str, request_id: str | int | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id

    def __str__(self) -> str:
        rid = f" (request {self.request_id})" if self.request_id is not None else ""
        return f"{self.code}: {self.message}{rid}"

    def with_request_id(self, request_id: str | int | None) -> ProtocolError:
        if self.request_id is None and request_id is not None:
            self.request_id = request_id
        return self
