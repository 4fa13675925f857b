"""The Redis backplane's layout: key names, the space-channel message, the Lua scripts.

Layout (``P`` is the key prefix, default ``agora``)::

    P:seq:{space}       STRING  the space's last seq (INCR)          EXPIRE seq_ttl
    P:epoch:{space}     STRING  the space's history epoch            EXPIRE seq_ttl
    P:history:{space}   STREAM  the last history_size messages       EXPIRE history_ttl
    P:once:{space}:{h}  STRING  an idempotency key's receipt         EXPIRE history_ttl
    P:space:{space}     channel the space's messages
    P:node:{node_id}    channel messages for one node (send_to_node)

A message on a space channel is a short text header, a newline, the excluded
agent id, the stream id and the addressed agent ids (space-separated; lengths
given in the header), then the frame::

    {seq} {op} {published_at} {len(exclude)} {len(stream)} {len(to)}\\n{exclude}{stream}{to}{frame}

``seq`` is empty for unsequenced messages; ``len(to)`` is -1 when the message
is not addressed. The receiver finds the newline, splits six numbers and
slices: the frame is never parsed here. :func:`routing` writes what follows
the seq up to the frame, :func:`parse_message` reads a whole message.

A history entry's id is ``{seq}-0``, so reads by seq are plain XRANGEs; its
field ``m`` is the message as published on the space channel, and stream
frames also carry ``s`` (stream id) and ``o`` (1 first delta, 2 delta, 3 done,
4 cancel) so a script can tell which streams complete without parsing messages.

**Epoch.** Every script that reads or writes a space's position runs
:data:`POSITION_FN` first: a missing epoch is created from the caller's
random candidate, and a missing seq is restored from the newest history
entry — or, with no history either, restarts at 0 under a *new* epoch. So a
flushed or restarted-empty Redis (or evicted keys) is detected by what is
missing, never assumed, and a (space, epoch) pair never reuses a seq. A node
that raises a seq after a reconnect (Redis came back behind) also drops the
epoch (:data:`RAISE_SEQ_LUA`).
"""

from __future__ import annotations

import itertools
import secrets
import time

from hub.cluster.backplane.base import Delivery, Draft, StreamOp
from hub.cluster.backplane.idempotency import redis_key

_OPS = tuple(StreamOp)

# The seq key and the epoch live this long without a publish (the history
# itself only history_ttl): an idle client can still resume an idle space.
SEQ_TTL = 86400


class SpaceKeys:
    """The names of a space's keys and channels under one prefix.

    On a Redis Cluster (``clustered``) the space's name is a hash tag —
    ``P:seq:{space}``, ``P:history:{space}``, … — so every key and the channel
    of one space share one hash slot (each script touches one slot, and the
    sharded channel lives on the master that holds the keys); a node's channel
    is tagged by the node id. On one Redis the names carry no braces."""

    def __init__(self, prefix: str, clustered: bool = False):
        self.prefix = prefix
        self.clustered = clustered

    def _tag(self, name: str) -> str:
        return f"{{{name}}}" if self.clustered else name

    def seq(self, space: str) -> str:
        return f"{self.prefix}:seq:{self._tag(space)}"

    def history(self, space: str) -> str:
        return f"{self.prefix}:history:{self._tag(space)}"

    def epoch(self, space: str) -> str:
        return f"{self.prefix}:epoch:{self._tag(space)}"

    def position(self, space: str) -> list[str]:
        """The KEYS of :data:`POSITION_FN`: seq, history, epoch."""
        return [self.seq(space), self.history(space), self.epoch(space)]

    def once(self, space: str, key: str) -> str:
        return redis_key(self.prefix, self._tag(space), key)

    def channel(self, space: str) -> bytes:
        return f"{self.prefix}:space:{self._tag(space)}".encode()

    def node_channel(self, node_id: str) -> str:
        return f"{self.prefix}:node:{self._tag(node_id)}"


class EpochCandidates:
    """The candidate epochs a node passes to the scripts: unique across nodes
    (a random prefix) and across time (a counter)."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


def routing(message: Draft | Delivery) -> bytes:
    """The part of a channel message between its seq and its frame."""
    exclude = message.exclude.encode() if message.exclude else b""
    stream = message.stream.encode() if message.stream else b""
    to = " ".join(message.to).encode() if message.to is not None else b""
    return b" %d %.6f %d %d %d\n%s%s%s" % (
        message.op,
        time.time(),
        len(exclude),
        len(stream),
        len(to) if message.to is not None else -1,
        exclude,
        stream,
        to,
    )


def parse_message(space: str, data: bytes) -> tuple[Delivery, float]:
    """A space-channel message as an Delivery, and when it was published."""
    i = data.index(b"\n")
    seq_b, op_b, at_b, xlen_b, slen_b, tlen_b = data[:i].split(b" ")
    i += 1
    xlen = int(xlen_b)
    slen = int(slen_b)
    tlen = int(tlen_b)
    j = i + xlen
    k = j + slen
    m = k + tlen if tlen > 0 else k
    message = Delivery(
        space,
        data[m:],
        int(seq_b) if seq_b else None,
        data[i:j].decode() if xlen else None,
        data[j:k].decode() if slen else None,
        _OPS[int(op_b)],
        None if tlen < 0 else tuple(data[k:m].decode().split()),
    )
    return message, float(at_b)


# Stream op codes in a history entry: StreamOp, with the end split in two.
_DONE_CODE = b"3"
_CANCEL_CODE = b"4"
_CANCEL_HEAD = b'{"type":"space.event.cancel"'


def stream_code(draft: Draft) -> bytes:
    """The ``o`` field of a history entry (empty when not a stream frame)."""
    code = b"%d" % draft.op if draft.stream is not None else b""
    if code == _DONE_CODE and draft.head.startswith(_CANCEL_HEAD):
        code = _CANCEL_CODE
    return code


POSITION_FN = """
local function position(seq_key, history_key, epoch_key, candidate, seq_ttl)
  local epoch = redis.call('GET', epoch_key)
  if epoch and STAMP and string.sub(epoch, -#STAMP - 1) ~= '.' .. STAMP then
    epoch = false  -- written under another master: history may have been lost
  end
  local seq = redis.call('GET', seq_key)
  if not seq then
    local last = redis.call('XREVRANGE', history_key, '+', '-', 'COUNT', 1)
    if last[1] then
      seq = string.match(last[1][1], '^%d+')
    else
      seq = '0'
      epoch = false
    end
    redis.call('SET', seq_key, seq, 'EX', seq_ttl)
  end
  if not epoch then
    epoch = candidate
    if STAMP then epoch = candidate .. '.' .. STAMP end
    redis.call('SET', epoch_key, epoch, 'EX', seq_ttl)
  end
  return epoch, tonumber(seq)
end
"""

# KEYS: seq, history, epoch[, once]. ARGV: head, tail, channel, header rest,
# history_size, history_ttl, seq_ttl, candidate epoch, stream id, stream op
# code[, receipt, settle]. A known idempotency key returns its receipt (a
# string) and publishes nothing; otherwise the seq (an integer). With settle
# "1" the key is not checked, only its receipt rewritten with this seq.
PUBLISH_LUA = (
    POSITION_FN
    + """
if KEYS[4] and ARGV[12] ~= '1' then
  local receipt = redis.call('GET', KEYS[4])
  if receipt then return receipt end
end
position(KEYS[1], KEYS[2], KEYS[3], ARGV[8], ARGV[7])
local seq = redis.call('INCR', KEYS[1])
local msg = seq .. ARGV[4] .. ARGV[1] .. seq .. ARGV[2]
local ttl = tonumber(ARGV[6])
if tonumber(ARGV[5]) > 0 then
  local id = seq .. '-0'
  if ARGV[9] ~= '' then
    redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], id, 'm', msg, 's', ARGV[9], 'o', ARGV[10])
  else
    redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[5], id, 'm', msg)
  end
  redis.call('EXPIRE', KEYS[2], ttl)
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('EXPIRE', KEYS[3], ARGV[7])
redis.call(PUBLISH_COMMAND, ARGV[3], msg)
if KEYS[4] then redis.call('SET', KEYS[4], seq .. ' ' .. ARGV[11], 'EX', ttl) end
return seq
"""
)

# KEYS: seq, history and epoch key of each space, in threes. ARGV[1]: ttl,
# ARGV[2]: candidate epoch, ARGV[i + 2]: the floor for the i-th space.
# Raising a seq means Redis came back behind what was delivered: its history
# may have lost messages, so the epoch is replaced. A missing seq is first
# restored from the history, as in every script: raised from 0 instead it
# could stay below the newest entry, and every publish would fail until it
# passed it. Returns each space's epoch afterwards.
RAISE_SEQ_LUA = (
    POSITION_FN
    + """
local ttl = ARGV[1]
local epochs = {}
for i = 1, #KEYS / 3 do
  local key, epoch_key = KEYS[3 * i - 2], KEYS[3 * i]
  local floor = tonumber(ARGV[i + 2])
  local epoch, cur = position(key, KEYS[3 * i - 1], epoch_key, ARGV[2] .. 'a' .. i, ttl)
  if cur < floor then
    redis.call('SET', key, floor, 'EX', ttl)
    redis.call('DEL', epoch_key)
    epoch = position(key, KEYS[3 * i - 1], epoch_key, ARGV[2] .. 'b' .. i, ttl)
  end
  epochs[i] = epoch
end
return epochs
"""
)

# KEYS: seq, history, epoch. ARGV: candidate epoch, seq_ttl.
POSITION_LUA = (
    POSITION_FN
    + """
local epoch, seq = position(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
return {epoch, seq}
"""
)

# KEYS: seq, history, epoch. ARGV: candidate epoch, seq_ttl, mode (after |
# before | newest), bound, limit, scan ("1": find the complete streams of
# (bound, seq] when they are not all in the page returned).
# Returns {epoch, seq, oldest seq or nil, {msg...}, {stream...} or nil}.
HISTORY_LUA = (
    POSITION_FN
    + """
local epoch, seq = position(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2])
local mode, bound, limit = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local entries = {}
-- Nothing lies past seq, so a bound beyond it reads nothing (after) or from
-- the newest (before); it is never written into a stream id, where Lua would
-- print a number from 1e14 up in exponent form.
if mode == 'after' then
  if bound < seq then
    entries = redis.call('XRANGE', KEYS[2], (bound + 1) .. '-0', '+', 'COUNT', limit)
  end
elseif mode == 'before' then
  if bound > seq + 1 then bound = seq + 1 end
  if bound > 1 then
    entries = redis.call('XREVRANGE', KEYS[2], (bound - 1) .. '-0', '-', 'COUNT', limit)
  end
else
  entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', limit)
end
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
local oldest = false
if first[1] then oldest = tonumber(string.match(first[1][1], '^%d+')) end
local msgs = {}
for i, entry in ipairs(entries) do msgs[i] = entry[2][2] end
local complete = false
if ARGV[6] == '1' and seq - bound > #entries then
  complete = {}
  local opened = {}
  for _, entry in ipairs(redis.call('XRANGE', KEYS[2], (bound + 1) .. '-0', seq .. '-0')) do
    local f = entry[2]
    if f[3] then
      if f[6] == '1' then opened[f[4]] = true
      elseif f[6] == '3' and opened[f[4]] then complete[#complete + 1] = f[4] end
    end
  end
end
return {epoch, seq, oldest, msgs, complete}
"""
)


class Scripts:
    """The scripts' text for one mode of Redis.

    On a cluster a space's messages go out with ``SPUBLISH`` (sharded pub/sub:
    only the master holding the space's slot carries them). Where a replica
    may be promoted (Sentinel, Cluster), each script reads the master's
    replication id (``INFO replication``, a few microseconds) and an epoch
    carries its first twelve hex digits: a promoted replica has a new
    replication id, so the first script to touch a space there replaces its
    epoch — what the old master acknowledged but had not yet replicated may
    be gone, and resumes across the failover say ``recovered: false``.
    """

    def __init__(self, *, clustered: bool, failover: bool):
        command = "SPUBLISH" if clustered else "PUBLISH"
        stamp = (
            "string.sub(string.match(redis.call('INFO', 'replication'),"
            " 'master_replid:(%x+)') or '', 1, 12)"
            if failover
            else "false"
        )
        head = f"local PUBLISH_COMMAND = '{command}'\nlocal STAMP = {stamp}\n"
        self.publish = head + PUBLISH_LUA
        self.raise_seq = head + RAISE_SEQ_LUA
        self.position = head + POSITION_LUA
        self.history = head + HISTORY_LUA
