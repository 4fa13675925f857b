"""Redis presence: node liveness — touching, reaping the dead, restoring after a loss.

A node touches its registration (``P:nodes:{P}``, scored by Redis time)
every beat. A node silent for ``dead_after`` is reaped by one of the others:

1. :data:`LEASE_LUA` takes the dead nodes (touched on the reaper's behalf,
   so nobody else takes them for ``dead_after``);
2. each dead node's shards list its agents (``P:node-agents:{b}:NODE``);
3. per agent, in its slot: which spaces the dead connection is in;
4. per membership, in the space's slot: removed if the dead connection holds
   it; the space index follows (out if empty, in otherwise);
5. per agent: the intents dropped and, if the dead connection still holds
   the id, the record (then the directory's entries);
6. the shards' entries dropped, the node marked reaped (if it had agents: a
   paused node learns on waking that its agents were announced gone), the
   leaves it held unannounced (``P:departing``, read in step 2 and returned
   as :attr:`ReapedAgent.held`) dropped, and only then the node itself.

Every step is conditional on the dead connection, so a reaper that dies
half-way leaves the node (its lease runs out) to the next, which redoes
what is left and changes nothing twice. Steps run batched: one pipeline per
step for all the agents of all the dead nodes.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from hub.cluster.presence.base import AgentRecord, ReapedAgent
from hub.cluster.presence.redis_directory import RedisDirectory, capabilities_of, info_of
from hub.cluster.presence.redis_directory import record_from as _record
from hub.cluster.presence.redis_scripts import (
    DELETE_IF_LUA,
    LEASE_LUA,
    LEAVE_CLUSTER_LUA,
    NODE_ALIVE_LUA,
    REAP_DONE_LUA,
    REAP_MEMBER_LUA,
    REAP_READ_LUA,
    RESTORE_AGENT_LUA,
    RESTORE_MEMBER_LUA,
    TOUCH_LUA,
    PresenceKeys,
)
from hub.cluster.presence.redis_scripts import origin as _origin
from hub.cluster.redis_store import Call, run_all
from hub.errors import BackplaneUnavailable

#: Calls per pipeline when a step runs for many agents.
BATCH = 500


class RedisLiveness:
    """The liveness half of :class:`~hub.cluster.presence.redis.RedisPresence`."""

    def __init__(
        self,
        client: Any,
        keys: PresenceKeys,
        directory: RedisDirectory,
        call: Callable[..., Any],
        command: Callable[[str], contextlib.AbstractContextManager[None]],
        *,
        node_id: str,
        ttl: float,
    ):
        self._client = client
        self._keys = keys
        self._directory = directory
        self._call = call
        self._command = command
        self.node_id = node_id
        # The liveness window the node promises; reaping uses the caller's
        # ``dead_after``, this is the fallback when that is not positive.
        self.ttl = ttl
        script = client.register_script
        self._touch = script(TOUCH_LUA)
        self._alive = script(NODE_ALIVE_LUA)
        self._lease = script(LEASE_LUA)
        self._leave = script(LEAVE_CLUSTER_LUA)
        self._reap_read = script(REAP_READ_LUA)
        self._reap_member = script(REAP_MEMBER_LUA)
        self._reap_done = script(REAP_DONE_LUA)
        self._restore_agent = script(RESTORE_AGENT_LUA)
        self._restore_member = script(RESTORE_MEMBER_LUA)
        self._delete_if = script(DELETE_IF_LUA)

    async def _batched(self, what: str, calls: Sequence[Call]) -> list[Any]:
        """The calls' results, :data:`BATCH` per pipeline; a failure is raised."""
        if not calls:
            return []
        with self._command(what):
            return await run_all(self._client, what, calls, BATCH)

    def _shards(self, node_id: str) -> list[str]:
        return [self._keys.node_agents(node_id, b) for b in range(self._keys.shards)]

    # ── this node ───────────────────────────────────────────────────────

    async def start(self) -> None:
        """Hand leftovers of a previous process with this node id to the reapers.

        Its agents' shards move to a tombstone node (renamed in their slots)
        that is registered long dead — registered first, as alive, so that
        no reaper finds it before every shard has moved. Best effort: with
        Redis down this does nothing, and every later call raises
        BackplaneUnavailable until Redis is back.
        """
        with contextlib.suppress(BackplaneUnavailable):
            shards = self._shards(self.node_id)
            departing = self._keys.departing(self.node_id)
            found = await self._batched(
                "start", [(None, "EXISTS", [k]) for k in (*shards, departing)]
            )
            *found_shards, left_departing = found
            held = [k for k, n in zip(shards, found_shards, strict=True) if n]
            if not held and not left_departing:
                return
            tomb = f"{self.node_id}~{secrets.token_hex(4)}"
            nodes = self._keys.nodes
            await self._call("start", self._touch, [nodes], [tomb])
            renames: list[Call] = [
                (None, "RENAME", [k, self._keys.node_agents(tomb, shards.index(k))]) for k in held
            ]
            if left_departing:  # leaves it held unannounced: the reaper tells them
                renames.append((None, "RENAME", [departing, self._keys.departing(tomb)]))
            await self._batched("start", renames)
            with self._command("start"):
                await self._client.zadd(nodes, {tomb: 0})

    async def touch_node(self) -> bool:
        added = await self._call("touch_node", self._touch, [self._keys.nodes], [self.node_id])
        return bool(added)

    async def reaped(self) -> bool:
        with self._command("reaped"):
            return bool(await self._client.getdel(self._keys.reaped(self.node_id)))

    async def node_alive(self, node_id: str, within: float) -> bool:
        alive = await self._call(
            "node_alive", self._alive, [self._keys.nodes], [node_id, max(1, round(within * 1000))]
        )
        return bool(alive)

    async def leave_cluster(self) -> None:
        """Graceful shutdown: gone from the registry, or — with agents still
        registered — marked long dead, for the next reaper to announce them."""
        counts = await self._batched(
            "leave_cluster",
            [
                *((None, "HLEN", [k]) for k in self._shards(self.node_id)),
                (None, "SCARD", [self._keys.departing(self.node_id)]),
            ],
        )
        flag = "1" if any(counts) else "0"
        await self._call("leave_cluster", self._leave, [self._keys.nodes], [self.node_id, flag])

    # ── restoring after a data loss ─────────────────────────────────────

    async def restore(
        self, agents: list[AgentRecord], memberships: dict[str, list[str]]
    ) -> list[AgentRecord]:
        """Re-assert this node's agents (intents first) and memberships."""
        keys = self._keys
        spaces_of: dict[str, list[str]] = {}
        for space, ids in memberships.items():
            for agent_id in ids:
                spaces_of.setdefault(agent_id, []).append(space)
        intents: list[Call] = []
        restores: list[tuple[str, Call]] = []
        for record in agents:
            aid = record.agent_id
            intents.append((None, "HSET", [keys.node_agents(self.node_id, keys.shard_of(aid)),
                                           aid, record.connection_id]))  # fmt: skip
            args = [record.node_id, record.connection_id, info_of(record), "1"]
            restores.append((aid, self._restore_call(aid, [*args, *spaces_of.get(aid, ())])))
        # Members without a record here (no claim to re-assert): memberships only.
        claimed = {r.agent_id for r in agents}
        for aid, spaces in spaces_of.items():
            if aid not in claimed:
                restores.append((aid, self._restore_call(aid, ["", "", "", "0", *spaces])))
        await self._batched("restore", intents)
        await self._directory.index([(r.agent_id, r.capabilities) for r in agents], listed=True)
        results = await self._batched("restore", [c for _, c in restores])
        conflicts: list[AgentRecord] = []
        members: list[Call] = []
        touched: list[str] = []
        conns = {r.agent_id: r.connection_id for r in agents}
        for (aid, _), result in zip(restores, results, strict=True):
            if result[0] == 1:
                conflicts.append(_record(aid, *result[1:]))
                # Not ours any more: this node's shard no longer lists it.
                mine = keys.node_agents(self.node_id, keys.shard_of(aid))
                members.append((self._delete_if, [mine], [aid, conns[aid]]))
                continue
            for space in spaces_of.get(aid, ()):
                members.append((self._restore_member, [keys.members(space),
                                keys.member_conns(space)], [aid, result[1]]))  # fmt: skip
                touched.append(space)
        await self._batched("restore", members)
        await self._directory.space_listed(touched)
        return conflicts

    def _restore_call(self, agent_id: str, args: list[Any]) -> Call:
        keys = self._keys
        return (self._restore_agent, [keys.agent(agent_id), keys.member_of(agent_id)], args)

    # ── reaping ─────────────────────────────────────────────────────────

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        window = dead_after if dead_after > 0 else self.ttl
        leased = await self._call(
            "reap_dead_nodes",
            self._lease,
            [self._keys.nodes],
            [max(1, round(window * 1000)), self.node_id],
        )
        dead = [n.decode() for n in leased]
        if not dead:
            return []
        held = await self._held(dead)
        departing = await self._departing(dead)
        reaped = await self._reap(held)
        await self._drop_nodes(dead, held)
        return _with_departures(reaped, departing)

    async def _departing(self, dead: list[str]) -> list[tuple[str, str, str]]:
        """(node, space, agent) of every leave the dead nodes held unannounced."""
        found = await self._batched(
            "reap_dead_nodes", [(None, "SMEMBERS", [self._keys.departing(n)]) for n in dead]
        )
        out: list[tuple[str, str, str]] = []
        for node, entries in zip(dead, found, strict=True):
            for entry in sorted(e.decode() for e in entries):
                space, _, agent = entry.partition(" ")
                if agent:
                    out.append((node, space, agent))
        return out

    async def _held(self, dead: list[str]) -> list[tuple[str, str, str, str]]:
        """(node, shard key, agent, conn) of every agent the dead nodes listed."""
        shards = [(node, key) for node in dead for key in self._shards(node)]
        found = await self._batched(
            "reap_dead_nodes", [(None, "HGETALL", [key]) for _, key in shards]
        )
        return [
            (node, key, aid.decode(), conn.decode())
            for (node, key), entries in zip(shards, found, strict=True)
            for aid, conn in _pairs(entries)
        ]

    async def _reap(self, held: list[tuple[str, str, str, str]]) -> list[ReapedAgent]:
        keys = self._keys
        what = "reap_dead_nodes"
        agent_keys = [[keys.agent(aid), keys.member_of(aid)] for _, _, aid, _ in held]
        read = await self._batched(
            what,
            [(self._reap_read, k, [conn]) for k, (*_, conn) in zip(agent_keys, held, strict=True)],
        )
        # Memberships out, in their spaces' slots (only the dead connection's).
        removals: list[tuple[int, str]] = []
        calls: list[Call] = []
        for i, ((_, _, aid, conn), row) in enumerate(zip(held, read, strict=True)):
            for space in row[3:]:
                name = space.decode()
                removals.append((i, name))
                calls.append((self._reap_member, [keys.members(name), keys.member_conns(name)],
                              [aid, conn, "1" if row[0] else "0"]))  # fmt: skip
        removed = await self._batched(what, calls)
        left: dict[int, list[str]] = {}
        empty, occupied = set(), set()
        for (i, space), (count, out) in zip(removals, removed, strict=True):
            if out:
                left.setdefault(i, []).append(space)
            (occupied if count else empty).add(space)
        # A space the dead node was joining may have missed its index entry.
        await self._directory.space_listed(occupied)
        await self._directory.space_emptied(empty - occupied)
        done = await self._batched(
            what,
            [
                (self._reap_done, k, [conn, *(s.decode() for s in row[3:])])
                for k, (_, _, _, conn), row in zip(agent_keys, held, read, strict=True)
            ],
        )
        await self._directory.unindex(
            [
                (aid, capabilities_of(gone[1]))
                for (_, _, aid, _), gone in zip(held, done, strict=True)
                if gone[0]
            ],
            listed=True,
        )
        out: list[ReapedAgent] = []
        for i, ((node, _, aid, conn), row, gone) in enumerate(zip(held, read, done, strict=True)):
            owned = gone[0] == 1
            spaces = tuple(left.get(i, ()))
            if owned or spaces:
                origin = _origin(node)
                record = _record(aid, row[1] if owned else origin.encode(), conn.encode(),
                                 row[2] if owned else b"")  # fmt: skip
                out.append(ReapedAgent(record, spaces))
        await self._batched(
            what, [(self._delete_if, [key], [aid, conn]) for _, key, aid, conn in held]
        )
        return out

    async def _drop_nodes(self, dead: list[str], held: list[tuple[str, str, str, str]]) -> None:
        """Mark the nodes that had agents reaped (tombstones stand for a node
        long gone: not marked), then drop them from the registry."""
        had = {node for node, *_ in held if _origin(node) == node}
        calls: list[Call] = [
            (None, "SET", [self._keys.reaped(node), "1", "EX", 86400]) for node in sorted(had)
        ]
        calls += [(None, "DEL", [self._keys.departing(node)]) for node in dead]
        await self._batched("reap_dead_nodes", calls)
        with self._command("reap_dead_nodes"):
            await self._client.zrem(self._keys.nodes, *dead)


def _pairs(flat: Any) -> Iterator[tuple[bytes, bytes]]:
    """Field/value pairs of an HGETALL reply (a dict, or a flat list in RESP2 scripts)."""
    if isinstance(flat, dict):
        yield from flat.items()
    else:
        yield from zip(flat[::2], flat[1::2], strict=True)


def _with_departures(
    reaped: list[ReapedAgent], departing: list[tuple[str, str, str]]
) -> list[ReapedAgent]:
    """The reaped agents with the leaves their dead nodes held (``held``); an
    agent that had gone from its node altogether is added with only those."""
    if not departing:
        return reaped
    held: dict[tuple[str, str], list[str]] = {}
    for node, space, agent in departing:
        held.setdefault((_origin(node), agent), []).append(space)
    out: list[ReapedAgent] = []
    for r in reaped:
        spaces = held.pop((r.record.node_id, r.record.agent_id), None)
        out.append(r if spaces is None else ReapedAgent(r.record, r.spaces, tuple(spaces)))
    out += [
        ReapedAgent(AgentRecord(agent, node, ""), (), tuple(spaces))
        for (node, agent), spaces in held.items()
    ]
    return out
