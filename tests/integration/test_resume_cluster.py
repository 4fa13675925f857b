"""Resume in a real cluster: hub processes, a real redis-server, SIGKILL.

Agents reach the nodes through a small TCP proxy that, like a load
balancer, sends each new connection to the first node that answers — so an
agent whose node is killed comes back on another one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
from typing import Any

import pytest
from redis.asyncio import Redis

from agora_client import Backoff, Resumed
from tests.integration.test_cluster import CLUSTER, wait_ready
from tests.support.events import collect
from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

TIMEOUT = 30.0
FAST = Backoff(initial=0.05, maximum=0.5)


@pytest.fixture
def cluster(redis_server, hub_process):
    def start(n: int = 2, **settings: Any) -> list[Any]:
        return [
            hub_process(redis_url=redis_server.url, node_id=f"node{i}", **{**CLUSTER, **settings})
            for i in range(n)
        ]

    return start


async def test_resume_on_another_node_after_sigkill(cluster, clients, proxy):
    n0, n1 = cluster(2)
    via = await proxy(n0, n1)  # new connections go to n0 while it lives
    resumes: asyncio.Queue[Resumed] = asyncio.Queue()
    alice = await clients(
        via.url, "alice", reconnect=True, backoff=FAST, on_resume=resumes.put_nowait
    )
    bob = await clients(n1.url, "bob")
    events = alice.events("room")
    await bob.join("room")
    await alice.join("room")
    assert alice.registration is not None
    first_node = alice.registration.connection_id
    sent: list[int] = []
    killed, enough = asyncio.Event(), asyncio.Event()

    async def traffic() -> None:
        while not killed.is_set() or len(sent) < 40:
            sent.append((await bob.publish("room", f"m{len(sent)}")).seq)
            if len(sent) == 20:
                enough.set()
            await asyncio.sleep(0.005)

    publisher = asyncio.create_task(traffic())
    await enough.wait()
    os.kill(n0.proc.pid, signal.SIGKILL)
    async with asyncio.timeout(TIMEOUT):
        note = await resumes.get()
    killed.set()
    await publisher
    assert note.recovered is True
    assert alice.registration.connection_id != first_node, "now on the other node"
    got = await collect(events, sent[-1])
    assert [e.seq for e in got] == sent
    assert [e.text for e in got] == [f"m{i}" for i in range(len(sent))]


async def test_redis_restart_loses_history_and_says_so(redis_server, cluster, clients, proxy):
    (n0,) = cluster(1)
    alice = await clients(n0.url, "alice")
    joined = await alice.join("room")
    await alice.publish("room", "before")
    position = alice.position("room")
    await alice.aclose()

    redis_server.kill()
    await wait_ready(n0, 503)
    redis_server.start()  # empty: no persistence
    await wait_ready(n0, 200)
    ws = await WsClient.connect(n0.url, "alice")
    assert position is not None
    reply = await ws.request(
        {"type": "space.join", "space": "room",
         "since": {"seq": position.seq, "epoch": position.epoch}}
    )  # fmt: skip
    assert reply["recovered"] is False
    assert reply["epoch"] != joined.epoch


async def test_trimmed_history_is_not_recovered(cluster, clients):
    (n0,) = cluster(1, history_size=10)
    alice = await clients(n0.url, "alice")
    bob = await clients(n0.url, "bob")
    await alice.join("room")
    await bob.join("room")
    await alice.publish("room", "seen")
    position = alice.position("room")
    await alice.aclose()
    for i in range(30):
        await bob.publish("room", f"m{i}")
    again = await clients(n0.url, "alice")
    result = await again.join("room", since=position)
    assert result.recovered is False and result.epoch == position.epoch
    page = await again.history("room", limit=100)
    assert len(page.events) == 10 and page.next_before_seq is None


async def test_idempotent_retries_on_the_same_and_another_node(cluster):
    n0, n1 = cluster(2)
    a0 = await WsClient.connect(n0.url, "alice")
    watcher = await WsClient.connect(n1.url, "watcher")
    await a0.join("room")
    await watcher.join("room")
    msg = {"type": "space.publish", "space": "room", "data": {"text": "pay"},
           "idempotency_key": "invoice-42"}  # fmt: skip
    first = await a0.request(dict(msg))
    assert first["type"] == "space.event"
    same_node = await a0.request(dict(msg))
    await a0.close()
    a1 = await WsClient.connect(n1.url, "alice")  # the agent moved to another node
    await a1.join("room")
    other_node = await a1.request(dict(msg))
    for retry in (same_node, other_node):
        assert retry["type"] == "space.published" and retry["duplicate"] is True
        assert (retry["event_id"], retry["seq"]) == (first["event_id"], first["seq"])
    last = await a1.request({"type": "space.publish", "space": "room", "data": {"text": "end"}})
    texts = []
    while True:
        m = await watcher.recv(TIMEOUT)
        if m["type"] == "space.event":
            texts.append(m["data"]["text"])
            if m["seq"] == last["seq"]:
                break
    assert texts == ["pay", "end"]


async def test_a_retry_racing_its_original_in_one_pipeline_publishes_once(cluster):
    """Original and retry travel in the same Redis pipeline; racing retries
    from two nodes are covered by the backplane contract tests."""
    n0, n1 = cluster(2)
    c0 = await WsClient.connect(n0.url, "alice")
    await c0.join("room")
    watcher = await WsClient.connect(n1.url, "watcher")
    await watcher.join("room")
    keys = [f"k{i}" for i in range(30)]
    for key in keys:  # each key sent twice back to back: the second is a retry
        for _ in range(2):
            await c0.send({"type": "space.publish", "space": "room", "data": {"k": key},
                           "idempotency_key": key})  # fmt: skip
    last = await c0.request({"type": "space.publish", "space": "room", "data": {"k": "end"}})
    got = []
    while True:
        m = await watcher.recv(TIMEOUT)
        if m["type"] == "space.event":
            got.append(m["data"]["k"])
            if m["seq"] == last["seq"]:
                break
    assert got == [*keys, "end"]


@pytest.mark.parametrize("seed", range(6))
async def test_join_racing_a_burst_across_nodes(cluster, seed):
    """Property: replay ∪ live is exactly (since, last], in order, on another node."""
    rng = random.Random(seed)
    n0, n1 = cluster(2)
    pubs = [await WsClient.connect(n0.url, f"pub{i}") for i in range(3)]
    for p in pubs:
        epoch = (await p.join("room"))["epoch"]
    for i in range(rng.randrange(1, 30)):
        await pubs[0].request({"type": "space.publish", "space": "room", "data": {"w": i}})
    current = (await pubs[0].request({"type": "space.join", "space": "room"}))["seq"]
    since = rng.randrange(0, current + 1)
    burst = rng.randrange(100, 400)

    async def publisher(p: WsClient) -> None:
        for i in range(burst):
            await p.send({"type": "space.publish", "space": "room", "data": {"i": i}})
            if rng.random() < 0.1:
                await asyncio.sleep(0)

    tasks = [asyncio.create_task(publisher(p)) for p in pubs]
    await asyncio.sleep(rng.random() * 0.02)
    joiner = await WsClient.connect(n1.url, "joiner")
    joined = await joiner.request(
        {"type": "space.join", "space": "room", "since": {"seq": since, "epoch": epoch}}
    )
    assert joined["recovered"] is True
    await asyncio.gather(*tasks)
    last = (await pubs[0].request({"type": "space.publish", "space": "room", "data": {}}))["seq"]
    seqs = []
    while not seqs or seqs[-1] < last:
        m = await joiner.recv(TIMEOUT)
        if m.get("space") == "room" and isinstance(m.get("seq"), int):
            seqs.append(m["seq"])
    assert seqs == list(range(since + 1, last + 1))


def local_ports(pid: int) -> set[int]:
    """Local TCP ports of a process's sockets (from /proc: no extra packages)."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(OSError):
            target = os.readlink(f"{fd_dir}/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def kill_pubsub_link(redis_url: str, pid: int) -> None:
    """Cut one node's Redis pub/sub connection, as a network failure would."""
    ports = local_ports(pid)
    client = Redis.from_url(redis_url)
    try:
        killed = 0
        for entry in await client.client_list(_type="pubsub"):
            if int(entry["addr"].rsplit(":", 1)[1]) in ports:
                await client.client_kill_filter(_id=entry["id"])
                killed += 1
        assert killed == 1
    finally:
        await client.aclose()


@pytest.mark.parametrize("history_size", [1000, 0])
async def test_members_of_a_node_that_missed_events_lose_nothing(
    redis_server, cluster, clients, history_size
):
    """A node's pub/sub link drops while others publish: it fills the gap from
    history; without history its members are told to resume (and do)."""
    n0, n1 = cluster(2, history_size=history_size)
    resumes: asyncio.Queue[Resumed] = asyncio.Queue()
    alice = await clients(n1.url, "alice", reconnect=True, backoff=FAST,
                          on_resume=resumes.put_nowait)  # fmt: skip
    bob = await clients(n0.url, "bob")
    events = alice.events("room")
    await bob.join("room")
    await alice.join("room")
    sent: list[int] = []
    cut, enough = asyncio.Event(), asyncio.Event()

    async def traffic() -> None:
        while not cut.is_set() or len(sent) < 60:
            sent.append((await bob.publish("room", f"m{len(sent)}")).seq)
            if len(sent) == 20:
                enough.set()
            await asyncio.sleep(0.002)

    publisher = asyncio.create_task(traffic())
    await enough.wait()
    await kill_pubsub_link(redis_server.url, n1.proc.pid)
    cut.set()
    await publisher
    if history_size:
        got = await collect(events, sent[-1])
        assert [e.seq for e in got] == sent, "filled in by the node"
        assert resumes.empty() and alice.reconnects == 0
    else:
        # Nothing to fill from: alice was closed, came back, and was told.
        # (She may be back only after the last publish: one more event
        # published once she is tells when she has everything she will get.)
        async with asyncio.timeout(TIMEOUT):
            note = await resumes.get()
        assert note.recovered is False
        after = (await bob.publish("room", "after the resume")).seq
        got = await collect(events, after)
        assert alice.reconnects == 1
        seqs = [e.seq for e in got]
        assert seqs == sorted(set(seqs)) and set(seqs) <= {*sent, after}
        assert seqs[-1] == after
