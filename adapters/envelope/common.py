"""What the gateway and the outbound bridge share: bounded reads and the
hub-signed error envelopes both answer with."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aiohttp import StreamReader
from nacl.signing import SigningKey

from hub.adapter_host import read_at_most
from protocol.envelope import AgoraErrorCode, EnvelopeError, Format, Reason, error_envelope
from protocol.errors import ErrorCode

#: The agora/1.0 code (and HTTP status) for each hub error code a publish can get.
CODE_FOR_HUB_ERROR: dict[str, AgoraErrorCode] = {
    ErrorCode.INVALID_REQUEST: AgoraErrorCode.BAD_REQUEST,
    ErrorCode.UNAUTHORIZED: AgoraErrorCode.UNAUTHORIZED,
    ErrorCode.SPACE_NOT_FOUND: AgoraErrorCode.NOT_FOUND,
    ErrorCode.RATE_LIMITED: AgoraErrorCode.TOO_MANY_REQUESTS,
    ErrorCode.SPACE_FULL: AgoraErrorCode.UNAVAILABLE,
    ErrorCode.UNAVAILABLE: AgoraErrorCode.UNAVAILABLE,
}


def too_large(limit: int) -> EnvelopeError:
    return EnvelopeError(Reason.TOO_LARGE, f"body is larger than {limit} bytes")


async def read_bounded(stream: StreamReader, limit: int, length: int | None = None) -> bytes:
    """The whole body, or :func:`too_large` as soon as it is known to pass ``limit``."""
    body = await read_at_most(stream, limit, length)
    if body is None:
        raise too_large(limit)
    return body


def sender_of(fmt: Format, data: Mapping[str, Any]) -> str | None:
    """agentprotocol/0.1: ``from.agentId`` of a (possibly invalid) message."""
    if fmt is not Format.AGENTPROTOCOL:
        return None
    sender = data.get("from")
    agent = sender.get("agentId") if isinstance(sender, Mapping) else None
    return agent[:256] if isinstance(agent, str) else None


def request_of(fmt: Format, data: Mapping[str, Any]) -> str | None:
    """The request a (possibly invalid) envelope is about, for an error's reference:
    agora/1.0 its own ``id`` (or the REQUEST it answers), agentprotocol/0.1
    its ``correlationId`` (or its own ``id``)."""
    payload = data.get("payload")
    ref = None
    if isinstance(payload, Mapping):
        ref = payload.get("request_id" if fmt is Format.AGORA else "correlationId")
    if fmt is Format.AGORA and data.get("type") == "REQUEST":
        ref = None
    if not isinstance(ref, str) or not ref:
        ref = data.get("id")
    return ref[:256] if isinstance(ref, str) and ref else None


def signed_error(
    key: SigningKey,
    fmt: Format,
    error: EnvelopeError | AgoraErrorCode,
    message: str | None = None,
    *,
    about: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An error envelope in ``fmt`` signed by the hub, referring to ``about``."""
    about = about or {}
    return error_envelope(
        fmt,
        error,
        message,
        signing_key=key,
        now=time.time(),
        request_id=request_of(fmt, about),
        to=sender_of(fmt, about),
    )
