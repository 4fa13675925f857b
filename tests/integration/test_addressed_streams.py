"""Addressed client streams (contract §4 for §5's client streams): ``to`` on a
stream's first delta routes every frame of it, live, in history and on resume."""

from __future__ import annotations

import asyncio

import pytest

from agora_client import AssembledEvent, StreamChunk
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


def _delta(eid: str, text: str, **extra) -> dict:
    return {"type": "space.event.delta", "space": SPACE, "event_id": eid,
            "data": {"text": text}, **extra}  # fmt: skip


def _done(eid: str, **extra) -> dict:
    return {"type": "space.event.done", "space": SPACE, "event_id": eid, **extra}


async def _stream_frames(c: WsClient, stream: str) -> list[dict]:
    """The frames of ``stream`` ``c`` received, up to its done."""
    frames = [await c.wait_for("space.event.delta", event_id=stream)]
    while frames[-1]["type"] != "space.event.done":
        msg = await c.recv()
        if msg.get("event_id") == stream:
            frames.append(msg)
    return frames


def _no_frame_of(c: WsClient, stream: str) -> bool:
    return not [m for m in c.backlog if m.get("event_id") == stream]


async def test_an_addressed_stream_reaches_its_recipients_and_the_publisher_only(hub):
    server = await hub()
    alice, bob, carol, dave = await _members(server.url, "alice", "bob", "carol", "dave")
    await alice.send(_delta("s1", "one ", to=["bob", "carol"]))
    first = await alice.wait_for("space.event.delta", event_id="alice/s1")
    assert first["to"] == ["bob", "carol"]
    await alice.send(_delta("s1", "two"))
    done = await alice.request(_done("s1"))
    assert done["type"] == "space.event.done"
    for c in (bob, carol):
        frames = await _stream_frames(c, "alice/s1")
        assert frames[0]["to"] == ["bob", "carol"] and frames[0]["from"] == "alice"
        assert "".join(f["data"]["text"] for f in frames[:-1]) == "one two"
    # dave's next frame is the following broadcast: the stream's seqs are gaps to him.
    nxt = await alice.request({"type": "space.publish", "space": SPACE, "data": {}})
    seen = await dave.wait_for("space.event")
    assert seen["event_id"] == nxt["event_id"] and seen["seq"] == done["seq"] + 1
    assert _no_frame_of(dave, "alice/s1")
    await _close(alice, bob, carol, dave)


async def test_a_non_member_in_to_refuses_the_stream_and_it_stays_closed(hub):
    server = await hub()
    alice, bob = await _members(server.url, "alice", "bob")
    outsider = await WsClient.connect(server.url, "outsider")  # connected, not a member
    for n, to in enumerate(("outsider", ["bob", "ghost"])):
        err = await alice.request(_delta(f"s{n}", "secret", to=to, id=f"d{n}"))
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
        assert err["request_id"] == f"d{n}" and "not members" in err["message"]
        # A later delta does not reopen it for everyone to see.
        err = await alice.request(_delta(f"s{n}", "secret", id=f"again{n}"))
        assert err["code"] == "INVALID_REQUEST" and "already ended" in err["message"]
    for bad in ([], "", "no spaces", ["x"] * 101):
        err = await alice.request(_delta("s9", "x", to=bad))
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST", bad
    ok = await alice.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    first = await bob.wait_for("space.event")
    assert first["event_id"] == ok["event_id"] and first["seq"] == 1  # nothing was relayed
    assert _no_frame_of(bob, "alice/s0") and _no_frame_of(bob, "alice/s1")
    await _close(alice, bob, outsider)


async def test_an_addressed_first_delta_refused_for_any_reason_never_opens_it_for_all(hub):
    """A first delta with a malformed ``to`` (too many, none, not an id) or
    over the open-stream limit is refused; a later delta of that stream
    without ``to`` must not open it for every member (what was meant for a
    few would reach all): refused. The first delta again, with a good ``to``,
    opens it for its audience."""
    server = await hub(max_streams_per_agent=1)
    alice, bob, carol = await _members(server.url, "alice", "bob", "carol")
    for n, bad in enumerate((["bob"] * 101, [], "not an id!")):
        err = await alice.request(_delta(f"m{n}", "secret", to=bad, id=f"first{n}"))
        assert err["code"] == "INVALID_REQUEST" and err["request_id"] == f"first{n}", err
        err = await alice.request(_delta(f"m{n}", "secret", id=f"later{n}"))
        assert err["code"] == "INVALID_REQUEST" and "with its to" in err["message"], err
    # Not a member yet (the space refuses it): joining does not open it for all.
    dave = await WsClient.connect(server.url, "dave")
    err = await dave.request(_delta("d1", "secret", to="bob", id="early"))
    assert err["type"] == "error" and err["request_id"] == "early", err
    await dave.join(SPACE)
    err = await dave.request(_delta("d1", "secret", id="joined"))
    assert err["code"] == "INVALID_REQUEST" and "with its to" in err["message"], err
    await alice.send(_delta("busy", "held", to="carol"))  # the one open stream
    err = await alice.request(_delta("full", "secret", to="bob", id="over"))
    assert err["code"] == "RATE_LIMITED" and err["request_id"] == "over", err
    await alice.request(_done("busy"))
    err = await alice.request(_delta("full", "secret", id="unaddressed"))
    assert err["code"] == "INVALID_REQUEST" and "with its to" in err["message"], err
    await alice.send(_delta("full", "for bob", to="bob"))  # again, addressed: it opens
    await alice.request(_done("full"))
    frames = await _stream_frames(bob, "alice/full")
    assert [f["data"]["text"] for f in frames[:-1]] == ["for bob"]
    ok = await alice.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    await carol.wait_for("space.event", event_id=ok["event_id"])
    assert all(_no_frame_of(carol, f"alice/{s}") for s in ("m0", "m1", "m2", "full"))
    assert all(_no_frame_of(bob, f"alice/m{n}") for n in range(3))
    assert _no_frame_of(carol, "dave/d1") and _no_frame_of(bob, "dave/d1")
    await _close(alice, bob, carol, dave)


async def test_to_on_a_later_delta_is_refused_and_the_stream_goes_on(hub):
    server = await hub()
    alice, bob, carol = await _members(server.url, "alice", "bob", "carol")
    await alice.send(_delta("s1", "a", to="bob"))
    err = await alice.request(_delta("s1", "b", to="carol", id="late"))
    assert err["code"] == "INVALID_REQUEST" and err["request_id"] == "late"
    assert "first delta" in err["message"]
    await alice.send(_delta("s1", "c"))
    await alice.request(_done("s1"))
    frames = await _stream_frames(bob, "alice/s1")
    assert [f["data"]["text"] for f in frames[:-1]] == ["a", "c"]
    await alice.request({"type": "space.publish", "space": SPACE, "data": {}})
    await carol.wait_for("space.event")
    assert _no_frame_of(carol, "alice/s1")
    await _close(alice, bob, carol)


async def test_history_and_resume_respect_an_addressed_stream(hub):
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=5)
    alice, bob, carol = await _members(server.url, "alice", "bob", "carol")
    start = await carol.request({"type": "space.history", "space": SPACE, "limit": 1})
    await alice.send(_delta("s1", "for bob", to="bob", echo=False))
    await alice.send(_delta("s1", " only", echo=False))
    await alice.send(_done("s1"))
    await _stream_frames(bob, "alice/s1")
    last = await alice.request({"type": "space.publish", "space": SPACE, "data": {"n": 1}})

    def kinds(events: list[dict]) -> list[tuple[str, str]]:
        return [(e["type"], e["event_id"]) for e in events]

    stream = [("space.event.delta", "alice/s1")] * 2 + [("space.event.done", "alice/s1")]
    bob_page = await bob.request({"type": "space.history", "space": SPACE})
    assert kinds(bob_page["events"]) == [*stream, ("space.event", last["event_id"])]
    assert bob_page["events"][0]["to"] == "bob"
    carol_page = await carol.request({"type": "space.history", "space": SPACE})
    assert kinds(carol_page["events"]) == [("space.event", last["event_id"])]
    # The publisher, who asked for no echo, has its done (as before) but not its deltas.
    alice_page = await alice.request({"type": "space.history", "space": SPACE})
    assert ("space.event.delta", "alice/s1") not in kinds(alice_page["events"])

    # Resuming from before the stream: bob gets it replayed, carol does not.
    since = {"epoch": start["epoch"], "seq": start["seq"]}
    await _close(bob, carol)
    for name, expected in (("bob", [*stream, ("space.event", last["event_id"])]),
                           ("carol", [("space.event", last["event_id"])])):  # fmt: skip
        c = await WsClient.connect(server.url, name)
        joined = await c.request({"type": "space.join", "space": SPACE, "since": since})
        assert joined["type"] == "space.joined" and joined["recovered"] is True
        replayed = [await c.recv()]
        while replayed[-1].get("event_id") != last["event_id"]:
            replayed.append(await c.recv())
        assert kinds([m for m in replayed if m.get("seq")]) == expected, name
        await c.close()
    await alice.close()


async def test_the_sdk_streams_to_an_audience_and_stream_reply_answers_the_asker_only(hub, clients):
    server = await hub()
    asker = await clients(server, "asker")
    answerer = await clients(server, "answerer")
    bystander = await clients(server, "bystander")
    for c in (asker, answerer, bystander):
        await c.join(SPACE)
    bystander_streams = bystander.stream_events(SPACE)
    bystander_events = bystander.events(SPACE)
    questions = answerer.events(SPACE)
    answerer_streams = answerer.stream_events(SPACE)

    async def answer() -> None:
        question = await questions.get(timeout=10)
        async with answerer.stream_reply(question, data={"status": "success"}) as s:
            for token in ("forty", "-", "two"):
                await s.send(token)

    task = asyncio.get_running_loop().create_task(answer())
    reply = await asker.request(SPACE, "6 x 7?", timeout=10)
    await task
    assert isinstance(reply, AssembledEvent) and reply.complete and reply.text == "forty-two"
    assert reply.sender == "answerer" and reply.data["status"] == "success"

    # Client.stream(to=...) to one member.
    async with asker.stream(SPACE, event_id="note", to="answerer") as s:
        await s.send("psst")
    while (chunk := await answerer_streams.get(timeout=10)).event_id != "asker/note":
        assert chunk.sender == "answerer"  # its own reply's echo
    assert isinstance(chunk, StreamChunk) and chunk.text == "psst"

    # The bystander saw the question, then the marker, and no frame of either stream:
    # every one of them has a lower seq than the marker, so it would be here by now.
    marker = await asker.publish(SPACE, "everyone")
    while (ev := await bystander_events.get(timeout=10)).event_id != marker.event_id:
        assert ev.sender == "asker" and ev.text == "6 x 7?"
    assert len(bystander_streams) == 0


@pytest.mark.redis
async def test_an_addressed_stream_across_nodes(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    (alice,) = await _members(one.url, "alice")
    bob, carol = await _members(two.url, "bob", "carol")
    err = await alice.request(_delta("s0", "x", to="nobody"))
    assert err["code"] == "INVALID_REQUEST"
    await alice.send(_delta("s1", "to bob on the other node", to="bob"))
    first = await alice.wait_for("space.event.delta", event_id="alice/s1")
    assert first["to"] == "bob"
    await alice.request(_done("s1"))
    frames = await _stream_frames(bob, "alice/s1")
    assert frames[0]["data"]["text"] == "to bob on the other node"
    nxt = await alice.request({"type": "space.publish", "space": SPACE, "data": {}})
    assert (await carol.wait_for("space.event"))["event_id"] == nxt["event_id"]
    assert _no_frame_of(carol, "alice/s1")
    await _close(alice, bob, carol)
