"""``auth_mode=jwt``: JSON Web Tokens whose ``sub`` is the agent id.

PyJWT does the cryptography; this module decides which key and which
algorithms a token may use. The algorithms follow from the key, never from
the token: a shared secret allows only HMAC (HS256/384/512), a public key
only the asymmetric family of its type (RSA: RS*/PS*, EC: the ES* of its
curve, Ed25519/Ed448: EdDSA). So ``alg: none`` and algorithm confusion (an
HS256 token "signed" with the RSA public key as the secret) are refused.

``exp`` is required, ``nbf``/``iat`` are checked when present (all with
``leeway`` seconds of clock skew) and must be JSON numbers; ``aud`` and
``iss`` are checked when configured, and a token carrying an ``aud`` is
refused when no audience is configured (RFC 7519 §4.1.3). The claims
``join`` / ``publish`` become the connection's :class:`~hub.core.authz.Grant`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import jwt
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from hub.core.authz import Grant, parse_patterns
from hub.errors import AuthError, ConfigError
from protocol.names import is_valid_agent_id

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
ASYMMETRIC_ALGORITHMS = frozenset((*RSA_ALGORITHMS, *_EC_ALGORITHMS.values(), "EdDSA"))
_KNOWN_ALGORITHMS = ASYMMETRIC_ALGORITHMS | frozenset(HMAC_ALGORITHMS)
MIN_RSA_BITS = 2048
MIN_SECRET_BYTES = 32
# Outside ±2**53 a JSON number is no longer an exact time; NaN and infinities
# fail the comparison too.
_MAX_TIME = 2**53

# PyJWT's exception → what the client is told. Fixed texts, so nothing from
# the token (or a library message quoting it) can reach a log or the wire.
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "token expired"),
    (jwt.ImmatureSignatureError, "token not yet valid"),
    (jwt.InvalidAudienceError, "token audience not accepted"),
    (jwt.InvalidIssuerError, "token issuer not accepted"),
    (jwt.InvalidAlgorithmError, "token algorithm not allowed"),
    (jwt.InvalidSignatureError, "token signature is invalid"),
    (jwt.InvalidIssuedAtError, "token claim 'iat' must be a number"),
    (jwt.exceptions.InvalidSubjectError, "token claim 'sub' must be a string"),
)


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """A key and the only algorithms a token verified with it may use."""

    key: Any
    algorithms: tuple[str, ...]


class KeySource(Protocol):
    async def resolve(self, header: Mapping[str, Any]) -> VerificationKey:
        """The key for a token with this (unverified) header; AuthError if none."""
        ...

    async def aclose(self) -> None: ...


def algorithms_for(public_key: object) -> tuple[str, ...]:
    """The algorithms a public key may verify; ValueError for unusable keys."""
    if isinstance(public_key, rsa.RSAPublicKey):
        if public_key.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key of {public_key.key_size} bits (at least {MIN_RSA_BITS})")
        return RSA_ALGORITHMS
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        alg = _EC_ALGORITHMS.get(public_key.curve.name)
        if alg is None:
            raise ValueError(f"unsupported elliptic curve {public_key.curve.name}")
        return (alg,)
    if isinstance(public_key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return ("EdDSA",)
    raise ValueError(f"unsupported key type {type(public_key).__name__}")


class StaticKey:
    """One configured key: ``jwt_secret`` or ``jwt_public_key``."""

    def __init__(self, key: VerificationKey):
        self._key = key

    @classmethod
    def from_secret(cls, secret: str) -> StaticKey:
        if len(secret.encode()) < MIN_SECRET_BYTES:
            # RFC 7518 §3.2: an HMAC key at least as long as the hash output.
            raise ConfigError(f"jwt_secret must be at least {MIN_SECRET_BYTES} bytes")
        return cls(VerificationKey(secret, HMAC_ALGORITHMS))

    @classmethod
    def from_public_key_file(cls, path: Path) -> StaticKey:
        """A PEM public key or X.509 certificate; a private key is refused."""
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read jwt_public_key {path}: {exc.strerror}") from None
        try:
            return cls.from_public_key_pem(data)
        except ValueError as exc:
            raise ConfigError(f"jwt_public_key {path}: {exc}") from None

    @classmethod
    def from_public_key_pem(cls, data: bytes) -> StaticKey:
        if b"PRIVATE KEY-----" in data:
            # The hub only verifies; keeping signing material on it is a risk.
            raise ValueError("is a private key; give the hub the public key only")
        try:
            key: Any = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm):
            try:
                key = x509.load_pem_x509_certificate(data).public_key()
            except (ValueError, UnsupportedAlgorithm):
                raise ValueError("is not a PEM public key or certificate") from None
        return cls(VerificationKey(key, algorithms_for(key)))

    async def resolve(self, header: Mapping[str, Any]) -> VerificationKey:
        return self._key

    async def aclose(self) -> None:
        return None


class JwtAuth:
    """Verifies JWTs against a :class:`KeySource`."""

    def __init__(
        self,
        keys: KeySource,
        *,
        audience: str | None = None,
        issuer: str | None = None,
        leeway: float = 30.0,
    ):
        self.keys = keys
        self._audience = audience
        self._issuer = issuer
        self._leeway = leeway

    async def authenticate(self, agent_id: str, token: str | None) -> Grant:
        return _grant(agent_id, await self._claims(token))

    async def identify(self, token: str | None) -> tuple[str, Grant]:
        claims = await self._claims(token)
        subject = claims.get("sub")
        if not is_valid_agent_id(subject):
            raise AuthError("token subject is not a valid agent id")
        return subject, _grant(subject, claims)

    async def _claims(self, token: str | None) -> dict[str, Any]:
        if not token:
            raise AuthError("a JWT is required")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise AuthError("malformed token") from None
        alg = header.get("alg")
        # Checked before any key lookup, so garbage never triggers a JWKS fetch.
        if not isinstance(alg, str) or alg not in _KNOWN_ALGORITHMS:
            raise AuthError("token algorithm not allowed")
        key = await self.keys.resolve(header)
        if alg not in key.algorithms:
            raise AuthError("token algorithm not allowed")
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(key.algorithms),
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={"require": ["exp", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthError(_reason(exc)) from None
        return claims

    async def aclose(self) -> None:
        await self.keys.aclose()


def _reason(exc: jwt.PyJWTError) -> str:
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"token lacks the {exc.claim!r} claim"
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "malformed token"


def _is_time(value: object) -> bool:
    # bool is an int subclass, and PyJWT itself would accept "123" via int().
    return type(value) in (int, float) and -_MAX_TIME < value < _MAX_TIME  # type: ignore[operator]


def _grant(agent_id: str, claims: dict[str, Any]) -> Grant:
    if claims.get("sub") != agent_id:
        raise AuthError("token subject does not match agent_id")
    for name in ("exp", "nbf", "iat"):
        if name in claims and not _is_time(claims[name]):
            raise AuthError(f"token claim {name!r} must be a number")
    try:
        join = claims.get("join")
        publish = claims.get("publish")
        return Grant(
            join=None if join is None else parse_patterns(join, "token claim 'join'"),
            publish=None if publish is None else parse_patterns(publish, "token claim 'publish'"),
            expires_at=float(claims["exp"]),
        )
    except ValueError as exc:
        raise AuthError(str(exc)) from None
