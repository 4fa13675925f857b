"""What a node does as a member of a cluster.

- **Liveness**: every heartbeat interval the node touches its presence
  registration; a node silent for ``heartbeat_timeout`` is reaped by one of
  the others, which announces its agents' departures (``space.members`` left,
  ``agent.status`` offline) — within 2 × heartbeat timeout of its death.
- **Data loss**: when the store answers that this node's registration is
  missing (Redis restarted empty, or others reaped us during a pause), the
  node restores its agents and memberships from its own connections.
- **Remote liveness probes**: a duplicate agent id held on another node is
  checked by asking that node to ping the holder (``probe`` / ``probe_result``
  node messages); a dead holder is replaced and its node told to ``evict`` it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import TYPE_CHECKING, Any

import orjson

from hub.errors import BackplaneUnavailable
from hub.presence import AgentRecord
from protocol.errors import CloseCode, ErrorCode

if TYPE_CHECKING:
    from hub.node import Node


class ClusterLink:
    def __init__(self, node: Node):
        self._node = node
        self._probes: dict[str, asyncio.Future[bool]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # ── liveness and reaping ────────────────────────────────────────────

    async def tick(self) -> None:
        """One round of touch / restore / reap; BackplaneUnavailable propagates."""
        node = self._node
        presence = node.presence
        if await presence.touch_node():
            await self._restore()
        for reaped in await presence.reap_dead_nodes(node.settings.heartbeat_timeout):
            node.log.info(
                "reaped agent of dead node",
                agent_id=reaped.record.agent_id,
                dead_node=reaped.record.node_id,
            )
            for space in reaped.spaces:
                await node.membership.announce_departure(space, reaped.record.agent_id)
            holder = await presence.get_agent(reaped.record.agent_id)
            if holder is None or holder.connection_id == reaped.record.connection_id:
                # (An agent that already reconnected elsewhere is not offline.)
                await node.membership.agent_status("offline", reaped.record)

    async def _restore(self) -> None:
        node = self._node
        agents: list[AgentRecord] = []
        memberships: dict[str, list[str]] = {}
        for conn in list(node.connections.values()):
            if conn.session is None or conn.closing or conn.record is None:
                continue
            agents.append(conn.record)
            for space in conn.session.spaces:
                memberships.setdefault(space, []).append(conn.agent_id)
        if not agents:
            return
        conflicts = await node.presence.restore(agents, memberships)
        node.log.warning("presence restored", agents=len(agents), conflicts=len(conflicts))
        for record in conflicts:
            for conn in list(node.connections.values()):
                if conn.agent_id == record.agent_id and conn.record is not None:
                    node.close_connection(
                        conn,
                        CloseCode.AGENT_EXISTS,
                        ErrorCode.AGENT_EXISTS,
                        "agent connected elsewhere",
                    )

    # ── node messages ───────────────────────────────────────────────────

    async def holder_alive(self, holder: AgentRecord) -> bool:
        """Ask the holder's node to probe it; no answer in time means dead.

        A holder found dead is evicted (and cleaned up) by its node before the
        answer comes back.
        """
        node = self._node
        token = secrets.token_hex(8)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._probes[token] = future
        msg = {
            "op": "probe",
            "token": token,
            "connection_id": holder.connection_id,
            "reply_to": node.node_id,
        }
        try:
            await node.backplane.send_to_node(holder.node_id, orjson.dumps(msg))
            async with asyncio.timeout(
                node.settings.liveness_probe_timeout + node.settings.close_timeout + 1.0
            ):
                return await future
        except TimeoutError:
            return False
        finally:
            self._probes.pop(token, None)

    async def evict_remote(self, holder: AgentRecord) -> None:
        msg = {"op": "evict", "connection_id": holder.connection_id}
        with contextlib.suppress(BackplaneUnavailable):
            await self._node.backplane.send_to_node(holder.node_id, orjson.dumps(msg))

    def on_message(self, payload: bytes) -> None:
        try:
            msg = orjson.loads(payload)
            op = msg["op"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self._node.log.warning("malformed node message")
            return
        if op == "probe":
            self._spawn(self._answer_probe(msg))
        elif op == "probe_result":
            future = self._probes.get(msg.get("token", ""))
            if future is not None and not future.done():
                future.set_result(bool(msg.get("alive")))
        elif op == "evict":
            conn = self._node.connections.get(msg.get("connection_id", ""))
            if conn is not None:
                self._node.evict(conn)

    async def _answer_probe(self, msg: dict[str, Any]) -> None:
        node = self._node
        conn = node.connections.get(msg.get("connection_id", ""))
        alive = conn is not None and await node.local_alive(conn)
        if conn is not None and not alive:
            # Evict before answering, so the asker's newcomer never races the
            # departure of the dead connection (its memberships, its id).
            node.evict(conn)
            await conn.wait_cleaned_up(node.settings.close_timeout)
        reply = {"op": "probe_result", "token": msg.get("token"), "alive": alive}
        with contextlib.suppress(BackplaneUnavailable):
            await node.backplane.send_to_node(str(msg.get("reply_to")), orjson.dumps(reply))

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
