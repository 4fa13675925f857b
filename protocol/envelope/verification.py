"""What verification yields, the timestamp window, and signature checking.

The clock is always passed in (``now``, Unix seconds): nothing here reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey
from pydantic import BaseModel

from protocol.envelope.errors import EnvelopeError, Reason, malformed
from protocol.identity import SIGNATURE_LEN

DEFAULT_MAX_AGE = 60.0
DEFAULT_MAX_SKEW = 30.0
_MAX_TIMESTAMP_LEN = 64


class Format(StrEnum):
    """An envelope format, named by its ``protocol`` field."""

    AGORA = "agora/1.0"
    AGENTPROTOCOL = "agentprotocol/0.1"


#: The ``protocol`` values that make a JSON object an envelope.
PROTOCOLS = frozenset(f.value for f in Format)


def is_envelope(data: Mapping[str, Any]) -> bool:
    """Does ``data`` claim to be a signed envelope (``protocol`` names one)?
    Cheap: every publish asks."""
    proto = data.get("protocol")
    return proto.__class__ is str and proto in PROTOCOLS


def has_own_sender(data: Mapping[str, Any]) -> bool:
    """Is ``data.from`` the envelope's own sender object (agentprotocol/0.1's
    ``from: {agentId, …}``) rather than the hub's ``data.from`` (a string that
    must be the publisher's id)? agora/1.0 has no ``from`` of its own."""
    return data.get("protocol") == Format.AGENTPROTOCOL and data.get("from").__class__ is dict


@dataclass(frozen=True, slots=True)
class Verified:
    """An envelope whose signature, shape and timestamp were checked.

    ``signer`` is how peers name the sender: the did:key for agora/1.0 (a
    raw ``sender.id`` key is normalised to it), ``from.agentId`` for
    agentprotocol/0.1. ``did`` is the did:key of the verifying key in both.
    ``task_id`` is the request the envelope belongs to (agora: a REQUEST's
    own ``id``, else ``payload.request_id``; agentprotocol:
    ``payload.correlationId``), None when it has none.
    Pass ``replay_key`` and ``replay_ttl`` to a replay cache.
    """

    format: Format
    id: str
    type: str
    signer: str
    did: str
    public_key: bytes
    timestamp: float
    payload: BaseModel
    task_id: str | None
    replay_key: str
    replay_ttl: float

    def replayed(self) -> EnvelopeError:
        """The error to raise when the replay cache has seen this envelope."""
        return EnvelopeError(
            Reason.REPLAYED, f"envelope {self.id[:64]!r} was already seen", envelope_id=self.id
        )


def replay_key(fmt: Format, did: str, envelope_id: str) -> str:
    # Keyed by signer too: nobody can burn another sender's ids in advance.
    return f"{fmt.value}|{did}|{envelope_id}"


def parse_timestamp(text: str, envelope_id: str | None = None) -> float:
    """Unix seconds of an ISO 8601 timestamp that names its offset (``Z`` or ``±hh:mm``)."""
    if len(text) > _MAX_TIMESTAMP_LEN:
        raise malformed("timestamp is too long", envelope_id)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise malformed(f"timestamp {text!r} is not ISO 8601", envelope_id) from None
    if when.tzinfo is None:
        raise malformed(f"timestamp {text!r} has no UTC offset (add 'Z')", envelope_id)
    return when.timestamp()


def format_timestamp(now: float) -> str:
    """ISO 8601 UTC with milliseconds, the way ``Date.prototype.toISOString`` writes it."""
    text = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Window:
    """Accepted timestamps: at most ``max_age`` old, at most ``max_skew`` ahead."""

    max_age: float = DEFAULT_MAX_AGE
    max_skew: float = DEFAULT_MAX_SKEW

    def check(self, text: str, now: float, envelope_id: str) -> float:
        ts = parse_timestamp(text, envelope_id)
        if now - ts > self.max_age:
            raise EnvelopeError(
                Reason.STALE,
                f"timestamp is {now - ts:.0f} s old (limit {self.max_age:g} s)",
                envelope_id=envelope_id,
            )
        if ts - now > self.max_skew:
            raise EnvelopeError(
                Reason.FUTURE,
                f"timestamp is {ts - now:.0f} s ahead (limit {self.max_skew:g} s)",
                envelope_id=envelope_id,
            )
        return ts

    def replay_ttl(self, ts: float, now: float) -> float:
        """How long to remember an id: until its timestamp leaves the window,
        plus ``max_skew`` for nodes whose clocks run behind this one."""
        return max(ts + self.max_age - now, 0.0) + self.max_skew + 1.0


def decode_signature(raw: bytes, envelope_id: str) -> bytes:
    if len(raw) != SIGNATURE_LEN:
        raise malformed(
            f"signature is {len(raw)} bytes, an Ed25519 signature is {SIGNATURE_LEN}", envelope_id
        )
    return raw


def check_signature(public_key: bytes, body: bytes, signature: bytes, envelope_id: str) -> None:
    try:
        VerifyKey(public_key).verify(body, signature)
    except BadSignatureError:
        raise EnvelopeError(
            Reason.BAD_SIGNATURE, "signature does not verify", envelope_id=envelope_id
        ) from None
    except (ValueError, TypeError):
        raise malformed("public key or signature is unusable", envelope_id) from None
