"""A small reconnect storm against real hub processes (contract §10, §17).

A few hundred agents in spaces of 50 are dropped at once, events are
published while they are away, then every one of them reconnects at the
same moment and re-joins with ``since``: each must get every missed event
exactly once, with ``recovered: true``, and no connection may fail. An
observer that is a member of every space must stay connected throughout
(membership churn alone never makes it a slow consumer) and see every event.
The second test drops a whole node (SIGKILL) of a two-node cluster on a real
redis-server and brings its agents back on the surviving node.

The full-size storm (10,000 agents) is a benchmark: ``make bench
ARGS="--only storm"`` (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from tests.support.wsclient import WsClient

pytestmark = pytest.mark.timeout(120)

# Heartbeats slow enough that hundreds of idle test agents stay quiet, yet
# well inside the test's time; nothing else differs from the defaults.
SETTINGS = {"heartbeat_interval": 10, "heartbeat_timeout": 60}
WAIT = 60.0  # generous: a busy 2-core machine


class Storm:
    """Agents ``agent-0`` … in spaces of ``space_size``; an observer and a
    publisher in every space."""

    def __init__(self, agents: int, space_size: int):
        self.n = agents
        self.space_size = space_size
        self.spaces = [f"storm-{k}" for k in range(-(-agents // space_size))]
        self.agents: list[WsClient] = []
        self.since: list[dict[str, Any]] = []
        self.missed: dict[str, list[int]] = {s: [] for s in self.spaces}
        self.observer: WsClient | None = None
        self.publisher: WsClient | None = None
        # Members per space as the observer last heard it.
        self.member_count: dict[str, int] = {}
        self.observed: dict[str, list[int]] = {s: [] for s in self.spaces}

    def space_of(self, i: int) -> str:
        return self.spaces[i // self.space_size]

    async def watch(self, url: str) -> None:
        self.observer = await WsClient.connect(url, "observer")
        self.publisher = await WsClient.connect(url, "publisher")
        for space in self.spaces:
            await self.observer.join(space)
            await self.publisher.join(space)

    async def connect_all(self, url: str) -> None:
        sem = asyncio.Semaphore(100)

        async def one(i: int) -> tuple[WsClient, dict[str, Any]]:
            async with sem:
                c = await WsClient.connect(url, f"agent-{i}")
                joined = await c.join(self.space_of(i))
                return c, {"seq": joined["seq"], "epoch": joined["epoch"]}

        async with asyncio.timeout(WAIT):
            pairs = await asyncio.gather(*(one(i) for i in range(self.n)))
        self.agents = [c for c, _ in pairs]
        self.since = [s for _, s in pairs]
        await self.members_settle(lambda s: self.members_in(s) + 2)

    def members_in(self, space: str) -> int:
        k = self.spaces.index(space)
        return min(self.space_size, self.n - k * self.space_size)

    async def members_settle(self, want: Any) -> None:
        """Read the observer's frames until every space has ``want(space)`` members."""
        assert self.observer is not None
        async with asyncio.timeout(WAIT):
            while any(self.member_count.get(s) != want(s) for s in self.spaces):
                msg = await self.observer.recv(timeout=WAIT)
                self._observe(msg)

    def _observe(self, msg: dict[str, Any]) -> None:
        space = msg.get("space")
        if msg.get("type") == "space.members" and "member_count" in msg:
            self.member_count[space] = msg["member_count"]
        elif msg.get("type") == "space.event" and space in self.observed:
            self.observed[space].append(msg["seq"])

    def drop(self) -> None:
        """Every agent's TCP connection aborted at once (no close handshake)."""
        for c in self.agents:
            c.ws.transport.abort()

    async def publish(self, per_space: int) -> None:
        assert self.publisher is not None
        for space in self.spaces:
            for e in range(per_space):
                reply = await self.publisher.request(
                    {"type": "space.publish", "space": space, "data": {"text": f"missed {e}"}}
                )
                assert reply["type"] == "space.event", reply
                self.missed[space].append(reply["seq"])

    async def reconnect_all(self, url: str) -> list[dict[str, Any]]:
        """All agents at once, each re-joining with ``since``; their joined replies."""

        async def one(i: int) -> tuple[WsClient, dict[str, Any]]:
            c = await WsClient.connect(url, f"agent-{i}")
            joined = await c.request(
                {"type": "space.join", "space": self.space_of(i), "since": self.since[i]},
                timeout=WAIT,
            )
            return c, joined

        async with asyncio.timeout(WAIT):
            pairs = await asyncio.gather(*(one(i) for i in range(self.n)))
        self.agents = [c for c, _ in pairs]
        return [j for _, j in pairs]

    async def check_every_event_once(self) -> None:
        """A marker per space, then each agent's events of its space up to it:
        exactly the missed ones, in order, then the marker (a duplicate of a
        replayed event would sit in between)."""
        assert self.publisher is not None and self.observer is not None
        marker: dict[str, int] = {}
        for space in self.spaces:
            reply = await self.publisher.request(
                {"type": "space.publish", "space": space, "data": {"text": "marker"}}
            )
            marker[space] = reply["seq"]

        async def events_until(c: WsClient, space: str, last: int) -> list[int]:
            got: list[int] = []
            while not got or got[-1] < last:
                msg = await c.recv(timeout=WAIT)
                if msg.get("type") == "space.event" and msg.get("space") == space:
                    got.append(msg["seq"])
            return got

        async with asyncio.timeout(WAIT):
            got = await asyncio.gather(
                *(
                    events_until(c, self.space_of(i), marker[self.space_of(i)])
                    for i, c in enumerate(self.agents)
                )
            )
        wrong = {
            f"agent-{i}": seqs
            for i, seqs in enumerate(got)
            if seqs != [*self.missed[self.space_of(i)], marker[self.space_of(i)]]
        }
        assert not wrong, f"{len(wrong)} agents got other events than missed + marker: {wrong}"
        # The observer stayed, and saw every event live, once, in order.
        async with asyncio.timeout(WAIT):
            while any(
                not self.observed[s] or self.observed[s][-1] < marker[s] for s in self.spaces
            ):
                self._observe(await self.observer.recv(timeout=WAIT))
        for space in self.spaces:
            assert self.observed[space] == [*self.missed[space], marker[space]], space

    async def aclose(self) -> None:
        for c in [*self.agents, self.observer, self.publisher]:
            if c is not None:
                c.ws.transport.abort()


def assert_all_recovered(joined: list[dict[str, Any]]) -> None:
    bad = [j for j in joined if j.get("type") != "space.joined" or j.get("recovered") is not True]
    assert not bad, f"{len(bad)} joins not recovered, e.g. {bad[:3]}"


async def test_every_agent_dropped_at_once_resumes_with_nothing_lost(hub_process):
    node = hub_process(**SETTINGS)
    storm = Storm(agents=300, space_size=50)
    try:
        await storm.watch(node.url)
        await storm.connect_all(node.url)
        storm.drop()
        # The hub saw them go: every space is down to the observer and the publisher.
        await storm.members_settle(lambda s: 2)
        await storm.publish(per_space=2)
        joined = await storm.reconnect_all(node.url)
        assert_all_recovered(joined)
        await storm.check_every_event_once()
        assert node.proc.poll() is None
    finally:
        await storm.aclose()


@pytest.mark.redis
async def test_a_dropped_node_agents_resume_on_the_other_node(redis_server, hub_process):
    cluster = {
        **SETTINGS,
        "redis_url": redis_server.url,
        # A dead node is noticed within about a second and a half.
        "node_heartbeat_interval": 0.25,
        "node_heartbeat_timeout": 1.5,
    }
    a = hub_process(node_id="node-a", **cluster)
    b = hub_process(node_id="node-b", **cluster)
    storm = Storm(agents=200, space_size=50)
    try:
        await storm.watch(a.url)  # observer and publisher on node A
        await storm.connect_all(b.url)  # every agent on node B
        os.kill(b.proc.pid, signal.SIGKILL)
        await storm.publish(per_space=2)  # while they are away
        # Node A reaped the dead node's agents.
        await storm.members_settle(lambda s: 2)
        joined = await storm.reconnect_all(a.url)
        assert_all_recovered(joined)
        await storm.check_every_event_once()
    finally:
        await storm.aclose()
