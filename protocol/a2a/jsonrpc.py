"""JSON-RPC 2.0 as A2A 1.0's JSON-RPC binding uses it: requests in, responses out.

A request is ``{"jsonrpc": "2.0", "id", "method", "params": {…}}``; a response
``{"jsonrpc": "2.0", "id", "result"}`` or ``{… "error": {code, message, data?}}``.
A2A adds its own error codes (``-32001`` …) and, like the ``a2a-sdk``
server, an ``ErrorInfo`` entry in ``error.data`` naming the reason, which
that library's client maps to its typed errors.

:func:`parse_request` turns a decoded body into an :class:`RpcRequest` or
raises :class:`RpcError` with the id when one could be read — never anything
else. The client side (:func:`request_body`, :func:`parse_response`) is used
by the outbound bridge: a remote's error becomes an :class:`RpcError` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from protocol.codec import MAX_DEPTH
from protocol.errors import ErrorCode, ProtocolError

# JSON-RPC 2.0
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# A2A 1.0
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOTIFICATION_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
VERSION_NOT_SUPPORTED = -32009

#: ``ErrorInfo.reason`` per code, as the a2a-sdk server sends them.
REASONS = {
    TASK_NOT_FOUND: "TASK_NOT_FOUND",
    TASK_NOT_CANCELABLE: "TASK_NOT_CANCELABLE",
    PUSH_NOTIFICATION_NOT_SUPPORTED: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    UNSUPPORTED_OPERATION: "UNSUPPORTED_OPERATION",
    CONTENT_TYPE_NOT_SUPPORTED: "CONTENT_TYPE_NOT_SUPPORTED",
    INVALID_AGENT_RESPONSE: "INVALID_AGENT_RESPONSE",
    VERSION_NOT_SUPPORTED: "VERSION_NOT_SUPPORTED",
    INVALID_PARAMS: "INVALID_PARAMS",
    INVALID_REQUEST: "INVALID_REQUEST",
}
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_DOMAIN = "a2a-protocol.org"
MAX_ERROR_CHARS = 1024
MAX_METHOD_CHARS = 128

RequestId = str | int | float | None


class RpcError(ProtocolError):
    """A JSON-RPC error: ``code`` and ``message`` go on the wire; ``http_status``
    is the HTTP status to answer with (200 but for transport-level refusals)."""

    def __init__(
        self,
        code: int,
        message: str,
        request_id: RequestId = None,
        *,
        http_status: int = 200,
    ):
        super().__init__(ErrorCode.INVALID_REQUEST, message[:MAX_ERROR_CHARS])
        self.rpc_code = code
        self.rpc_id = request_id
        self.http_status = http_status

    def with_id(self, request_id: RequestId) -> RpcError:
        return RpcError(self.rpc_code, self.message, request_id, http_status=self.http_status)

    def wire(self) -> dict[str, Any]:
        """The ``error`` member of the response."""
        error: dict[str, Any] = {"code": self.rpc_code, "message": self.message}
        reason = REASONS.get(self.rpc_code)
        if reason is not None:
            error["data"] = [
                {"@type": _ERROR_INFO, "reason": reason, "domain": _DOMAIN, "metadata": {}}
            ]
        return error

    def __str__(self) -> str:
        return f"JSON-RPC {self.rpc_code}: {self.message}"


@dataclass(frozen=True, slots=True)
class RpcRequest:
    id: RequestId
    method: str
    params: dict[str, Any]


def _valid_id(value: object) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def parse_request(obj: object) -> RpcRequest:
    """A decoded request body as a request; :class:`RpcError` otherwise.

    A batch (a JSON array) is refused as an invalid request: A2A sends one
    call per HTTP request. A request without ``id`` (a notification) is
    carried out and answered with ``"id": null``, as the a2a-sdk server does —
    an HTTP request always gets an answer.
    """
    if not isinstance(obj, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: expected a JSON-RPC request object")
    request_id = obj.get("id")
    if not _valid_id(request_id):
        raise RpcError(INVALID_REQUEST, "Invalid Request: id must be a string, a number or null")
    if obj.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"', request_id)
    method = obj.get("method")
    if not isinstance(method, str) or not 0 < len(method) <= MAX_METHOD_CHARS:
        raise RpcError(INVALID_REQUEST, "Invalid Request: method must be a string", request_id)
    params = obj.get("params", {})
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: params must be an object", request_id)
    return RpcRequest(request_id, method, params)


def decode(body: bytes) -> object:
    """The body's JSON; :class:`RpcError` ``-32700`` when it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):  # past orjson's own bound: too deep to be read at all
            raise RpcError(INVALID_REQUEST, f"JSON nested deeper than {MAX_DEPTH} levels") from None
        raise RpcError(PARSE_ERROR, f"Parse error: {exc}") from None


def response(request_id: RequestId, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


def error_response(error: RpcError) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": error.rpc_id, "error": error.wire()})


# ── the client side (outbound bridge) ───────────────────────────────────────


def request_body(method: str, params: dict[str, Any], request_id: str) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def parse_response(obj: object) -> dict[str, Any]:
    """The ``result`` object of a remote's response; :class:`RpcError` for an
    error response (the remote's code and message) or anything that is not a
    JSON-RPC response with an object result (``-32006``)."""
    if not isinstance(obj, dict):
        raise RpcError(INVALID_AGENT_RESPONSE, "The remote's answer is not a JSON-RPC response")
    error = obj.get("error")
    if error is not None:
        if not isinstance(error, dict):
            raise RpcError(INVALID_AGENT_RESPONSE, "The remote's error is not an object")
        code = error.get("code")
        message = error.get("message")
        return _raise(
            code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            message if isinstance(message, str) else "error",
        )
    result = obj.get("result")
    if not isinstance(result, dict):
        raise RpcError(INVALID_AGENT_RESPONSE, "The remote's answer has no result object")
    return result


def _raise(code: int, message: str) -> dict[str, Any]:
    raise RpcError(code, message)
