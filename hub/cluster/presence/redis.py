"""Redis presence: agent claims, space memberships, the directory, node liveness.

The layout and the slot of every key: :mod:`hub.cluster.presence.redis_scripts`.
On a Redis Cluster an agent's claim lives in the agent's hash slot, a
space's members in the space's slot (with its seq, history and channel), and
the indexes in shards spread over the slots — so joins, leaves and claims
spread over the masters like the agents and spaces do. One Redis and
Sentinel keep the keys of earlier versions.

No script crosses slots, so a change that touches an agent and a space (a
join, a leave, a reaping) is a sequence of single-slot scripts. What that
loses is atomicity across them; what keeps presence right is the order:

* **Intent first.** Before an agent becomes a member, its own slot records
  the intent (``P:member-of``, the space and its connection); before a claim,
  the node's shard lists the agent (``P:node-agents``); before a record, the
  directory lists it. The index a reaper or a reader goes by may list more
  than is true, never less.
* **Removal after, checked.** A membership is removed first, then its
  intent — only if it is still the same connection's. An index entry is
  removed after its record, then the record is checked again.
* **Holders named where the data is.** Each membership carries the
  connection that holds it (``P:member-conns``, in the space's slot): a
  reaper takes out only what the dead connection held, atomically in that
  slot, even if the agent reconnected elsewhere meanwhile, and a leave tells
  which connection's intent to drop.
* **Reaping leased, idempotent.** One script takes each dead node (a lease
  of ``dead_after``); the reaper then removes its agents step by step, each
  step conditional on the dead connection, and only then drops the node. A
  reaper that dies half-way leaves the node for the next one, which redoes
  what is left.

Liveness uses Redis server time only (``TIME`` inside the scripts): nodes'
clocks never have to agree. Records carry no TTL; a node that stops touching
its registration is reaped by the survivors, who announce the departures.
"""

from __future__ import annotations

from collections.abc import Sequence

from hub.cluster.presence.base import (
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    MembersPage,
    ReapedAgent,
)
from hub.cluster.presence.redis_directory import RedisDirectory, capabilities_of, info_of
from hub.cluster.presence.redis_directory import record_from as _record
from hub.cluster.presence.redis_liveness import RedisLiveness
from hub.cluster.presence.redis_scripts import (
    CLAIM_LUA,
    DELETE_IF_LUA,
    FORGET_LUA,
    INTEND_LUA,
    JOIN_LUA,
    LEAVE_LUA,
    RELEASE_LUA,
    UPDATE_LUA,
    PresenceKeys,
)
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import RedisStore
from hub.errors import BackplaneUnavailable, SpaceFull


class RedisPresence(RedisStore):
    """Presence shared by every node of a cluster, on the node's
    :class:`~hub.cluster.redis_connection.RedisConnection`."""

    def __init__(
        self, redis: RedisConnection, *, node_id: str, ttl: float = 60.0, prefix: str = "agora"
    ):
        super().__init__(redis, prefix=prefix)
        self.node_id = node_id
        self._keys = keys = PresenceKeys(prefix, redis.clustered)
        script = self._client.register_script
        self._claim = script(CLAIM_LUA)
        self._release = script(RELEASE_LUA)
        self._update = script(UPDATE_LUA)
        self._intend = script(INTEND_LUA)
        self._forget = script(FORGET_LUA)
        self._join = script(JOIN_LUA)
        self._leave = script(LEAVE_LUA)
        self._delete_if = script(DELETE_IF_LUA)
        self._directory = RedisDirectory(self._client, keys, self._check_open)
        self._liveness = RedisLiveness(
            self._client, keys, self._directory, self._call, self._command,
            node_id=node_id, ttl=ttl,
        )  # fmt: skip

    def _closed_error(self, what: str) -> BackplaneUnavailable:
        return BackplaneUnavailable("presence closed")

    def _my_agents(self, agent_id: str) -> str:
        """This node's shard of its agents that ``agent_id`` belongs in."""
        return self._keys.node_agents(self.node_id, self._keys.shard_of(agent_id))

    # ── agents ───────────────────────────────────────────────────────────

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        aid, conn = record.agent_id, record.connection_id
        caps = set(record.capabilities)
        mine = self._my_agents(aid)
        # Intents, one round trip: this node lists the agent, the directory lists it.
        intent = (None, "HSET", [mine, aid, conn])
        await self._directory.index([(aid, caps)], listed=True, along=[intent])
        held, *rest = await self._call(
            "claim_agent",
            self._claim,
            [self._keys.agent(aid)],
            [record.node_id, conn, info_of(record), "0" if replace is None else "1", replace or ""],
        )
        if held:
            holder = _record(aid, *rest)
            undo = (self._delete_if, [mine], [aid, conn])
            stale = [(aid, caps - set(holder.capabilities))]
            await self._directory.unindex(stale, listed=False, along=[undo])
            return holder
        (replaced,) = rest
        await self._directory.unindex([(aid, capabilities_of(replaced) - caps)], listed=False)
        return None

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        info = await self._call(
            "release_agent", self._release, [self._keys.agent(agent_id)], [connection_id]
        )
        # With the directory's entries (one round trip), after the record.
        unlisted = (self._delete_if, [self._my_agents(agent_id)], [agent_id, connection_id])
        gone = [] if info is None else [(agent_id, capabilities_of(info))]
        await self._directory.unindex(gone, listed=info is not None, along=[unlisted])

    async def update_agent(self, record: AgentRecord) -> None:
        caps = set(record.capabilities)
        await self._directory.index([(record.agent_id, caps)], listed=False)
        old = await self._call(
            "update_agent",
            self._update,
            [self._keys.agent(record.agent_id)],
            [record.connection_id, record.node_id, info_of(record)],
        )
        # Not applied (another connection's id): what was added is checked off.
        stale = caps if old is None else capabilities_of(old) - caps
        await self._directory.unindex([(record.agent_id, stale)], listed=False)

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        with self._command("get_agent"):
            node, conn, info = await self._client.hmget(
                self._keys.agent(agent_id), ["node", "conn", "info"]
            )
        if conn is None:
            return None
        return _record(agent_id, node or b"", conn, info)

    # ── membership ───────────────────────────────────────────────────────

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        keys = self._keys
        member_of = keys.member_of(agent_id)
        conn = await self._call(
            "join_space", self._intend, [keys.agent(agent_id), member_of], [space]
        )
        n, *fresh = await self._call(
            "join_space",
            self._join,
            [keys.members(space), keys.member_conns(space)],
            [agent_id, capacity, conn],
        )
        if n < 0:
            await self._call("join_space", self._forget, [member_of], [space, conn])
            raise SpaceFull(space, capacity)
        if fresh[0]:
            await self._directory.space_listed([space])
        return int(n)

    async def leave_space(self, space: str, agent_id: str) -> int:
        keys = self._keys
        n, removed, conn = await self._call(
            "leave_space",
            self._leave,
            [keys.members(space), keys.member_conns(space)],
            [agent_id],
        )
        if removed:
            await self._call("leave_space", self._forget, [keys.member_of(agent_id)], [space, conn])
            if not n:
                await self._directory.space_emptied([space])
        return int(n)

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        key = self._keys.members(space)
        with self._command("space_members"):
            async with self._client.pipeline(transaction=True) as pipe:
                if limit > 0:
                    pipe.zrange(key, 0, limit - 1)
                pipe.zcard(key)
                result = await pipe.execute()
        ids = [m.decode() for m in result[0]] if limit > 0 else []
        return ids, int(result[-1])

    async def members_page(self, space: str, cursor: str | None, limit: int) -> MembersPage:
        return await self._directory.members_page(space, cursor, limit)

    async def list_agents(
        self,
        *,
        capability: CapabilityFilter | None,
        space: str | None,
        cursor: str | None,
        limit: int,
    ) -> AgentsPage:
        return await self._directory.list_agents(
            capability=capability, space=space, cursor=cursor, limit=limit
        )

    async def missing_members(self, space: str, agent_ids: tuple[str, ...]) -> list[str]:
        with self._command("missing_members"):
            if not agent_ids:
                return []
            scores = await self._client.zmscore(self._keys.members(space), list(agent_ids))
        return [a for a, score in zip(agent_ids, scores, strict=True) if score is None]

    async def space_sizes(self) -> dict[str, int]:
        return await self._directory.space_sizes()

    # ── leaves held unannounced (this node's coalescing windows) ────────

    async def note_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        if agent_ids:
            with self._command("note_departures"):
                await self._client.sadd(
                    self._keys.departing(self.node_id), *(f"{space} {a}" for a in agent_ids)
                )

    async def forget_departures(self, space: str, agent_ids: Sequence[str]) -> None:
        if agent_ids:
            with self._command("forget_departures"):
                await self._client.srem(
                    self._keys.departing(self.node_id), *(f"{space} {a}" for a in agent_ids)
                )

    # ── node liveness (hub/cluster/presence/redis_liveness.py) ──────────

    async def start(self) -> None:
        await self._liveness.start()

    async def touch_node(self) -> bool:
        return await self._liveness.touch_node()

    async def reaped(self) -> bool:
        return await self._liveness.reaped()

    async def node_alive(self, node_id: str, within: float) -> bool:
        return await self._liveness.node_alive(node_id, within)

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        return await self._liveness.restore(agents, memberships)

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        return await self._liveness.reap_dead_nodes(dead_after)

    async def leave_cluster(self) -> None:
        await self._liveness.leave_cluster()
