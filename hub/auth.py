"""Connection authentication: ``none``, ``tokens`` (a JSON file) or ``jwt``.

The token comes from the ``token`` query parameter or an
``Authorization: Bearer …`` header. A refusal becomes ``error UNAUTHORIZED``
and close 4401 (see :mod:`hub.server`).
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Protocol

import jwt
import orjson

from hub.errors import AuthError, ConfigError
from hub.settings import Settings


class Authenticator(Protocol):
    def authenticate(self, agent_id: str, token: str | None) -> None:
        """Return if ``token`` proves ``agent_id``; raise AuthError otherwise."""
        ...


class NoAuth:
    """Development mode: any agent id is accepted."""

    def authenticate(self, agent_id: str, token: str | None) -> None:
        return None


class TokenFileAuth:
    """Fixed tokens per agent id, from a JSON object ``{"agent-id": "token"}``."""

    # Compared against when the agent id is unknown, so the time taken does
    # not tell which ids exist.
    _DUMMY = "x" * 32

    def __init__(self, path: Path):
        self.path = path
        self._tokens = self.load(path)

    @staticmethod
    def load(path: Path) -> dict[str, str]:
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read tokens file {path}: {exc}") from None
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in data.items()
        ):
            raise ConfigError(
                f'tokens file {path} must be a JSON object {{"agent-id": "token", …}}'
            )
        return data

    def reload(self) -> None:
        self._tokens = self.load(self.path)

    def authenticate(self, agent_id: str, token: str | None) -> None:
        expected = self._tokens.get(agent_id)
        given = (token or "").encode()
        ok = hmac.compare_digest((expected or self._DUMMY).encode(), given)
        if expected is None or not token or not ok:
            raise AuthError("invalid token for this agent_id")


class JwtAuth:
    """HS256 JSON Web Tokens whose ``sub`` is the agent id; ``exp`` required."""

    def __init__(self, secret: str):
        self._secret = secret

    def authenticate(self, agent_id: str, token: str | None) -> None:
        if not token:
            raise AuthError("a JWT is required")
        try:
            claims = jwt.decode(
                token, self._secret, algorithms=["HS256"], options={"require": ["exp", "sub"]}
            )
        except jwt.ExpiredSignatureError:
            raise AuthError("token expired") from None
        except jwt.InvalidTokenError as exc:
            raise AuthError(f"invalid token: {exc}") from None
        if claims.get("sub") != agent_id:
            raise AuthError("token subject does not match agent_id")


def build_authenticator(settings: Settings) -> Authenticator:
    if settings.auth_mode == "tokens":
        assert settings.auth_tokens_file is not None  # checked by Settings
        return TokenFileAuth(settings.auth_tokens_file)
    if settings.auth_mode == "jwt":
        assert settings.jwt_secret is not None
        return JwtAuth(settings.jwt_secret.get_secret_value())
    return NoAuth()
