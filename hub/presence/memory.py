"""Single-node presence: dictionaries."""

from __future__ import annotations

from hub.errors import SpaceFull
from hub.presence.base import AgentRecord, ReapedAgent


class MemoryPresence:
    def __init__(self) -> None:
        self._agents: dict[str, AgentRecord] = {}
        # dicts as insertion-ordered sets: member lists come oldest first
        self._spaces: dict[str, dict[str, None]] = {}

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        holder = self._agents.get(record.agent_id)
        if holder is not None and holder.connection_id != replace:
            return holder
        self._agents[record.agent_id] = record
        return None

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        holder = self._agents.get(agent_id)
        if holder is not None and holder.connection_id == connection_id:
            del self._agents[agent_id]

    async def update_agent(self, record: AgentRecord) -> None:
        holder = self._agents.get(record.agent_id)
        if holder is not None and holder.connection_id == record.connection_id:
            self._agents[record.agent_id] = record

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        return self._agents.get(agent_id)

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        members = self._spaces.get(space)
        if members is None:
            members = self._spaces[space] = {}
        if agent_id not in members:
            if len(members) >= capacity:
                if not members:
                    del self._spaces[space]
                raise SpaceFull(space, capacity)
            members[agent_id] = None
        return len(members)

    async def leave_space(self, space: str, agent_id: str) -> int:
        members = self._spaces.get(space)
        if members is None:
            return 0
        members.pop(agent_id, None)
        if not members:
            del self._spaces[space]
            return 0
        return len(members)

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        members = self._spaces.get(space)
        if not members:
            return [], 0
        if limit >= len(members):
            return list(members), len(members)
        out = []
        for agent_id in members:
            if len(out) >= limit:
                break
            out.append(agent_id)
        return out, len(members)

    async def missing_members(self, space: str, agent_ids: tuple[str, ...]) -> list[str]:
        members = self._spaces.get(space, {})
        return [a for a in agent_ids if a not in members]

    async def space_sizes(self) -> dict[str, int]:
        return {space: len(m) for space, m in self._spaces.items()}

    # A single node is never dead to itself and never loses its data.
    async def touch_node(self) -> bool:
        return False

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        return []

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        return []

    async def leave_cluster(self) -> None:
        return None
