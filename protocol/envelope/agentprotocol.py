"""agentprotocol/0.1 messages (seed 003): parse, sign, verify, build.

Signed bytes: the message without its top-level ``signature``, keys sorted
recursively the JavaScript way and printed by ``JSON.stringify`` (see
:mod:`protocol.envelope.canonical`). Signature: Ed25519, standard base64
with padding. Keys are SPKI-DER in standard base64.

The sender's key comes from, in this order of trust:

1. ``keys`` — what the caller already knows (``agentId`` → raw key);
2. ``from.publicKey`` — what the reference implementation publishes; then
   ``from.agentId`` must be derived from it (SHA-256 of the key text, first
   16 bytes, base64url), or be the key itself, or its did:key;
3. ``from.agentId`` holding the key itself (SPKI-DER or raw, base64), or a
   did:key, as the seed's examples show.

When two sources disagree the message is refused (``key_mismatch``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey
from pydantic import BaseModel, ValidationError

from protocol.envelope.canonical import MAX_ENVELOPE_BYTES, js_canonical
from protocol.envelope.errors import (
    AgentProtocolErrorCode,
    EnvelopeError,
    Reason,
    describe,
    envelope_id_of,
    malformed,
)
from protocol.envelope.models import AGENTPROTOCOL_PAYLOADS, AgentProtocolType, APFrom, APMessage
from protocol.envelope.verification import (
    Format,
    Verified,
    Window,
    check_signature,
    decode_signature,
    format_timestamp,
    replay_key,
)
from protocol.identity import (
    agentprotocol_agent_id,
    b64,
    b64_decode_strict,
    did_key,
    public_key_from_did,
    public_key_from_spki_b64,
    spki_der,
)

PROTOCOL = Format.AGENTPROTOCOL.value
VERSION = "0.1"


def parse(data: Mapping[str, Any]) -> tuple[APMessage, BaseModel]:
    """The message and its typed payload; no signature or time checks."""
    eid = envelope_id_of(data)
    try:
        msg = APMessage.model_validate(data)
        payload = AGENTPROTOCOL_PAYLOADS[msg.type].model_validate(msg.payload)
    except ValidationError as exc:
        raise malformed(f"invalid agentprotocol/0.1 message: {describe(exc)}", eid) from None
    return msg, payload


def signing_form(data: Mapping[str, Any]) -> dict[str, Any]:
    """The message as signed: without ``signature``."""
    return {k: v for k, v in data.items() if k != "signature"}


def _key_in_id(agent_id: str) -> bytes | None:
    if agent_id.startswith("did:key:"):
        try:
            return public_key_from_did(agent_id)
        except ValueError:
            return None
    try:
        return public_key_from_spki_b64(agent_id)
    except ValueError:
        return None


def sender_key(sender: APFrom, keys: Mapping[str, bytes] | None, envelope_id: str) -> bytes:
    """The sender's raw public key (see the module docstring for the sources)."""
    agent_id = sender.agentId
    claimed: bytes | None = None
    if sender.publicKey is not None:
        try:
            claimed = public_key_from_spki_b64(sender.publicKey)
        except ValueError as exc:
            raise malformed(f"from.publicKey: {exc}", envelope_id) from None
        if agent_id not in (
            agentprotocol_agent_id(sender.publicKey),
            sender.publicKey,
            did_key(claimed),
        ):
            raise EnvelopeError(
                Reason.KEY_MISMATCH,
                "from.agentId is not derived from from.publicKey",
                envelope_id=envelope_id,
            )
    else:
        claimed = _key_in_id(agent_id)
    known = keys.get(agent_id) if keys is not None else None
    if known is not None and claimed is not None and known != claimed:
        raise EnvelopeError(
            Reason.KEY_MISMATCH,
            f"agent {agent_id[:64]!r} is known with a different key",
            envelope_id=envelope_id,
        )
    key = known or claimed
    if key is None:
        raise EnvelopeError(
            Reason.UNKNOWN_KEY,
            f"no public key for agent {agent_id[:64]!r}: send from.publicKey",
            envelope_id=envelope_id,
        )
    return key


def task_id(payload: BaseModel) -> str | None:
    cid = getattr(payload, "correlationId", None)
    return cid if isinstance(cid, str) else None


def verify(
    data: Mapping[str, Any],
    *,
    now: float,
    window: Window,
    max_bytes: int = MAX_ENVELOPE_BYTES,
    keys: Mapping[str, bytes] | None = None,
) -> Verified:
    msg, payload = parse(data)
    if not msg.signature:
        raise EnvelopeError(Reason.UNSIGNED, "message is not signed", envelope_id=msg.id)
    ts = window.check(msg.timestamp, now, msg.id)
    key = sender_key(msg.from_, keys, msg.id)
    try:
        raw_sig = b64_decode_strict(msg.signature, "signature")
    except ValueError as exc:
        raise malformed(str(exc), msg.id) from None
    signature = decode_signature(raw_sig, msg.id)
    body = js_canonical(signing_form(data), max_bytes=max_bytes)
    check_signature(key, body, signature, msg.id)
    did = did_key(key)
    return Verified(
        format=Format.AGENTPROTOCOL,
        id=msg.id,
        type=msg.type.value,
        signer=msg.from_.agentId,
        did=did,
        public_key=key,
        timestamp=ts,
        payload=payload,
        task_id=task_id(payload),
        replay_key=replay_key(Format.AGENTPROTOCOL, did, msg.id),
        replay_ttl=window.replay_ttl(ts, now),
    )


def sign(message: Mapping[str, Any], signing_key: SigningKey) -> dict[str, Any]:
    """A signed copy (any previous ``signature`` is replaced)."""
    sender = message.get("from")
    if isinstance(sender, Mapping) and isinstance(sender.get("publicKey"), str):
        try:
            named = public_key_from_spki_b64(sender["publicKey"])
        except ValueError as exc:
            raise malformed(f"from.publicKey: {exc}") from None
        if named != bytes(signing_key.verify_key):
            raise malformed("from.publicKey is not the signing key")
    out = signing_form(message)
    body = js_canonical(out)
    out["signature"] = b64(signing_key.sign(body).signature)
    return out


def identity(
    signing_key: SigningKey, *, name: str | None = None, capabilities: list[str] | None = None
) -> dict[str, Any]:
    """A ``from`` object that lets anyone verify the key's messages."""
    spki = b64(spki_der(bytes(signing_key.verify_key)))
    sender: dict[str, Any] = {"agentId": agentprotocol_agent_id(spki)}
    if name is not None:
        sender["name"] = name
    sender["capabilities"] = list(capabilities or [])
    sender["publicKey"] = spki
    return sender


def build(
    type: AgentProtocolType | str,
    payload: Mapping[str, Any],
    *,
    signing_key: SigningKey,
    now: float,
    to: str | None = None,
    name: str | None = "agora-hub",
    capabilities: list[str] | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """A new message from ``signing_key``, signed (field order as upstream writes it)."""
    message = {
        "protocol": PROTOCOL,
        "id": message_id or str(uuid.uuid4()),
        "timestamp": format_timestamp(now),
        "from": identity(signing_key, name=name, capabilities=capabilities),
        "to": {"agentId": to, "broadcast": False},
        "type": AgentProtocolType(type).value,
        "payload": dict(payload),
    }
    return sign(message, signing_key)


def error(
    code: AgentProtocolErrorCode | str,
    message: str,
    *,
    signing_key: SigningKey,
    now: float,
    correlation_id: str | None = None,
    to: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An ``error`` message. The reference validator requires a
    ``correlationId``; without one to answer, the message's own id is used."""
    message_id = str(uuid.uuid4())
    payload = {
        "correlationId": correlation_id or message_id,
        "code": str(code),
        "message": message,
        "details": dict(details or {}),
    }
    return build(
        AgentProtocolType.ERROR,
        payload,
        signing_key=signing_key,
        now=now,
        to=to,
        message_id=message_id,
    )


def hello(
    *,
    signing_key: SigningKey,
    now: float,
    to: str | None,
    space: str,
    members: list[dict[str, Any]],
    capabilities: list[str] | None = None,
) -> dict[str, Any]:
    """The hub's ``hello`` in answer to one: its identity and the space's members."""
    payload = {
        "version": VERSION,
        "features": ["signed-messages"],
        "space": space,
        "members": members,
    }
    return build(
        AgentProtocolType.HELLO,
        payload,
        signing_key=signing_key,
        now=now,
        to=to,
        capabilities=capabilities,
    )
