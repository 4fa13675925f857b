"""What the cluster knows of one agent: who holds its id, and what it registered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """Who holds an agent id, and what the agent said about itself."""

    agent_id: str
    node_id: str
    connection_id: str
    type: str | None = None
    capabilities: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    #: When the connection was accepted (Unix epoch ms); 0 when unknown.
    connected_at: int = 0

    def public(self) -> dict[str, Any]:
        """The agent as ``agent.status`` events show it."""
        return {
            "id": self.agent_id,
            "type": self.type,
            "capabilities": list(self.capabilities),
            "metadata": self.metadata,
        }

    def directory(self) -> dict[str, Any]:
        """The agent as an ``agent.list`` entry shows it."""
        return {
            **self.public(),
            "node": self.node_id,
            "connected_at": self.connected_at or None,
        }
