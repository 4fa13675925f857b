"""JSON-RPC 2.0 as MCP uses it: one message per HTTP body, no batches.

:func:`parse_message` turns a body into a :class:`Request`, a
:class:`Notification` or a :class:`ClientReply` (a client answering a server
request, which this server never sends), or raises :class:`JsonRpcError`
with the code the specification names: ``-32700`` for a body that is not
JSON, ``-32600`` for JSON that is not one JSON-RPC message. MCP narrows
JSON-RPC a little: an id is a string or an integer (never ``null``), and
``params``, when present, is an object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from protocol.codec import MAX_DEPTH

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: Implementation-defined server errors (-32000 … -32099).
SERVER_BUSY = -32000
UNAUTHORIZED = -32001
#: MCP 2026-07-28: a routing header disagrees with the body.
HEADER_MISMATCH = -32020
#: MCP 2026-07-28: ``data = {supported, requested}``.
UNSUPPORTED_PROTOCOL_VERSION = -32022

#: Longest method name looked at (anything longer is refused, not echoed).
MAX_METHOD = 128
#: Longest string id accepted.
MAX_ID = 256

RequestId = str | int


class JsonRpcError(Exception):
    """A request answered with a JSON-RPC error object.

    ``request_id`` is the offending request's id when it was read, else
    ``None`` (sent as ``"id": null``)."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        data: Any = None,
        request_id: RequestId | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.request_id = request_id

    def for_request(self, request_id: RequestId | None) -> JsonRpcError:
        """The same error, answering ``request_id``."""
        return JsonRpcError(self.code, self.message, data=self.data, request_id=request_id)

    def response(self) -> dict[str, Any]:
        return error_response(self.request_id, self.code, self.message, self.data)

    def __str__(self) -> str:
        return f"JSON-RPC {self.code}: {self.message}"


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClientReply:
    """A response (result or error) the client posted; acknowledged and dropped."""

    id: RequestId | None


Message = Request | Notification | ClientReply


def parse_message(body: bytes, check: Callable[[bytes, Any], None] | None = None) -> Message:
    """One JSON-RPC message from an HTTP body; :class:`JsonRpcError` otherwise.
    ``check`` (the body and its decoded value) may refuse it before it is read
    as a message."""
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):  # past orjson's own bound: too deep to be read at all
            message = f"JSON nested deeper than {MAX_DEPTH} levels"
            raise JsonRpcError(INVALID_REQUEST, message) from None
        raise JsonRpcError(PARSE_ERROR, "Parse error: the body is not JSON") from None
    if check is not None:
        check(body, decoded)
    return message_from(decoded)


def message_from(decoded: Any) -> Message:
    """A decoded JSON value as one JSON-RPC message."""
    if isinstance(decoded, list):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: batches are not supported")
    if not isinstance(decoded, dict):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: expected a JSON object")
    if decoded.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    has_id = "id" in decoded
    request_id = decoded.get("id")
    if "method" not in decoded:
        if has_id and ("result" in decoded or "error" in decoded):
            return ClientReply(request_id if _valid_id(request_id) else None)
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: no "method"')
    if has_id and not _valid_id(request_id):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    method = decoded["method"]
    answer_to = request_id if has_id else None
    if not isinstance(method, str) or not 0 < len(method) <= MAX_METHOD:
        raise JsonRpcError(
            INVALID_REQUEST, "Invalid Request: method must be a short string", request_id=answer_to
        )
    params = decoded.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JsonRpcError(
            INVALID_PARAMS, "Invalid params: params must be an object", request_id=answer_to
        )
    if has_id:
        return Request(request_id, method, params)
    return Notification(method, params)


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and len(value) <= MAX_ID


def result_response(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(
    request_id: RequestId | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def method_not_found(request_id: RequestId, method: str) -> JsonRpcError:
    return JsonRpcError(
        METHOD_NOT_FOUND, f"Method not found: {method[:MAX_METHOD]}", request_id=request_id
    )


def invalid_params(request_id: RequestId, message: str) -> JsonRpcError:
    return JsonRpcError(INVALID_PARAMS, f"Invalid params: {message}", request_id=request_id)


def sse_event(message: dict[str, Any]) -> bytes:
    """One Server-Sent Events ``message`` event carrying a JSON-RPC message."""
    return b"event: message\ndata: " + orjson.dumps(message) + b"\n\n"
