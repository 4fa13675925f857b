"""Single-node presence: dictionaries, and sorted lists for paging.

Paging never scans: the directory keeps agent ids sorted (all of them, and
per capability) and each space keeps its members in join order, so a page is
a bisection and a slice.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from itertools import islice

from hub.cluster.presence.base import (
    MAX_PREFIX_CAPABILITIES,
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    InvalidQuery,
    MembersPage,
    ReapedAgent,
)
from hub.errors import SpaceFull
from protocol.names import is_valid_agent_id


class _Space:
    """Members in join order: ``order`` for lookups (insertion-ordered, so
    oldest first), the parallel sorted lists for paging by join number."""

    __slots__ = ("agents", "numbers", "order")

    def __init__(self) -> None:
        self.order: dict[str, int] = {}
        self.numbers: list[int] = []
        self.agents: list[str] = []

    def add(self, agent_id: str, number: int) -> None:
        self.order[agent_id] = number
        self.numbers.append(number)  # numbers only grow: the lists stay sorted
        self.agents.append(agent_id)

    def remove(self, agent_id: str) -> None:
        number = self.order.pop(agent_id, None)
        if number is not None:
            i = bisect_left(self.numbers, number)
            del self.numbers[i]
            del self.agents[i]

    def after(self, number: int, limit: int) -> tuple[list[str], list[int]]:
        i = bisect_right(self.numbers, number)
        return self.agents[i : i + limit], self.numbers[i : i + limit]


class MemoryPresence:
    def __init__(self) -> None:
        self._agents: dict[str, AgentRecord] = {}
        self._spaces: dict[str, _Space] = {}
        self._joins = 0
        # The directory's indexes: sorted agent ids, overall and per capability.
        self._ids: list[str] = []
        self._by_capability: dict[str, list[str]] = {}
        self._capabilities: list[str] = []  # sorted, for prefix filters
        self._departing: set[tuple[str, str]] = set()

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    # ── agents ───────────────────────────────────────────────────────────

    def _index(self, record: AgentRecord) -> None:
        aid = record.agent_id
        insort(self._ids, aid)
        for cap in set(record.capabilities):
            ids = self._by_capability.get(cap)
            if ids is None:
                ids = self._by_capability[cap] = []
                insort(self._capabilities, cap)
            insort(ids, aid)

    def _unindex(self, record: AgentRecord) -> None:
        aid = record.agent_id
        _discard(self._ids, aid)
        for cap in set(record.capabilities):
            ids = self._by_capability.get(cap)
            if ids is None:
                continue
            _discard(ids, aid)
            if not ids:
                del self._by_capability[cap]
                _discard(self._capabilities, cap)

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        holder = self._agents.get(record.agent_id)
        if holder is not None:
            if holder.connection_id != replace:
                return holder
            self._unindex(holder)
        self._agents[record.agent_id] = record
        self._index(record)
        return None

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        holder = self._agents.get(agent_id)
        if holder is not None and holder.connection_id == connection_id:
            del self._agents[agent_id]
            self._unindex(holder)

    async def update_agent(self, record: AgentRecord) -> None:
        holder = self._agents.get(record.agent_id)
        if holder is not None and holder.connection_id == record.connection_id:
            self._unindex(holder)
            self._agents[record.agent_id] = record
            self._index(record)

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        return self._agents.get(agent_id)

    async def list_agents(
        self,
        *,
        capability: CapabilityFilter | None,
        space: str | None,
        cursor: str | None,
        limit: int,
    ) -> AgentsPage:
        if space is not None:
            return self._space_agents(space, capability, cursor, limit)
        if cursor is not None and not is_valid_agent_id(cursor):
            raise InvalidQuery("invalid cursor")
        after = cursor or ""
        if capability is None:
            lists = [self._ids]
        elif not capability.prefix:
            lists = [self._by_capability.get(capability.value, [])]
        else:
            caps = self._capabilities
            lo = bisect_left(caps, capability.value)
            hi = lo
            while hi < len(caps) and caps[hi].startswith(capability.value):
                hi += 1
                if hi - lo > MAX_PREFIX_CAPABILITIES:
                    raise InvalidQuery(
                        f"capability prefix matches more than {MAX_PREFIX_CAPABILITIES} "
                        "capabilities: narrow it"
                    )
            lists = [self._by_capability[c] for c in caps[lo:hi]]
        merged = heapq.merge(*(islice(ids, bisect_right(ids, after), None) for ids in lists))
        page: list[str] = []
        for aid in merged:
            if page and page[-1] == aid:
                continue  # several of its capabilities match the prefix
            page.append(aid)
            if len(page) > limit:
                break
        more = len(page) > limit
        page = page[:limit]
        return AgentsPage([self._agents[a] for a in page], page[-1] if more else None)

    def _space_agents(
        self, space: str, capability: CapabilityFilter | None, cursor: str | None, limit: int
    ) -> AgentsPage:
        members = self._spaces.get(space)
        after = _number(cursor)
        if members is None:
            return AgentsPage([], None)
        ids, numbers = members.after(after, limit + 1)
        more = len(ids) > limit
        ids, numbers = ids[:limit], numbers[:limit]
        agents = []
        for aid in ids:
            record = self._agents.get(aid)
            if record is not None and (
                capability is None or capability.matches(record.capabilities)
            ):
                agents.append(record)
        return AgentsPage(agents, str(numbers[-1]) if more else None)

    # ── spaces ───────────────────────────────────────────────────────────

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        members = self._spaces.get(space)
        if members is None:
            members = self._spaces[space] = _Space()
        if agent_id not in members.order:
            if len(members.order) >= capacity:
                if not members.order:
                    del self._spaces[space]
                raise SpaceFull(space, capacity)
            self._joins += 1
            members.add(agent_id, self._joins)
        return len(members.order)

    async def leave_space(self, space: str, agent_id: str) -> int:
        members = self._spaces.get(space)
        if members is None:
            return 0
        members.remove(agent_id)
        if not members.order:
            del self._spaces[space]
            return 0
        return len(members.order)

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        members = self._spaces.get(space)
        if members is None:
            return [], 0
        return members.agents[:limit], len(members.order)

    async def members_page(self, space: str, cursor: str | None, limit: int) -> MembersPage:
        after = _number(cursor)
        members = self._spaces.get(space)
        if members is None:
            return MembersPage([], 0, None)
        ids, numbers = members.after(after, limit + 1)
        more = len(ids) > limit
        return MembersPage(
            ids[:limit], len(members.order), str(numbers[limit - 1]) if more else None
        )

    async def missing_members(self, space: str, agent_ids: tuple[str, ...]) -> list[str]:
        members = self._spaces.get(space)
        order = members.order if members is not None else {}
        return [a for a in agent_ids if a not in order]

    async def space_sizes(self) -> dict[str, int]:
        return {space: len(m.order) for space, m in self._spaces.items()}

    # A single node is never reaped: its notes are kept only to be dropped.
    async def note_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        self._departing.update((space, a) for a in agent_ids)

    async def forget_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        self._departing.difference_update((space, a) for a in agent_ids)

    # A single node is never dead to itself and never loses its data.
    async def touch_node(self) -> bool:
        return False

    async def node_alive(self, node_id: str, within: float) -> bool:
        return True

    async def reaped(self) -> bool:
        return False

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        return []

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        return []

    async def leave_cluster(self) -> None:
        return None


def _discard(ids: list[str], value: str) -> None:
    i = bisect_left(ids, value)
    if i < len(ids) and ids[i] == value:
        del ids[i]


def _number(cursor: str | None) -> int:
    """A join-order cursor (decimal), 0 for the start."""
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
        raise InvalidQuery("invalid cursor")
    return int(cursor)
