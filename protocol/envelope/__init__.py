"""Signed envelopes: agora/1.0 (seed 000) and agentprotocol/0.1 (seed 003).

Pure: no I/O, and the clock is always an argument. The hub's calls::

    fmt = detect(data)                    # None: not an envelope
    if fmt and is_signed(data):
        v = verify(data, now=time.time())  # raises EnvelopeError
        if await replay_cache.seen(v.replay_key, v.replay_ttl):
            raise v.replayed()

Replies the hub signs itself: :func:`error_envelope`, :func:`timeout_envelope`,
:func:`welcome_envelope`. Task bookkeeping: :mod:`protocol.envelope.lifecycle`.
See ``docs/envelopes.md`` for both formats side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey
from pydantic import BaseModel

from protocol.envelope import agentprotocol, agora
from protocol.envelope.canonical import MAX_DEPTH, MAX_ENVELOPE_BYTES, parse_json
from protocol.envelope.errors import (
    AGENTPROTOCOL_CODE_FOR,
    AgentProtocolErrorCode,
    AgoraErrorCode,
    EnvelopeError,
    LifecycleError,
    Reason,
    malformed,
)
from protocol.envelope.lifecycle import Task, TaskState, TaskTable
from protocol.envelope.models import AgentProtocolType, AgoraType
from protocol.envelope.verification import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_SKEW,
    PROTOCOLS,
    Format,
    Verified,
    Window,
    has_own_sender,
    is_envelope,
)

__all__ = [
    "DEFAULT_MAX_AGE",
    "DEFAULT_MAX_SKEW",
    "MAX_DEPTH",
    "MAX_ENVELOPE_BYTES",
    "PROTOCOLS",
    "AgentProtocolErrorCode",
    "AgentProtocolType",
    "AgoraErrorCode",
    "AgoraType",
    "EnvelopeError",
    "Format",
    "LifecycleError",
    "Reason",
    "Task",
    "TaskState",
    "TaskTable",
    "Verified",
    "detect",
    "error_envelope",
    "has_own_sender",
    "is_envelope",
    "is_signed",
    "parse",
    "parse_json",
    "sign_agentprotocol",
    "sign_agora",
    "timeout_envelope",
    "verify",
    "welcome_envelope",
]

_FORMATS = {f.value: f for f in Format}

sign_agora = agora.sign
sign_agentprotocol = agentprotocol.sign


def _envelope(data: object) -> tuple[Format, Mapping[str, Any]]:
    fmt = detect(data)
    if fmt is None or not isinstance(data, Mapping):
        raise malformed("not an envelope: 'protocol' is not agora/1.0 or agentprotocol/0.1")
    return fmt, data


def detect(data: object) -> Format | None:
    """The envelope format named by ``data["protocol"]``; None when not an envelope."""
    if not isinstance(data, Mapping):
        return None
    proto = data.get("protocol")
    return _FORMATS.get(proto) if isinstance(proto, str) else None


def is_signed(data: object) -> bool:
    """False for an envelope whose signature is missing, null or ``""``.

    Anything else counts as signed, even a signature of the wrong type, so a
    garbled signature is refused by :func:`verify` instead of passing as
    unsigned.
    """
    fmt = detect(data)
    if fmt is None or not isinstance(data, Mapping):
        return False
    if fmt is Format.AGORA:
        sender = data.get("sender")
        sig = sender.get("signature") if isinstance(sender, Mapping) else None
    else:
        sig = data.get("signature")
    return sig is not None and sig != ""


def parse(data: object) -> tuple[Format, BaseModel, BaseModel]:
    """Shape only (no signature, no clock): the format, envelope and typed payload.

    For unsigned envelopes, which the hub delivers marked unverified.
    """
    fmt, env = _envelope(data)
    model, payload = (agora.parse if fmt is Format.AGORA else agentprotocol.parse)(env)
    return fmt, model, payload


def verify(
    data: object,
    *,
    now: float,
    max_age: float = DEFAULT_MAX_AGE,
    max_skew: float = DEFAULT_MAX_SKEW,
    max_bytes: int = MAX_ENVELOPE_BYTES,
    keys: Mapping[str, bytes] | None = None,
) -> Verified:
    """Check shape, timestamp window and signature; raise :class:`EnvelopeError`.

    ``now`` is Unix seconds. ``keys`` (agentprotocol/0.1 only) maps agent ids
    to raw public keys known out of band. Replay is the caller's job: see
    :attr:`Verified.replay_key`.
    """
    fmt, env = _envelope(data)
    window = Window(max_age, max_skew)
    if fmt is Format.AGORA:
        return agora.verify(env, now=now, window=window, max_bytes=max_bytes)
    return agentprotocol.verify(env, now=now, window=window, max_bytes=max_bytes, keys=keys)


# ── envelopes the hub signs ─────────────────────────────────────────────────


def error_envelope(
    fmt: Format,
    error: EnvelopeError | AgoraErrorCode,
    message: str | None = None,
    *,
    signing_key: SigningKey,
    now: float,
    request_id: str | None = None,
    to: str | None = None,
) -> dict[str, Any]:
    """An error envelope in ``fmt``, signed by the hub.

    ``error`` is a refusal (its codes and message are used) or a code such as
    ``AgoraErrorCode.TOO_MANY_REQUESTS``. ``request_id`` is the request being
    answered (:attr:`Verified.task_id`); ``to`` the recipient's agent id
    (agentprotocol/0.1 only).
    """
    if isinstance(error, EnvelopeError):
        agora_code, ap_code = error.agora_code, error.agentprotocol_code
        text = message or error.message
    else:
        agora_code, ap_code = error, AGENTPROTOCOL_CODE_FOR[error]
        text = message or error.name.replace("_", " ").lower()
    if fmt is Format.AGORA:
        return agora.error(
            agora_code, text, signing_key=signing_key, now=now, request_id=request_id
        )
    return agentprotocol.error(
        ap_code, text, signing_key=signing_key, now=now, correlation_id=request_id, to=to
    )


def timeout_envelope(
    fmt: Format,
    *,
    signing_key: SigningKey,
    now: float,
    request_id: str,
    to: str | None = None,
    message: str = "no answer within the request's timeout",
) -> dict[str, Any]:
    """ERROR 408 (agentprotocol/0.1: ``TIMEOUT``) for a request nobody answered."""
    return error_envelope(
        fmt,
        AgoraErrorCode.TIMEOUT,
        message,
        signing_key=signing_key,
        now=now,
        request_id=request_id,
        to=to,
    )


def welcome_envelope(
    hello: Verified,
    *,
    signing_key: SigningKey,
    now: float,
    space: str,
    members: list[dict[str, Any]],
    capabilities: list[str] | None = None,
) -> dict[str, Any]:
    """The hub's answer to a HELLO / ``hello``: WELCOME, or a ``hello`` back.

    ``members`` are ``{"id", "capabilities"}`` objects for the space's agents.
    """
    if hello.format is Format.AGORA:
        return agora.welcome(
            signing_key=signing_key, now=now, hello_id=hello.id, space=space, members=members
        )
    return agentprotocol.hello(
        signing_key=signing_key,
        now=now,
        to=hello.signer,
        space=space,
        members=members,
        capabilities=capabilities,
    )
