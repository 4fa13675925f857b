"""Ed25519 identities: did:key and base64url forms of a public key."""

from __future__ import annotations

import base64

_B58 = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
ED25519_MULTICODEC = b"\xed\x01"


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
    for ch in text.encode():
        idx = _B58.find(bytes([ch]))
        if idx < 0:
            raise ValueError(f"invalid base58 character {chr(ch)!r}")
        n = n * 58 + idx
    pad = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * pad + body


def did_key(public_key: bytes) -> str:
    """``did:key:z…`` for a raw 32-byte Ed25519 public key."""
    return "did:key:z" + b58encode(ED25519_MULTICODEC + public_key)


def public_key_from_did(did: str) -> bytes:
    if not did.startswith("did:key:z"):
        raise ValueError("not a did:key with base58btc (z) encoding")
    raw = b58decode(did[len("did:key:z") :])
    if not raw.startswith(ED25519_MULTICODEC) or len(raw) != 34:
        raise ValueError("did:key is not an Ed25519 key")
    return raw[2:]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
