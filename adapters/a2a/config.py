"""``[[bridges.a2a]]``: an A2A agent elsewhere, a member here."""

from __future__ import annotations

from pydantic import Field

from adapters.config import BridgeConfig


class A2aBridge(BridgeConfig):
    """One outbound A2A agent: ``space``, ``agent_id``, ``url`` (the remote
    agent's base URL: its card is at ``{url}/.well-known/agent-card.json``),
    an optional answer ``timeout`` and extra HTTP ``headers`` sent with every
    call (an ``Authorization`` the remote wants, say)."""

    timeout: float | None = Field(default=None, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
