"""Protocol hashes and conversation ids.

A Protocol Document is named by the SHA-1 of its whole text (seed 001 §8.2). The spec
writes the digest as 40 hex digits; the ``agora-protocol`` 0.2.0 library sends and
verifies the 28-character standard base64 of the same 20 bytes. Both name one digest, so
both are accepted and normalised to one key: 40 lowercase hex digits.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from enum import StrEnum

from protocol.agora_http.errors import (
    CONVERSATION_NOT_FOUND,
    UNSUPPORTED_PROTOCOL,
    AgoraHttpError,
    invalid_field,
)

_HEX_SHA1 = re.compile(r"[0-9a-fA-F]{40}")
_BASE64_SHA1 = re.compile(r"[A-Za-z0-9+/]{27}=")
# secrets.token_urlsafe(24): 24 random bytes, 32 base64url characters.
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9_-]{32}")
# A remote's id goes into the path of our follow-up requests: unreserved URI characters
# only, and never a dot segment.
_REMOTE_CONVERSATION_ID = re.compile(r"[A-Za-z0-9._~-]{1,256}")


class HashForm(StrEnum):
    HEX = "hex"
    BASE64 = "base64"


def hash_document(text: str) -> str:
    """SHA-1 of the document's UTF-8 text, as 40 lowercase hex digits."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def normalise_hash(value: object) -> str | None:
    """``protocolHash`` as sent → 40 lowercase hex, or ``None`` for no protocol.

    Not a string → HTTP 400. A string in neither form names no document the hub can
    have, so it is the Agora-level ``Unsupported protocol`` (seed 001 §8.3). Base64 with
    non-zero padding bits is refused so a digest has exactly one spelling per form.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_field("protocolHash must be a string or null")
    if _HEX_SHA1.fullmatch(value):
        return value.lower()
    if _BASE64_SHA1.fullmatch(value):
        digest = base64.b64decode(value)
        if base64.b64encode(digest).decode("ascii") == value:
            return digest.hex()
    raise AgoraHttpError.failure(
        UNSUPPORTED_PROTOCOL,
        detail="protocolHash is neither 40 hex digits nor a 28-character base64 SHA-1",
    )


def format_hash(hex_digest: str, form: HashForm = HashForm.HEX) -> str:
    """A normalised digest in the form a peer expects (the 0.2.0 library: base64)."""
    if form is HashForm.BASE64:
        return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")
    return hex_digest


def new_conversation_id() -> str:
    """An unguessable conversation id (seed 001 §11)."""
    return secrets.token_urlsafe(24)


def is_conversation_id(value: object) -> bool:
    return isinstance(value, str) and _CONVERSATION_ID.fullmatch(value) is not None


def check_conversation_id(value: object) -> str:
    """A conversation id from a request path; any other shape is simply not found."""
    if is_conversation_id(value):
        return value  # type: ignore[return-value]
    raise AgoraHttpError.failure(CONVERSATION_NOT_FOUND, detail="malformed conversation id")


def is_remote_conversation_id(value: object) -> bool:
    """Whether a remote's ``conversationId`` is safe to put in a URL path segment."""
    return (
        isinstance(value, str)
        and value not in {".", ".."}
        and _REMOTE_CONVERSATION_ID.fullmatch(value) is not None
    )
