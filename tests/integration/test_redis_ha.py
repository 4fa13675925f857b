"""Two hub nodes on Redis with replicas: Sentinel and Redis Cluster.

Contract §16: everything of §8 and §10 holds on both (cross-node order,
membership, AGENT_EXISTS, history and resume, idempotent publish), and a
master killed with ``kill -9`` while a publisher publishes with idempotency
keys and a listener listens loses nothing silently: the listener gets every
acknowledged event, or is told ``recovered: false``; no retried publish is
recorded twice. The nodes run in this process (each its own ports); the
shared setups serve the tests that kill nothing, each failover test has its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import Counter
from typing import Any

import pytest

from agora_client import AgentExists, Client, Resumed, Unavailable
from agora_client.errors import HubConnectionError, RequestTimeout

pytestmark = pytest.mark.redis

TIMEOUT = 15.0
FAST = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 3.0,
    "liveness_probe_timeout": 0.5,
    "rate_limit": 10_000,
    "rate_burst": 10_000,
}
SETUPS = {"sentinel": "redis_sentinel", "cluster": "redis_cluster"}


@pytest.fixture(params=list(SETUPS))
def shared(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(SETUPS[request.param])


async def two_nodes(hub: Any, url: str) -> list[Any]:
    prefix = f"t{secrets.token_hex(3)}"
    return [
        await hub(redis_url=url, redis_prefix=prefix, node_id=f"{prefix}-n{i}", **FAST)
        for i in range(2)
    ]


async def until(condition: Any, what: str, timeout: float = 30.0) -> float:
    """Poll ``condition`` (a readiness flag: there is no event to wait on);
    returns how long it took."""
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_two_nodes_share_spaces_order_history_and_keys(shared, hub, clients):
    n0, n1 = await two_nodes(hub, shared.url)
    a = await clients(n0.url, "alice", request_timeout=20)
    b = await clients(n1.url, "bob", request_timeout=20)
    await a.join("room")
    joined = await b.join("room")
    assert sorted(joined.members) == ["alice", "bob"]
    assert {s.id for s in await a.spaces()} >= {"room"}

    # AGENT_EXISTS across nodes.
    with pytest.raises(AgentExists):
        await clients(n1.url, "alice")

    # One order on both nodes, two publishers on two nodes.
    got_a, got_b = a.events("room"), b.events("room")
    await asyncio.gather(
        *(a.publish("room", {"n": i, "by": "a"}) for i in range(10)),
        *(b.publish("room", {"n": i, "by": "b"}) for i in range(10)),
    )
    seen_a = [await got_a.get(timeout=TIMEOUT) for _ in range(20)]
    seen_b = [await got_b.get(timeout=TIMEOUT) for _ in range(20)]
    assert [e.event_id for e in seen_a] == [e.event_id for e in seen_b]
    assert [e.seq for e in seen_a] == sorted(e.seq for e in seen_a)

    first = await b.publish("room", {"once": 1}, idempotency_key="k1", echo=False)
    # History and resume across nodes.
    position = b.position("room")
    assert position is not None
    await b.aclose()
    for i in range(3):
        await a.publish("room", {"later": i})
    c = await clients(n0.url, "bob", request_timeout=20)
    stream = c.events("room")
    resumed = await c.join("room", since=position)
    assert resumed.recovered is True
    replayed = [await stream.get(timeout=TIMEOUT) for _ in range(3)]
    assert [e.data["later"] for e in replayed] == [0, 1, 2]
    # Idempotent publish: the retry on the other node is the same event.
    again = await c.publish("room", {"once": 1}, idempotency_key="k1", echo=False)
    assert again.event_id == first.event_id and again.seq == first.seq


class Publisher:
    """Publishes ``{"i": n}`` with idempotency key ``k{n}``, retrying a key
    until it is acknowledged (through the failover)."""

    def __init__(self, client: Client, space: str):
        self.client = client
        self.space = space
        self.acked: dict[int, int] = {}  # i -> seq
        self.refused = 0

    async def run(self, stop: asyncio.Event, started: asyncio.Event, at: int) -> None:
        i = 0
        while not stop.is_set():
            if i == at:
                started.set()
            while True:
                try:
                    event = await self.client.publish(
                        self.space, {"i": i}, idempotency_key=f"k{i}", echo=False
                    )
                except (Unavailable, HubConnectionError, RequestTimeout):
                    self.refused += 1
                    await asyncio.sleep(0.05)  # a client's retry pause
                    continue
                self.acked[i] = event.seq
                break
            i += 1
            await asyncio.sleep(0.01)  # a steady publisher, not a burst


async def whole_history(client: Client, space: str) -> list[Any]:
    events: list[Any] = []
    before = None
    while True:
        page = await client.history(space, limit=100, before_seq=before)
        events = [e for e in page.events if isinstance(getattr(e, "data", None), dict)] + events
        if page.next_before_seq is None:
            return events
        before = page.next_before_seq


async def failover_run(setup: Any, kind: str, hub: Any, clients: Any) -> dict[str, Any]:
    n0, n1 = await two_nodes(hub, setup.url)
    space = "failover"
    resumes: list[Resumed] = []
    listener = await clients(
        n1.url, "listener", reconnect=True, on_resume=resumes.append, request_timeout=30
    )
    await listener.join(space)
    received = listener.events(space)
    got: list[int] = []

    async def listen() -> None:
        while True:
            event = await received.get()
            got.append(event.data["i"])

    publisher_client = await clients(n0.url, "publisher", reconnect=True, request_timeout=30)
    await publisher_client.join(space)
    publisher = Publisher(publisher_client, space)
    halfway, stop = asyncio.Event(), asyncio.Event()
    listening = asyncio.get_running_loop().create_task(listen())
    publishing = asyncio.get_running_loop().create_task(publisher.run(stop, halfway, 50))
    await halfway.wait()
    key = f"{n0.node.settings.redis_prefix}:seq:{{{space}}}"
    killed_at = time.monotonic()
    old = await asyncio.to_thread(setup.kill_master, *(() if kind == "sentinel" else (key,)))
    await until(lambda: not (n0.node.ready and n1.node.ready), "nodes not ready")
    await asyncio.to_thread(setup.wait_failover, old, *(() if kind == "sentinel" else (key,)))
    await until(lambda: n0.node.ready and n1.node.ready, "nodes ready again", 60)
    recovered_after = time.monotonic() - killed_at
    acked = len(publisher.acked)
    await until(lambda: len(publisher.acked) >= acked + 30, "publishing after the failover")
    stop.set()
    await asyncio.wait_for(publishing, 60)
    last = max(publisher.acked)
    # Everything acknowledged reaches the listener (or it was told it cannot).
    with contextlib.suppress(TimeoutError):
        await until(lambda: last in got or any(not r.recovered for r in resumes), "last", 30)
        await until(lambda: set(publisher.acked) <= set(got), "all", 5)
    listening.cancel()
    counts = Counter(e.data["i"] for e in await whole_history(publisher_client, space))
    told = [r for r in resumes if not r.recovered]
    lost = sorted(set(publisher.acked) - set(got))
    return {
        "lost": lost,
        # Lost outside what a not-recovered rejoin owned up to: after its
        # position (since.seq) and up to where it rejoined (seq).
        "lost_untold": [
            i for i in lost if not any(r.since.seq < publisher.acked[i] <= r.seq for r in told)
        ],
        "duplicated": sorted(i for i, n in Counter(got).items() if n > 1),
        "recorded_twice": sorted(i for i, n in counts.items() if n > 1),
        "told": told,
        "refused": publisher.refused,
        "ready_after": recovered_after,
    }


@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
async def test_master_killed_mid_publish_loses_nothing_silently(
    kind, redis_ha_factory, hub, clients
):
    setup = await asyncio.to_thread(redis_ha_factory, kind)
    result = await failover_run(setup, kind, hub, clients)
    print(f"{kind} failover: {result}")
    # No retried publish was carried out twice (the idempotency receipt and
    # the event replicate together).
    assert result["recorded_twice"] == []
    # The listener got every acknowledged event once — or was told it may not,
    # and then only events of the window it was told about are missing.
    assert result["lost_untold"] == []
    if not result["told"]:
        assert result["lost"] == [] and result["duplicated"] == []
    # The failover was real: the publisher was refused while there was no master.
    assert result["refused"] > 0


async def test_a_node_started_before_its_redis_cluster_waits_for_it(redis_ha_factory, hub, clients):
    """No reachable node yet (redis-py's RedisClusterException is no
    RedisError): the node starts not-ready, as with one Redis, and becomes
    ready when the cluster comes up — it neither crashes nor needs a restart."""
    setup = redis_ha_factory("cluster", start=False)
    node = await hub(redis_url=setup.url, **FAST)
    assert not node.node.ready
    await asyncio.to_thread(setup.start)
    await until(lambda: node.node.ready, "ready once the cluster is up", 60)
    agent = await clients(node.url, "early", request_timeout=20)
    await agent.join("room")
    events = agent.events("room")
    sent = await agent.publish("room", {"text": "hello"})
    assert (await events.get(timeout=TIMEOUT)).event_id == sent.event_id
