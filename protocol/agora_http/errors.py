"""The three error layers of HTTP Agora and the exception that carries the first two.

Seed 001 §10 separates:

* **transport** — an HTTP status (400 malformed JSON or invalid field, 404, 413 …);
* **Agora** — HTTP 200 with ``{"status": "failure", "error": …}``;
* **protocol** — HTTP 200 with ``status: "success"`` and the error inside ``body``, in
  the Protocol Document's own terms. That one is the answering agent's business, so it
  never appears here as an exception.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from protocol.errors import ErrorCode, ProtocolError

# Wire texts a client may match on; the first is prescribed verbatim by seed 001 §8.3.
UNSUPPORTED_PROTOCOL = "Unsupported protocol"
CONVERSATION_NOT_FOUND = "Conversation not found"
CONVERSATION_EXPIRED = "Conversation expired"
MISSING_BODY = "Missing field 'body'"
TIMEOUT = "Timeout"


class ErrorLayer(StrEnum):
    TRANSPORT = "transport"
    AGORA = "agora"


class AgoraHttpError(ProtocolError):
    """A request refused at the transport layer (HTTP status) or the Agora layer (failure).

    ``error`` is what goes on the wire; ``message`` may add detail for logs.
    """

    def __init__(
        self,
        layer: ErrorLayer,
        error: str,
        *,
        http_status: int = 200,
        detail: str | None = None,
    ):
        super().__init__(ErrorCode.INVALID_REQUEST, detail or error)
        self.layer = layer
        self.error = error
        self.http_status = http_status

    @classmethod
    def transport(cls, http_status: int, error: str) -> AgoraHttpError:
        return cls(ErrorLayer.TRANSPORT, error, http_status=http_status)

    @classmethod
    def failure(cls, error: str, detail: str | None = None) -> AgoraHttpError:
        return cls(ErrorLayer.AGORA, error, detail=detail)

    def response(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body to answer with.

        A transport error carries the same ``status``/``error`` shape in its body, so a
        client that reads JSON on every status still gets a reason.
        """
        return self.http_status, {"status": "failure", "error": self.error}

    def __str__(self) -> str:
        return f"{self.layer} {self.http_status}: {self.message}"


class ProtocolDocumentError(AgoraHttpError):
    """A Protocol Document that does not have the shape of seed 001 §8.1."""

    def __init__(self, reason: str):
        super().__init__(ErrorLayer.AGORA, f"Invalid protocol document: {reason}")
        self.reason = reason


def invalid_field(error: str) -> AgoraHttpError:
    return AgoraHttpError.transport(400, error)
