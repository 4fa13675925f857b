"""Redis presence: the indexes — the agent directory, the capabilities, the
non-empty spaces — and the paged reads that use them.

Keys (:mod:`hub.cluster.presence.redis_scripts`): ``P:agent-index:{b}`` (the
agent ids of shard ``b``, score 0: lexical order), ``P:cap:{capability}``,
``P:capabilities:{P}`` (every declared capability, for prefix filters),
``P:space-sizes:{b}`` (the spaces of shard ``b`` that may have members) and
the spaces' ``P:members:{space}``.

The indexes live in other slots than the records they index, so they are
kept in step by separate commands, ordered to fail safe: an entry is added
*before* the record it indexes is written, and removed *after* the record
is gone, then checked against the record again (re-added if the record came
back meanwhile). Whatever fails in between leaves an index that lists too
much — never too little — and every read checks what it lists against the
records themselves: an agent without a record, or without the capability,
is not listed; a space is listed with its members' exact count, or not at
all when it has none.

Every query is a bounded range read per shard — ``ZRANGEBYSCORE`` /
``ZRANGEBYLEX`` with ``LIMIT`` from the cursor, the shards' pages merged —
then one pipelined ``HMGET`` per listed agent: a page costs the same whatever
the number of agents or members.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from hub.cluster.presence.base import (
    MAX_PREFIX_CAPABILITIES,
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    InvalidQuery,
    MembersPage,
)
from hub.cluster.presence.redis_scripts import (
    CAP_ADD_LUA,
    CAP_REMOVE_LUA,
    PresenceKeys,
)
from hub.cluster.redis_store import Call, as_unavailable, run_all
from protocol.names import is_valid_agent_id


def record_from(agent_id: str, node: bytes, conn: bytes, info: bytes | None) -> AgentRecord:
    """An agent record from its hash fields (``info`` is the JSON of the details)."""
    data = _details(info)
    return AgentRecord(
        agent_id,
        node.decode(),
        conn.decode(),
        data.get("type"),
        tuple(data.get("capabilities") or ()),
        data.get("metadata") or {},
        data.get("connected_at") or 0,
    )


def info_of(record: AgentRecord) -> bytes:
    """The JSON of a record's details, as its ``info`` field stores them."""
    return orjson.dumps(
        {
            "type": record.type,
            "capabilities": record.capabilities,
            "metadata": record.metadata,
            "connected_at": record.connected_at,
        }
    )


def capabilities_of(info: bytes | str | None) -> set[str]:
    """The capabilities in a record's ``info`` (its JSON; nothing if unreadable)."""
    caps = _details(info).get("capabilities")
    if not isinstance(caps, list):
        return set()
    return {c for c in caps if isinstance(c, str)}


def _details(info: bytes | str | None) -> dict[str, Any]:
    if not info:
        return {}
    with contextlib.suppress(orjson.JSONDecodeError):
        data = orjson.loads(info)
        if isinstance(data, dict):
            return data
    return {}


class RedisDirectory:
    """The indexes of :class:`~hub.cluster.presence.redis.RedisPresence`: kept
    in step by it, read for paged queries."""

    def __init__(self, client: Any, keys: PresenceKeys, check_open: Callable[[str], None]):
        self._client = client
        self._keys = keys
        self._check_open = check_open
        self._cap_add = client.register_script(CAP_ADD_LUA)
        self._cap_remove = client.register_script(CAP_REMOVE_LUA)

    async def _run(self, what: str, calls: list[Call]) -> list[Any]:
        """The calls' results; the first failure is raised (unavailable)."""
        if not calls:
            return []
        self._check_open(what)
        return await run_all(self._client, what, calls)

    # ── agents and capabilities ─────────────────────────────────────────

    async def index(
        self, entries: Iterable[Entry], *, listed: bool, along: Sequence[Call] = ()
    ) -> None:
        """Add each agent (``listed``: to the directory itself) and its
        capabilities; ``along``: the caller's calls, sent in the same pipeline."""
        keys = self._keys
        entries = [(aid, sorted(set(caps))) for aid, caps in entries]
        pairs = [(aid, c) for aid, caps in entries for c in caps]
        calls: list[Call] = [(self._cap_add, [keys.cap(c)], [aid]) for aid, c in pairs]
        if listed:
            calls += [
                (None, "ZADD", [keys.agent_index(keys.shard_of(a)), 0, a]) for a, _ in entries
            ]
        fresh = await self._run("index agent", [*calls, *along])
        new = sorted({c for (_, c), f in zip(pairs, fresh, strict=False) if f == 1})
        await self._run("index agent", [(None, "ZADD", [keys.capabilities, 0, c]) for c in new])

    async def unindex(
        self, entries: Iterable[Entry], *, listed: bool, along: Sequence[Call] = ()
    ) -> None:
        """Remove each agent (``listed``: from the directory itself) and the
        capabilities, then put back what an agent's record (if it came back
        meanwhile) still declares; ``along``: the caller's calls, sent with the
        removals."""
        keys = self._keys
        entries = [(aid, sorted(set(caps))) for aid, caps in entries]
        pairs = [(aid, c) for aid, caps in entries for c in caps]
        if not pairs and not listed:
            await self._run("unindex agent", list(along))
            return
        calls: list[Call] = [(self._cap_remove, [keys.cap(c)], [aid]) for aid, c in pairs]
        if listed:
            calls += [(None, "ZREM", [keys.agent_index(keys.shard_of(a)), a]) for a, _ in entries]
        gone = await self._run("unindex agent", [*calls, *along])
        empty = sorted({c for (_, c), g in zip(pairs, gone, strict=False) if g == 1})
        await self._run("unindex agent", [(None, "ZREM", [keys.capabilities, c]) for c in empty])
        # The checks, after the removals: a record or a set written meanwhile
        # is indexed again.
        checks: list[Call] = [(None, "EXISTS", [keys.cap(c)]) for c in empty]
        checks += [(None, "HMGET", [keys.agent(a), "conn", "info"]) for a, _ in entries]
        found = await self._run("unindex agent", checks)
        back = [c for c, n in zip(empty, found, strict=False) if n]
        await self._run("unindex agent", [(None, "ZADD", [keys.capabilities, 0, c]) for c in back])
        again = [
            (aid, capabilities_of(info) & set(caps))
            for (aid, caps), (conn, info) in zip(entries, found[len(empty) :], strict=True)
            if conn is not None
        ]
        if again:
            await self.index(again, listed=listed)

    # ── spaces ──────────────────────────────────────────────────────────

    async def space_listed(self, spaces: Iterable[str]) -> None:
        """These spaces have members (idempotent)."""
        keys = self._keys
        calls: list[Call] = [
            (None, "HSET", [keys.space_index(keys.shard_of(s)), s, 1]) for s in set(spaces)
        ]
        await self._run("index space", calls)

    async def space_emptied(self, spaces: Iterable[str]) -> None:
        """These spaces were left empty: out of the index, unless a join came
        in meanwhile."""
        keys = self._keys
        names = sorted(set(spaces))
        await self._run(
            "index space",
            [(None, "HDEL", [keys.space_index(keys.shard_of(s)), s]) for s in names],
        )
        counts = await self._run("index space", [(None, "ZCARD", [keys.members(s)]) for s in names])
        await self.space_listed(s for s, n in zip(names, counts, strict=True) if n)

    async def space_sizes(self) -> dict[str, int]:
        """Every space with members and its exact count (the index's entries
        checked against the spaces' members)."""
        keys = self._keys
        shards = await self._run(
            "space_sizes",
            [(None, "HKEYS", [keys.space_index(b)]) for b in range(keys.shards)],
        )
        names = sorted({n.decode() for shard in shards for n in shard})
        counts = await self._run("space_sizes", [(None, "ZCARD", [keys.members(s)]) for s in names])
        return {s: int(n) for s, n in zip(names, counts, strict=True) if n}

    # ── paged reads ─────────────────────────────────────────────────────

    async def members_page(self, space: str, cursor: str | None, limit: int) -> MembersPage:
        after = _join_number(cursor)
        self._check_open("members_page")
        key = self._keys.members(space)
        with as_unavailable("members_page"):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.zrangebyscore(
                    key, f"({after}", "+inf", start=0, num=limit + 1, withscores=True
                )
                pipe.zcard(key)
                rows, count = await pipe.execute()
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = str(int(rows[-1][1])) if more else None
        return MembersPage([m.decode() for m, _ in rows], int(count), next_cursor)

    async def list_agents(
        self,
        *,
        capability: CapabilityFilter | None,
        space: str | None,
        cursor: str | None,
        limit: int,
    ) -> AgentsPage:
        with as_unavailable("list_agents"):
            if space is not None:
                return await self._space_agents(space, capability, cursor, limit)
            if cursor is not None and not is_valid_agent_id(cursor):
                raise InvalidQuery("invalid cursor")
            start = b"(" + cursor.encode() if cursor else b"-"
            keys = self._keys
            if capability is None:
                sets = [keys.agent_index(b) for b in range(keys.shards)]
            elif not capability.prefix:
                sets = [keys.cap(capability.value)]
            else:
                sets = [keys.cap(c.decode()) for c in await self._prefixed(capability.value)]
            ids = await self._merged_ids(sets, start, limit + 1)
            more = len(ids) > limit
            ids = ids[:limit]
            records = await self._records(ids)
        agents = [
            r
            for r in records
            if r is not None and (capability is None or capability.matches(r.capabilities))
        ]
        return AgentsPage(agents, ids[-1] if more else None)

    async def _space_agents(
        self, space: str, capability: CapabilityFilter | None, cursor: str | None, limit: int
    ) -> AgentsPage:
        after = _join_number(cursor)
        self._check_open("list_agents")
        rows = await self._client.zrangebyscore(
            self._keys.members(space),
            f"({after}",
            "+inf",
            start=0,
            num=limit + 1,
            withscores=True,
        )
        more = len(rows) > limit
        rows = rows[:limit]
        records = await self._records([m.decode() for m, _ in rows])
        agents = [
            r
            for r in records
            if r is not None and (capability is None or capability.matches(r.capabilities))
        ]
        return AgentsPage(agents, str(int(rows[-1][1])) if more else None)

    async def _prefixed(self, prefix: str) -> list[bytes]:
        """The declared capabilities starting with ``prefix`` (bounded)."""
        self._check_open("list_agents")
        raw = prefix.encode()
        caps = await self._client.zrangebylex(
            self._keys.capabilities,
            b"[" + raw,
            b"[" + raw + b"\xff",
            start=0,
            num=MAX_PREFIX_CAPABILITIES + 1,
        )
        if len(caps) > MAX_PREFIX_CAPABILITIES:
            raise InvalidQuery(
                f"capability prefix matches more than {MAX_PREFIX_CAPABILITIES} "
                "capabilities: narrow it"
            )
        return caps

    async def _merged_ids(self, keys: list[str], start: bytes, n: int) -> list[str]:
        """The first ``n`` distinct ids after ``start`` of the union of ``keys``
        (each a score-0 set in lexical order): ``n`` from each, merged."""
        if not keys:
            return []
        self._check_open("list_agents")
        async with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrangebylex(key, start, b"+", start=0, num=n)
            results = await pipe.execute()
        if len(results) == 1:
            return [m.decode() for m in results[0]]
        out: list[str] = []
        for member in heapq.merge(*results):
            aid = member.decode()
            if out and out[-1] == aid:
                continue  # several of its capabilities match the prefix
            out.append(aid)
            if len(out) >= n:
                break
        return out

    async def _records(self, agent_ids: list[str]) -> list[AgentRecord | None]:
        if not agent_ids:
            return []
        self._check_open("list_agents")
        async with self._client.pipeline(transaction=False) as pipe:
            for aid in agent_ids:
                pipe.hmget(self._keys.agent(aid), ["node", "conn", "info"])
            rows = await pipe.execute()
        return [
            None if conn is None else record_from(aid, node or b"", conn, info)
            for aid, (node, conn, info) in zip(agent_ids, rows, strict=True)
        ]


#: An agent id and capabilities of its record, for :meth:`RedisDirectory.index`.
Entry = tuple[str, Iterable[str]]


def _join_number(cursor: str | None) -> int:
    """A join-order cursor (a member's score), 0 for the start."""
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
        raise InvalidQuery("invalid cursor")
    return int(cursor)
