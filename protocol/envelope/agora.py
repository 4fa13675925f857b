"""agora/1.0 envelopes (seed 000): parse, sign, verify, build.

Signed bytes: RFC 8785 (JCS) of the whole envelope with ``sender.signature``
set to ``""`` (blanked, not removed: removing it changes the bytes).
Signature: Ed25519, base64url without padding. ``sender.id``: a did:key
(``did:key:z`` + base58btc of 0xed01 + key) or the raw key in base64url.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey
from pydantic import BaseModel, ValidationError

from protocol.envelope.canonical import MAX_ENVELOPE_BYTES, jcs
from protocol.envelope.errors import (
    AgoraErrorCode,
    EnvelopeError,
    Reason,
    describe,
    envelope_id_of,
    malformed,
)
from protocol.envelope.models import AGORA_PAYLOADS, AgoraEnvelope, AgoraType
from protocol.envelope.verification import (
    Format,
    Verified,
    Window,
    check_signature,
    decode_signature,
    format_timestamp,
    replay_key,
)
from protocol.identity import b64url, b64url_decode_strict, did_key, public_key_from_id

PROTOCOL = Format.AGORA.value


def parse(data: Mapping[str, Any]) -> tuple[AgoraEnvelope, BaseModel]:
    """The envelope and its typed payload; no signature or time checks."""
    eid = envelope_id_of(data)
    try:
        env = AgoraEnvelope.model_validate(data)
        payload = AGORA_PAYLOADS[env.type].model_validate(env.payload)
    except ValidationError as exc:
        raise malformed(f"invalid agora/1.0 envelope: {describe(exc)}", eid) from None
    return env, payload


def signing_form(data: Mapping[str, Any]) -> dict[str, Any]:
    """The envelope as signed: ``sender.signature`` blanked to ``""``."""
    sender = data.get("sender")
    if not isinstance(sender, Mapping):
        raise malformed("sender must be an object", envelope_id_of(data))
    return {**data, "sender": {**sender, "signature": ""}}


def task_id(env: AgoraEnvelope, payload: BaseModel) -> str | None:
    if env.type is AgoraType.REQUEST:
        return env.id
    rid = getattr(payload, "request_id", None)
    return rid if isinstance(rid, str) else None


def verify(
    data: Mapping[str, Any],
    *,
    now: float,
    window: Window,
    max_bytes: int = MAX_ENVELOPE_BYTES,
) -> Verified:
    env, payload = parse(data)
    if not env.sender.signature:
        raise EnvelopeError(Reason.UNSIGNED, "envelope is not signed", envelope_id=env.id)
    ts = window.check(env.timestamp, now, env.id)
    try:
        key = public_key_from_id(env.sender.id)
        raw_sig = b64url_decode_strict(env.sender.signature, "sender.signature")
    except ValueError as exc:
        raise malformed(str(exc), env.id) from None
    signature = decode_signature(raw_sig, env.id)
    body = jcs(signing_form(data), max_bytes=max_bytes)
    check_signature(key, body, signature, env.id)
    did = did_key(key)
    return Verified(
        format=Format.AGORA,
        id=env.id,
        type=env.type.value,
        signer=did,
        did=did,
        public_key=key,
        timestamp=ts,
        payload=payload,
        task_id=task_id(env, payload),
        replay_key=replay_key(Format.AGORA, did, env.id),
        replay_ttl=window.replay_ttl(ts, now),
    )


def sign(envelope: Mapping[str, Any], signing_key: SigningKey) -> dict[str, Any]:
    """A signed copy. ``sender.id`` defaults to the key's did:key; if given,
    it must name ``signing_key``."""
    public = bytes(signing_key.verify_key)
    sender = dict(envelope.get("sender") or {})
    sender_id = sender.get("id") or did_key(public)
    try:
        named = public_key_from_id(sender_id)
    except ValueError as exc:
        raise malformed(f"sender.id: {exc}") from None
    if named != public:
        raise malformed("sender.id does not name the signing key")
    sender["id"] = sender_id
    sender["signature"] = ""
    out = {**envelope, "sender": sender}
    body = jcs(out)
    sender["signature"] = b64url(signing_key.sign(body).signature)
    return out


def build(
    type: AgoraType | str,
    payload: Mapping[str, Any],
    *,
    signing_key: SigningKey,
    now: float,
    envelope_id: str | None = None,
) -> dict[str, Any]:
    """A new envelope from ``signing_key``'s did:key, signed."""
    envelope = {
        "protocol": PROTOCOL,
        "id": envelope_id or str(uuid.uuid4()),
        "timestamp": format_timestamp(now),
        "type": AgoraType(type).value,
        "sender": {"id": did_key(bytes(signing_key.verify_key)), "signature": ""},
        "payload": dict(payload),
    }
    return sign(envelope, signing_key)


def error(
    code: AgoraErrorCode | int,
    message: str,
    *,
    signing_key: SigningKey,
    now: float,
    request_id: str | None = None,
) -> dict[str, Any]:
    """An ERROR envelope (``request_id`` is the REQUEST it answers, if known)."""
    payload: dict[str, Any] = {"code": int(code), "message": message}
    if request_id is not None:
        payload["request_id"] = request_id
    return build(AgoraType.ERROR, payload, signing_key=signing_key, now=now)


def welcome(
    *,
    signing_key: SigningKey,
    now: float,
    hello_id: str | None,
    space: str,
    members: list[dict[str, Any]],
) -> dict[str, Any]:
    """The hub's WELCOME to a HELLO: its identity and the space's members."""
    public = bytes(signing_key.verify_key)
    payload: dict[str, Any] = {
        "identity": {"did": did_key(public), "public_key": b64url(public)},
        "space": space,
        "members": members,
    }
    if hello_id is not None:
        payload["request_id"] = hello_id
    return build(AgoraType.WELCOME, payload, signing_key=signing_key, now=now)
