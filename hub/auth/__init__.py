"""Connection authentication: ``none``, ``tokens`` (a JSON file) or ``jwt``.

An :class:`Authenticator` turns ``(agent_id, token)`` into a
:class:`~hub.core.authz.Grant` (what the connection may do) or raises
:class:`~hub.errors.AuthError`, whose message is safe to send to the client
and to log: it never contains the token. A refusal at the handshake becomes
``error UNAUTHORIZED`` and close 4401.

``authenticate`` is a coroutine because a JWT signed by a key the hub has not
seen yet makes it fetch the identity provider's JWKS document; every other
case completes without suspending.
"""

from __future__ import annotations

from typing import Protocol

from hub.auth.jwks import JwksKeys
from hub.auth.jwt_auth import JwtAuth, KeySource, StaticKey
from hub.auth.tokens_file import TokenFileAuth
from hub.config.settings import Settings
from hub.core.authz import Grant
from hub.errors import AuthError, ConfigError

__all__ = [
    "Authenticator",
    "JwksKeys",
    "JwtAuth",
    "KeySource",
    "NoAuth",
    "StaticKey",
    "TokenFileAuth",
    "build_authenticator",
]


class Authenticator(Protocol):
    async def authenticate(self, agent_id: str, token: str | None) -> Grant:
        """Return what ``token`` allows ``agent_id``; raise AuthError if it proves nothing."""
        ...

    async def identify(self, token: str | None) -> tuple[str, Grant]:
        """A bearer token alone (HTTP gateways): the agent id it names and what
        it allows; raise AuthError if it proves nothing."""
        ...

    async def aclose(self) -> None:
        """Release what the authenticator holds (idempotent)."""
        ...


class NoAuth:
    """Development mode: any agent id is accepted, unrestricted."""

    async def authenticate(self, agent_id: str, token: str | None) -> Grant:
        return Grant.unrestricted

    async def identify(self, token: str | None) -> tuple[str, Grant]:
        raise AuthError("no authentication is configured: a token names nobody")

    async def aclose(self) -> None:
        return None


def build_authenticator(settings: Settings) -> Authenticator:
    """The authenticator ``settings`` ask for; ConfigError if its files are unusable."""
    if settings.auth_mode == "tokens" and settings.auth_tokens_file is not None:
        return TokenFileAuth(settings.auth_tokens_file)
    if settings.auth_mode == "jwt":
        keys: KeySource | None = None
        if settings.jwt_jwks_url:
            keys = JwksKeys(settings.jwt_jwks_url)
        elif settings.jwt_public_key is not None:
            keys = StaticKey.from_public_key_file(settings.jwt_public_key)
        elif settings.jwt_secret is not None:
            keys = StaticKey.from_secret(settings.jwt_secret.get_secret_value())
        if keys is not None:
            return JwtAuth(
                keys,
                audience=settings.jwt_audience,
                issuer=settings.jwt_issuer,
                leeway=settings.jwt_leeway,
            )
    if settings.auth_mode != "none":
        # Settings validation makes this unreachable; refuse rather than fail open.
        raise ConfigError(f"auth_mode={settings.auth_mode} is missing its key settings")
    return NoAuth()
