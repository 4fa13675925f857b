"""Redis presence: agent ownership, space membership and node liveness.

Layout (``P`` is the key prefix, default ``agora``)::

    P:agent:{agent_id}       HASH   node, conn, info (JSON: type, capabilities, metadata)
    P:node-agents:{node_id}  HASH   agent_id -> connection id, the node's agents
    P:nodes                  ZSET   node_id scored by its last touch (Redis TIME, ms)
    P:members:{space}        ZSET   agent_id scored by join order (oldest first)
    P:member-of:{agent_id}   HASH   space -> connection id of the holder at join time
    P:space-sizes            HASH   space -> member count, for every non-empty space
    P:join-order             STRING counter giving each join its score
    P:agent-index, P:cap:{capability}, P:capabilities   the directory's indexes
                                    (see :mod:`hub.presence.redis_directory`)

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
from redis.asyncio import Redis

from hub.backplane.redis import REDIS_ERRORS, redis_pool, unavailable
from hub.errors import BackplaneUnavailable, SpaceFull
from hub.presence.base import (
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    MembersPage,
    ReapedAgent,
)
from hub.presence.redis_directory import INDEX_LUA, RedisDirectory
from hub.presence.redis_directory import record_from as _record

# KEYS: agent, node-agents of this node. ARGV: agent id, node, conn, info,
# replace flag ('1' or '0'), connection id that may be replaced, prefix.
CLAIM_LUA = (
    INDEX_LUA
    + """
local holder = redis.call('HMGET', KEYS[1], 'node', 'conn', 'info')
if holder[2] and (ARGV[5] ~= '1' or holder[2] ~= ARGV[6]) then
  return {holder[1] or '', holder[2], holder[3] or ''}
end
if holder[2] then unindex(ARGV[7], ARGV[1], holder[3]) end
redis.call('HSET', KEYS[1], 'node', ARGV[2], 'conn', ARGV[3], 'info', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
index(ARGV[7], ARGV[1], ARGV[4])
return false
"""
)

# KEYS: agent, node-agents of this node. ARGV: agent id, conn, prefix.
RELEASE_LUA = (
    INDEX_LUA
    + """
local rec = redis.call('HMGET', KEYS[1], 'conn', 'info')
if rec[1] == ARGV[2] then
  unindex(ARGV[3], ARGV[1], rec[2])
  redis.call('DEL', KEYS[1])
end
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[2], ARGV[1]) end
return 0
"""
)

# KEYS: agent. ARGV: conn, node, info, agent id, prefix.
UPDATE_LUA = (
    INDEX_LUA
    + """
local rec = redis.call('HMGET', KEYS[1], 'conn', 'info')
if rec[1] == ARGV[1] then
  unindex(ARGV[5], ARGV[4], rec[2])
  redis.call('HSET', KEYS[1], 'node', ARGV[2], 'info', ARGV[3])
  index(ARGV[5], ARGV[4], ARGV[3])
end
return 0
"""
)

# KEYS: nodes. ARGV: node id, window (ms). 1 when the node touched its
# registration within the window (Redis time).
NODE_ALIVE_LUA = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now - tonumber(score) > tonumber(ARGV[2]) then return 0 end
return 1
"""

# KEYS: members, member-of, space-sizes, join-order, agent.
# ARGV: agent id, space, capacity. Returns the count, or -1 when full.
JOIN_LUA = """
local conn = redis.call('HGET', KEYS[5], 'conn') or ''
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local n = redis.call('ZCARD', KEYS[1])
  if n >= tonumber(ARGV[3]) then return -1 end
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[4]), ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[2], conn)
local n = redis.call('ZCARD', KEYS[1])
redis.call('HSET', KEYS[3], ARGV[2], n)
return n
"""

# KEYS: members, member-of, space-sizes. ARGV: agent id, space.
LEAVE_LUA = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[2])
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then redis.call('HSET', KEYS[3], ARGV[2], n) else redis.call('HDEL', KEYS[3], ARGV[2]) end
return n
"""

# KEYS: nodes. ARGV: node id. Returns 1 when the registration was missing.
TOUCH_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZADD', KEYS[1], now, ARGV[1])
"""

# KEYS: nodes, node-agents of this node. ARGV: node id.
# With agents still registered, the node is marked long dead instead of
# removed, so the next reaper announces their departures.
LEAVE_CLUSTER_LUA = """
if redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], 0, ARGV[1])
end
return 0
"""

# KEYS: nodes, node-agents of this node, a fresh name for it. ARGV: that name.
# A node restarted under the same id finds its previous incarnation's agents:
# they move to a tombstone node marked long dead, for a reaper to announce.
RETIRE_LUA = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('RENAME', KEYS[2], KEYS[3])
  redis.call('ZADD', KEYS[1], 0, ARGV[1])
end
return 0
"""

# KEYS: agent, node-agents of this node, member-of, space-sizes, join-order.
# ARGV: prefix, agent id, node, conn, info, claim flag, spaces...
# Returns the holder when another connection holds the id (nothing restored).
RESTORE_LUA = (
    INDEX_LUA
    + """
if ARGV[6] == '1' then
  local holder = redis.call('HMGET', KEYS[1], 'node', 'conn', 'info')
  if holder[2] and holder[2] ~= ARGV[4] then
    return {holder[1] or '', holder[2], holder[3] or ''}
  end
  if holder[2] then unindex(ARGV[1], ARGV[2], holder[3]) end
  redis.call('HSET', KEYS[1], 'node', ARGV[3], 'conn', ARGV[4], 'info', ARGV[5])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[4])
  index(ARGV[1], ARGV[2], ARGV[5])
end
local conn = redis.call('HGET', KEYS[1], 'conn') or ''
for i = 7, #ARGV do
  local space = ARGV[i]
  local zkey = ARGV[1] .. ':members:' .. space
  if not redis.call('ZSCORE', zkey, ARGV[2]) then
    redis.call('ZADD', zkey, redis.call('INCR', KEYS[5]), ARGV[2])
  end
  redis.call('HSET', KEYS[3], space, conn)
  redis.call('HSET', KEYS[4], space, redis.call('ZCARD', zkey))
end
return false
"""
)

# KEYS: nodes, space-sizes. ARGV: prefix, dead_after (ms), this node's id.
# For each agent a dead node registered: if the dead connection still holds
# the id, the record and all the agent's memberships go; if the id has moved
# to a new connection since, only memberships joined by the dead connection go.
# Returns {agent, node, conn, info, spaces...} per removed agent.
REAP_LUA = (
    INDEX_LUA
    + """
local p = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
local out = {}
for _, node in ipairs(dead) do
  if node ~= ARGV[3] then
    redis.call('ZREM', KEYS[1], node)
    -- a tombstone (see RETIRE_LUA) stands for the node id before the '~'
    local origin = string.match(node, '^(.*)~%x%x%x%x%x%x%x%x$') or node
    local index = p .. ':node-agents:' .. node
    local held = redis.call('HGETALL', index)
    for i = 1, #held, 2 do
      local aid, conn = held[i], held[i + 1]
      local akey = p .. ':agent:' .. aid
      local rec = redis.call('HMGET', akey, 'node', 'conn', 'info')
      local owned = rec[2] == conn
      local mkey = p .. ':member-of:' .. aid
      local ms = redis.call('HGETALL', mkey)
      local entry = {aid, owned and rec[1] or origin, conn, owned and rec[3] or ''}
      for j = 1, #ms, 2 do
        local space, tag = ms[j], ms[j + 1]
        if owned or tag == conn then
          local zkey = p .. ':members:' .. space
          redis.call('ZREM', zkey, aid)
          redis.call('HDEL', mkey, space)
          local n = redis.call('ZCARD', zkey)
          if n > 0 then
            redis.call('HSET', KEYS[2], space, n)
          else
            redis.call('HDEL', KEYS[2], space)
          end
          entry[#entry + 1] = space
        end
      end
      if owned then
        unindex(p, aid, rec[3])
        redis.call('DEL', akey)
      end
      if owned or #entry > 4 then out[#out + 1] = entry end
    end
    redis.call('DEL', index)
  end
end
return out
"""
)


def _info(record: AgentRecord) -> bytes:
    return orjson.dumps(
        {
            "type": record.type,
            "capabilities": record.capabilities,
            "metadata": record.metadata,
            "connected_at": record.connected_at,
        }
    )


class RedisPresence:
    """Presence shared by every node of a cluster through one Redis."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "agora",
        node_id: str,
        ttl: float = 60.0,
        socket_timeout: float = 3.0,
        connect_timeout: float = 2.0,
        max_connections: int = 32,
    ):
        self.node_id = node_id
        # The liveness window the node promises; reaping uses the caller's
        # ``dead_after``, this is the fallback when that is not positive.
        self.ttl = ttl
        self._p = prefix
        self._closed = False
        self._client = Redis.from_pool(
            redis_pool(
                url,
                socket_timeout=socket_timeout,
                connect_timeout=connect_timeout,
                max_connections=max_connections,
            )
        )
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
        self._nodes = f"{prefix}:nodes"
        self._sizes = f"{prefix}:space-sizes"
        self._order = f"{prefix}:join-order"
        self._my_agents = f"{prefix}:node-agents:{node_id}"
        self._directory = RedisDirectory(self._client, prefix, self._check_open)

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
                [self._nodes, self._my_agents, f"{self._p}:node-agents:{tomb}"],
                [tomb],
            )

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._client.aclose()

    async def __aenter__(self) -> RedisPresence:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise BackplaneUnavailable("presence closed")

    async def _call(self, what: str, script: Any, keys: list[str], args: list[Any]) -> Any:
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        try:
            return await script(keys=keys, args=args)
        except REDIS_ERRORS as exc:
            raise unavailable(what, exc) from exc

    def _agent(self, agent_id: str) -> str:
        return f"{self._p}:agent:{agent_id}"

    def _members(self, space: str) -> str:
        return f"{self._p}:members:{space}"

    def _member_of(self, agent_id: str) -> str:
        return f"{self._p}:member-of:{agent_id}"

    # ── agents ───────────────────────────────────────────────────────────

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        holder = await self._call(
            "claim_agent",
            self._claim,
            [self._agent(record.agent_id), self._my_agents],
            [
                record.agent_id,
                record.node_id,
                record.connection_id,
                _info(record),
                "0" if replace is None else "1",
                replace or "",
                self._p,
            ],
        )
        if not holder:
            return None
        return _record(record.agent_id, *holder)

    async def release_agent(self, agent_id: str, connection_id: str) -> None:
        await self._call(
            "release_agent",
            self._release,
            [self._agent(agent_id), self._my_agents],
            [agent_id, connection_id, self._p],
        )

    async def update_agent(self, record: AgentRecord) -> None:
        await self._call(
            "update_agent",
            self._update,
            [self._agent(record.agent_id)],
            [record.connection_id, record.node_id, _info(record), record.agent_id, self._p],
        )

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        try:
            node, conn, info = await self._client.hmget(
                self._agent(agent_id), ["node", "conn", "info"]
            )
        except REDIS_ERRORS as exc:
            raise unavailable("get_agent", exc) from exc
        if conn is None:
            return None
        return _record(agent_id, node or b"", conn, info)

    # ── membership ───────────────────────────────────────────────────────

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        n = await self._call(
            "join_space",
            self._join,
            [
                self._members(space),
                self._member_of(agent_id),
                self._sizes,
                self._order,
                self._agent(agent_id),
            ],
            [agent_id, space, capacity],
        )
        if n < 0:
            raise SpaceFull(space, capacity)
        return int(n)

    async def leave_space(self, space: str, agent_id: str) -> int:
        n = await self._call(
            "leave_space",
            self._leave,
            [self._members(space), self._member_of(agent_id), self._sizes],
            [agent_id, space],
        )
        return int(n)

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        key = self._members(space)
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                if limit > 0:
                    pipe.zrange(key, 0, limit - 1)
                pipe.zcard(key)
                result = await pipe.execute()
        except REDIS_ERRORS as exc:
            raise unavailable("space_members", exc) from exc
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
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        if not agent_ids:
            return []
        try:
            scores = await self._client.zmscore(self._members(space), list(agent_ids))
        except REDIS_ERRORS as exc:
            raise unavailable("missing_members", exc) from exc
        return [a for a, score in zip(agent_ids, scores, strict=True) if score is None]

    async def space_sizes(self) -> dict[str, int]:
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        try:
            sizes = await self._client.hgetall(self._sizes)
        except REDIS_ERRORS as exc:
            raise unavailable("space_sizes", exc) from exc
        return {k.decode(): int(v) for k, v in sizes.items() if int(v) > 0}

    # ── node liveness ────────────────────────────────────────────────────

    async def touch_node(self) -> bool:
        added = await self._call("touch_node", self._touch, [self._nodes], [self.node_id])
        return bool(added)

    async def node_alive(self, node_id: str, within: float) -> bool:
        alive = await self._call(
            "node_alive",
            self._node_alive,
            [self._nodes],
            [node_id, max(1, round(within * 1000))],
        )
        return bool(alive)

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        if self._closed:
            raise BackplaneUnavailable("presence closed")
        spaces_of: dict[str, list[str]] = {}
        for space, ids in memberships.items():
            for agent_id in ids:
                spaces_of.setdefault(agent_id, []).append(space)
        calls: list[tuple[str, list[str], list[Any]]] = []
        for record in agents:
            aid = record.agent_id
            calls.append(
                (
                    aid,
                    self._restore_keys(aid),
                    [
                        self._p,
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
            calls.append((aid, self._restore_keys(aid), [self._p, aid, "", "", "", "0", *spaces]))
        conflicts: list[AgentRecord] = []
        try:
            for i in range(0, len(calls), 200):
                chunk = calls[i : i + 200]
                async with self._client.pipeline(transaction=False) as pipe:
                    for _, keys, args in chunk:
                        await self._restore(keys=keys, args=args, client=pipe)
                    results = await pipe.execute()
                for (aid, _, _), holder in zip(chunk, results, strict=True):
                    if holder:
                        conflicts.append(_record(aid, *holder))
        except REDIS_ERRORS as exc:
            raise unavailable("restore", exc) from exc
        return conflicts

    def _restore_keys(self, agent_id: str) -> list[str]:
        return [
            self._agent(agent_id),
            self._my_agents,
            self._member_of(agent_id),
            self._sizes,
            self._order,
        ]

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        window = dead_after if dead_after > 0 else self.ttl
        rows = await self._call(
            "reap_dead_nodes",
            self._reap,
            [self._nodes, self._sizes],
            [self._p, max(1, round(window * 1000)), self.node_id],
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
            "leave_cluster", self._leave_cluster, [self._nodes, self._my_agents], [self.node_id]
        )
