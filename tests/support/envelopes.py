"""Signed envelopes for tests: real keys, real signatures, and ways to spoil them."""

from __future__ import annotations

import copy
import time
from typing import Any

from nacl.signing import SigningKey

from protocol.envelope import agentprotocol as ap
from protocol.envelope import agora
from protocol.envelope.canonical import jcs
from protocol.identity import b64url

ALICE = SigningKey(b"\x0a" * 32)
BOB = SigningKey(b"\x0b" * 32)
MALLORY = SigningKey(b"\x0c" * 32)


def agora_env(
    type: str, payload: dict[str, Any], key: SigningKey = ALICE, *, age: float = 0.0
) -> dict[str, Any]:
    """An agora/1.0 envelope signed now (or ``age`` seconds ago; negative: ahead)."""
    return agora.build(type, payload, signing_key=key, now=time.time() - age)


def agora_request(key: SigningKey = ALICE, **payload: Any) -> dict[str, Any]:
    return agora_env("REQUEST", {"resource": "test:echo", "params": {"q": 1}, **payload}, key)


def ap_msg(
    type: str,
    payload: dict[str, Any],
    key: SigningKey = ALICE,
    *,
    to: str | None = None,
    age: float = 0.0,
) -> dict[str, Any]:
    """An agentprotocol/0.1 message signed now, carrying its ``from.publicKey``."""
    return ap.build(type, payload, signing_key=key, now=time.time() - age, to=to, name="test")


def ap_request(
    key: SigningKey = ALICE, correlation_id: str = "c-1", **extra: Any
) -> dict[str, Any]:
    payload = {"action": "review", "correlationId": correlation_id, "params": {}, **extra}
    return ap_msg("request", payload, key)


def forged(envelope: dict[str, Any]) -> dict[str, Any]:
    """The same envelope with its content changed after signing."""
    out = copy.deepcopy(envelope)
    out["payload"]["forged"] = True
    return out


def bad_signature(envelope: dict[str, Any]) -> dict[str, Any]:
    """The same envelope with a valid-looking signature that does not verify."""
    out = copy.deepcopy(envelope)
    if envelope.get("protocol") == "agora/1.0":
        sig = out["sender"]["signature"]
        out["sender"]["signature"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    else:
        sig = out["signature"]
        out["signature"] = ("B" if sig[0] == "A" else "A") + sig[1:]
    return out


def resigned_by(envelope: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """Signed by ``key`` while still naming the original sender (a forgery)."""
    out = copy.deepcopy(envelope)
    body = jcs(agora.signing_form(out))
    out["sender"]["signature"] = b64url(key.sign(body).signature)
    return out
