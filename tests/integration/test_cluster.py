"""A real cluster: several `agora-hub serve` processes sharing a real redis-server."""

import asyncio
import os
import signal
import urllib.error
import urllib.request

import pytest

from tests.support.wsclient import WsClient as _WsClient

pytestmark = pytest.mark.redis


class WsClient(_WsClient):
    """Cluster tests run for seconds: their clients heartbeat like real ones."""

    @classmethod
    async def connect(cls, *args, **kwargs):
        kwargs.setdefault("heartbeat", True)
        return await super().connect(*args, **kwargs)


CLUSTER = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 2.0,
    "liveness_probe_timeout": 0.5,
    "rate_limit": 10_000,
    "rate_burst": 10_000,
}


@pytest.fixture
def cluster(redis_server, hub_process):
    def start(n: int = 2, **settings):
        return [
            hub_process(redis_url=redis_server.url, node_id=f"node{i}", **{**CLUSTER, **settings})
            for i in range(n)
        ]

    return start


def node_tag(client: WsClient) -> str:
    return client.registered["agent"]["connection_id"].split("-")[1]


def ready(proc) -> int:
    try:
        with urllib.request.urlopen(proc.http + "/readyz", timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


async def wait_ready(proc, want: int, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while await asyncio.to_thread(ready, proc) != want:  # noqa: ASYNC110
            await asyncio.sleep(0.1)  # polling an HTTP endpoint: there is no event to wait on


async def test_cross_node_fan_out_in_one_order(cluster):
    nodes = cluster(3)
    clients = [await WsClient.connect(nodes[i % 3].url, f"agent-{i}") for i in range(9)]
    assert len({node_tag(c) for c in clients}) == 3
    for c in clients:
        await c.join("general")
    per = 15

    async def publish(c):
        for n in range(per):
            await c.send(
                {"type": "space.publish", "space": "general", "data": {"n": n, "by": c.agent_id}}
            )

    publishers = clients[:3]  # one on each node
    await asyncio.gather(*(publish(p) for p in publishers))
    total = per * len(publishers)

    async def collect(c):
        out = []
        while len(out) < total:
            msg = await c.recv(timeout=20)
            if msg["type"] == "space.event":
                out.append(msg)
        return out

    results = await asyncio.gather(*(collect(c) for c in clients))
    reference = [e["event_id"] for e in results[0]]
    for events in results:
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == total
        assert [e["event_id"] for e in events] == reference
    for p in publishers:
        assert [e["data"]["n"] for e in results[4] if e["from"] == p.agent_id] == list(range(per))


async def test_members_and_list_are_cluster_wide(cluster):
    a_node, b_node = cluster(2)
    a = await WsClient.connect(a_node.url, "alice")
    b = await WsClient.connect(b_node.url, "bob")
    await a.join("general")
    joined = await b.join("general")
    assert joined["members"] == ["alice", "bob"] and joined["member_count"] == 2
    note = await a.wait_for("space.members", joined="bob")
    assert note["member_count"] == 2
    await b.join("task.only-bob")
    listing = await a.request({"type": "space.list"})
    assert {"id": "general", "type": "public", "member_count": 2} in listing["spaces"]
    assert {"id": "task.only-bob", "type": "public", "member_count": 1} in listing["spaces"]
    err = await a.request({"type": "space.publish", "space": "task.only-bob", "data": {}})
    assert err["code"] == "UNAUTHORIZED"  # exists (on the other node), not a member
    await b.close()
    note = await a.wait_for("space.members", left="bob")
    assert note["members"] == ["alice"]


async def test_capacity_is_cluster_wide(cluster):
    nodes = cluster(2, space_capacity=2)
    a = await WsClient.connect(nodes[0].url, "a")
    b = await WsClient.connect(nodes[1].url, "b")
    c = await WsClient.connect(nodes[0].url, "c")
    await a.join("pair")
    await b.join("pair")
    err = await c.request({"type": "space.join", "space": "pair"})
    assert err["code"] == "SPACE_FULL"


async def test_agent_exists_across_nodes(cluster):
    n0, n1 = cluster(2)
    first = await WsClient.connect(n0.url, "alice")
    second = await WsClient.connect(n1.url, "alice", registered=False)
    code, frames = await second.closed()
    assert code == 4409 and frames[0]["code"] == "AGENT_EXISTS"
    assert (await first.request({"type": "space.list"}))["type"] == "space.list"


async def test_dead_holder_on_another_node_is_replaced(cluster):
    n0, n1 = cluster(2)
    watcher = await WsClient.connect(n1.url, "watcher")
    await watcher.join("general")
    ghost = await WsClient.connect(n0.url, "alice")
    await ghost.join("general")
    await watcher.wait_for("space.members", joined="alice")
    ghost.ws.transport.pause_reading()  # stops answering pings
    fresh = await WsClient.connect(n1.url, "alice")
    assert node_tag(fresh) != node_tag(ghost)
    await watcher.wait_for("space.members", left="alice")
    await fresh.join("general")
    echo = await fresh.request({"type": "space.publish", "space": "general", "data": {"x": 1}})
    assert echo["type"] == "space.event"
    ghost.ws.transport.abort()


async def test_streams_and_cancels_across_nodes(cluster):
    n0, n1 = cluster(2)
    pub = await WsClient.connect(n0.url, "pub")
    r1 = await WsClient.connect(n1.url, "r1")
    r2 = await WsClient.connect(n1.url, "r2")
    for c in (pub, r1, r2):
        await c.join("room")

    def delta(eid, text):
        return {
            "type": "space.event.delta",
            "space": "room",
            "event_id": eid,
            "data": {"text": text},
        }

    await pub.send(delta("e1", "one"))
    got = await r1.wait_for("space.event.delta", event_id="pub/e1")
    ack = await r1.request({"type": "space.event.cancel", "space": "room", "event_id": "pub/e1"})
    assert ack["reason"] == "receiver_cancelled"
    await pub.send(delta("e1", "two"))
    await pub.send({"type": "space.event.done", "space": "room", "event_id": "e1"})
    texts = []
    while True:
        msg = await r2.recv()
        if msg.get("event_id") != "pub/e1":
            continue
        if msg["type"] == "space.event.done":
            break
        texts.append(msg["data"]["text"])
    assert texts == ["one", "two"] and got["data"]["text"] == "one"
    # Publisher cancel and publisher disconnect reach the other node.
    await pub.send(delta("e2", "x"))
    await pub.send({"type": "space.event.cancel", "space": "room", "event_id": "e2"})
    end = await r2.wait_for("space.event.cancel", event_id="pub/e2")
    assert end["reason"] == "cancelled"
    await pub.send(delta("e3", "y"))
    await r2.wait_for("space.event.delta", event_id="pub/e3")
    await pub.close()
    end = await r2.wait_for("space.event.cancel", event_id="pub/e3")
    assert end["reason"] == "publisher_disconnected"
    # r1 cancelled e1 as a receiver: it never saw "two" or the done.
    assert not [m for m in r1.backlog if m.get("event_id") == "pub/e1"]


async def test_killed_node_is_cleaned_up_by_the_others(cluster):
    n0, n1 = cluster(2)
    survivor = await WsClient.connect(n1.url, "survivor")
    await survivor.join("general")
    await survivor.join("agent.status")
    doomed = await WsClient.connect(n0.url, "doomed")
    await doomed.join("general")
    await survivor.wait_for("space.members", joined="doomed")
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    os.kill(n0.proc.pid, signal.SIGKILL)
    note = await survivor.wait_for("space.members", left="doomed", timeout=20)
    offline = await survivor.wait_for("space.event", space="agent.status", timeout=20)
    while offline["data"]["event"] != "offline":
        offline = await survivor.wait_for("space.event", space="agent.status", timeout=20)
    elapsed = loop.time() - killed_at
    assert note["members"] == ["survivor"]
    assert offline["data"]["agent"]["id"] == "doomed"
    assert elapsed < 2 * CLUSTER["heartbeat_timeout"] + 2.0  # generous: a busy machine
    listing = await survivor.request({"type": "space.list"})
    assert {"id": "general", "type": "public", "member_count": 1} in listing["spaces"]
    # The id is free again, on the surviving node.
    back = await WsClient.connect(n1.url, "doomed")
    assert back.registered is not None


async def test_redis_outage_is_survived_without_silent_loss(redis_server, cluster):
    n0, n1 = cluster(2)
    pub = await WsClient.connect(n0.url, "pub")
    sub = await WsClient.connect(n1.url, "sub")
    await pub.join("general")
    await sub.join("general")
    before = await pub.request({"type": "space.publish", "space": "general", "data": {"i": 0}})
    await sub.wait_for("space.event", event_id=before["event_id"])

    redis_server.kill()
    await wait_ready(n0, 503)
    await wait_ready(n1, 503)
    # During the outage a publish is refused, never silently dropped.
    outcome = await pub.request(
        {"type": "space.publish", "space": "general", "data": {"i": 1}}, timeout=20
    )
    assert outcome["type"] == "error" and outcome["code"] == "UNAVAILABLE"
    assert outcome["request_id"]
    # Local connections stay up and are still answered.
    hb = await sub.request({"type": "agent.heartbeat"})
    assert hb["type"] == "agent.heartbeat"

    redis_server.start()
    await wait_ready(n0, 200)
    await wait_ready(n1, 200)
    after = await pub.request(
        {"type": "space.publish", "space": "general", "data": {"i": 2}}, timeout=20
    )
    assert after["type"] == "space.event"
    got = await sub.wait_for("space.event", event_id=after["event_id"], timeout=20)
    assert got["seq"] > before["seq"]  # strictly increasing across the restart
    # Members were restored in the empty Redis: a newcomer sees both.
    late = await WsClient.connect(n0.url, "late")
    joined = await late.join("general")
    assert set(joined["members"]) == {"pub", "sub", "late"}
    assert pub.ws.close_code is None and sub.ws.close_code is None
