"""The Redis backplane's history: scripts, epochs and reads.

Keys of a space (``P`` is the prefix)::

    P:seq:{space}      STRING  last seq                       EXPIRE seq_ttl
    P:epoch:{space}    STRING  history epoch                  EXPIRE seq_ttl
    P:history:{space}  STREAM  the last history_size messages EXPIRE history_ttl
    P:once:{space}:{h} STRING  an idempotency key's receipt   EXPIRE history_ttl

A history entry's id is ``{seq}-0``, so reads by seq are plain XRANGEs; its
field ``m`` is the message as published on the space channel (header, then
frame), and stream frames also carry ``s`` (stream id) and ``o`` (1 first
delta, 2 delta, 3 done, 4 cancel) so a script can tell which streams complete
without parsing messages.

**Epoch.** Every script that reads or writes a space's position runs
:data:`POSITION_FN` first: a missing epoch is created from the caller's
random candidate, and a missing seq is restored from the newest history
entry — or, with no history either, restarts at 0 under a *new* epoch. So a
flushed or restarted-empty Redis (or evicted keys) is detected by what is
missing, never assumed, and a (space, epoch) pair never reuses a seq. A node
that raises a seq after a reconnect (Redis came back behind) also drops the
epoch (see ``RAISE_SEQ_LUA`` in :mod:`hub.backplane.redis`).
"""

from __future__ import annotations

import secrets
from typing import Any

from hub.backplane.base import Envelope, History, Position, StreamOp, complete_streams

_OPS = tuple(StreamOp)

# The seq key and the epoch live this long without a publish (the history
# itself only history_ttl): an idle client can still resume an idle space.
SEQ_TTL = 86400

POSITION_FN = """
local function position(seq_key, history_key, epoch_key, candidate, seq_ttl)
  local epoch = redis.call('GET', epoch_key)
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
    redis.call('SET', epoch_key, epoch, 'EX', seq_ttl)
  end
  return epoch, tonumber(seq)
end
"""

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
if mode == 'after' then
  entries = redis.call('XRANGE', KEYS[2], (bound + 1) .. '-0', '+', 'COUNT', limit)
elseif mode == 'before' then
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


def candidate_epoch() -> str:
    return secrets.token_hex(6)


def parse_message(space: str, data: bytes) -> Envelope:
    """A space-channel message (header, newline, routing, frame) as an Envelope."""
    i = data.index(b"\n")
    seq_b, op_b, _at, xlen_b, slen_b, tlen_b = data[:i].split(b" ")
    i += 1
    xlen, slen, tlen = int(xlen_b), int(slen_b), int(tlen_b)
    j = i + xlen
    k = j + slen
    m = k + tlen if tlen > 0 else k
    return Envelope(
        space,
        data[m:],
        int(seq_b) if seq_b else None,
        data[i:j].decode() if xlen else None,
        data[j:k].decode() if slen else None,
        _OPS[int(op_b)],
        None if tlen < 0 else tuple(data[k:m].decode().split()),
    )


def position_from(reply: Any) -> Position:
    epoch, seq = reply
    return Position(_text(epoch), int(seq))


def history_from(space: str, reply: Any, newest_first: bool, streams: bool) -> History:
    epoch, seq, oldest, msgs, scanned = reply
    events = [parse_message(space, m) for m in msgs]
    if newest_first:
        events.reverse()
    if scanned is not None:
        complete = frozenset(_text(s) for s in scanned)
    else:  # the page holds the whole window (or no scan was asked for)
        complete = complete_streams(events) if streams else frozenset()
    return History(
        _text(epoch),
        int(seq),
        events,
        int(oldest) if oldest is not None else None,
        complete,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
