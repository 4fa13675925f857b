"""Publishing: membership, stamps, echo, order, fan-out."""

import asyncio

from agora_client import Client, Event
from tests.support.wsclient import WsClient


async def test_event_stamps_and_echo(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")
    await b.join("general")
    echo = await a.request(
        {
            "type": "space.publish",
            "id": "msg_004",
            "space": "general",
            "data": {"text": "Hello everyone", "timestamp": 1234567890},
        }
    )
    got = await b.wait_for("space.event")
    assert got == echo
    assert set(got) == {
        "type",
        "space",
        "event_id",
        "seq",
        "from",
        "timestamp",
        "data",
        "request_id",
    }
    assert got["from"] == "alice" and got["data"]["from"] == "alice"
    assert got["data"]["timestamp"] == 1234567890  # what was published is kept
    assert isinstance(got["timestamp"], int) and got["timestamp"] > 1_600_000_000_000
    second = await a.request({"type": "space.publish", "space": "general", "data": {"n": 2}})
    assert second["seq"] > echo["seq"] and second["event_id"] != echo["event_id"]
    await a.close()
    await b.close()


async def test_echo_false_acks_without_echo(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")
    await b.join("general")
    ack = await a.request(
        {"type": "space.publish", "space": "general", "echo": False, "data": {"text": "quiet"}}
    )
    assert ack["type"] == "space.published"
    got = await b.wait_for("space.event")
    assert (got["event_id"], got["seq"]) == (ack["event_id"], ack["seq"])
    # The sender sees its next echoed event, not the silent one.
    echo = await a.request({"type": "space.publish", "space": "general", "data": {"n": 2}})
    assert echo["seq"] == ack["seq"] + 1
    assert all(m.get("event_id") != ack["event_id"] for m in a.backlog)
    await a.close()
    await b.close()


async def test_publish_rules(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await b.join("general")
    err = await a.request({"type": "space.publish", "space": "general", "data": {}})
    assert err["code"] == "UNAUTHORIZED"
    err = await a.request({"type": "space.publish", "space": "nowhere", "data": {}})
    assert err["code"] == "SPACE_NOT_FOUND"
    await a.join("general")
    err = await a.request({"type": "space.publish", "space": "general", "data": {"from": "bob"}})
    assert err["code"] == "INVALID_REQUEST" and "from" in err["message"]
    err = await a.request({"type": "space.publish", "space": "general", "data": "text"})
    assert err["code"] == "INVALID_REQUEST"
    await a.close()
    await b.close()


async def test_two_hundred_agents_receive_every_event_in_seq_order(hub):
    # 200 SDK agents (agora_client), heartbeating like real ones.
    server = await hub(rate_limit=10_000, rate_burst=10_000)
    clients = [Client(server.url, f"agent-{i:03}") for i in range(200)]
    try:
        await asyncio.gather(*(c.connect() for c in clients))
        for c in clients:
            await c.join("all")
        received = [c.events("all") for c in clients]
        publishers = clients[:4]
        per_publisher = 25

        async def publish(c: Client) -> list[Event]:
            # All of one publisher's messages are in flight at once (sent in
            # this order before any answer): the hub has to keep their order.
            return await asyncio.gather(
                *(c.publish("all", {"n": n, "by": c.agent_id}) for n in range(per_publisher))
            )

        published = await asyncio.gather(*(publish(p) for p in publishers))
        total = len(publishers) * per_publisher

        async def collect(sub) -> list[Event]:
            return [await sub.get(timeout=30) for _ in range(total)]

        results = await asyncio.gather(*(collect(sub) for sub in received))
        reference = [e.event_id for e in results[0]]
        for events in results:
            seqs = [e.seq for e in events]
            assert seqs == sorted(seqs) and len(set(seqs)) == total
            assert [e.event_id for e in events] == reference  # one order for everyone
        seq_of = {e.event_id: e.seq for e in results[0]}
        for p, acks in zip(publishers, published, strict=True):  # each keeps its own order
            ns = [e.data["n"] for e in results[-1] if e.sender == p.agent_id]
            assert ns == list(range(per_publisher))
            assert all(seq_of[e.event_id] == e.seq for e in acks)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
