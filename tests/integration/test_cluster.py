"""A real cluster: several `agora-hub serve` processes sharing a real redis-server.

The agents are the project's own SDK (`agora_client.Client`), which heartbeats
on the hub's interval like any real agent. The raw `WsClient` is used only
where a test needs something the SDK would never do (see the comments).
"""

import asyncio
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from agora_client import (
    AgentExists,
    Client,
    Event,
    MembersChanged,
    SpaceFull,
    SpaceInfo,
    StreamChunk,
    Unauthorized,
    Unavailable,
)
from tests.support.mcphttp import McpHttp
from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

TIMEOUT = 10.0

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


async def next_matching(sub: Any, predicate: Callable[[Any], bool], timeout: float = TIMEOUT):
    """The first item of ``sub`` for which ``predicate`` holds (earlier ones are consumed)."""
    async with asyncio.timeout(timeout):
        while True:
            item = await sub.get()
            if predicate(item):
                return item


def joined(agent: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, MembersChanged) and m.joined == agent


def left(agent: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, MembersChanged) and m.left == agent


def node_tag(client: Client) -> str:
    assert client.registration is not None
    return client.registration.connection_id.split("-")[1]


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


async def test_cross_node_fan_out_in_one_order(cluster, clients):
    nodes = cluster(3)
    clients = [await clients(nodes[i % 3].url, f"agent-{i}") for i in range(9)]
    assert len({node_tag(c) for c in clients}) == 3
    for c in clients:
        await c.join("general")
    received = [c.events("general") for c in clients]
    per = 15

    async def publish(c: Client) -> list[Event]:
        # All of one publisher's messages are in flight at once (sent in this
        # order before any answer), so the hub has to keep their order itself.
        return await asyncio.gather(
            *(c.publish("general", {"n": n, "by": c.agent_id}) for n in range(per))
        )

    publishers = clients[:3]  # one on each node
    published = await asyncio.gather(*(publish(p) for p in publishers))
    total = per * len(publishers)

    async def collect(sub) -> list[Event]:
        return [await sub.get(timeout=20) for _ in range(total)]

    results = await asyncio.gather(*(collect(sub) for sub in received))
    reference = [e.event_id for e in results[0]]
    for events in results:
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and len(set(seqs)) == total
        assert [e.event_id for e in events] == reference
    seq_of = {e.event_id: e.seq for e in results[0]}
    for p, acks in zip(publishers, published, strict=True):
        assert [e.data["n"] for e in results[4] if e.sender == p.agent_id] == list(range(per))
        assert all(seq_of[e.event_id] == e.seq for e in acks)  # each publish() got its own event


async def test_a_publish_sent_just_before_leaving_is_acknowledged_before_the_leave(cluster):
    """Join, publish and leave sent back to back, an observer on another node:
    the publisher's acknowledgement (its echo, contract §4; the done of a
    publish the hub streamed, or of its own stream) comes before its
    ``space.left`` every time. A node on Redis gets its own events back
    through pub/sub; the leave used to take the publisher out of the fan-out
    before its event came back (about one time in five the publish went
    unanswered, though the observer got it)."""
    first, second = cluster(2, member_events_interval=0.2, stream_threshold=4096)
    observer = await WsClient.connect(second.url, "observer", heartbeat=True)
    neighbour = await WsClient.connect(first.url, "neighbour", heartbeat=True)
    publisher = await WsClient.connect(first.url, "publisher", heartbeat=True)
    ways = {
        "plain": [{"type": "space.publish", "data": {"text": "hi"}}],
        "big": [{"type": "space.publish", "data": {"text": "x" * 10_000}}],  # streamed
        "stream": [
            {"type": "space.event.delta", "data": {"text": "x"}},
            {"type": "space.event.done"},
        ],
    }
    acks = {"plain": "space.event", "big": "space.event.done", "stream": "space.event.done"}
    for trial in range(45):
        way = list(ways)[trial % 3]
        space = f"pl{trial}"
        await observer.join(space)
        await neighbour.join(space)  # the publisher's join is held a while (coalesced)
        rid = f"p{trial}"
        sent = [
            {"type": "space.join", "space": space},
            *({**m, "space": space, "event_id": f"s{trial}"} for m in ways[way]),
            {"type": "space.leave", "space": space},
        ]
        sent[-2]["id"] = rid
        for msg in sent:
            await publisher.send(msg)
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1].get("type") not in ("space.left", "error"):
            frames.append(await publisher.recv())
        kinds = [f["type"] for f in frames if f.get("type") != "space.members"]
        assert kinds[0] == "space.joined" and kinds[-1] == "space.left", (way, frames)
        ack = [f for f in frames if f.get("request_id") == rid]
        assert [f["type"] for f in ack] == [acks[way]], (way, frames)
        assert ack[0]["from"] == "publisher"
        seen = await observer.wait_for(acks[way], space=space)
        assert seen["seq"] == ack[0]["seq"], (way, seen, ack)


async def test_members_and_list_are_cluster_wide(cluster, clients):
    a_node, b_node = cluster(2)
    a = await clients(a_node.url, "alice")
    b = await clients(b_node.url, "bob")
    await a.join("general")
    seen_by_a = a.events("general", members=True)
    result = await b.join("general")
    assert result.members == ["alice", "bob"] and result.member_count == 2
    note = await next_matching(seen_by_a, joined("bob"))
    assert note.member_count == 2
    await b.join("task.only-bob")
    listing = await a.spaces()
    assert SpaceInfo("general", "public", 2) in listing
    assert SpaceInfo("task.only-bob", "public", 1) in listing
    with pytest.raises(Unauthorized) as refused:  # exists (on the other node), not a member
        await a.publish("task.only-bob", {})
    assert refused.value.code == "UNAUTHORIZED"
    await b.aclose()
    note = await next_matching(seen_by_a, left("bob"))
    assert note.members == ["alice"]


async def test_capacity_is_cluster_wide(cluster, clients):
    nodes = cluster(2, space_capacity=2)
    a = await clients(nodes[0].url, "a")
    b = await clients(nodes[1].url, "b")
    c = await clients(nodes[0].url, "c")
    await a.join("pair")
    await b.join("pair")
    with pytest.raises(SpaceFull) as refused:
        await c.join("pair")
    assert refused.value.code == "SPACE_FULL"


async def test_agent_exists_across_nodes(cluster, clients):
    n0, n1 = cluster(2)
    first = await clients(n0.url, "alice")
    with pytest.raises(AgentExists) as refused:
        await clients(n1.url, "alice")
    assert refused.value.code == "AGENT_EXISTS"
    # The SDK raises the refusal's error event but does not expose the close
    # code that follows it: the raw client checks that it is 4409.
    raw = await WsClient.connect(n1.url, "alice", registered=False)
    code, frames = await raw.closed()
    assert code == 4409 and frames[0]["code"] == "AGENT_EXISTS"
    assert first.connected
    await first.spaces()  # the holder is still answered


async def test_dead_holder_on_another_node_is_replaced(cluster, clients):
    n0, n1 = cluster(2)
    watcher = await clients(n1.url, "watcher")
    await watcher.join("general")
    seen = watcher.events("general", members=True)
    # The dead holder is a raw client: it keeps sending heartbeats but stops
    # reading (so it never answers the hub's ping). An SDK client that hears
    # nothing drops its own connection after heartbeat_timeout, which would
    # free the id without any liveness probe.
    ghost = await WsClient.connect(n0.url, "alice", heartbeat=True)
    await ghost.join("general")
    await next_matching(seen, joined("alice"))
    ghost.ws.transport.pause_reading()  # stops answering pings
    fresh = await clients(n1.url, "alice")
    assert node_tag(fresh) != ghost.registered["agent"]["connection_id"].split("-")[1]
    await next_matching(seen, left("alice"))
    await fresh.join("general")
    echo = await fresh.publish("general", {"x": 1})
    assert echo.sender == "alice" and echo.data["x"] == 1
    ghost.ws.transport.abort()


async def test_streams_and_cancels_across_nodes(cluster, clients):
    n0, n1 = cluster(2)
    pub = await clients(n0.url, "pub")
    r1 = await clients(n1.url, "r1")
    r2 = await clients(n1.url, "r2")
    for c in (pub, r1, r2):
        await c.join("room")
    at_r1 = r1.stream_events("room")
    at_r2 = r2.stream_events("room")

    def chunk(kind: str, event_id: str) -> Callable[[Any], bool]:
        return lambda m: isinstance(m, StreamChunk) and m.kind == kind and m.event_id == event_id

    e1 = pub.stream("room", event_id="e1")
    await e1.send("one")
    got = await next_matching(at_r1, chunk("delta", "pub/e1"))
    await r1.cancel_stream("room", "pub/e1")
    ack = await next_matching(at_r1, lambda m: m.event_id == "pub/e1")
    assert ack.kind == "cancel" and ack.reason == "receiver_cancelled"
    await e1.send("two")
    await e1.close()
    texts = []
    while True:
        msg = await next_matching(at_r2, lambda m: m.event_id == "pub/e1")
        if msg.kind == "done":
            break
        assert msg.kind == "delta"
        texts.append(msg.text)
    assert texts == ["one", "two"] and got.text == "one"
    # Publisher cancel and publisher disconnect reach the other node.
    e2 = pub.stream("room", event_id="e2")
    await e2.send("x")
    await e2.cancel()
    end = await next_matching(at_r2, chunk("cancel", "pub/e2"))
    assert end.reason == "cancelled"
    e3 = pub.stream("room", event_id="e3")
    await e3.send("y")
    await next_matching(at_r2, chunk("delta", "pub/e3"))
    await pub.aclose()  # e3 still open
    end = await next_matching(at_r2, chunk("cancel", "pub/e3"))
    assert end.reason == "publisher_disconnected"
    # r1 cancelled e1 as a receiver: up to the end of e3 it never saw "two" or the done.
    rest = [await at_r1.get(timeout=TIMEOUT)]
    while not chunk("cancel", "pub/e3")(rest[-1]):
        rest.append(await at_r1.get(timeout=TIMEOUT))
    assert [m for m in rest if m.event_id == "pub/e1"] == []
    assert rest[-1].reason == "publisher_disconnected"


async def test_a_stream_of_a_killed_node_ends_as_a_disconnect(cluster, clients):
    """The publisher's node dies mid-stream: once it is reaped, receivers on
    other nodes get the cancel a disconnect gives — not, 2 × stream_idle_timeout
    later (60 s by default), an idle timeout."""
    n0, n1 = cluster(2, stream_idle_timeout=300.0)
    pub = await clients(n0.url, "pub")
    receiver = await clients(n1.url, "receiver")
    for c in (pub, receiver):
        await c.join("room")
    chunks = receiver.stream_events("room")
    stream = pub.stream("room", event_id="long")
    await stream.send("first words")
    first = await next_matching(chunks, lambda m: isinstance(m, StreamChunk))
    assert (first.kind, first.event_id) == ("delta", "pub/long")
    os.kill(n0.proc.pid, signal.SIGKILL)
    end = await next_matching(
        chunks, lambda m: isinstance(m, StreamChunk) and m.event_id == "pub/long", timeout=30
    )
    assert (end.kind, end.reason) == ("cancel", "publisher_disconnected")


async def back_on(node: Any, agent_id: str) -> WsClient:
    """``agent_id`` connected to ``node`` as soon as its holder on a killed
    node is found dead (what the SDKs' reconnect does)."""
    async with asyncio.timeout(30):
        while True:
            try:
                return await WsClient.connect(node.url, agent_id, heartbeat=True)
            except Exception:
                await asyncio.sleep(0.2)


async def _stream_then_killed(
    cluster: Any, clients: Any, event_id: str, text: str
) -> tuple[Any, WsClient]:
    """``pub`` on node 0 opens stream ``event_id`` to ``receiver`` on node 1;
    node 0 is SIGKILLed and ``pub`` is back at once on node 1, in the space:
    the receiver's stream events and ``pub``'s new connection."""
    n0, n1 = cluster(2, stream_idle_timeout=300.0)
    pub = await WsClient.connect(n0.url, "pub", heartbeat=True)
    receiver = await clients(n1.url, "receiver")
    await receiver.join("room")
    await pub.join("room")
    chunks = receiver.stream_events("room")
    await pub.send({"type": "space.event.delta", "space": "room", "event_id": event_id,
                    "data": {"text": text}})  # fmt: skip
    first = await next_matching(chunks, lambda m: isinstance(m, StreamChunk))
    assert (first.kind, first.event_id) == ("delta", f"pub/{event_id}")
    os.kill(n0.proc.pid, signal.SIGKILL)
    back = await back_on(n1, "pub")
    await back.join("room")
    return chunks, back


async def test_a_stream_of_a_killed_node_ends_even_when_its_publisher_is_back_at_once(
    cluster, clients
):
    """As above, with the publisher reconnecting to the receiver's node right
    after its node died (the SDKs do): the stream was the dead connection's,
    and ends with ``publisher_disconnected`` once that node is reaped — not at
    the idle timeout because the agent id is held again."""
    chunks, back = await _stream_then_killed(cluster, clients, "long", "first words")
    end = await next_matching(
        chunks, lambda m: isinstance(m, StreamChunk) and m.event_id == "pub/long", timeout=30
    )
    assert (end.kind, end.reason) == ("cancel", "publisher_disconnected")
    await back.close()


async def test_a_stream_id_reused_after_its_node_was_killed_ends_the_old_stream_first(
    cluster, clients
):
    """The publisher back at once, opening a stream with the same id again
    (ids are unique among one connection's streams only): receivers get the
    old stream's end (``publisher_disconnected``) before the new one's first
    delta — the new text never continues the old (outside audit: it did)."""
    chunks, back = await _stream_then_killed(cluster, clients, "k", "OLD-")
    delta = {"type": "space.event.delta", "space": "room", "event_id": "k"}
    await back.send({**delta, "data": {"text": "new"}})
    await back.send({"type": "space.event.done", "space": "room", "event_id": "k"})
    seen = []
    while not seen or seen[-1][0] != "done":
        chunk = await next_matching(
            chunks, lambda m: isinstance(m, StreamChunk) and m.event_id == "pub/k", timeout=30
        )
        seen.append((chunk.kind, chunk.reason if chunk.kind == "cancel" else chunk.text))
    assert seen == [("cancel", "publisher_disconnected"), ("delta", "new"), ("done", "")], seen
    await back.close()


async def test_an_agent_back_at_once_from_a_killed_node_is_offline_then_online(cluster, clients):
    """Its id taken over from a dead node, the old connection is announced
    ``offline`` before the new one ``online`` — as for a holder replaced on a
    live node (found by an outside audit: watchers got ``online`` twice)."""
    n0, n1 = cluster(2)
    watcher = await clients(n1.url, "watcher")
    await watcher.join("agent.status")
    status = watcher.events("agent.status")
    await WsClient.connect(n0.url, "mover", heartbeat=True)  # its node is killed below
    first = await next_matching(status, lambda e: e.data["agent"]["id"] == "mover")
    assert first.data["event"] == "online"
    os.kill(n0.proc.pid, signal.SIGKILL)
    back = await back_on(n1, "mover")
    told = []
    while "online" not in told:
        event = await next_matching(status, lambda e: e.data["agent"]["id"] == "mover")
        told.append(event.data["event"])
    assert told == ["offline", "online"], told
    await back.close()


async def test_killed_node_is_cleaned_up_by_the_others(cluster, clients):
    n0, n1 = cluster(2)
    survivor = await clients(n1.url, "survivor")
    await survivor.join("general")
    await survivor.join("agent.status")
    members = survivor.events("general", members=True)
    status = survivor.events("agent.status")
    doomed = await clients(n0.url, "doomed")
    await doomed.join("general")
    await next_matching(members, joined("doomed"))
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    os.kill(n0.proc.pid, signal.SIGKILL)
    note, offline = await asyncio.gather(
        next_matching(members, left("doomed"), timeout=20),
        next_matching(status, lambda e: e.data.get("event") == "offline", timeout=20),
    )
    elapsed = loop.time() - killed_at
    assert note.members == ["survivor"]
    assert offline.sender == "@hub" and offline.data["agent"]["id"] == "doomed"
    assert elapsed < 2 * CLUSTER["heartbeat_timeout"] + 2.0  # generous: a busy machine
    assert SpaceInfo("general", "public", 1) in await survivor.spaces()
    # The id is free again, on the surviving node.
    back = await clients(n1.url, "doomed")
    assert back.registration is not None and back.registration.agent_id == "doomed"


async def test_a_node_reaped_while_paused_announces_its_agents_again(cluster, clients):
    """A live node that stops beating (an event loop stalled, a VM paused) is
    reaped and its agents announced gone; once it runs again it restores them,
    and the others hear they are back — not only a newcomer reading the list."""
    fast_nodes = {"node_heartbeat_interval": 0.2, "node_heartbeat_timeout": 1.0}
    n0, n1 = cluster(2, heartbeat_timeout=20.0, **fast_nodes)
    survivor = await clients(n1.url, "survivor")
    await survivor.join("general")
    await survivor.join("agent.status")
    members = survivor.events("general", members=True)
    status = survivor.events("agent.status")

    def status_of(event: str) -> Callable[[Any], bool]:
        return lambda e: e.data.get("event") == event and e.data["agent"]["id"] == "napper"

    # A raw client: it neither heartbeats nor reconnects while its node sleeps.
    napper = await WsClient.connect(n0.url, "napper")
    await napper.join("general")
    await next_matching(members, joined("napper"))
    os.kill(n0.proc.pid, signal.SIGSTOP)
    try:
        await next_matching(members, left("napper"), timeout=20)
        await next_matching(status, status_of("offline"), timeout=20)
    finally:
        os.kill(n0.proc.pid, signal.SIGCONT)
    back, online = await asyncio.gather(
        next_matching(members, joined("napper"), timeout=20),
        next_matching(status, status_of("online"), timeout=20),
    )
    assert set(back.members) == {"survivor", "napper"}
    assert online.sender == "@hub"
    # The napper never noticed: same connection, still a member.
    listed = await napper.request({"type": "space.members", "space": "general"})
    assert set(listed["members"]) == {"survivor", "napper"}


async def test_the_hubs_own_agents_survive_a_redis_restart(redis_server, cluster, clients):
    """Every node hosts its own copy of the hub's agent ``mcp`` under that one
    id. Restoring presence in an emptied Redis must not make one node's copy a
    duplicate of another's (it was closed 4409, and that node's MCP calls hung)."""
    nodes = cluster(2)
    sub = await clients(nodes[0].url, "sub", request_timeout=20)
    other = await clients(nodes[1].url, "other", request_timeout=20)
    await sub.join("general")
    await other.join("general")
    received = sub.events("general")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
        mcps = [McpHttp(http, node.http_url, agent_id=f"caller{n}") for n, node in enumerate(nodes)]

        async def publish_via_each_node(round_: str) -> None:
            for n, mcp in enumerate(mcps):
                text = f"{round_} via node{n}"
                result = await mcp.call("space_publish", {"space": "general", "text": text})
                assert not result.get("isError"), result
                assert (await received.get(timeout=TIMEOUT)).data["text"] == text

        await publish_via_each_node("before")
        redis_server.kill()
        await wait_ready(nodes[0], 503)
        await wait_ready(nodes[1], 503)
        redis_server.start()
        await wait_ready(nodes[0], 200)
        await wait_ready(nodes[1], 200)
        # Both nodes restored their members (a newcomer sees both agents).
        late = await clients(nodes[0].url, "late", request_timeout=20)
        async with asyncio.timeout(30):
            while not {"sub", "other"} <= set((await late.join("general")).members):
                await late.leave("general")
                await asyncio.sleep(0.2)  # restoring is a node's own timer: nothing to wait on
        await publish_via_each_node("after")


async def test_redis_outage_is_survived_without_silent_loss(redis_server, cluster, clients):
    n0, n1 = cluster(2)
    pub = await clients(n0.url, "pub", request_timeout=20)
    sub = await clients(n1.url, "sub", request_timeout=20)
    await pub.join("general")
    await sub.join("general")
    received = sub.events("general")
    before = await pub.publish("general", {"i": 0})
    got = await received.get(timeout=TIMEOUT)
    assert got.event_id == before.event_id

    redis_server.kill()
    await wait_ready(n0, 503)
    await wait_ready(n1, 503)
    # During the outage a publish is refused, never silently dropped.
    with pytest.raises(Unavailable) as refused:
        await pub.publish("general", {"i": 1})
    assert refused.value.code == "UNAVAILABLE" and refused.value.request_id
    # Local connections stay up and are still answered.
    assert isinstance(await sub.ping(), int)

    redis_server.start()
    await wait_ready(n0, 200)
    await wait_ready(n1, 200)
    after = await pub.publish("general", {"i": 2})
    got = await received.get(timeout=20)
    # The refused publish was not carried out: the next event sub sees is this one.
    assert got.event_id == after.event_id and got.data["i"] == 2
    assert got.seq > before.seq  # strictly increasing across the restart
    # Members were restored in the empty Redis: a newcomer sees both.
    late = await clients(n0.url, "late")
    result = await late.join("general")
    assert set(result.members) == {"pub", "sub", "late"}
    # Neither connection dropped (without reconnect, a drop would be final).
    assert pub.connected and sub.connected
    assert pub.closed_error is None and sub.closed_error is None


async def test_membership_changes_a_node_missed_while_cut_off_are_told(
    redis_server, hub_process, proxy, clients
):
    """A node whose link to Redis is down while another node announces a
    leave and a join (an outage it comes back from later than the others: each
    node reconnects on its own backoff) misses those ``space.members`` events,
    which carry no seq. Once back it tells its members what changed meanwhile,
    before anything of the space newer than its return (contract §21: changes
    are never dropped, and no member sees an event of an agent whose join it
    was not told of)."""
    slow_reap = {**CLUSTER, "heartbeat_timeout": 30.0, "node_heartbeat_timeout": 30.0}
    n0 = hub_process(redis_url=redis_server.url, node_id="node0", **slow_reap)
    link = await proxy(redis_server.port)
    n1 = hub_process(redis_url=f"redis://127.0.0.1:{link.port}/0", node_id="node1", **slow_reap)
    watcher = await clients(n0.url, "watcher")  # on the node that stays connected
    sub = await clients(n1.url, "sub", request_timeout=20)
    leaver = await clients(n0.url, "leaver")
    for agent in (watcher, sub, leaver):
        await agent.join("general")
    seen_by_sub = sub.events("general", members=True)
    seen_by_watcher = watcher.events("general", members=True)
    await next_matching(seen_by_sub, joined("leaver"))

    link.refuse()  # node1 loses Redis; node0 does not
    await wait_ready(n1, 503)
    await leaver.leave("general")
    newcomer = await clients(n0.url, "newcomer")
    await newcomer.join("general")
    # node0 announced both (its own member heard them) while node1 could not hear.
    await told_until(seen_by_watcher, {("left", "leaver"), ("joined", "newcomer")})

    link.admit()
    await wait_ready(n1, 200)
    await newcomer.publish("general", {"text": "hello"})
    # The news of the newcomer's join comes before its event.
    told = await told_until(seen_by_sub, {("left", "leaver"), ("joined", "newcomer")})
    assert told == {("left", "leaver"), ("joined", "newcomer")}
    event = await seen_by_sub.get(timeout=TIMEOUT)
    assert event.sender == "newcomer" and event.data["text"] == "hello"


async def test_an_event_published_while_a_node_was_cut_off_reaches_it_in_a_quiet_space(
    redis_server, hub_process, proxy, clients
):
    """A node whose link to Redis is down misses what another node publishes
    meanwhile (nodes come back from a Redis restart each on its own backoff).
    Its members must get it once the node is back — not only when the space's
    next event shows the gap: in a quiet space there is none (an asker would
    wait for a reply that is never delivered)."""
    slow_reap = {**CLUSTER, "heartbeat_timeout": 30.0, "node_heartbeat_timeout": 30.0}
    n0 = hub_process(redis_url=redis_server.url, node_id="node0", **slow_reap)
    link = await proxy(redis_server.port)
    n1 = hub_process(redis_url=f"redis://127.0.0.1:{link.port}/0", node_id="node1", **slow_reap)
    speaker = await clients(n0.url, "speaker")
    listener = await clients(n1.url, "listener", request_timeout=20)
    await speaker.join("quiet")
    await listener.join("quiet")
    heard = listener.events("quiet")
    await speaker.publish("quiet", {"text": "before"})
    assert (await heard.get(timeout=TIMEOUT)).data["text"] == "before"

    link.refuse()  # node1 loses Redis; node0 does not
    await wait_ready(n1, 503)
    await speaker.publish("quiet", {"text": "while away"})
    link.admit()
    await wait_ready(n1, 200)
    event = await heard.get(timeout=TIMEOUT)  # and nothing else is published
    assert event.data["text"] == "while away" and event.sender == "speaker"


async def told_until(sub: Any, want: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The changes ``sub``'s ``space.members`` events told, as ``("joined"|"left",
    agent)``, read until they include ``want``; an event before then fails."""
    told: set[tuple[str, str]] = set()
    async with asyncio.timeout(TIMEOUT):
        while not want <= told:
            item = await sub.get()
            assert isinstance(item, MembersChanged), f"{item} before {want - told} was told"
            told |= {("joined", a) for a in item.joined_ids}
            told |= {("left", a) for a in item.left_ids}
    return told


async def test_a_space_whose_keys_redis_lost_while_linked_never_goes_back_in_seq(
    redis_server, cluster
):
    """``FLUSHALL`` (or eviction) with every link up: the next publish begins the
    space again at seq 1 under a new epoch. Members that stayed connected had
    seen seqs 1–3: they must never get a seq again (found by an outside audit:
    they got 1, 2, … a second time, told nothing). They are closed
    ``UNAVAILABLE``/1013 before that event, and resuming tells them
    ``recovered: false`` with the new epoch."""
    import redis.asyncio as aioredis

    n0, n1 = cluster()
    a = await WsClient.connect(n0.url, "a", heartbeat=True)
    b = await WsClient.connect(n1.url, "b", heartbeat=True)
    await a.join("f")
    joined = await b.join("f")
    for i in range(1, 4):
        await a.send({"type": "space.publish", "space": "f", "data": {"text": f"e{i}"}})
        assert (await b.wait_for("space.event", timeout=TIMEOUT))["seq"] == i
    redis = aioredis.from_url(redis_server.url)
    await redis.flushall()
    await redis.aclose()
    await a.send({"type": "space.publish", "space": "f", "data": {"text": "after"}})
    for member in (a, b):
        code, frames = await member.closed(timeout=TIMEOUT)
        assert code == 1013, (code, frames)
        seqs = [f["seq"] for f in frames if f.get("type") == "space.event"]
        assert seqs == sorted(set(seqs)) and set(seqs) <= {1, 2, 3}, frames  # a's echoes
        assert [f["code"] for f in frames if f.get("type") == "error"] == ["UNAVAILABLE"]
    back = await WsClient.connect(n1.url, "b")
    since = {"seq": 3, "epoch": joined["epoch"]}
    rejoined = await back.request({"type": "space.join", "space": "f", "since": since})
    assert rejoined["type"] == "space.joined" and rejoined["recovered"] is False, rejoined
    assert rejoined["epoch"] != joined["epoch"]
    await back.close()


async def test_joining_a_quiet_space_again_is_answered(cluster):
    """A node that joined a member to a space whose last event came before it
    subscribed keeps filtering that member's frames until it delivers an event
    up to the join's position — in a quiet space, never. Leaving and joining
    again went unanswered: the old filter dropped the new ``space.joined``
    (its seq is not above the old position). Found by an outside audit."""
    n0, n1 = cluster()
    speaker = await WsClient.connect(n0.url, "speaker", heartbeat=True)
    await speaker.join("quiet")
    await speaker.request({"type": "space.publish", "space": "quiet", "data": {"text": "hi"}})
    rejoiner = await WsClient.connect(n1.url, "rejoiner", heartbeat=True)
    first = await rejoiner.join("quiet")
    assert first["seq"] == 1
    left = await rejoiner.request({"type": "space.leave", "space": "quiet"})
    assert left["type"] == "space.left", left
    again = await rejoiner.request({"type": "space.join", "space": "quiet"}, timeout=TIMEOUT)
    assert again["type"] == "space.joined" and again["seq"] == 1, again
    since = {"seq": 0, "epoch": first["epoch"]}  # a resume below the old boundary
    await rejoiner.request({"type": "space.leave", "space": "quiet"})
    resumed = await rejoiner.request(
        {"type": "space.join", "space": "quiet", "since": since}, timeout=TIMEOUT
    )
    assert resumed["type"] == "space.joined" and resumed["recovered"] is True, resumed
    replayed = await rejoiner.wait_for("space.event", timeout=TIMEOUT)
    assert replayed["seq"] == 1 and replayed["data"]["text"] == "hi"
    await speaker.close()
    await rejoiner.close()
