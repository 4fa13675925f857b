"""Producers hear that nobody receives their stream any more (contract §19):
a WebSocket agent streaming on one node of a Redis-backed cluster, its askers
on another, cancelling, leaving, disconnecting, dying with their node. The
producer is a raw WebSocket client, to see the exact frames."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest

from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

SPACE = "room"
WAIT = 10.0  # generous: a busy machine; the budget checked is the contract's second
BUDGET = 1.0


@pytest.fixture
async def two_nodes(hub, redis_server) -> tuple[Any, Any]:
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    return await hub(**settings), await hub(**settings)


async def member(server: Any, agent_id: str) -> WsClient:
    client = await WsClient.connect(server.url, agent_id, heartbeat=True)
    await client.join(SPACE)
    return client


def delta(eid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "space.event.delta", "space": SPACE, "event_id": eid,
            "data": {"text": text}, **extra}  # fmt: skip


async def notice(producer: WsClient, eid: str, timeout: float = WAIT) -> dict[str, Any]:
    """The producer's notice for its stream ``eid`` (its own id)."""
    return await producer.wait_for("space.event.cancel", timeout, event_id=eid)


async def receiver_cancel(receiver: WsClient, stream: str) -> None:
    msg = {"type": "space.event.cancel", "space": SPACE, "event_id": stream}
    ack = await receiver.request(msg)
    assert (ack["type"], ack["reason"]) == ("space.event.cancel", "receiver_cancelled")


async def test_the_askers_cancel_on_another_node_reaches_the_producer(two_nodes):
    one, two = two_nodes
    producer, asker = await member(one, "producer"), await member(two, "asker")
    await producer.send(delta("answer-1", "The ", to="asker"))
    first = await asker.wait_for("space.event.delta", event_id="producer/answer-1")
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    await receiver_cancel(asker, first["event_id"])
    told = await notice(producer, "answer-1")
    assert loop.time() - cancelled_at < BUDGET
    assert told == {
        "type": "space.event.cancel",
        "space": SPACE,
        "event_id": "answer-1",
        "from": "asker",
        "timestamp": told["timestamp"],
        "reason": "receiver_cancelled",
    }
    # Its echo copy of the stream ends too (hub-side id), like every copy.
    echo = await producer.wait_for("space.event.cancel", WAIT, event_id="producer/answer-1")
    assert (echo["from"], echo["reason"]) == ("producer", "receiver_cancelled")
    # What it had in flight is dropped without a word; its done is answered.
    for word in ("answer ", "is ", "42"):
        await producer.send(delta("answer-1", word))
    await producer.send({"type": "space.event.done", "space": SPACE, "event_id": "answer-1",
                         "id": "fin"})  # fmt: skip
    answer = await producer.wait_for("space.event.cancel", WAIT, id="fin")
    assert (answer["event_id"], answer["from"]) == ("answer-1", "asker")
    marker = await producer.request({"type": "space.publish", "space": SPACE, "data": {}})
    assert marker["type"] == "space.event"
    assert [m for m in producer.backlog if m.get("type") == "error"] == []
    ping = await asker.wait_for("space.event", event_id=marker["event_id"])
    assert ping["seq"] == marker["seq"]
    assert [m for m in asker.backlog if m.get("type") == "space.event.delta"] == []
    for c in (producer, asker):
        await c.close()


@pytest.mark.parametrize("how", ["leave", "disconnect"])
async def test_an_asker_that_goes_away_counts_as_left(two_nodes, how):
    one, two = two_nodes
    producer, asker = await member(one, "producer"), await member(two, "asker")
    await producer.send(delta("a1", "thinking", to="asker"))
    await asker.wait_for("space.event.delta", event_id="producer/a1")
    loop = asyncio.get_running_loop()
    gone_at = loop.time()
    if how == "leave":
        left = await asker.request({"type": "space.leave", "space": SPACE})
        assert left["type"] == "space.left"
    else:
        await asker.close()
    told = await notice(producer, "a1")
    assert loop.time() - gone_at < BUDGET
    assert (told["from"], told["reason"]) == ("asker", "receivers_left")
    await producer.close()
    if how == "leave":
        await asker.close()


async def round_trip(producer: WsClient, other: WsClient) -> None:
    """A barrier through ``other``'s node: the producer publishes, ``other``
    sees it and publishes, the producer sees that. What the producer's node
    asked ``other``'s node before (a census) has been answered by then."""
    marker = await producer.request({"type": "space.publish", "space": SPACE, "data": {}})
    await other.wait_for("space.event", event_id=marker["event_id"])
    back = await other.request({"type": "space.publish", "space": SPACE, "data": {}})
    await producer.wait_for("space.event", event_id=back["event_id"])


def told_of(producer: WsClient, eid: str) -> list[dict[str, Any]]:
    return [m for m in producer.backlog if m.get("event_id") == eid]


async def test_an_unaddressed_stream_waits_for_its_last_current_receiver(two_nodes):
    """Receivers on both nodes; one who joins mid-stream does not count."""
    one, two = two_nodes
    producer = await member(one, "producer")
    near, far = await member(one, "near"), await member(two, "far")
    await producer.send(delta("s", "hello"))
    for r in (near, far):
        await r.wait_for("space.event.delta", event_id="producer/s")
    late = await member(two, "late")  # joins mid-stream: gets none of it
    await producer.send(delta("s", " world"))
    await far.wait_for("space.event.delta", event_id="producer/s")
    await receiver_cancel(far, "producer/s")
    for _ in range(2):
        await round_trip(producer, far)
    assert told_of(producer, "s") == [], "near still reads it"
    await receiver_cancel(near, "producer/s")
    told = await notice(producer, "s")
    assert (told["from"], told["reason"]) == ("near", "receiver_cancelled")
    assert [m for m in late.backlog if m.get("event_id") == "producer/s"] == []
    for c in (producer, near, far, late):
        await c.close()


async def test_the_census_hears_a_receiver_on_the_other_node(two_nodes):
    """The first receiver to go is on the producer's own node: the other
    node's receiver keeps the stream going until it goes too."""
    one, two = two_nodes
    producer = await member(one, "producer")
    near, far = await member(one, "near"), await member(two, "far")
    await producer.send(delta("s", "x", echo=False))
    for r in (near, far):
        await r.wait_for("space.event.delta", event_id="producer/s")
    await near.close()
    await round_trip(producer, far)
    assert told_of(producer, "s") == [], "far still reads it"
    await producer.send(delta("s", "y"))
    more = await far.wait_for("space.event.delta", event_id="producer/s")
    assert more["data"]["text"] == "y"
    await far.request({"type": "space.leave", "space": SPACE})
    told = await notice(producer, "s")
    assert (told["from"], told["reason"]) == ("far", "receivers_left")
    await producer.close()
    await far.close()


CLUSTER = {"heartbeat_interval": 0.5, "heartbeat_timeout": 2.0, "liveness_probe_timeout": 0.5}


async def test_an_askers_node_dying_counts_as_the_asker_leaving(redis_server, hub_process):
    n0 = hub_process(redis_url=redis_server.url, node_id="node0", **CLUSTER)
    n1 = hub_process(redis_url=redis_server.url, node_id="node1", **CLUSTER)
    producer, asker = await member(n0, "producer"), await member(n1, "asker")
    await producer.send(delta("a1", "thinking", to="asker"))
    await producer.send(delta("a2", "unaddressed"))
    await asker.wait_for("space.event.delta", event_id="producer/a1")
    await asker.wait_for("space.event.delta", event_id="producer/a2")
    os.kill(n1.proc.pid, signal.SIGKILL)
    # Reaped once its node is judged dead (about 2-3 s on these settings).
    for eid in ("a1", "a2"):
        told = await notice(producer, eid, timeout=30)
        assert (told["from"], told["reason"]) == ("asker", "receivers_left")
    await producer.close()
