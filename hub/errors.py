"""The hub's exceptions.

Exception tree::

    HubError                  root of everything the hub package raises
    ├── ConfigError           settings or config file are unusable
    ├── AuthError             a connection's credentials were refused
    ├── BackplaneUnavailable  the backplane (Redis) can't carry out a request
    ├── SpaceFull             a join would exceed a space's capacity
    └── AgentIdTaken          an agent id is not free (held by a live agent, or the hub's own)

Protocol-level refusals are :class:`protocol.errors.ProtocolError`, which the
session turns into ``error`` events; these are the hub's internal failures.
"""

from __future__ import annotations


class HubError(Exception):
    """Root of the hub's exceptions."""


class ConfigError(HubError):
    """The settings or the config file can't be used."""


class AuthError(HubError):
    """Credentials were missing or wrong."""


class BackplaneUnavailable(HubError):
    """The backplane could not carry out a request; nothing was done."""

    def __init__(self, what: str = "backplane unavailable"):
        super().__init__(what)


class SpaceFull(HubError):
    """The space already holds its capacity of members."""

    def __init__(self, space: str, capacity: int):
        super().__init__(f"space {space!r} is full ({capacity} members)")
        self.space = space
        self.capacity = capacity


class AgentIdTaken(HubError):
    """An agent id is not free: an adapter's id held by a live agent
    elsewhere, or a caller naming one of the hub's own agents."""

    def __init__(self, agent_id: str, message: str | None = None):
        super().__init__(message or f"agent id {agent_id!r} is held by a live agent")
        self.agent_id = agent_id
