"""Who holds an agent id: a free id is claimed, a live holder keeps it, a dead
one is evicted and replaced — asked directly on this node, through a fake
:class:`RemoteHolders` (the cluster link) for another node's."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hub.cluster.presence import AgentRecord, MemoryPresence
from hub.config.settings import Settings, load_settings
from hub.core.registry import Registry
from hub.core.session import Session, SessionLimits
from hub.handlers.agent_ids import AgentIds, LocalHolders
from protocol.errors import CloseCode, ErrorCode
from tests.support.peers import FakePeer

NODE = "node-a"


class FakeRemoteHolders:
    """Another node's answers, as the cluster link would give them."""

    def __init__(self, alive: bool = True, on_ask: Any = None):
        self.alive = alive
        self.on_ask = on_ask
        self.asked: list[AgentRecord] = []
        self.evicted: list[AgentRecord] = []

    async def holder_alive(self, holder: AgentRecord) -> bool:
        self.asked.append(holder)
        if self.on_ask is not None:
            await self.on_ask()
        return self.alive

    async def evict_remote(self, holder: AgentRecord) -> None:
        self.evicted.append(holder)


class Setup:
    def __init__(self, settings: Settings, remote: FakeRemoteHolders | None = None):
        self.settings = settings
        self.presence = MemoryPresence()
        self.registry: Registry[FakePeer] = Registry()
        self.local = LocalHolders(settings, self.registry)
        self.remote = remote or FakeRemoteHolders()
        self.ids = AgentIds(settings, NODE, self.registry, self.presence, self.local, self.remote)
        self._n = 0

    def record(self, agent_id: str = "alice", node: str = NODE) -> AgentRecord:
        self._n += 1
        return AgentRecord(agent_id, node, f"c{self._n}")

    async def holder(self, *, alive: bool, silent_for: float = 0.0) -> FakePeer:
        """A local connection holding ``alice``; the lifecycle's cleanup runs when
        the hub closes it (as ``ConnectionLifecycle.handle`` would)."""
        record = self.record()
        now = asyncio.get_running_loop().time()
        peer = FakePeer("alice", record.connection_id, alive=alive, record=record)
        limits = SessionLimits(heartbeat_timeout=self.settings.heartbeat_timeout)
        peer.session = Session("alice", record.connection_id, limits, now - silent_for)
        self.registry.add(record.connection_id, peer)
        assert await self.ids.claim(record)
        self.registry.bind_agent(peer)
        asyncio.get_running_loop().create_task(cleanup(self, peer))
        return peer

    async def holding(self, agent_id: str = "alice") -> str | None:
        found = await self.presence.get_agent(agent_id)
        return None if found is None else found.connection_id


async def cleanup(setup: Setup, peer: FakePeer) -> None:
    await peer.closed.wait()
    setup.registry.evict(peer.connection_id, peer)
    await setup.presence.release_agent(peer.agent_id, peer.connection_id)
    peer.cleaned_up.set()


@pytest.fixture
def settings() -> Settings:
    return load_settings({"node_id": NODE, "liveness_probe_timeout": 2.0})


async def test_a_free_id_is_claimed(settings: Settings) -> None:
    s = Setup(settings)
    record = s.record()
    assert await s.ids.claim(record) is True
    assert await s.presence.get_agent("alice") == record
    assert s.remote.asked == []


async def test_a_live_local_holder_keeps_its_id(settings: Settings) -> None:
    s = Setup(settings)
    holder = await s.holder(alive=True)
    assert await s.ids.claim(s.record()) is False
    assert await s.holding() == holder.connection_id
    assert not holder.closing and len(holder.probes) == 1
    assert 0 < holder.probes[0] <= settings.liveness_probe_timeout


async def test_a_dead_local_holder_is_evicted_and_replaced(settings: Settings) -> None:
    s = Setup(settings)
    holder = await s.holder(alive=False)
    newcomer = s.record()
    assert await s.ids.claim(newcomer) is True
    assert holder.closed_with is not None
    assert holder.closed_with[:2] == (CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT)
    assert holder.messages("error")[0]["code"] == "HEARTBEAT_TIMEOUT"
    assert holder.cleaned_up.is_set(), "the departure was cleaned up before the newcomer"
    assert await s.holding() == newcomer.connection_id
    await asyncio.sleep(0)  # the cut comes on the next turn, after the close frame
    assert holder.aborted
    assert s.remote.asked == [], "a local holder is never asked through the cluster"


async def test_the_probe_never_waits_longer_than_the_holders_allowance(
    settings: Settings,
) -> None:
    s = Setup(settings)
    # Silent for all but 0.5 s of its heartbeat timeout: the probe gets ≤ 0.5 s.
    holder = await s.holder(alive=True, silent_for=settings.heartbeat_timeout - 0.5)
    await s.ids.claim(s.record())
    assert 0 < holder.probes[0] <= 0.5
    # Silent past it: no time left, so dead without waiting for an answer.
    late = Setup(settings)
    silent = await late.holder(alive=True, silent_for=settings.heartbeat_timeout + 1)
    assert await late.ids.claim(late.record()) is True
    assert silent.probes == [0.0] and silent.closing


async def test_a_record_left_behind_on_this_node_is_replaced_without_a_probe(
    settings: Settings,
) -> None:
    s = Setup(settings)
    stale = s.record()
    assert await s.presence.claim_agent(stale) is None  # no connection has it here
    newcomer = s.record()
    assert await s.ids.claim(newcomer) is True
    assert await s.holding() == newcomer.connection_id


async def test_a_live_remote_holder_is_asked_through_its_node(settings: Settings) -> None:
    s = Setup(settings, FakeRemoteHolders(alive=True))
    remote = s.record(node="node-b")
    assert await s.presence.claim_agent(remote) is None
    assert await s.ids.claim(s.record()) is False
    assert s.remote.asked == [remote] and s.remote.evicted == []
    assert await s.holding() == remote.connection_id


async def test_a_dead_remote_holder_is_replaced_then_evicted_there(settings: Settings) -> None:
    s = Setup(settings, FakeRemoteHolders(alive=False))
    remote = s.record(node="node-b")
    await s.presence.claim_agent(remote)
    newcomer = s.record()
    assert await s.ids.claim(newcomer) is True
    assert await s.holding() == newcomer.connection_id
    assert s.remote.evicted == [remote]


async def test_a_third_connection_that_wins_the_race_keeps_the_id(settings: Settings) -> None:
    """The holder was dead, but by the time it is replaced another connection
    took the id: the newcomer is refused and nobody is evicted."""
    s: Setup

    async def someone_else_claims() -> None:
        winner = s.record(node="node-c")
        assert await s.presence.claim_agent(winner, replace=remote.connection_id) is None

    s = Setup(settings, FakeRemoteHolders(alive=False, on_ask=someone_else_claims))
    remote = s.record(node="node-b")
    await s.presence.claim_agent(remote)
    assert await s.ids.claim(s.record()) is False
    assert s.remote.evicted == []
    assert (await s.presence.get_agent("alice")).node_id == "node-c"


# ── asked by other nodes ─────────────────────────────────────────────────────


async def test_probe_local_answers_for_this_nodes_holders(settings: Settings) -> None:
    s = Setup(settings)
    assert await s.local.probe_local("nobody") is False
    alive = await s.holder(alive=True)
    assert await s.local.probe_local(alive.connection_id) is True
    assert not alive.closing


async def test_probe_local_evicts_a_dead_holder_before_answering(settings: Settings) -> None:
    s = Setup(settings)
    dead = await s.holder(alive=False)
    assert await s.local.probe_local(dead.connection_id) is False
    assert dead.closing and dead.cleaned_up.is_set()
    assert await s.holding() is None, "its departure is done when the asker hears"


async def test_evict_local_closes_only_a_known_connection(settings: Settings) -> None:
    s = Setup(settings)
    holder = await s.holder(alive=True)
    s.local.evict_local("nobody")
    assert not holder.closing
    s.local.evict_local(holder.connection_id)
    assert holder.closed_with is not None and holder.closed_with[0] is CloseCode.HEARTBEAT_TIMEOUT
