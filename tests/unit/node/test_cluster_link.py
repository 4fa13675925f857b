"""The cluster link's beat: when a node reaps, what it announces, and the
settings that decide how fast a dead node's agents are gone (contract §8)."""

from __future__ import annotations

from typing import Any

import pytest

from hub.cluster.presence import AgentRecord
from hub.cluster.presence.base import ReapedAgent
from hub.config.settings import Settings
from hub.core.registry import Registry
from hub.node.cluster_link import ClusterLink


class FakeLiveness:
    def __init__(self) -> None:
        self.touches = 0
        self.reaps: list[float] = []
        self.dead: list[ReapedAgent] = []

    async def touch_node(self) -> bool:
        self.touches += 1
        return False

    async def reap_dead_nodes(self, dead_after: float) -> list[ReapedAgent]:
        self.reaps.append(dead_after)
        dead, self.dead = self.dead, []
        return dead

    async def get_agent(self, agent_id: str) -> AgentRecord | None:
        return None


class FakeMembership:
    def __init__(self) -> None:
        self.said: list[tuple[Any, ...]] = []

    async def announce_departure(self, space: str, agent_id: str) -> None:
        self.said.append(("left", space, agent_id))

    async def agent_status(self, event: str, record: AgentRecord) -> None:
        self.said.append((event, record.agent_id))

    # (the link's StreamReceivers, which producers' nodes hear through)
    async def departed(self, space: str, agents: list[str]) -> None:
        self.said.append(("departed", space, agents))

    def census_result(self, msg: dict[str, Any]) -> None:
        self.said.append(("census_result", msg))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def link(settings: Settings, clock: Clock) -> tuple[ClusterLink, FakeLiveness, FakeMembership]:
    presence, membership = FakeLiveness(), FakeMembership()
    cluster = ClusterLink(
        settings, "n1", Registry(), presence, None, membership, membership,  # type: ignore[arg-type]
        probe_local=None, evict_local=None, clock=clock,  # type: ignore[arg-type]
    )  # fmt: skip
    return cluster, presence, membership


def test_default_node_liveness_meets_the_contract():
    s = Settings()
    assert (s.node_heartbeat_interval, s.node_heartbeat_timeout) == (1.0, 5.0)
    # Dead after 5 s of silence, noticed by the next beat: well within 10 s, and
    # far within 2 × heartbeat_timeout (120 s), whatever the agents' heartbeats.
    assert s.node_dead_after + s.node_beat_every <= 6.0
    assert s.node_dead_after + s.node_beat_every < 2 * s.heartbeat_timeout


@pytest.mark.parametrize(
    ("settings", "dead_after", "every"),
    [
        ({}, 5.0, 1.0),
        ({"heartbeat_interval": 0.5, "heartbeat_timeout": 2}, 2.0, 2 / 3),  # capped
        ({"node_heartbeat_interval": 0.1, "node_heartbeat_timeout": 0.5}, 0.5, 0.1),
        ({"node_heartbeat_interval": 4, "node_heartbeat_timeout": 6}, 6.0, 2.0),
    ],
)
def test_the_effective_beat_and_timeout(settings, dead_after, every):
    s = Settings(**settings)
    assert s.node_dead_after == pytest.approx(dead_after)
    assert s.node_beat_every == pytest.approx(every)
    assert s.node_dead_after + s.node_beat_every < 2 * s.heartbeat_timeout


def test_the_timeout_must_exceed_the_interval():
    with pytest.raises(ValueError, match="node_heartbeat_timeout"):
        Settings(node_heartbeat_interval=5, node_heartbeat_timeout=5)


async def test_a_steady_node_reaps_on_every_beat_and_announces_departures():
    clock = Clock()
    cluster, presence, membership = link(Settings(), clock)
    await cluster.tick()  # the first beat after start reaps at once (tombstones)
    presence.dead = [ReapedAgent(AgentRecord("doomed", "n0", "ws-n0-1"), ("general", "ops"))]
    clock.now += 1
    await cluster.tick()
    assert presence.reaps == [5.0, 5.0]
    assert membership.said == [
        ("left", "general", "doomed"),
        ("left", "ops", "doomed"),
        ("offline", "doomed"),
        # The producers of streams in those spaces count the reaped agent gone.
        ("departed", "general", ["doomed"]),
        ("departed", "ops", ["doomed"]),
    ]


async def test_after_a_gap_in_its_own_beats_a_node_judges_nobody_for_one_timeout():
    """Redis was unreachable (or this node stalled) for longer than the timeout:
    every node missed its beats, so none may be reaped until all could beat again."""
    clock = Clock()
    cluster, presence, _ = link(Settings(), clock)
    await cluster.tick()
    assert len(presence.reaps) == 1
    clock.now += 12  # the beats between failed (BackplaneUnavailable): no tick completed
    await cluster.tick()
    for _ in range(4):
        clock.now += 1
        await cluster.tick()
    assert len(presence.reaps) == 1 and presence.touches == 6  # touched, reaped nobody
    clock.now += 1.5
    await cluster.tick()
    assert len(presence.reaps) == 2
