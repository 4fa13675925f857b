"""The Redis presence's layout: key names and the Lua scripts.

The keys are those of the layout in :mod:`hub.cluster.presence.redis` (the
directory's indexes: :mod:`hub.cluster.presence.redis_directory`); :class:`PresenceKeys`
names them. Every change that touches more than one key is one script here,
so no reader ever sees half of it. Each script that writes agent records
(claim, update, release, restore, reap) starts with :data:`INDEX_LUA` and
keeps the directory's indexes in step; the scripts that reap and restore
compute per-agent and per-space key names from the prefix themselves, since
those keys are only known inside the script. Times are Redis ``TIME`` (ms),
never a node's clock.
"""

from __future__ import annotations


class PresenceKeys:
    """The names of the presence keys under one prefix."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.nodes = f"{prefix}:nodes"
        self.sizes = f"{prefix}:space-sizes"
        self.order = f"{prefix}:join-order"
        self.agent_index = f"{prefix}:agent-index"
        self.capabilities = f"{prefix}:capabilities"

    def agent(self, agent_id: str) -> str:
        return f"{self.prefix}:agent:{agent_id}"

    def node_agents(self, node_id: str) -> str:
        return f"{self.prefix}:node-agents:{node_id}"

    def reaped(self, node_id: str) -> str:
        """Set when other nodes reaped ``node_id`` and announced its agents gone."""
        return f"{self.prefix}:reaped:{node_id}"

    def members(self, space: str) -> str:
        return f"{self.prefix}:members:{space}"

    def member_of(self, agent_id: str) -> str:
        return f"{self.prefix}:member-of:{agent_id}"

    def cap(self, capability: str) -> str:
        return f"{self.prefix}:cap:{capability}"


# The directory's indexes, prepended to every script that writes agent records.
INDEX_LUA = """
local function caps_of(info)
  if not info or info == '' then return {} end
  local ok, data = pcall(cjson.decode, info)
  if not ok or type(data) ~= 'table' or type(data.capabilities) ~= 'table' then return {} end
  return data.capabilities
end
local function unindex(p, aid, info)
  redis.call('ZREM', p .. ':agent-index', aid)
  for _, cap in ipairs(caps_of(info)) do
    if type(cap) == 'string' then
      local key = p .. ':cap:' .. cap
      redis.call('ZREM', key, aid)
      if redis.call('EXISTS', key) == 0 then redis.call('ZREM', p .. ':capabilities', cap) end
    end
  end
end
local function index(p, aid, info)
  redis.call('ZADD', p .. ':agent-index', 0, aid)
  for _, cap in ipairs(caps_of(info)) do
    if type(cap) == 'string' then
      redis.call('ZADD', p .. ':cap:' .. cap, 0, aid)
      redis.call('ZADD', p .. ':capabilities', 0, cap)
    end
  end
end
"""

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
# A node reaped with agents is marked (P:reaped:NODE, a day): if it was alive
# after all, it learns on waking that its agents were announced gone.
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
    if origin == node and #held > 0 then
      -- a live node reaped by mistake (paused, cut off) learns it on waking
      redis.call('SET', p .. ':reaped:' .. node, '1', 'EX', 86400)
    end
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
