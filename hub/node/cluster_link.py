"""What a node does as a member of a cluster.

- **Liveness**: every ``node_heartbeat_interval`` (1 s) the node touches its
  presence registration and reaps the nodes silent for
  ``node_heartbeat_timeout`` (5 s; never more than ``heartbeat_timeout``): one
  of the others takes a dead node's agents out of presence and announces their
  departures (``space.members`` left, ``agent.status`` offline) — within about
  6 s of its death on defaults, never later than 2 × heartbeat timeout — and
  the leaves the dead node still held in its coalescing windows (noted in
  presence), but for agents that are members again. Agents'
  heartbeats play no part: a node beats for all of its agents at once. A node
  that could not beat for a while (its Redis link was down, its loop stalled)
  reaps nobody until it has beaten for one timeout again, so that the others,
  which were likely cut off too, have the time to beat before they are judged
  (a Redis outage does not end in every node reaping every other).
- **Data loss**: when the store answers that this node's registration is
  missing (Redis restarted empty, or others reaped us during a pause), the
  node restores its agents and memberships from its own connections.
- **Remote liveness probes**: a duplicate agent id held on another node is
  checked by asking that node to ping the holder (``probe`` / ``probe_result``
  node messages); a dead holder is replaced and its node told to ``evict`` it.
  A holder whose node is gone is dead without waiting for an answer: its node
  no longer touches its presence registration, or nobody listens on its
  channel any more (a killed process loses its Redis connections at once).
- **Operator disconnects**: the server API or the status page on any node
  closes an agent's connection through its node (``disconnect`` node message).
- **Streams' receivers**: the answers to a census of a stream's receivers
  (``census_result`` node messages) go to :class:`StreamStops`, and so do the
  reaped agents of a dead node: producers count them as gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import structlog

from hub.cluster.backplane import Backplane
from hub.cluster.presence import AgentRecord, Presence
from hub.config.settings import Settings
from hub.core.peer import PeerKind
from hub.core.registry import Registry
from hub.errors import BackplaneUnavailable
from hub.handlers.agent_ids import EVICT_CLEANUP
from hub.handlers.membership import Membership
from protocol.errors import CloseCode, ErrorCode

#: While waiting for a probe's answer, how often to check the node still listens.
NODE_CHECK_INTERVAL = 0.5
#: A node message that does nothing: sent only to count who listens.
NODE_PING = b'{"op":"ping"}'


class StreamReceivers(Protocol):
    """What the link tells :class:`~hub.handlers.stream_stops.StreamStops`."""

    def census_result(self, msg: dict[str, Any]) -> None: ...

    async def departed(self, space: str, agents: list[str]) -> None: ...


class ClusterLink:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        registry: Registry[Any],
        presence: Presence,
        backplane: Backplane,
        membership: Membership,
        stream_stops: StreamReceivers,
        *,
        probe_local: Callable[[str], Awaitable[bool]],
        evict_local: Callable[[str], None],
        disconnect_local: Callable[[str, str], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.node_id = node_id
        self.registry = registry
        self.presence = presence
        self.backplane = backplane
        self.membership = membership
        self.stream_stops = stream_stops
        self._probe_local = probe_local
        self._evict_local = evict_local
        self._disconnect_local = disconnect_local
        self._clock = clock
        self.log = structlog.get_logger("hub").bind(node=node_id)
        self._probes: dict[str, asyncio.Future[bool]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: When this node last touched its registration, and since when it has
        #: done so without a gap longer than the node timeout (``clock`` time).
        self._touched: float | None = None
        self._steady_since = -math.inf

    # ── liveness and reaping ────────────────────────────────────────────

    async def tick(self) -> None:
        """One round of touch / restore / reap; BackplaneUnavailable propagates."""
        presence = self.presence
        dead_after = self.settings.node_dead_after
        now = self._clock()
        if await presence.touch_node():
            await self._restore(announce=await presence.reaped())
        if self._touched is not None and now - self._touched > dead_after:
            self._steady_since = now  # beating again after a gap: judge nobody yet
        self._touched = now
        if now - self._steady_since < dead_after:
            return
        departed: dict[str, list[str]] = {}
        held: dict[str, list[str]] = {}
        for reaped in await presence.reap_dead_nodes(dead_after):
            self.log.info(
                "reaped agent of dead node",
                agent_id=reaped.record.agent_id,
                dead_node=reaped.record.node_id,
            )
            for space in reaped.spaces:
                await self.membership.announce_departure(space, reaped.record.agent_id)
                departed.setdefault(space, []).append(reaped.record.agent_id)
            for space in reaped.held:
                if space not in reaped.spaces:
                    held.setdefault(space, []).append(reaped.record.agent_id)
            if not reaped.record.connection_id:
                continue  # it had gone from that node: its offline was told
            holder = await presence.get_agent(reaped.record.agent_id)
            if holder is None or holder.connection_id == reaped.record.connection_id:
                # (An agent that already reconnected elsewhere is not offline.)
                await self.membership.agent_status("offline", reaped.record)
        for space, agents in held.items():
            # Leaves the dead node held unannounced (contract §21): told now,
            # but for an agent that is a member again (it rejoined elsewhere,
            # told at once there) — its `left` must not follow that join.
            for agent_id in await presence.missing_members(space, tuple(agents)):
                await self.membership.announce_departure(space, agent_id)
        for space, agents in departed.items():
            # Best effort: a producer not told still ends its stream itself.
            with contextlib.suppress(BackplaneUnavailable):
                await self.stream_stops.departed(space, agents)

    async def _restore(self, *, announce: bool) -> None:
        """Put this node's agents and memberships back in presence. With
        ``announce`` (the node had been reaped: its agents were announced gone)
        each restored agent is announced ``online`` and a member again."""
        agents: list[AgentRecord] = []
        memberships: dict[str, list[str]] = {}
        for peer in self.registry:
            if peer.session is None or peer.closing or peer.record is None:
                continue
            # A shared member (``a2a``, ``mcp``: one per node under one id)
            # never claimed its id: every node would claim it, and all but one
            # would lose their copy as a duplicate. Its memberships only.
            if peer.kind is not PeerKind.SHARED:
                agents.append(peer.record)
            for space in peer.session.spaces:
                memberships.setdefault(space, []).append(peer.agent_id)
        if not agents and not memberships:
            return
        conflicts = await self.presence.restore(agents, memberships)
        self.log.warning(
            "presence restored", agents=len(agents), conflicts=len(conflicts), reaped=announce
        )
        lost = {record.agent_id for record in conflicts}
        for record in conflicts:
            for peer in self.registry:
                if peer.agent_id == record.agent_id and peer.record is not None:
                    peer.close_for(
                        CloseCode.AGENT_EXISTS,
                        ErrorCode.AGENT_EXISTS,
                        "agent connected elsewhere",
                    )
        if announce:
            # In the background: thousands of announcements must not hold up
            # the beat that keeps this node from being reaped again.
            self._spawn(self._announce_restored([a for a in agents if a.agent_id not in lost]))

    async def _announce_restored(self, agents: list[AgentRecord]) -> None:
        """The counterpart of the reaper's departures: ``online`` and a join per
        space (coalesced per space like any joins). Best effort: what the
        backplane cannot take now is not retried."""
        restored = {a.agent_id for a in agents}
        events = self.membership.member_events
        with contextlib.suppress(BackplaneUnavailable):
            for record in agents:
                await self.membership.agent_status("online", record)
            for peer in self.registry:
                if peer.agent_id in restored and peer.session is not None:
                    for space in list(peer.session.spaces):
                        await events.changed(space, peer.agent_id, True)

    # ── node messages ───────────────────────────────────────────────────

    async def holder_alive(self, holder: AgentRecord) -> bool:
        """Ask the holder's node to probe it; no answer in time means dead.

        A holder found dead is evicted (and cleaned up) by its node before the
        answer comes back.
        """
        settings = self.settings
        if not await self.presence.node_alive(holder.node_id, settings.node_dead_after):
            return False
        token = secrets.token_hex(8)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._probes[token] = future
        msg = {
            "op": "probe",
            "token": token,
            "connection_id": holder.connection_id,
            "reply_to": self.node_id,
        }
        loop = asyncio.get_running_loop()
        # The holder's node answers within the probe timeout plus the
        # eviction's cleanup (EVICT_CLEANUP): the newcomer's client is kept
        # waiting for no longer than that, well under a connect timeout.
        deadline = loop.time() + settings.liveness_probe_timeout + EVICT_CLEANUP + 1.0
        try:
            payload = orjson.dumps(msg)
            while await self.backplane.send_to_node(holder.node_id, payload):
                # Somebody listens there; should the node die while we wait,
                # the next look finds nobody (a killed process loses its
                # connections at once) instead of waiting out the deadline.
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                try:
                    async with asyncio.timeout(min(NODE_CHECK_INTERVAL, remaining)):
                        return await asyncio.shield(future)
                except TimeoutError:
                    payload = NODE_PING
            return False  # nobody listens there: the node is gone
        finally:
            self._probes.pop(token, None)

    async def evict_remote(self, holder: AgentRecord) -> None:
        """The holder's id was taken over: its node closes it (and says it went
        ``offline``). A node nobody listens for any more (killed) cannot: the
        ``offline`` of that connection is published here, before the newcomer's
        ``online`` — as when a live node's holder is replaced."""
        msg = {"op": "evict", "connection_id": holder.connection_id}
        with contextlib.suppress(BackplaneUnavailable):
            if await self.backplane.send_to_node(holder.node_id, orjson.dumps(msg)) == 0:
                await self.membership.agent_status("offline", holder)

    async def disconnect_remote(self, holder: AgentRecord, reason: str) -> bool:
        """Ask the holder's node to disconnect it (an operator's request);
        False when nobody listens there. BackplaneUnavailable propagates."""
        msg = {"op": "disconnect", "connection_id": holder.connection_id, "reason": reason}
        return await self.backplane.send_to_node(holder.node_id, orjson.dumps(msg)) > 0

    def on_message(self, payload: bytes) -> None:
        try:
            msg = orjson.loads(payload)
            op = msg["op"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.log.warning("malformed node message")
            return
        if op == "probe":
            self._spawn(self._answer_probe(msg))
        elif op == "probe_result":
            future = self._probes.get(msg.get("token", ""))
            if future is not None and not future.done():
                future.set_result(bool(msg.get("alive")))
        elif op == "evict":
            self._evict_local(str(msg.get("connection_id", "")))
        elif op == "disconnect" and self._disconnect_local is not None:
            self._disconnect_local(str(msg.get("connection_id", "")), str(msg.get("reason", "")))
        elif op == "census_result":
            self.stream_stops.census_result(msg)
        # "ping" (NODE_PING) needs no answer: its sender only counts listeners.

    async def _answer_probe(self, msg: dict[str, Any]) -> None:
        alive = await self._probe_local(str(msg.get("connection_id", "")))
        reply = {"op": "probe_result", "token": msg.get("token"), "alive": alive}
        with contextlib.suppress(BackplaneUnavailable):
            await self.backplane.send_to_node(str(msg.get("reply_to")), orjson.dumps(reply))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for future in self._probes.values():
            if not future.done():
                future.cancel()
