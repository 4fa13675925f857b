"""HTTP Agora (seeds 001 and 004) as pure data: no sockets, no clocks.

- :mod:`.errors` — the error layers and :class:`AgoraHttpError`.
- :mod:`.identifiers` — protocol hashes (hex and base64 forms) and conversation ids.
- :mod:`.documents` — Protocol Documents and ``protocolSources`` (``data:`` URIs).
- :mod:`.messages` — requests and replies: parsing, checks and builders.
"""

from protocol.agora_http.documents import (
    MAX_SOURCE_BYTES,
    ProtocolDocument,
    decode_source,
    encode_source,
)
from protocol.agora_http.errors import (
    CONVERSATION_EXPIRED,
    CONVERSATION_NOT_FOUND,
    MISSING_BODY,
    TIMEOUT,
    UNSUPPORTED_PROTOCOL,
    AgoraHttpError,
    ErrorLayer,
    ProtocolDocumentError,
)
from protocol.agora_http.identifiers import (
    HashForm,
    check_conversation_id,
    format_hash,
    hash_document,
    is_conversation_id,
    is_remote_conversation_id,
    new_conversation_id,
    normalise_hash,
)
from protocol.agora_http.messages import (
    DEFAULT_LIMITS,
    MAX_ERROR_CHARS,
    AgoraLimits,
    AgoraRequest,
    Reply,
    check_follow_up,
    decode_reply,
    decode_request,
    failure,
    interpret_reply,
    outbound_request,
    parse_request,
    success,
    wellknown,
)

__all__ = [
    "CONVERSATION_EXPIRED",
    "CONVERSATION_NOT_FOUND",
    "DEFAULT_LIMITS",
    "MAX_ERROR_CHARS",
    "MAX_SOURCE_BYTES",
    "MISSING_BODY",
    "TIMEOUT",
    "UNSUPPORTED_PROTOCOL",
    "AgoraHttpError",
    "AgoraLimits",
    "AgoraRequest",
    "ErrorLayer",
    "HashForm",
    "ProtocolDocument",
    "ProtocolDocumentError",
    "Reply",
    "check_conversation_id",
    "check_follow_up",
    "decode_reply",
    "decode_request",
    "decode_source",
    "encode_source",
    "failure",
    "format_hash",
    "hash_document",
    "interpret_reply",
    "is_conversation_id",
    "is_remote_conversation_id",
    "new_conversation_id",
    "normalise_hash",
    "outbound_request",
    "parse_request",
    "success",
    "wellknown",
]
