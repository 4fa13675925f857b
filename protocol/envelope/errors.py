"""Why an envelope was refused, and the code each protocol uses for it.

Exception tree (under :class:`protocol.errors.ProtocolError`)::

    ProtocolError
    └── EnvelopeError           an envelope was refused; carries a Reason, the
        │                       hub ErrorCode, the agora/1.0 numeric code and
        │                       the agentprotocol/0.1 string code
        └── LifecycleError      a message that does not fit its task's state

One table, :data:`REASONS`, maps every reason to its three codes, so the
hub, the HTTP bridge and the error envelopes all agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum, StrEnum
from typing import Any, NamedTuple

from pydantic import ValidationError

from protocol.errors import ErrorCode, ProtocolError


class AgoraErrorCode(IntEnum):
    """agora/1.0 error codes (seed 000 §5); they double as HTTP statuses."""

    BAD_REQUEST = 400
    UNAUTHORIZED = 401
    PAYMENT_REQUIRED = 402
    NOT_FOUND = 404
    TIMEOUT = 408
    TOO_MANY_REQUESTS = 429
    INTERNAL_ERROR = 500
    UNAVAILABLE = 503


class AgentProtocolErrorCode(StrEnum):
    """agentprotocol/0.1 error codes (seed 003)."""

    INVALID_MESSAGE = "INVALID_MESSAGE"
    INVALID_SIGNATURE = "INVALID_SIGNATURE"
    UNKNOWN_AGENT = "UNKNOWN_AGENT"
    CAPABILITY_NOT_SUPPORTED = "CAPABILITY_NOT_SUPPORTED"
    TIMEOUT = "TIMEOUT"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL_ERROR = "INTERNAL_ERROR"


# agentprotocol/0.1 has no code for 402 or 503: the nearest one is used.
AGENTPROTOCOL_CODE_FOR: dict[AgoraErrorCode, AgentProtocolErrorCode] = {
    AgoraErrorCode.BAD_REQUEST: AgentProtocolErrorCode.INVALID_MESSAGE,
    AgoraErrorCode.UNAUTHORIZED: AgentProtocolErrorCode.INVALID_SIGNATURE,
    AgoraErrorCode.PAYMENT_REQUIRED: AgentProtocolErrorCode.INVALID_MESSAGE,
    AgoraErrorCode.NOT_FOUND: AgentProtocolErrorCode.CAPABILITY_NOT_SUPPORTED,
    AgoraErrorCode.TIMEOUT: AgentProtocolErrorCode.TIMEOUT,
    AgoraErrorCode.TOO_MANY_REQUESTS: AgentProtocolErrorCode.RATE_LIMITED,
    AgoraErrorCode.INTERNAL_ERROR: AgentProtocolErrorCode.INTERNAL_ERROR,
    AgoraErrorCode.UNAVAILABLE: AgentProtocolErrorCode.INTERNAL_ERROR,
}


class Reason(StrEnum):
    """Machine-readable cause of an :class:`EnvelopeError`."""

    MALFORMED = "malformed"  # not JSON, wrong types, missing fields, bad encodings
    TOO_LARGE = "too_large"  # over the size or nesting bound
    UNSIGNED = "unsigned"  # no signature where one is required
    BAD_SIGNATURE = "bad_signature"  # the signature does not verify
    UNKNOWN_KEY = "unknown_key"  # no public key for the sender
    KEY_MISMATCH = "key_mismatch"  # the sender's id and key disagree
    STALE = "stale"  # timestamp older than the window
    FUTURE = "future"  # timestamp ahead by more than the allowed skew
    REPLAYED = "replayed"  # id already seen inside the window
    ILLEGAL_TRANSITION = "illegal_transition"  # message does not fit the task's state
    UNKNOWN_TASK = "unknown_task"  # answers a request that is not tracked
    TOO_MANY_TASKS = "too_many_tasks"  # the task table is full


class Codes(NamedTuple):
    hub: ErrorCode
    agora: AgoraErrorCode
    agentprotocol: AgentProtocolErrorCode


_A = AgoraErrorCode
_P = AgentProtocolErrorCode
_H = ErrorCode

REASONS: dict[Reason, Codes] = {
    Reason.MALFORMED: Codes(_H.INVALID_REQUEST, _A.BAD_REQUEST, _P.INVALID_MESSAGE),
    Reason.TOO_LARGE: Codes(_H.INVALID_REQUEST, _A.BAD_REQUEST, _P.INVALID_MESSAGE),
    Reason.UNSIGNED: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_SIGNATURE),
    Reason.BAD_SIGNATURE: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_SIGNATURE),
    Reason.UNKNOWN_KEY: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.UNKNOWN_AGENT),
    Reason.KEY_MISMATCH: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_SIGNATURE),
    Reason.STALE: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_MESSAGE),
    Reason.FUTURE: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_MESSAGE),
    Reason.REPLAYED: Codes(_H.UNAUTHORIZED, _A.UNAUTHORIZED, _P.INVALID_MESSAGE),
    Reason.ILLEGAL_TRANSITION: Codes(_H.INVALID_REQUEST, _A.BAD_REQUEST, _P.INVALID_MESSAGE),
    Reason.UNKNOWN_TASK: Codes(_H.INVALID_REQUEST, _A.BAD_REQUEST, _P.INVALID_MESSAGE),
    Reason.TOO_MANY_TASKS: Codes(_H.UNAVAILABLE, _A.UNAVAILABLE, _P.RATE_LIMITED),
}


class EnvelopeError(ProtocolError):
    """An envelope was refused.

    ``code`` is the hub's :class:`ErrorCode` (for ``error`` events);
    ``agora_code`` and ``agentprotocol_code`` are what an error envelope of
    either format carries (``agora_code`` is also the HTTP status).
    ``envelope_id`` is the refused envelope's own ``id`` when it had one.
    """

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        envelope_id: str | None = None,
        request_id: str | int | None = None,
    ):
        codes = REASONS[reason]
        super().__init__(codes.hub, message, request_id)
        self.reason = reason
        self.agora_code = codes.agora
        self.agentprotocol_code = codes.agentprotocol
        self.envelope_id = envelope_id

    def __str__(self) -> str:
        return f"{self.reason} ({self.agora_code.value}): {super().__str__()}"


class LifecycleError(EnvelopeError):
    """A task message that its task's current state does not allow."""

    def __init__(
        self,
        reason: Reason,
        message: str,
        *,
        task_id: str | None = None,
        state: str | None = None,
        event: str | None = None,
    ):
        super().__init__(reason, message)
        self.task_id = task_id
        self.state = state
        self.event = event


def malformed(message: str, envelope_id: str | None = None) -> EnvelopeError:
    return EnvelopeError(Reason.MALFORMED, message, envelope_id=envelope_id)


def envelope_id_of(data: Mapping[str, Any]) -> str | None:
    """The ``id`` of a (possibly invalid) envelope, for error reports."""
    eid = data.get("id")
    return eid[:256] if isinstance(eid, str) and eid else None


def describe(exc: ValidationError) -> str:
    """The first few validation failures, as ``field: problem``."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False)[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "envelope"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
