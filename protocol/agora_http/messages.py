"""HTTP Agora requests and replies (seed 001 §5–7, §9–10): parsing, checks, builders.

Inbound, :func:`decode_request` turns raw request bytes into an :class:`AgoraRequest`
or raises :class:`AgoraHttpError` at the right layer — never anything else. Outbound,
:func:`decode_reply` turns whatever a remote answered into a :class:`Reply`, which is
always either a success or a failure: a remote cannot make the bridge raise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from protocol.agora_http.documents import MAX_SOURCE_BYTES, decode_source
from protocol.agora_http.errors import (
    MISSING_BODY,
    AgoraHttpError,
    invalid_field,
)
from protocol.agora_http.identifiers import (
    HashForm,
    format_hash,
    hash_document,
    is_remote_conversation_id,
    normalise_hash,
)

MAX_ERROR_CHARS = 1024
# Year 2286 in seconds; keeps the value a safe integer for every JSON encoder.
_MAX_TIMESTAMP = 10**10


@dataclass(frozen=True, slots=True)
class AgoraLimits:
    """Bounds on one request or reply; the defaults fit a 1 MiB hub frame."""

    max_request_bytes: int = 1024 * 1024
    max_sources: int = 8
    max_source_bytes: int = MAX_SOURCE_BYTES


DEFAULT_LIMITS = AgoraLimits()


# ── inbound ─────────────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class AgoraRequest:
    """One validated request; ``protocol_hash`` is normalised (40 lowercase hex)."""

    body: str | dict[str, Any]
    protocol_hash: str | None = None
    protocol_sources: tuple[str, ...] = ()
    documents: tuple[str, ...] = ()
    multiround: bool = False

    def document_for(self, protocol_hash: str) -> str | None:
        """The first carried document whose SHA-1 is ``protocol_hash`` (40 hex)."""
        for text in self.documents:
            if hash_document(text) == protocol_hash:
                return text
        return None

    def event_data(self, conversation_id: str | None = None) -> dict[str, Any]:
        """The ``data`` of the ``space.event`` the request becomes (contract §9)."""
        data: dict[str, Any] = {"via": "agora-http", "body": self.body}
        if isinstance(self.body, str):
            data["text"] = self.body
        data["protocolHash"] = self.protocol_hash
        data["protocolSources"] = list(self.protocol_sources)
        data["multiround"] = self.multiround
        data["conversation_id"] = conversation_id
        return data


def decode_request(raw: bytes, limits: AgoraLimits = DEFAULT_LIMITS) -> AgoraRequest:
    """Parse and validate a request body exactly as received (the bytes, not a dict,
    so that the size bound and the malformed-JSON answer are the module's too)."""
    if len(raw) > limits.max_request_bytes:
        raise AgoraHttpError.transport(
            413, f"request body exceeds {limits.max_request_bytes} bytes"
        )
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise AgoraHttpError.transport(400, "malformed JSON") from None
    return parse_request(obj, limits)


def parse_request(obj: object, limits: AgoraLimits = DEFAULT_LIMITS) -> AgoraRequest:
    """Validate a decoded request. Field types first (HTTP 400), then Agora rules (200).

    Unknown fields are ignored (seed 001 §6.1), including the ``status`` some clients
    put on follow-ups.
    """
    if not isinstance(obj, dict):
        raise invalid_field("the request must be a JSON object")
    has_body = "body" in obj
    body = obj.get("body")
    if has_body and not isinstance(body, str | dict):
        raise invalid_field("body must be a string or an object")
    multiround = obj.get("multiround")
    if multiround is not None and not isinstance(multiround, bool):
        raise invalid_field("multiround must be true or false")
    sources = _sources(obj.get("protocolSources"), limits)
    raw_hash = obj.get("protocolHash")
    if raw_hash is not None and not isinstance(raw_hash, str):
        raise invalid_field("protocolHash must be a string or null")
    if not has_body:
        raise AgoraHttpError.failure(MISSING_BODY)
    return AgoraRequest(
        body=body,  # type: ignore[arg-type]
        protocol_hash=normalise_hash(raw_hash),
        protocol_sources=sources,
        documents=tuple(decode_source(s, max_bytes=limits.max_source_bytes) for s in sources),
        multiround=bool(multiround),
    )


def _sources(value: object, limits: AgoraLimits) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise invalid_field("protocolSources must be a list of strings")
    if len(value) > limits.max_sources:
        raise invalid_field(f"protocolSources has more than {limits.max_sources} items")
    return tuple(value)


def check_follow_up(request: AgoraRequest, conversation_hash: str | None) -> None:
    """A follow-up may repeat its conversation's protocol (the library always does) but
    not change it: seed 001 §7.2 makes that a malformed request."""
    if request.protocol_hash is not None and request.protocol_hash != conversation_hash:
        raise invalid_field("the protocol cannot change during a conversation")


# ── replies the hub sends ───────────────────────────────────────────────────


def success(
    body: Any,
    *,
    conversation_id: str | None = None,
    conversation_expires: int | None = None,
) -> dict[str, Any]:
    reply: dict[str, Any] = {"status": "success", "body": body}
    if conversation_id is not None:
        reply["conversationId"] = conversation_id
    if conversation_expires is not None:
        reply["conversationExpires"] = conversation_expires
    return reply


def failure(error: str) -> dict[str, Any]:
    return {"status": "failure", "error": error}


def wellknown(documents: Iterable[str]) -> dict[str, list[str]]:
    """``GET …/wellknown``: each supported hash → its document text (seed 001 §9)."""
    return {hash_document(text): [text] for text in documents}


# ── requests the hub sends and the replies it gets ──────────────────────────


def outbound_request(
    body: Any,
    *,
    protocol_hash: str | None = None,
    protocol_sources: Iterable[str] = (),
    multiround: bool = False,
    hash_form: HashForm = HashForm.HEX,
) -> dict[str, Any]:
    """A request to a remote Agora server; ``protocol_hash`` is a normalised digest."""
    request: dict[str, Any] = {
        "protocolHash": None if protocol_hash is None else format_hash(protocol_hash, hash_form),
        "protocolSources": list(protocol_sources),
        "body": body,
    }
    if multiround:
        request["multiround"] = True
    return request


@dataclass(frozen=True, slots=True)
class Reply:
    """A remote's answer, reduced to success (``body``) or failure (``error``)."""

    status: Literal["success", "failure"]
    body: Any = None
    error: str | None = None
    conversation_id: str | None = None
    conversation_expires: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "success"

    def event_data(self) -> dict[str, Any]:
        """``{status, body}`` or ``{status, error}`` for the answer published back."""
        if self.ok:
            return {"status": "success", "body": self.body}
        return {"status": "failure", "error": self.error}


def _failed(error: str) -> Reply:
    return Reply("failure", error=error[:MAX_ERROR_CHARS])


def decode_reply(http_status: int, raw: bytes, limits: AgoraLimits = DEFAULT_LIMITS) -> Reply:
    """Whatever came back over HTTP → a :class:`Reply`; a non-200 status is a failure."""
    if http_status != 200:
        return _failed(f"HTTP {http_status} from the remote Agora server")
    if len(raw) > limits.max_request_bytes:
        return _failed(f"reply exceeds {limits.max_request_bytes} bytes")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _failed("reply is not JSON")
    return interpret_reply(obj)


def interpret_reply(obj: object) -> Reply:
    """A decoded reply → :class:`Reply`. The library's ``{status: "error", message}``
    is read as a failure; an unsafe ``conversationId`` makes the reply a failure."""
    if not isinstance(obj, dict):
        return _failed("reply is not a JSON object")
    status = obj.get("status")
    if status == "success":
        conversation_id = obj.get("conversationId")
        if conversation_id is not None and not is_remote_conversation_id(conversation_id):
            return _failed("reply has an invalid conversationId")
        return Reply(
            "success",
            body=obj.get("body"),
            conversation_id=conversation_id,
            conversation_expires=_timestamp(obj.get("conversationExpires")),
        )
    if status == "failure":
        return _failed(_text(obj.get("error"), "failure without an error"))
    if status == "error":
        return _failed(_text(obj.get("message"), "error without a message"))
    return _failed(f"reply has no valid status ({str(status)[:64]!r})")


def _timestamp(value: object) -> int | None:
    """``conversationExpires`` if it is a plausible Unix time; it is advisory, so
    anything else is dropped rather than failing the reply."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value < _MAX_TIMESTAMP:  # also false for NaN
        return None
    return int(value)


def _text(value: object, default: str) -> str:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return repr(value)[:MAX_ERROR_CHARS]
