"""The hub's own Ed25519 identity: it signs the envelopes the hub itself makes
(WELCOME, timeouts, error envelopes) and is published at ``GET /identity``.

Loaded from ``identity_file`` (written by ``agora-hub keygen --out FILE``);
when that is unset a key is generated in memory at start, so the identity
changes with every restart (fine for one node; a cluster that signs should
share one file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson
from nacl.signing import SigningKey

from hub.errors import ConfigError
from protocol.identity import b64url, did_key, signing_key_from_document


@dataclass(frozen=True)
class HubIdentity:
    signing_key: SigningKey

    @property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @property
    def did(self) -> str:
        return did_key(self.public_key)

    def public(self) -> dict[str, str]:
        """What ``GET /identity`` answers."""
        return {"did": self.did, "public_key": b64url(self.public_key)}

    @classmethod
    def generate(cls) -> HubIdentity:
        return cls(SigningKey.generate())

    @classmethod
    def load(cls, path: Path | None) -> HubIdentity:
        if path is None:
            return cls.generate()
        try:
            doc = orjson.loads(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"cannot read identity_file {path}: {exc.strerror}") from None
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"identity_file {path} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"identity_file {path} must be a JSON object (agora-hub keygen)")
        try:
            return cls(signing_key_from_document(doc))
        except ValueError as exc:
            raise ConfigError(f"identity_file {path}: {exc}") from None


def key_document(key: SigningKey) -> dict[str, str]:
    """What ``agora-hub keygen`` writes."""
    public = bytes(key.verify_key)
    return {
        "did": did_key(public),
        "public_key": b64url(public),
        "private_key": b64url(bytes(key)),
        "algorithm": "Ed25519",
    }
