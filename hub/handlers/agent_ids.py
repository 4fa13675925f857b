"""Who holds an agent id: claims, liveness probes and eviction.

An agent id is held by one connection cluster-wide (presence). A newcomer with
a held id gets it only when the holder is dead: silent past the heartbeat
timeout, or not answering a ping within ``liveness_probe_timeout`` — asked
directly when the holder is on this node, through its node when it is
elsewhere (:class:`RemoteHolders`, the cluster link). A dead holder is evicted
(error, close 4408, socket cut) and its departure cleaned up before the
newcomer is registered.

The newcomer is answered as soon as the holder is known dead: the probe never
waits longer than the holder's remaining heartbeat allowance, and it ends the
moment the hub closes the holder (heartbeat timeout) or loses it. A holder on
a node that is gone (no longer listening, or no longer touching its presence
registration) is dead without a probe.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from hub.cluster.presence import AgentClaims, AgentRecord
from hub.config.settings import Settings
from hub.core.peer import CleanedUp, Peer
from hub.core.registry import Registry
from protocol.errors import CloseCode, ErrorCode

#: How long a node waits for an evicted holder's cleanup before it answers
#: another node's probe (the socket is cut, so it is quick; this bounds it).
EVICT_CLEANUP = 1.0


class RemoteHolders(Protocol):
    async def holder_alive(self, holder: AgentRecord) -> bool:
        """Ask the holder's node; a holder found dead is evicted there first."""
        ...

    async def evict_remote(self, holder: AgentRecord) -> None: ...


class AgentIds:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        registry: Registry[Any],
        presence: AgentClaims,
        local: LocalHolders,
        remote: RemoteHolders,
    ):
        self.settings = settings
        self.node_id = node_id
        self.registry = registry
        self.presence = presence
        self.local = local
        self.remote = remote

    async def claim(self, record: AgentRecord) -> bool:
        """Take ``record.agent_id`` for its connection; False while a live holder has it."""
        holder = await self.presence.claim_agent(record)
        if holder is None:
            return True
        remote = holder.node_id != self.node_id
        if remote:
            if await self.remote.holder_alive(holder):
                return False
        else:
            peer = self.registry.connections.get(holder.connection_id)
            # No local connection with that id: a record left behind.
            if peer is not None:
                if await self.local.alive(peer):
                    return False
                self.local.evict(peer)
                await _wait(peer.cleaned_up, self.settings.close_timeout + 1)
        if await self.presence.claim_agent(record, replace=holder.connection_id) is not None:
            return False
        if remote:
            await self.remote.evict_remote(holder)
        return True


class LocalHolders:
    """This node's holders of agent ids: are they alive, and evicting the dead
    — asked by :class:`AgentIds` and, through the cluster link, by other nodes."""

    def __init__(self, settings: Settings, registry: Registry[Any]):
        self.settings = settings
        self.registry = registry

    async def alive(self, peer: Peer) -> bool:
        """Does this node's peer still answer? (Silent too long = no.)

        The probe waits at most the peer's remaining heartbeat allowance: past
        it the peer would be closed for silence anyway.
        """
        session = peer.session
        timeout = self.settings.liveness_probe_timeout
        if session is not None:
            timeout = min(timeout, session.allowance(asyncio.get_running_loop().time()))
        return await peer.probe(timeout)

    def evict(self, peer: Peer) -> None:
        """Drop a peer that failed a liveness probe: its id goes to a newcomer."""
        peer.close_for(
            CloseCode.HEARTBEAT_TIMEOUT,
            ErrorCode.HEARTBEAT_TIMEOUT,
            "failed a liveness probe: replaced by a new connection",
        )
        # It did not answer a ping: no closing handshake to wait for. Cut it
        # on the next turn of the loop, once close_for has written the error
        # and the close frame (a peer that still reads gets both).
        asyncio.get_running_loop().call_soon(peer.abort)

    # ── for other nodes (through the cluster link) ─────────────────────

    async def probe_local(self, connection_id: str) -> bool:
        """Another node asks: is this node's holder alive? A dead one is
        evicted and cleaned up before the answer goes back, so the asker's
        newcomer never races the departure of the dead connection."""
        peer = self.registry.connections.get(connection_id)
        if peer is None:
            return False
        if await self.alive(peer):
            return True
        self.evict(peer)
        await _wait(peer.cleaned_up, EVICT_CLEANUP)
        return False

    def evict_local(self, connection_id: str) -> None:
        peer = self.registry.connections.get(connection_id)
        if peer is not None:
            self.evict(peer)


async def _wait(event: CleanedUp, timeout: float) -> None:
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
