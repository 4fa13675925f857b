"""The client SDK against a real in-process hub: requests, errors, heartbeats, reconnect."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agora_client import (
    AgentExists,
    Backoff,
    Client,
    ConnectionClosed,
    ConnectionFailed,
    Event,
    HubClientError,
    HubRejected,
    InvalidRequest,
    MembersChanged,
    SpaceNotFound,
    Unauthorized,
)
from tests.support.servers import free_port
from tests.support.wsclient import WsClient

TIMEOUT = 10.0


async def next_matching(sub: Any, predicate: Callable[[Any], bool], timeout: float = TIMEOUT):
    """The first item of ``sub`` for which ``predicate`` holds."""
    async with asyncio.timeout(timeout):
        while True:
            item = await sub.get()
            if predicate(item):
                return item


async def test_connect_waits_for_registration(hub, clients):
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=1.0)
    c = await clients(server, "alice")
    assert c.connected
    reg = c.registration
    assert reg is not None and reg.agent_id == "alice" and reg.connection_id
    assert reg.heartbeat_interval == pytest.approx(0.2)
    assert reg.heartbeat_timeout == pytest.approx(1.0)


async def test_concurrent_requests_are_matched_by_id(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    await a.join("general")
    await b.join("general")
    seen_by_b = b.events("general")

    texts = [f"message {i}" for i in range(40)]
    spaces = [f"room-{i}" for i in range(5)]
    results = await asyncio.gather(
        *(a.publish("general", {"text": t, "n": i}) for i, t in enumerate(texts)),
        *(a.join(s) for s in spaces),
        a.spaces(),
    )
    published: list[Event] = results[: len(texts)]
    joins = results[len(texts) : len(texts) + len(spaces)]
    listing = results[-1]

    # Every publish got the acknowledgement of its own event, not a neighbour's.
    for i, (text, event) in enumerate(zip(texts, published, strict=True)):
        assert event.data["text"] == text and event.data["n"] == i
        assert event.sender == "alice" and event.space == "general"
    assert len({e.request_id for e in published}) == len(texts)
    assert len({e.seq for e in published}) == len(texts)
    assert [j.space for j in joins] == spaces
    assert all(j.members == ["alice"] for j in joins)
    assert "general" in {s.id for s in listing}

    # The other member sees the same events in seq order.
    received = [await seen_by_b.get(TIMEOUT) for _ in texts]
    assert [e.seq for e in received] == sorted(e.seq for e in published)
    assert {e.event_id for e in received} == {e.event_id for e in published}


async def test_two_clients_publishing_at_once_each_get_their_own_ack(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    await a.join("general")
    await b.join("general")
    # Both clients pick the same request ids ("c3", "c4", …): the hub echoes
    # other agents' request ids too, so acks must be matched on the sender.
    got = await asyncio.gather(
        *(a.publish("general", f"a{i}") for i in range(15)),
        *(b.publish("general", f"b{i}") for i in range(15)),
    )
    assert [e.text for e in got] == [f"a{i}" for i in range(15)] + [f"b{i}" for i in range(15)]
    assert [e.sender for e in got] == ["alice"] * 15 + ["bob"] * 15


async def test_publish_without_echo_and_too_big_for_one_frame(hub, clients):
    server = await hub(stream_threshold=1024, stream_chunk=256)
    a = await clients(server, "alice")
    await a.join("general")
    quiet = await a.publish("general", {"text": "no echo"}, echo=False)
    assert isinstance(quiet.timestamp, int) and quiet.seq > 0 and quiet.data["text"] == "no echo"

    big = "é" * 3000  # 6000 bytes: the hub sends it as deltas and a done
    event = await a.publish("general", big)
    assert event.streamed and event.text == big and event.event_id.startswith("alice/")
    assert event.seq > quiet.seq


async def test_hub_errors_become_typed_exceptions(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    await b.join("general")

    with pytest.raises(Unauthorized) as info:
        await a.publish("general", "not a member")
    err = info.value
    assert isinstance(err, HubRejected) and isinstance(err, HubClientError)
    assert err.code == "UNAUTHORIZED" and "general" in err.message
    assert isinstance(err.request_id, str) and err.request_id in str(err)

    with pytest.raises(SpaceNotFound) as info:
        await a.publish("nowhere", "hello")
    assert info.value.code == "SPACE_NOT_FOUND"

    with pytest.raises(InvalidRequest) as info:
        await a.join("Not A Space!")
    assert info.value.code == "INVALID_REQUEST"

    with pytest.raises(InvalidRequest):
        await a.leave("general")  # not a member

    await a.join("agent.status")
    with pytest.raises(Unauthorized):
        await a.publish("agent.status", "system spaces are read-only")

    # Errors did not disturb the connection.
    assert await a.ping()

    # A refused registration fails connect() and leaves nothing running.
    bad = Client(server.url, "carol", agent_type="t" * 100, reconnect=True)
    with pytest.raises(InvalidRequest):
        await bad.connect()
    assert not bad.connected
    await bad.aclose()
    await a.join("general")
    assert (await a.publish("general", "now a member")).sender == "alice"


async def test_refusals_when_connecting(hub, clients, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"alice": "s3cret"}))
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens))

    with pytest.raises(Unauthorized) as info:
        await Client(server.url, "alice", token="wrong").connect()
    assert info.value.code == "UNAUTHORIZED"

    alice = await clients(server, "alice", token="s3cret")
    assert alice.connected
    with pytest.raises(AgentExists):
        await Client(server.url, "alice", token="s3cret").connect()
    assert await alice.ping()

    with pytest.raises(ConnectionFailed) as failed:
        await Client(f"ws://127.0.0.1:{free_port()}/ws", "alice", open_timeout=5).connect()
    assert "connection refused" in str(failed.value)

    with pytest.raises(ValueError):
        Client(server.url, "not valid!")


async def test_heartbeats_keep_a_quiet_connection_alive(hub, clients):
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=1.0)
    sdk = await clients(server, "quiet-sdk")
    await sdk.join("quiet")
    # A raw client that never sends anything is the clock: it connected after
    # the SDK client, so by the time the hub drops it for silence, the SDK
    # client has sent no request for longer than the heartbeat timeout.
    raw = await WsClient.connect(server.url, "quiet-raw")
    code, frames = await raw.closed(timeout=TIMEOUT)
    assert code == 4408
    assert any(f.get("code") == "HEARTBEAT_TIMEOUT" for f in frames)

    assert sdk.connected and sdk.reconnects == 0
    assert await sdk.ping()
    assert (await sdk.join("quiet")).members == ["quiet-sdk"]


async def test_events_filter_by_space_and_report_member_changes(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    await a.join("x")
    await a.join("y")
    only_y = a.events("y")
    with_members = a.events("x", members=True)

    await b.join("x")
    change = await with_members.get(TIMEOUT)
    assert isinstance(change, MembersChanged)
    assert change.joined == "bob" and change.member_count == 2
    assert a.known_members("x") == ["alice", "bob"]

    await b.publish("x", "in x")
    await a.publish("y", "in y")
    got = await only_y.get(TIMEOUT)
    assert got.space == "y" and got.text == "in y"
    got = await next_matching(with_members, lambda e: isinstance(e, Event))
    assert got.space == "x" and got.text == "in x" and got.sender == "bob"
    assert a.last_seq("x") == got.seq

    await b.leave("x")
    change = await with_members.get(TIMEOUT)
    assert isinstance(change, MembersChanged) and change.left == "bob"


async def test_events_that_arrive_before_iteration_are_kept(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    b = await clients(server, "bob")
    await a.join("general")
    await b.join("general")
    await b.publish("general", "early")
    # a's own echo arrives after bob's event (one space, one order), so once
    # publish() returns, bob's event has reached a with nobody reading.
    await a.publish("general", "mine")
    events = a.events("general")
    assert [(await events.get(TIMEOUT)).text for _ in range(2)] == ["early", "mine"]


async def test_a_consumer_that_does_not_read_loses_the_oldest(hub, clients):
    server = await hub()
    a = await clients(server, "alice", queue_size=5)
    await a.join("general")
    sub = a.events("general")
    for i in range(12):
        await a.publish("general", f"m{i}")  # returns after the event was queued
    assert sub.dropped == 7 and len(sub) == 5
    assert [(await sub.get(TIMEOUT)).text for _ in range(5)] == [f"m{i}" for i in range(7, 12)]


async def test_register_is_seen_on_agent_status(hub, clients):
    server = await hub()
    watcher = await clients(server, "watcher")
    status = watcher.events("agent.status")
    await watcher.join("agent.status")
    a = await clients(server, "alice")
    reg = await a.register(type="llm", capabilities=["chat"], metadata={"model": "m1"})
    assert reg.agent_id == "alice"
    update = await next_matching(status, lambda e: e.data.get("event") == "updated")
    assert update.sender == "@hub"
    assert update.data["agent"] == {
        "id": "alice",
        "type": "llm",
        "capabilities": ["chat"],
        "metadata": {"model": "m1"},
    }


async def test_reconnects_after_the_hub_restarts_and_rejoins(hub, clients, caplog):
    caplog.set_level(logging.WARNING, logger="agora_client")
    first = await hub()
    port = first.port
    a = await clients(first, "alice", reconnect=True, backoff=Backoff(initial=0.05, maximum=0.5))
    await a.join("general")
    await a.join("other")
    events = a.events("general")

    await first.aclose()
    second = await hub(port=port)
    b = await clients(second, "bob")
    joined = await b.join("general")
    if "alice" not in joined.members:
        await next_matching(
            b.events("general", members=True),
            lambda m: isinstance(m, MembersChanged) and m.joined == "alice",
        )
    await b.publish("general", "after the restart")
    got = await next_matching(events, lambda e: e.sender == "bob")
    assert got.text == "after the restart"
    await a.wait_connected(TIMEOUT)  # events flow while the other space is still rejoined
    assert a.reconnects == 1
    assert a.joined_spaces == {"general", "other"}
    assert (await a.publish("general", "still here")).sender == "alice"
    # One line says why and what happens, without the hub's advice repeated.
    lost = [r.getMessage() for r in caplog.records if "reconnecting" in r.getMessage()]
    assert lost == ["UNAVAILABLE: hub shutting down (close code 1001); reconnecting"], lost


async def test_without_reconnect_a_lost_connection_ends_iterators(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    await a.join("general")
    events = a.events("general")
    await server.aclose()
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(TIMEOUT):
            async for _ in events:
                pass
    assert info.value.close_code == 1001
    assert info.value.code == "UNAVAILABLE"  # the hub's error event before closing
    with pytest.raises(ConnectionClosed):
        await a.publish("general", "too late")
    assert a.closed_error is info.value


async def test_aclose_is_idempotent_and_ends_iterators(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    await a.join("general")
    events = a.events("general")
    waiting = asyncio.ensure_future(events.get())
    await a.aclose()
    await a.aclose()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(waiting, TIMEOUT)
    with pytest.raises(ConnectionClosed):
        await a.join("general")
    with pytest.raises(StopAsyncIteration):
        await a.events().get(TIMEOUT)
