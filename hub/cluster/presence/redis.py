"""Redis presence: agent ownership, space membership and node liveness.

Layout (``P`` is the key prefix, default ``agora``)::

    P:agent:{agent_id}       HASH   node, conn, info (JSON: type, capabilities, metadata,
                                    connected_at)
    P:node-agents:{node_id}  HASH   agent_id -> connection id, the node's agents
    P:nodes                  ZSET   node_id scored by its last touch (Redis TIME, ms)
    P:members:{space}        ZSET   agent_id scored by join order (oldest first)
    P:member-of:{agent_id}   HASH   space -> connection id of the holder at join time
    P:space-sizes            HASH   space -> member count, for every non-empty space
    P:join-order             STRING counter giving each join its score
    P:agent-index, P:cap:{capability}, P:capabilities   the directory's indexes
                                    (see :mod:`hub.cluster.presence.redis_directory`)

Key names and the scripts are in :mod:`hub.cluster.presence.redis_scripts`; paged
reads (members pages, the agent directory) in :mod:`hub.cluster.presence.redis_directory`.

Every change that touches more than one key is one Lua script, so a reader
never sees a member without its index entry, and reaping a dead node is
atomic: the script that removes the node from ``P:nodes`` is the only one
that ever sees its agents, so exactly one caller reaps it.

Liveness uses Redis server time only (``TIME`` inside the scripts): nodes'
clocks never have to agree. Records carry no TTL; a node that stops touching
its registration is reaped by the survivors, who announce the departures.
"""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

import orjson

from hub.cluster.presence.base import (
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    MembersPage,
    ReapedAgent,
)
from hub.cluster.presence.redis_directory import RedisDirectory
from hub.cluster.presence.redis_directory import record_from as _record
from hub.cluster.presence.redis_scripts import (
    CLAIM_LUA,
    JOIN_LUA,
    LEAVE_CLUSTER_LUA,
    LEAVE_LUA,
    NODE_ALIVE_LUA,
    REAP_LUA,
    RELEASE_LUA,
    RESTORE_LUA,
    RETIRE_LUA,
    TOUCH_LUA,
    UPDATE_LUA,
    PresenceKeys,
)
from hub.cluster.redis_connection import RedisConnection
from hub.cluster.redis_store import RedisStore, run_scripts, tagged
from hub.errors import BackplaneUnavailable, SpaceFull


def _info(record: AgentRecord) -> bytes:
    return orjson.dumps(
        {
            "type": record.type,
            "capabilities": record.capabilities,
            "metadata": record.metadata,
            "connected_at": record.connected_at,
        }
    )


class RedisPresence(RedisStore):
    """Presence shared by every node of a cluster, on the node's
    :class:`~hub.cluster.redis_connection.RedisConnection`.

    On a Redis Cluster every presence key carries the hash tag ``{P}``: they
    all live in one slot, so every script stays one atomic step (reaping a
    dead node touches its agents, their memberships and the directory at
    once). Presence is written per connect, join and heartbeat interval, not
    per message: one shard carries it easily while space traffic spreads.
    """

    def __init__(
        self, redis: RedisConnection, *, node_id: str, ttl: float = 60.0, prefix: str = "agora"
    ):
        super().__init__(redis, prefix=tagged(prefix, redis.clustered))
        self.node_id = node_id
        # The liveness window the node promises; reaping uses the caller's
        # ``dead_after``, this is the fallback when that is not positive.
        self.ttl = ttl
        self._keys = PresenceKeys(self._prefix)
        script = self._client.register_script
        self._claim = script(CLAIM_LUA)
        self._release = script(RELEASE_LUA)
        self._update = script(UPDATE_LUA)
        self._join = script(JOIN_LUA)
        self._leave = script(LEAVE_LUA)
        self._touch = script(TOUCH_LUA)
        self._leave_cluster = script(LEAVE_CLUSTER_LUA)
        self._restore = script(RESTORE_LUA)
        self._reap = script(REAP_LUA)
        self._retire = script(RETIRE_LUA)
        self._node_alive = script(NODE_ALIVE_LUA)
        self._my_agents = self._keys.node_agents(node_id)
        self._directory = RedisDirectory(self._client, self._keys, self._check_open)

    def _closed_error(self, what: str) -> BackplaneUnavailable:
        return BackplaneUnavailable("presence closed")

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self) -> None:
        """Hand leftovers of a previous process with this node id to the reapers.

        Best effort: with Redis down this does nothing, and every later call
        raises BackplaneUnavailable until Redis is back.
        """
        tomb = f"{self.node_id}~{secrets.token_hex(4)}"
        with contextlib.suppress(BackplaneUnavailable):
            await self._call(
                "start",
                self._retire,
                [self._keys.nodes, self._my_agents, self._keys.node_agents(tomb)],
                [tomb],
            )

    # ── agents ───────────────────────────────────────────────────────────

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        holder = await self._call(
            "claim_agent",
            self._claim,
            [self._keys.agent(record.agent_id), self._my_agents],
            [
                record.agent_id,
                record.node_id,
                record.connection_id,
                _info(record),
                "0" if replace is None else "1",
                replace or "",
                self._prefix,
            ],
        )
        if not holder:
            return None
        return _record(record.agent_id, *holder)

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        await self._call(
            "release_agent",
            self._release,
            [self._keys.agent(agent_id), self._my_agents],
            [agent_id, connection_id, self._prefix],
        )

    async def update_agent(self, record: AgentRecord) -> None:
        await self._call(
            "update_agent",
            self._update,
            [self._keys.agent(record.agent_id)],
            [record.connection_id, record.node_id, _info(record), record.agent_id, self._prefix],
        )

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
        n = await self._call(
            "join_space",
            self._join,
            [
                keys.members(space),
                keys.member_of(agent_id),
                keys.sizes,
                keys.order,
                keys.agent(agent_id),
            ],
            [agent_id, space, capacity],
        )
        if n < 0:
            raise SpaceFull(space, capacity)
        return int(n)

    async def leave_space(self, space: str, agent_id: str) -> int:
        keys = self._keys
        n = await self._call(
            "leave_space",
            self._leave,
            [keys.members(space), keys.member_of(agent_id), keys.sizes],
            [agent_id, space],
        )
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
        with self._command("space_sizes"):
            sizes = await self._client.hgetall(self._keys.sizes)
        return {k.decode(): int(v) for k, v in sizes.items() if int(v) > 0}

    # ── node liveness ────────────────────────────────────────────────────

    async def touch_node(self) -> bool:
        added = await self._call("touch_node", self._touch, [self._keys.nodes], [self.node_id])
        return bool(added)

    async def reaped(self) -> bool:
        with self._command("reaped"):
            return bool(await self._client.getdel(self._keys.reaped(self.node_id)))

    async def node_alive(self, node_id: str, within: float) -> bool:
        alive = await self._call(
            "node_alive",
            self._node_alive,
            [self._keys.nodes],
            [node_id, max(1, round(within * 1000))],
        )
        return bool(alive)

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        with self._command("restore"):
            calls = self._restore_calls(agents, memberships)
            conflicts: list[AgentRecord] = []
            for i in range(0, len(calls), 200):
                chunk = calls[i : i + 200]
                results = await run_scripts(
                    self._client, self._restore, [(keys, args) for _, keys, args in chunk]
                )
                for (aid, _, _), holder in zip(chunk, results, strict=True):
                    if isinstance(holder, BaseException):
                        raise holder
                    if holder:
                        conflicts.append(_record(aid, *holder))
        return conflicts

    def _restore_calls(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[tuple[str, list[str], list[Any]]]:
        """(agent id, KEYS, ARGV) of the restore script for each agent to restore."""
        spaces_of: dict[str, list[str]] = {}
        for space, ids in memberships.items():
            for agent_id in ids:
                spaces_of.setdefault(agent_id, []).append(space)
        p = self._prefix
        calls: list[tuple[str, list[str], list[Any]]] = []
        for record in agents:
            aid = record.agent_id
            calls.append(
                (
                    aid,
                    self._restore_keys(aid),
                    [
                        p,
                        aid,
                        record.node_id,
                        record.connection_id,
                        _info(record),
                        "1",
                        *spaces_of.pop(aid, ()),
                    ],
                )
            )
        # Members without a record here (no claim to re-assert): memberships only.
        for aid, spaces in spaces_of.items():
            calls.append((aid, self._restore_keys(aid), [p, aid, "", "", "", "0", *spaces]))
        return calls

    def _restore_keys(self, agent_id: str) -> list[str]:
        keys = self._keys
        return [
            keys.agent(agent_id),
            self._my_agents,
            keys.member_of(agent_id),
            keys.sizes,
            keys.order,
        ]

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        window = dead_after if dead_after > 0 else self.ttl
        rows = await self._call(
            "reap_dead_nodes",
            self._reap,
            [self._keys.nodes, self._keys.sizes],
            [self._prefix, max(1, round(window * 1000)), self.node_id],
        )
        out = []
        for row in rows:
            aid, node, conn, info, *spaces = row
            out.append(
                ReapedAgent(
                    _record(aid.decode(), node, conn, info),
                    tuple(s.decode() for s in spaces),
                )
            )
        return out

    async def leave_cluster(self) -> None:
        await self._call(
            "leave_cluster",
            self._leave_cluster,
            [self._keys.nodes, self._my_agents],
            [self.node_id],
        )
