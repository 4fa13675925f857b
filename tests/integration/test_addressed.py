"""Addressed publish (contract §4): ``to`` narrows who receives an event."""

from __future__ import annotations

import pytest

from tests.support.wsclient import WsClient

SPACE = "room"


async def _members(url: str, *names: str) -> list[WsClient]:
    clients = [await WsClient.connect(url, n) for n in names]
    for c in clients:
        await c.join(SPACE)
    return clients


async def _close(*clients: WsClient) -> None:
    for c in clients:
        await c.close()


async def test_to_one_agent_reaches_it_and_the_sender_only(hub):
    server = await hub()
    alice, bob, carol = await _members(server.url, "alice", "bob", "carol")
    ev = await alice.request(
        {"type": "space.publish", "space": SPACE, "to": "bob", "data": {"q": 1}}
    )
    assert ev["type"] == "space.event" and ev["to"] == "bob" and ev["from"] == "alice"
    got = await bob.wait_for("space.event")
    assert got == ev  # the same bytes for everyone who gets it
    # carol's next event is the following broadcast: she saw a seq gap, not the event.
    nxt = await alice.request({"type": "space.publish", "space": SPACE, "data": {"q": 2}})
    seen = await carol.wait_for("space.event")
    assert seen["event_id"] == nxt["event_id"] and seen["seq"] == ev["seq"] + 1
    assert "to" not in nxt
    await _close(alice, bob, carol)


async def test_to_a_list_keeps_the_list_and_a_reply_names_what_it_answers(hub):
    server = await hub()
    alice, bob, carol, dave = await _members(server.url, "alice", "bob", "carol", "dave")
    ev = await alice.request(
        {"type": "space.publish", "space": SPACE, "to": ["carol", "bob"], "data": {"q": 1}}
    )
    assert ev["to"] == ["carol", "bob"]
    for c in (bob, carol):
        assert (await c.wait_for("space.event"))["event_id"] == ev["event_id"]
    reply = await bob.request(
        {
            "type": "space.publish",
            "space": SPACE,
            "to": "alice",
            "data": {"in_reply_to": ev["event_id"], "a": 42},
        }
    )
    got = await alice.wait_for("space.event", **{"from": "bob"})
    assert got["data"]["in_reply_to"] == ev["event_id"] and got["event_id"] == reply["event_id"]
    last = await alice.request({"type": "space.publish", "space": SPACE, "data": {}})
    assert (await dave.wait_for("space.event"))["event_id"] == last["event_id"]
    await _close(alice, bob, carol, dave)


async def test_to_a_non_member_is_refused_and_nothing_is_delivered(hub):
    server = await hub()
    alice, bob = await _members(server.url, "alice", "bob")
    outsider = await WsClient.connect(server.url, "outsider")  # connected, not a member
    for to in ("outsider", ["bob", "ghost"]):
        err = await alice.request(
            {"type": "space.publish", "id": "p1", "space": SPACE, "to": to, "data": {}}
        )
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
        assert err["request_id"] == "p1" and "not members" in err["message"]
    for bad in ([], "", "no spaces", ["x"] * 101):
        err = await alice.request({"type": "space.publish", "space": SPACE, "to": bad, "data": {}})
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST", bad
    ok = await alice.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    first = await bob.wait_for("space.event")
    assert first["event_id"] == ok["event_id"] and first["seq"] == 1  # no seq was taken
    await _close(alice, bob, outsider)


async def test_to_with_echo_off_acknowledges_with_published(hub):
    server = await hub()
    alice, bob = await _members(server.url, "alice", "bob")
    ack = await alice.request(
        {"type": "space.publish", "space": SPACE, "to": "bob", "echo": False, "data": {}}
    )
    assert ack["type"] == "space.published"
    got = await bob.wait_for("space.event")
    assert got["event_id"] == ack["event_id"] and got["seq"] == ack["seq"]
    await _close(alice, bob)


async def test_a_big_addressed_publish_is_streamed_to_the_addressed_only(hub):
    server = await hub(stream_threshold=1024, stream_chunk=512)
    alice, bob, carol = await _members(server.url, "alice", "bob", "carol")
    await alice.send(
        {"type": "space.publish", "space": SPACE, "to": "bob", "data": {"text": "t" * 3000}}
    )
    first = await bob.wait_for("space.event.delta")
    assert first["to"] == "bob"
    text = first["data"]["text"]
    while True:
        msg = await bob.recv()
        if msg["type"] == "space.event.done":
            break
        if msg["type"] == "space.event.delta":
            text += msg["data"]["text"]
    assert text == "t" * 3000
    nxt = await alice.request({"type": "space.publish", "space": SPACE, "data": {}})
    got = await carol.wait_for("space.event")
    assert got["event_id"] == nxt["event_id"]
    assert not [m for m in carol.backlog if m["type"].startswith("space.event.")]
    await _close(alice, bob, carol)


@pytest.mark.redis
async def test_addressed_publish_across_nodes(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    alice, bob = await _members(one.url, "alice", "bob")
    carol, dave = await _members(two.url, "carol", "dave")
    ev = await alice.request(
        {"type": "space.publish", "space": SPACE, "to": ["dave", "bob"], "data": {"x": 1}}
    )
    for c in (bob, dave):
        assert (await c.wait_for("space.event"))["event_id"] == ev["event_id"]
    err = await carol.request({"type": "space.publish", "space": SPACE, "to": "nobody", "data": {}})
    assert err["code"] == "INVALID_REQUEST"
    nxt = await carol.request({"type": "space.publish", "space": SPACE, "data": {}})
    for c in (alice, bob, dave):
        assert (await c.wait_for("space.event"))["event_id"] == nxt["event_id"]
    # carol never saw the addressed one: her only event is her own (the reply above).
    assert not [m for m in carol.backlog if m.get("event_id") == ev["event_id"]]
    await _close(alice, bob, carol, dave)
