"""The presence interface: agent ownership and space membership."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """Who holds an agent id, and what the agent said about itself."""

    agent_id: str
    node_id: str
    connection_id: str
    type: str | None = None
    capabilities: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The agent as ``agent.status`` events show it."""
        return {
            "id": self.agent_id,
            "type": self.type,
            "capabilities": list(self.capabilities),
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class ReapedAgent:
    """An agent removed because its node stopped refreshing its presence."""

    record: AgentRecord
    spaces: tuple[str, ...]


class Presence(Protocol):
    """Cluster-wide registry of agents and space members."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        """Take the agent id for ``record``'s connection.

        Returns ``None`` on success, else the record of the connection that
        holds it. With ``replace``, a holder whose connection id equals
        ``replace`` is overwritten (it was found dead).
        """
        ...

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        """Free the id, only if ``connection_id`` still holds it."""
        ...

    async def update_agent(self, record: AgentRecord) -> None: ...

    async def get_agent(self, agent_id: str) -> AgentRecord | None: ...

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        """Add a member (idempotent); raises SpaceFull; returns the member count."""
        ...

    async def leave_space(self, space: str, agent_id: str) -> int:
        """Remove a member; returns how many remain."""
        ...

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        """Up to ``limit`` member ids (oldest first) and the exact count."""
        ...

    async def missing_members(self, space: str, agent_ids: tuple[str, ...]) -> list[str]:
        """Those of ``agent_ids`` that are not members of ``space`` (in order)."""
        ...

    async def space_sizes(self) -> dict[str, int]:
        """Every space with at least one member, and its member count."""
        ...

    async def touch_node(self) -> bool:
        """Mark this node alive; called every heartbeat interval.

        Returns True when the node's registration was missing (first call,
        or the store lost its data, or other nodes reaped this one): the node
        then calls :meth:`restore` with what it holds locally.
        """
        ...

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        """Re-assert this node's agents and memberships after a data loss.

        Agents now held by another connection are not overwritten; they are
        returned so the node can close its stale copies.
        """
        ...

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        """Remove agents and memberships of nodes silent for ``dead_after`` s.

        Each dead node is reaped by exactly one caller in the cluster; the
        caller announces the departures.
        """
        ...

    async def leave_cluster(self) -> None:
        """Graceful shutdown: drop this node's registration."""
        ...
