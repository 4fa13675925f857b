"""Streaming: hub-side chunking, client streams, every cancel path, limits, leaks."""

import asyncio
import gc

import pytest

from tests.support.wsclient import WsClient

FAST_RATE = {
    "rate_limit": 100_000,
    "rate_burst": 100_000,
    "stream_rate_limit": 100_000,
    "stream_rate_burst": 100_000,
}


async def members(server, *names, space="room"):
    clients = [await WsClient.connect(server.url, n) for n in names]
    for c in clients:
        await c.join(space)
    for c in clients:  # drain join notices so tests read only stream frames
        c.backlog.clear()
    return clients


async def read_stream(c, event_id=None, timeout=10):
    """Deltas until done/cancel; returns (deltas, last frame)."""
    deltas = []
    while True:
        msg = await c.recv(timeout)
        if msg["type"] == "space.members":
            continue
        if event_id is not None and msg.get("event_id") != event_id:
            continue
        if msg["type"] == "space.event.delta":
            deltas.append(msg)
            event_id = msg["event_id"]
        elif msg["type"] in ("space.event.done", "space.event.cancel"):
            return deltas, msg
        else:
            raise AssertionError(f"unexpected {msg}")


# ── hub-side chunking ───────────────────────────────────────────────────────

MIXED = "héllo wörld € 😀 " * 50 + "末尾"  # 1-, 2-, 3- and 4-byte characters


@pytest.mark.parametrize("chunk", [4, 5, 7, 16, 33])
async def test_big_publish_is_streamed_and_reassembles_byte_for_byte(hub, chunk):
    server = await hub(stream_threshold=64, stream_chunk=chunk, **FAST_RATE)
    pub, sub = await members(server, "pub", "sub")
    await pub.send(
        {
            "type": "space.publish",
            "id": "big",
            "space": "room",
            "data": {"text": MIXED, "model": "m1", "lang": "mixed"},
        }
    )
    for c in (sub, pub):  # the publisher gets the echo too
        deltas, done = await read_stream(c)
        assert "".join(d["data"]["text"] for d in deltas).encode() == MIXED.encode()
        assert all(len(d["data"]["text"].encode()) <= chunk for d in deltas)
        first = deltas[0]
        assert first["data"]["model"] == "m1" and first["data"]["lang"] == "mixed"
        assert first["from"] == "pub" and first["data"]["from"] == "pub"
        assert all(set(d["data"]) == {"text"} for d in deltas[1:])
        assert done["type"] == "space.event.done" and done["request_id"] == "big"
        seqs = [d["seq"] for d in deltas] + [done["seq"]]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert len({d["event_id"] for d in deltas} | {done["event_id"]}) == 1
        assert first["event_id"].startswith("pub/")


async def test_small_publish_is_not_streamed(hub):
    server = await hub(stream_threshold=64)
    pub, sub = await members(server, "pub", "sub")
    await pub.send({"type": "space.publish", "space": "room", "data": {"text": "x" * 64}})
    assert (await sub.recv())["type"] == "space.event"


async def test_big_publish_without_echo_is_acknowledged(hub):
    server = await hub(stream_threshold=64, stream_chunk=16)
    pub, sub = await members(server, "pub", "sub")
    ack = await pub.request(
        {"type": "space.publish", "space": "room", "echo": False, "data": {"text": "y" * 200}}
    )
    assert ack["type"] == "space.published"
    _, end = await read_stream(sub)
    assert end["event_id"] == ack["event_id"] and end["seq"] == ack["seq"]
    assert not [m for m in pub.backlog if m["type"].startswith("space.event")]


# ── client streams ──────────────────────────────────────────────────────────


def delta(event_id, text, space="room", **kw):
    return {
        "type": "space.event.delta",
        "space": space,
        "event_id": event_id,
        "data": {"text": text, **kw.pop("data", {})},
        **kw,
    }


def done(event_id, space="room", **kw):
    return {"type": "space.event.done", "space": space, "event_id": event_id, **kw}


def cancel(event_id, space="room", **kw):
    return {"type": "space.event.cancel", "space": space, "event_id": event_id, **kw}


async def test_interleaved_streams_from_several_agents_keep_their_order(hub):
    server = await hub(**FAST_RATE)
    a, b, sub = await members(server, "alice", "bob", "sub")
    # Both agents use the same client-side id: the hub namespaces them.
    for i in range(30):
        await a.send(delta("evt_001", f"a{i} ", data={"model": "x"} if i == 0 else {}))
        await b.send(delta("evt_001", f"b{i} "))
    await a.send(done("evt_001"))
    await b.send(done("evt_001"))
    got: dict[str, list[str]] = {}
    finished = set()
    while len(finished) < 2:
        msg = await sub.recv()
        if msg["type"] == "space.event.delta":
            got.setdefault(msg["event_id"], []).append(msg["data"]["text"])
            assert msg["from"] == msg["event_id"].split("/")[0]
        elif msg["type"] == "space.event.done":
            finished.add(msg["event_id"])
    assert finished == {"alice/evt_001", "bob/evt_001"}
    assert got["alice/evt_001"] == [f"a{i} " for i in range(30)]
    assert got["bob/evt_001"] == [f"b{i} " for i in range(30)]


async def test_echo_on_and_off(hub):
    server = await hub()
    pub, sub = await members(server, "pub", "sub")
    await pub.send(delta("loud", "1"))
    await pub.send(delta("loud", "2"))
    await pub.send(done("loud"))
    deltas, end = await read_stream(pub, "pub/loud")
    assert [d["data"]["text"] for d in deltas] == ["1", "2"] and end["type"] == "space.event.done"
    await pub.send(delta("quiet", "1", echo=False))
    await pub.send(delta("quiet", "2"))
    await pub.send(done("quiet", id="q-done"))
    deltas, end = await read_stream(sub, "pub/quiet")
    assert [d["data"]["text"] for d in deltas] == ["1", "2"]
    # The quiet stream never reaches its publisher.
    await pub.request({"type": "space.list"})
    assert not [m for m in pub.backlog if m.get("event_id") == "pub/quiet"]


async def test_publisher_cancel_reaches_everyone_and_ends_the_stream(hub):
    server = await hub()
    pub, s1, s2 = await members(server, "pub", "s1", "s2")
    await pub.send(delta("e1", "partial"))
    await pub.send(cancel("e1", reason="user pressed stop", id="c1"))
    for c in (s1, s2):
        deltas, end = await read_stream(c, "pub/e1")
        assert [d["data"]["text"] for d in deltas] == ["partial"]
        assert end["type"] == "space.event.cancel" and end["reason"] == "user pressed stop"
        assert end["from"] == "pub"
    mine = await pub.wait_for("space.event.cancel")
    assert mine["event_id"] == "pub/e1" and mine["request_id"] == "c1"
    err = await pub.request(delta("e1", "too late"))
    assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
    err = await pub.request(done("e1"))
    assert err["code"] == "INVALID_REQUEST"


async def test_receiver_cancel_stops_only_that_receiver(hub):
    server = await hub()
    pub, quitter, stayer = await members(server, "pub", "quitter", "stayer")
    await pub.send(delta("e1", "one"))
    first = await quitter.wait_for("space.event.delta")
    # Named in another space, it is not a stream the quitter receives there.
    wrong = await quitter.request(cancel(first["event_id"], space="other"))
    assert wrong["type"] == "error" and wrong["code"] == "INVALID_REQUEST"
    assert "space 'other'" in wrong["message"]
    ack = await quitter.request(cancel(first["event_id"]))
    assert ack == {
        "type": "space.event.cancel",
        "id": ack["id"],
        "space": "room",
        "event_id": "pub/e1",
        "reason": "receiver_cancelled",
    }
    await pub.send(delta("e1", "two"))
    await pub.send(done("e1"))
    deltas, end = await read_stream(stayer, "pub/e1")
    assert [d["data"]["text"] for d in deltas] == ["one", "two"]
    assert end["type"] == "space.event.done"
    # The quitter saw nothing after its cancel; a later event proves the order.
    await pub.send({"type": "space.publish", "space": "room", "data": {"after": True}})
    nxt = await quitter.wait_for("space.event")
    assert nxt["data"]["after"] is True
    assert not [m for m in quitter.backlog if m.get("event_id") == "pub/e1"]
    err = await quitter.request(cancel("pub/e1"))
    assert err["code"] == "INVALID_REQUEST"  # no longer receiving it


async def test_hub_cancels_when_the_publisher_disconnects(hub):
    server = await hub()
    pub, sub = await members(server, "pub", "sub")
    await pub.send(delta("e1", "half"))
    await sub.wait_for("space.event.delta")
    await pub.close()
    end = await sub.wait_for("space.event.cancel")
    assert end["event_id"] == "pub/e1" and end["reason"] == "publisher_disconnected"


async def test_hub_cancels_idle_streams(hub):
    server = await hub(stream_idle_timeout=0.4)
    pub, sub = await members(server, "pub", "sub")
    await pub.send(delta("slow", "..."))
    end = await sub.wait_for("space.event.cancel", timeout=10)
    assert end["reason"] == "idle_timeout" and end["event_id"] == "pub/slow"
    mine = await pub.wait_for("space.event.cancel", timeout=10)
    assert mine["reason"] == "idle_timeout"
    err = await pub.request(delta("slow", "more"))
    assert err["code"] == "INVALID_REQUEST"


async def test_hub_cancels_when_the_publisher_leaves_the_space(hub):
    server = await hub()
    pub, sub = await members(server, "pub", "sub")
    await pub.send(delta("e1", "x"))
    await pub.request({"type": "space.leave", "space": "room"})
    end = await sub.wait_for("space.event.cancel")
    assert end["reason"] == "publisher_left_space"


async def test_late_joiner_gets_nothing_of_a_running_stream(hub):
    server = await hub()
    pub, early = await members(server, "pub", "early")
    await pub.send(delta("e1", "before"))
    await early.wait_for("space.event.delta")
    late = await WsClient.connect(server.url, "late")
    await late.join("room")
    await pub.send(delta("e1", "after"))
    await pub.send(done("e1"))
    await pub.send(delta("e2", "new stream"))
    got = await late.wait_for("space.event.delta")
    assert got["event_id"] == "pub/e2"  # the first delta it sees is the new stream's
    assert not [m for m in late.backlog if m.get("event_id") == "pub/e1"]
    deltas, _ = await read_stream(early, "pub/e1")
    assert [d["data"]["text"] for d in deltas] == ["after"]


async def test_member_who_leaves_mid_stream_gets_nothing_further(hub):
    server = await hub()
    pub, leaver, other = await members(server, "pub", "leaver", "other")
    await pub.send(delta("e1", "one"))
    await leaver.wait_for("space.event.delta")
    await leaver.request({"type": "space.leave", "space": "room"})
    await leaver.join("room")
    await pub.send(delta("e1", "two"))
    await pub.send(done("e1"))
    await read_stream(other, "pub/e1")
    await pub.send({"type": "space.publish", "space": "room", "data": {"marker": 1}})
    await leaver.wait_for("space.event")
    assert not [m for m in leaver.backlog if m.get("event_id") == "pub/e1"]


async def test_stream_limits_and_errors(hub):
    server = await hub(max_streams_per_agent=2)
    pub, _ = await members(server, "pub", "sub")
    await pub.send(delta("s1", "a"))
    await pub.send(delta("s2", "b"))
    err = await pub.request(delta("s3", "c"))
    assert err["code"] == "RATE_LIMITED" and "open streams" in err["message"]
    await pub.send(done("s1"))
    await pub.send(delta("s3", "c"))  # a slot is free again
    assert (await pub.wait_for("space.event.delta", event_id="pub/s3"))["data"]["text"] == "c"
    for bad in (
        done("never-opened"),
        delta("s2", "x", space="elsewhere"),
        delta("bad/id", "x"),
        {**delta("s4", "x"), "data": {"text": 5}},
    ):
        err = await pub.request(bad)
        assert err["type"] == "error" and err["code"] in {
            "INVALID_REQUEST",
            "UNAUTHORIZED",
            "SPACE_NOT_FOUND",
        }, (bad, err)
    err = await pub.request(delta("s9", "x", space="nowhere"))
    assert err["code"] == "SPACE_NOT_FOUND"


async def test_ten_thousand_streams_leave_nothing_behind(hub):
    server = await hub(**FAST_RATE)
    pub, sub = await members(server, "pub", "sub")
    node = server.node
    n = 10_000

    async def produce():
        for i in range(n):
            await pub.send(delta(f"s{i}", "tok"))
            if i % 3 == 0:
                await pub.send(cancel(f"s{i}"))
            else:
                await pub.send(done(f"s{i}"))

    async def consume():
        ends = 0
        while ends < n:
            msg = await sub.recv(timeout=30)
            if msg["type"] in ("space.event.done", "space.event.cancel"):
                ends += 1

    async def drain_publisher():
        ends = 0
        while ends < n:
            msg = await pub.recv(timeout=30)
            if msg["type"] in ("space.event.done", "space.event.cancel"):
                ends += 1

    await asyncio.gather(produce(), consume(), drain_publisher())
    gc.collect()
    assert len(node.registry.streams) == 0
    sessions = [c.session for c in node.registry.connections.values()]
    assert all(s.open_streams == 0 for s in sessions)
    from hub.core.publisher_streams import FINISHED_STREAMS_REMEMBERED

    # What a publisher remembers of its ended streams is bounded (it ended n of them).
    remembered = [len(s._streams._finished) for s in sessions if s._streams is not None]
    assert remembered and max(remembered) == min(n, FINISHED_STREAMS_REMEMBERED)
