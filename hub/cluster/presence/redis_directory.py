"""Redis presence, the read side of paging: a space's members and the agent directory.

Layout (``P`` is the key prefix; the rest of it is in :mod:`hub.cluster.presence.redis`)::

    P:members:{space}        ZSET   agent_id scored by join order: pages by score
    P:agent-index            ZSET   every agent id (score 0: lexical order), the directory
    P:cap:{capability}       ZSET   agent ids declaring that capability (score 0)
    P:capabilities           ZSET   every declared capability (score 0), for prefix filters

The indexes are written by the scripts that write agent records (claim,
update, release, restore, reap), each prefixed with
:data:`~hub.cluster.presence.redis_scripts.INDEX_LUA`: they
read the capabilities of the record they replace or remove from its ``info``.
Every query here is a bounded range read — ``ZRANGEBYSCORE``/``ZRANGEBYLEX``
with ``LIMIT`` from the cursor — then one pipelined ``HMGET`` per listed
agent: a page costs the same whatever the number of agents or members.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Callable
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
from hub.cluster.presence.redis_scripts import PresenceKeys
from hub.cluster.redis_store import as_unavailable
from protocol.names import is_valid_agent_id


def record_from(agent_id: str, node: bytes, conn: bytes, info: bytes | None) -> AgentRecord:
    """An agent record from its hash fields (``info`` is the JSON of the details)."""
    data: dict[str, Any] = {}
    if info:
        with contextlib.suppress(orjson.JSONDecodeError):
            data = orjson.loads(info)
    return AgentRecord(
        agent_id,
        node.decode(),
        conn.decode(),
        data.get("type"),
        tuple(data.get("capabilities") or ()),
        data.get("metadata") or {},
        data.get("connected_at") or 0,
    )


class RedisDirectory:
    """Paged reads for :class:`~hub.cluster.presence.redis.RedisPresence`."""

    def __init__(self, client: Any, keys: PresenceKeys, check_open: Callable[[str], None]):
        self._client = client
        self._keys = keys
        self._check_open = check_open

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
            if capability is None:
                keys = [self._keys.agent_index]
            elif not capability.prefix:
                keys = [self._keys.cap(capability.value)]
            else:
                keys = [self._keys.cap(c.decode()) for c in await self._prefixed(capability.value)]
            ids = await self._merged_ids(keys, start, limit + 1)
            more = len(ids) > limit
            ids = ids[:limit]
            records = await self._records(ids)
        return AgentsPage([r for r in records if r is not None], ids[-1] if more else None)

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


def _join_number(cursor: str | None) -> int:
    """A join-order cursor (a member's score), 0 for the start."""
    if cursor is None:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
        raise InvalidQuery("invalid cursor")
    return int(cursor)
