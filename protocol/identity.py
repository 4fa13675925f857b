"""Ed25519 identities: did:key, base64url, SPKI-DER and the key-file document.

Every decoder here is strict (exact alphabet, exact length) and raises
:class:`ValueError` with a readable message; callers turn that into their
protocol's error.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from nacl.signing import SigningKey

_B58 = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {chr(c): i for i, c in enumerate(_B58)}
ED25519_MULTICODEC = b"\xed\x01"
KEY_LEN = 32
SIGNATURE_LEN = 64
DID_KEY_PREFIX = "did:key:z"
# An Ed25519 did:key is 48 base58 characters; anything much longer is refused
# before the (quadratic) base58 decode runs.
_MAX_DID_LEN = 64
# SubjectPublicKeyInfo for Ed25519 (RFC 8410): this fixed header, then the key.
SPKI_ED25519_PREFIX = bytes.fromhex("302a300506032b6570032100")
_B64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_B64STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = bytearray()
    while n:
        n, rem = divmod(n, 58)
        out.append(_B58[rem])
    pad = len(data) - len(data.lstrip(b"\0"))
    return (b"1" * pad + bytes(reversed(out))).decode()


def b58decode(text: str) -> bytes:
    n = 0
    index = _B58_INDEX
    for ch in text:
        idx = index.get(ch)
        if idx is None:
            raise ValueError(f"invalid base58 character {ch!r}")
        n = n * 58 + idx
    pad = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * pad + body


# Agents sign many envelopes with one key: its did:key is worked out once.
@functools.lru_cache(maxsize=4096)
def did_key(public_key: bytes) -> str:
    """``did:key:z…`` for a raw 32-byte Ed25519 public key."""
    return DID_KEY_PREFIX + b58encode(ED25519_MULTICODEC + public_key)


@functools.lru_cache(maxsize=4096)  # failures are not cached: they raise again
def public_key_from_did(did: str) -> bytes:
    if not did.startswith(DID_KEY_PREFIX):
        raise ValueError("not a did:key with base58btc (z) encoding")
    if len(did) > _MAX_DID_LEN:
        raise ValueError("did:key is too long for an Ed25519 key")
    raw = b58decode(did[len(DID_KEY_PREFIX) :])
    if not raw.startswith(ED25519_MULTICODEC) or len(raw) != 2 + KEY_LEN:
        raise ValueError("did:key is not an Ed25519 key")
    return raw[2:]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _decode(text: str, pattern: re.Pattern[str], altchars: bytes | None, what: str) -> bytes:
    if not isinstance(text, str) or not pattern.fullmatch(text):
        raise ValueError(f"{what}: not base64 text")
    body = text.rstrip("=")
    if len(body) % 4 == 1 or (len(text) != len(body) and len(text) % 4):
        raise ValueError(f"{what}: bad base64 length or padding")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what}: not base64 text") from None
    # Unused low bits in the last character must be zero (RFC 4648 §3.5), so
    # each value has exactly one spelling.
    if base64.b64encode(raw, altchars=altchars).rstrip(b"=").decode() != body:
        raise ValueError(f"{what}: non-canonical base64")
    return raw


def b64url_decode_strict(text: str, what: str = "value") -> bytes:
    """base64url (RFC 4648 §5); padding optional, nothing outside the alphabet."""
    return _decode(text, _B64URL, b"-_", what)


def b64_decode_strict(text: str, what: str = "value") -> bytes:
    """Standard base64 (RFC 4648 §4); padding optional, nothing outside the alphabet."""
    return _decode(text, _B64STD, None, what)


def b64(data: bytes) -> str:
    """Standard base64 with padding."""
    return base64.b64encode(data).decode()


def public_key_from_id(key_id: str) -> bytes:
    """The raw key of an agora/1.0 ``sender.id``: a did:key or base64url key."""
    if not isinstance(key_id, str):
        raise ValueError("key id must be a string")
    if key_id.startswith("did:"):
        return public_key_from_did(key_id)
    raw = b64url_decode_strict(key_id, "sender key")
    if len(raw) != KEY_LEN:
        raise ValueError(f"sender key is {len(raw)} bytes, an Ed25519 key is {KEY_LEN}")
    return raw


def spki_der(public_key: bytes) -> bytes:
    """SubjectPublicKeyInfo DER of a raw Ed25519 key (what Node exports as 'spki')."""
    return SPKI_ED25519_PREFIX + public_key


def public_key_from_spki_b64(text: str) -> bytes:
    """The raw key from standard-base64 SPKI-DER, or from a bare 32-byte base64 key."""
    der = b64_decode_strict(text, "public key")
    if len(der) == KEY_LEN:
        return der
    if len(der) != len(SPKI_ED25519_PREFIX) + KEY_LEN or not der.startswith(SPKI_ED25519_PREFIX):
        raise ValueError("public key is neither SPKI-DER Ed25519 nor a raw 32-byte key")
    return der[len(SPKI_ED25519_PREFIX) :]


def agentprotocol_agent_id(spki_b64: str) -> str:
    """agentprotocol/0.1's ``agentId``: base64url of the first 16 bytes of
    SHA-256 over the *text* of the base64 SPKI key, without padding."""
    return b64url(hashlib.sha256(spki_b64.encode()).digest()[:16])


def signing_key_from_document(doc: Mapping[str, Any]) -> SigningKey:
    """The key in a ``keygen`` document (``private_key`` is a base64url seed)."""
    seed = doc.get("private_key")
    if not isinstance(seed, str):
        raise ValueError("key document has no 'private_key' string")
    raw = b64url_decode_strict(seed, "private_key")
    if len(raw) != KEY_LEN:
        raise ValueError(f"private_key is {len(raw)} bytes, an Ed25519 seed is {KEY_LEN}")
    key = SigningKey(raw)
    did = doc.get("did")
    if did is not None and did != did_key(bytes(key.verify_key)):
        raise ValueError("key document's 'did' does not match its private key")
    return key
