"""``auth_mode=tokens``: fixed tokens per agent id, from a JSON file.

Each value is the token itself or an object with the token and optional
restrictions (see :mod:`hub.core.authz`)::

    {
      "alice": "s3cret",
      "ci-bot": {"token": "…", "join": ["task.*", "lobby"], "publish": ["task.ci.*"]}
    }
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from pathlib import Path

import orjson

from hub.core.authz import Grant, parse_patterns
from hub.errors import AuthError, ConfigError
from protocol.names import is_valid_agent_id

_ENTRY_KEYS = frozenset({"token", "join", "publish"})


_MISSING_TOKEN = (
    "a token is required (?token=, Authorization: Bearer, or the bearer.TOKEN subprotocol)"
)


class TokenFileAuth:
    """Tokens compared in constant time; :meth:`reload` swaps the file in atomically."""

    # Compared against when the agent id is unknown, so the time taken does
    # not tell which ids exist.
    _DUMMY = b"x" * 32

    def __init__(self, path: Path):
        self.path = path
        self._entries = self.load(path)

    @staticmethod
    def load(path: Path) -> dict[str, tuple[bytes, Grant]]:
        """Read and check the whole file; ConfigError names the file and the agent id.

        Error messages never include a token.
        """
        try:
            data = orjson.loads(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"cannot read tokens file {path}: {exc.strerror}") from None
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"tokens file {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f'tokens file {path} must be a JSON object {{"agent-id": "token", …}}'
            )
        entries: dict[str, tuple[bytes, Grant]] = {}
        for agent_id, value in data.items():
            if not is_valid_agent_id(agent_id):
                raise ConfigError(f"tokens file {path}: {agent_id[:140]!r} is not a valid agent id")
            try:
                entries[agent_id] = _entry(value)
            except ValueError as exc:
                raise ConfigError(f"tokens file {path}: agent {agent_id!r}: {exc}") from None
        return entries

    def reload(self) -> None:
        """Re-read the file; if it is unusable the old tokens stay and ConfigError is raised."""
        self.prepare_reload()()

    def prepare_reload(self) -> Callable[[], None]:
        """Read and check the file; the returned function puts its tokens in
        service (SIGHUP reloads several files all or nothing)."""
        entries = self.load(self.path)

        def commit() -> None:
            self._entries = entries

        return commit

    async def authenticate(self, agent_id: str, token: str | None) -> Grant:
        if not token:
            # Saying it is missing tells nothing about the agent id.
            raise AuthError(_MISSING_TOKEN)
        expected, grant = self._entries.get(agent_id, (None, Grant.unrestricted))
        ok = hmac.compare_digest(expected or self._DUMMY, token.encode())
        if expected is None or not ok:
            raise AuthError("invalid token for this agent_id")
        return grant

    async def identify(self, token: str | None) -> tuple[str, Grant]:
        if not token:
            raise AuthError(_MISSING_TOKEN)
        given = token.encode()
        found: tuple[str, Grant] | None = None
        # Every entry is compared, so the time taken does not tell which matched.
        for agent_id, (expected, grant) in self._entries.items():
            if hmac.compare_digest(expected, given) and found is None:
                found = (agent_id, grant)
        if found is None:
            raise AuthError("invalid token")
        return found

    async def aclose(self) -> None:
        return None


def _entry(value: object) -> tuple[bytes, Grant]:
    if isinstance(value, str):
        if not value:
            raise ValueError("the token is empty")
        return value.encode(), Grant.unrestricted
    if not isinstance(value, dict):
        raise ValueError('the value must be a token string or {"token", "join", "publish"}')
    unknown = sorted(set(value) - _ENTRY_KEYS)
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}")
    token = value.get("token")
    if not isinstance(token, str) or not token:
        raise ValueError('"token" must be a non-empty string')
    join = value.get("join")
    publish = value.get("publish")
    grant = Grant(
        join=None if join is None else parse_patterns(join, '"join"'),
        publish=None if publish is None else parse_patterns(publish, '"publish"'),
    )
    if grant.join is None and grant.publish is None:
        grant = Grant.unrestricted
    return token.encode(), grant
