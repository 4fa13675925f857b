"""The presence interfaces: agent claims, space memberships, the directory
and node liveness — four small protocols, one store (memory or Redis) for all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hub.core.agent_record import AgentRecord


class InvalidQuery(ValueError):
    """A paged query the store cannot answer as asked (bad cursor, filter too broad)."""


#: Most distinct capabilities one prefix filter may expand to.
MAX_PREFIX_CAPABILITIES = 1000


@dataclass(frozen=True, slots=True)
class CapabilityFilter:
    """``agent.list``'s ``capability``: an exact URI, or a prefix ending in ``*``."""

    value: str
    prefix: bool

    @classmethod
    def parse(cls, text: str) -> CapabilityFilter:
        if text.endswith("*"):
            return cls(text[:-1], True)
        return cls(text, False)

    def matches(self, capabilities: tuple[str, ...]) -> bool:
        if self.prefix:
            return any(c.startswith(self.value) for c in capabilities)
        return self.value in capabilities


@dataclass(frozen=True, slots=True)
class MembersPage:
    """One page of a space's members, oldest first, and the exact count."""

    members: list[str]
    count: int
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class AgentsPage:
    """One page of the agent directory (may hold fewer than asked: only a
    ``None`` ``next_cursor`` says the listing is complete)."""

    agents: list[AgentRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ReapedAgent:
    """An agent removed because its node stopped refreshing its presence.

    ``spaces``: the memberships taken out. ``held``: the spaces the agent had
    left on the dead node whose ``left`` that node still held, unannounced
    (:meth:`Memberships.note_departures`) — due too, unless the agent is a
    member again. An agent that had gone from the dead node altogether
    (closed: its ``offline`` was told) comes with only ``held``, and an
    empty connection id in its record."""

    record: AgentRecord
    spaces: tuple[str, ...]
    held: tuple[str, ...] = ()


class AgentClaims(Protocol):
    """Who holds each agent id, cluster-wide, and what the agent registered."""

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


class Memberships(Protocol):
    """Who is in which space, cluster-wide."""

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        """Add a member (idempotent); raises SpaceFull; returns the member count."""
        ...

    async def leave_space(self, space: str, agent_id: str) -> int:
        """Remove a member; returns how many remain."""
        ...

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        """Up to ``limit`` member ids (oldest first) and the exact count."""
        ...

    async def members_page(self, space: str, cursor: str | None, limit: int) -> MembersPage:
        """Members of ``space`` after ``cursor`` in join order, at most ``limit``.

        Stable under concurrent joins and leaves: a member present for the
        whole paging is listed exactly once. Raises :class:`InvalidQuery`
        for a cursor this store did not hand out.
        """
        ...

    async def missing_members(self, space: str, agent_ids: tuple[str, ...]) -> list[str]:
        """Those of ``agent_ids`` that are not members of ``space`` (in order)."""
        ...

    async def space_sizes(self) -> dict[str, int]:
        """Every space with at least one member, and its member count."""
        ...

    async def note_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        """This node holds the announcement of these agents' leaving ``space``
        (its coalescing window is open, contract §21): noted, before the
        memberships go, so that the reaper of this node announces them
        should it die first (:attr:`ReapedAgent.held`). Idempotent."""
        ...

    async def forget_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        """The noted departures were announced: the notes go."""
        ...


class Directory(Protocol):
    """The agents online, found by capability or space."""

    async def list_agents(
        self,
        *,
        capability: CapabilityFilter | None,
        space: str | None,
        cursor: str | None,
        limit: int,
    ) -> AgentsPage:
        """Agents online cluster-wide, by agent id (or by join order with
        ``space``), filtered by capability and/or space membership. Uses an
        index, never a scan of every agent. Raises :class:`InvalidQuery`."""
        ...


class NodeLiveness(Protocol):
    """Nodes keep their registration alive; the dead ones' agents are reaped."""

    async def node_alive(self, node_id: str, within: float) -> bool:
        """Did ``node_id`` touch its registration in the last ``within`` s?"""
        ...

    async def touch_node(self) -> bool:
        """Mark this node alive; called every heartbeat interval.

        Returns True when the node's registration was missing (first call,
        or the store lost its data, or other nodes reaped this one): the node
        then calls :meth:`restore` with what it holds locally.
        """
        ...

    async def reaped(self) -> bool:
        """Did other nodes reap this one — remove its agents and announce them
        gone — since it last asked? True at most once per reaping. Asked when
        :meth:`touch_node` found the registration missing: a node paused or cut
        off past the node timeout then announces its restored agents again;
        after a plain data loss nobody was told they left, and it does not."""
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


class Presence(AgentClaims, Memberships, Directory, NodeLiveness, Protocol):
    """All four, as one store implements them (memory or Redis), and its lifecycle.
    Callers type on the part they use."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...
