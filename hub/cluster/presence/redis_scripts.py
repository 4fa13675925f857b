"""The Redis presence's layout: key names, hash slots, the Lua scripts.

Layout (``P`` is the key prefix, default ``agora``; on a Redis Cluster the
part in braces is the key's hash tag, on one Redis or Sentinel the same
names carry no braces and no shard part — exactly the keys of earlier
versions there)::

    agent's slot   P:agent:{agent}          HASH  node, conn, info (JSON: type,
                                                  capabilities, metadata, connected_at)
                   P:member-of:{agent}      HASH  space -> conn that joined it (an intent:
                                                  written before the membership)
    space's slot   P:members:{space}        ZSET  agent -> join number (oldest first)
                   P:member-conns:{space}   HASH  agent -> conn holding the membership
    shard b        P:node-agents:{b}:NODE   HASH  agent -> conn, NODE's agents (by agent)
                   P:departing:{b}:NODE     SET   "space agent": leaves NODE holds unannounced
                                                  (its coalescing window; b: NODE's shard)
                   P:agent-index:{b}        ZSET  agent ids (score 0): the directory
                   P:space-sizes:{b}        HASH  space -> 1, spaces that may be non-empty
    capability's   P:cap:{capability}       ZSET  agent ids declaring it (score 0)
    liveness       P:nodes:{P}              ZSET  node -> last touch (Redis TIME, ms)
                   P:reaped:{P}:NODE        STRING NODE was reaped (a day)
                   P:capabilities:{P}       ZSET  every declared capability (score 0)

A space's members keys share the slot of its seq, history and channel
(``P:seq:{space}``, :mod:`hub.cluster.backplane.redis_scripts`): every key of
one space in one slot (contract §16). An agent's record and its memberships'
intents share the agent's slot. Shards ``b`` are the :data:`SHARDS` bands of
the 16,384 slots: shard ``b``'s tag (:func:`shard_tag`) hashes into band
``b``, and an agent or space belongs to the band of its own slot — so the
per-node, directory and space indexes spread over the masters as the agents
and spaces do. Liveness (one beat per node per interval) and the capability
names (written when a capability first appears or last disappears) are
bounded by the number of nodes and of capabilities, not by the traffic, and
stay in one slot.

No script touches two slots (a Redis Cluster refuses that): a change across
them is a sequence of scripts, ordered so that a crash between two leaves
an index that says *more* than is true, never less — what a reader or the
reaper then checks (see :mod:`hub.cluster.presence.redis`). Times are Redis
``TIME`` (ms), never a node's clock.
"""

from __future__ import annotations

import functools
import re

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

#: Shards of the per-node, directory and space indexes on a Redis Cluster.
SHARDS = 16
#: A tombstone's name: the node id it stands for, ``~`` and 8 hex digits.
TOMB = re.compile(r"^(.*)~[0-9a-f]{8}$")


def origin(node: str) -> str:
    """The node id a tombstone stands for (itself when it is not one)."""
    match = TOMB.match(node)
    return match.group(1) if match else node


@functools.cache
def shard_tag(shard: int) -> str:
    """A hash tag whose slot is in band ``shard`` of :data:`SHARDS` (the same
    on every node: the first of ``s{shard}.{n}`` that hashes there)."""
    band = REDIS_CLUSTER_HASH_SLOTS // SHARDS
    n = 0
    while key_slot(f"s{shard}.{n}".encode()) // band != shard:
        n += 1
    return f"s{shard}.{n}"


class PresenceKeys:
    """The names of the presence keys under one prefix, for one mode."""

    def __init__(self, prefix: str, clustered: bool = False):
        self.prefix = prefix
        self.clustered = clustered
        self.shards = SHARDS if clustered else 1
        live = f":{{{prefix}}}" if clustered else ""
        self.nodes = f"{prefix}:nodes{live}"
        self.capabilities = f"{prefix}:capabilities{live}"
        self._reaped = f"{prefix}:reaped{live}"

    def _tag(self, name: str) -> str:
        return f"{{{name}}}" if self.clustered else name

    def shard_of(self, name: str) -> int:
        """The shard of an agent id or space name: the band of its own slot."""
        if not self.clustered:
            return 0
        return key_slot(name.encode()) * SHARDS // REDIS_CLUSTER_HASH_SLOTS

    def _sharded(self, kind: str, shard: int, rest: str = "") -> str:
        if not self.clustered:
            return f"{self.prefix}:{kind}{rest}"
        return f"{self.prefix}:{kind}:{{{shard_tag(shard)}}}{rest}"

    # ── the agent's slot ────────────────────────────────────────────────

    def agent(self, agent_id: str) -> str:
        return f"{self.prefix}:agent:{self._tag(agent_id)}"

    def member_of(self, agent_id: str) -> str:
        return f"{self.prefix}:member-of:{self._tag(agent_id)}"

    # ── the space's slot ────────────────────────────────────────────────

    def members(self, space: str) -> str:
        return f"{self.prefix}:members:{self._tag(space)}"

    def member_conns(self, space: str) -> str:
        return f"{self.prefix}:member-conns:{self._tag(space)}"

    # ── shards ──────────────────────────────────────────────────────────

    def node_agents(self, node_id: str, shard: int) -> str:
        return self._sharded("node-agents", shard, f":{node_id}")

    def departing(self, node_id: str) -> str:
        """The leaves ``node_id`` holds unannounced, in the shard of the node
        id (a tombstone's: of the node it stands for, so it renames there)."""
        return self._sharded("departing", self.shard_of(origin(node_id)), f":{node_id}")

    def agent_index(self, shard: int) -> str:
        return self._sharded("agent-index", shard)

    def space_index(self, shard: int) -> str:
        return self._sharded("space-sizes", shard)

    def cap(self, capability: str) -> str:
        return f"{self.prefix}:cap:{self._tag(capability)}"

    # ── liveness ────────────────────────────────────────────────────────

    def reaped(self, node_id: str) -> str:
        """Set when other nodes reaped ``node_id`` and announced its agents gone."""
        return f"{self._reaped}:{node_id}"


# ── the agent's slot ──────────────────────────────────────────────────────

# KEYS: agent. ARGV: node, conn, info, replace flag ('1' or '0'), the
# connection id that may be replaced. {1, node, conn, info} of the holder
# when it keeps the id; else {0, info of the record replaced or ''}.
CLAIM_LUA = """
local holder = redis.call('HMGET', KEYS[1], 'node', 'conn', 'info')
if holder[2] and (ARGV[4] ~= '1' or holder[2] ~= ARGV[5]) then
  return {1, holder[1] or '', holder[2], holder[3] or ''}
end
redis.call('HSET', KEYS[1], 'node', ARGV[1], 'conn', ARGV[2], 'info', ARGV[3])
return {0, holder[3] or ''}
"""

# KEYS: agent. ARGV: conn. The info of the record removed, or false.
RELEASE_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'conn', 'info')
if rec[1] ~= ARGV[1] then return false end
redis.call('DEL', KEYS[1])
return rec[2] or ''
"""

# KEYS: agent. ARGV: conn, node, info. The info replaced, or false.
UPDATE_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'conn', 'info')
if rec[1] ~= ARGV[1] then return false end
redis.call('HSET', KEYS[1], 'node', ARGV[2], 'info', ARGV[3])
return rec[2] or ''
"""

# KEYS: agent, member-of. ARGV: space. Records the intent to join with the
# holder's connection id ('' without a holder) and returns it.
INTEND_LUA = """
local conn = redis.call('HGET', KEYS[1], 'conn') or ''
redis.call('HSET', KEYS[2], ARGV[1], conn)
return conn
"""

# KEYS: member-of. ARGV: space, conn ('*': whoever). Drops the entry if conn's.
FORGET_LUA = """
if ARGV[2] == '*' or redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""

# KEYS: agent, member-of. ARGV: conn (of a dead node). {owned, node, info,
# spaces...}: the spaces to take the agent out of (every one if conn still
# holds the id, else those conn joined).
REAP_READ_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'node', 'conn', 'info')
local owned = rec[2] == ARGV[1]
local out = {owned and 1 or 0, rec[1] or '', rec[3] or ''}
local ms = redis.call('HGETALL', KEYS[2])
for j = 1, #ms, 2 do
  if owned or ms[j + 1] == ARGV[1] then out[#out + 1] = ms[j] end
end
return out
"""

# KEYS: agent, member-of. ARGV: conn, spaces... Drops conn's intents for the
# spaces and, if conn still holds the id, the record: {1, info} or {0}.
REAP_DONE_LUA = """
local rec = redis.call('HMGET', KEYS[1], 'conn', 'info')
local owned = rec[1] == ARGV[1]
for i = 2, #ARGV do
  local tag = redis.call('HGET', KEYS[2], ARGV[i])
  if owned or tag == ARGV[1] then redis.call('HDEL', KEYS[2], ARGV[i]) end
end
if not owned then return {0} end
redis.call('DEL', KEYS[1])
return {1, rec[2] or ''}
"""

# KEYS: agent, member-of. ARGV: node, conn, info, claim flag, spaces...
# With the flag, the record is re-asserted unless another connection holds
# the id: then {1, node, conn, info} of the holder and nothing restored.
# Else the intents for the spaces, and {0, the holder's conn or ''}.
RESTORE_AGENT_LUA = """
if ARGV[4] == '1' then
  local holder = redis.call('HMGET', KEYS[1], 'node', 'conn', 'info')
  if holder[2] and holder[2] ~= ARGV[2] then
    return {1, holder[1] or '', holder[2], holder[3] or ''}
  end
  redis.call('HSET', KEYS[1], 'node', ARGV[1], 'conn', ARGV[2], 'info', ARGV[3])
end
local conn = redis.call('HGET', KEYS[1], 'conn') or ''
for i = 5, #ARGV do redis.call('HSET', KEYS[2], ARGV[i], conn) end
return {0, conn}
"""

# ── the space's slot ──────────────────────────────────────────────────────
# A join number is one more than the newest member's: numbers only grow
# while the space has members, which is all paging by join order needs.

_NEXT_NUMBER = """
local function next_number(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return (tonumber(last[2]) or 0) + 1
end
"""

# KEYS: members, member-conns. ARGV: agent, capacity, conn.
# {count, 1 if this join made the space non-empty}, or {-1} when full.
JOIN_LUA = (
    _NEXT_NUMBER
    + """
local fresh = 0
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local n = redis.call('ZCARD', KEYS[1])
  if n >= tonumber(ARGV[2]) then return {-1} end
  redis.call('ZADD', KEYS[1], next_number(KEYS[1]), ARGV[1])
  if n == 0 then fresh = 1 end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return {redis.call('ZCARD', KEYS[1]), fresh}
"""
)

# KEYS: members, member-conns. ARGV: agent. {count, removed, conn}: the
# connection that held the membership ('*' unknown: written by an older
# version), '' when nothing was removed.
LEAVE_LUA = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {redis.call('ZCARD', KEYS[1]), 0, ''}
end
local conn = redis.call('HGET', KEYS[2], ARGV[1]) or '*'
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {redis.call('ZCARD', KEYS[1]), 1, conn}
"""

# KEYS: members, member-conns. ARGV: agent, conn, owned flag. Removes the
# membership if conn holds it (or, written by an older version without a
# holder, if conn held the agent id): {count, removed}.
REAP_MEMBER_LUA = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {redis.call('ZCARD', KEYS[1]), 0}
end
local tag = redis.call('HGET', KEYS[2], ARGV[1])
if tag == ARGV[2] or (not tag and ARGV[3] == '1') then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return {redis.call('ZCARD', KEYS[1]), 1}
end
return {redis.call('ZCARD', KEYS[1]), 0}
"""

# KEYS: members, member-conns. ARGV: agent, conn. A membership put back after
# a data loss (whatever the capacity): the count.
RESTORE_MEMBER_LUA = (
    _NEXT_NUMBER
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], next_number(KEYS[1]), ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return redis.call('ZCARD', KEYS[1])
"""
)

# ── shards and capabilities ───────────────────────────────────────────────

# KEYS: a hash. ARGV: field, value. Deletes the field if it holds the value.
DELETE_IF_LUA = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""

# KEYS: cap. ARGV: agent. 1 when the capability's set is new.
CAP_ADD_LUA = """
local fresh = redis.call('EXISTS', KEYS[1]) == 0
redis.call('ZADD', KEYS[1], 0, ARGV[1])
return fresh and 1 or 0
"""

# KEYS: cap. ARGV: agent. 1 when the capability's set is gone.
CAP_REMOVE_LUA = """
redis.call('ZREM', KEYS[1], ARGV[1])
return redis.call('EXISTS', KEYS[1]) == 0 and 1 or 0
"""

# ── liveness ──────────────────────────────────────────────────────────────

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: nodes. ARGV: node id, window (ms). 1 when the node touched its
# registration within the window (Redis time).
NODE_ALIVE_LUA = (
    _NOW
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
if now - tonumber(score) > tonumber(ARGV[2]) then return 0 end
return 1
"""
)

# KEYS: nodes. ARGV: node id. Returns 1 when the registration was missing.
TOUCH_LUA = _NOW + "return redis.call('ZADD', KEYS[1], now, ARGV[1])\n"

# KEYS: nodes. ARGV: dead_after (ms), this node's id. The nodes silent for
# dead_after, each now leased to the caller: touched as if alive, so that
# nobody else reaps it for dead_after — if the caller dies while reaping, the
# next reaper takes the node over.
LEASE_LUA = (
    _NOW
    + """
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])))
local out = {}
for _, node in ipairs(dead) do
  if node ~= ARGV[2] then
    redis.call('ZADD', KEYS[1], now, node)
    out[#out + 1] = node
  end
end
return out
"""
)

# KEYS: nodes. ARGV: node id, '1' when it still has agents. Gone from the
# registry — or, with agents, marked long dead for the next reaper.
LEAVE_CLUSTER_LUA = """
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[1], 0, ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""
