"""``space.history`` and idempotent publish on one node, on the wire."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_resume import FAST_RATE, frames_until, publish
from tests.support.wsclient import WsClient


async def history(c: WsClient, space: str = "room", **fields: Any) -> dict[str, Any]:
    return await c.request({"type": "space.history", "space": space, **fields})


# ── space.history ───────────────────────────────────────────────────────────


async def test_history_pages_back_oldest_first(hub):
    server = await hub(**FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    epoch = (await a.join("room"))["epoch"]
    for i in range(12):
        await publish(a, f"m{i}")
    late = await WsClient.connect(server.url, "late")
    await late.join("room")
    page = await history(late, limit=5)
    assert page["type"] == "space.history" and page["epoch"] == epoch and page["seq"] == 12
    assert [e["data"]["text"] for e in page["events"]] == [f"m{i}" for i in range(7, 12)]
    assert page["events"][0]["type"] == "space.event" and page["events"][0]["seq"] == 8
    assert page["next_before_seq"] == 8
    older = await history(late, limit=5, before_seq=page["next_before_seq"])
    assert [e["seq"] for e in older["events"]] == [3, 4, 5, 6, 7]
    oldest = await history(late, limit=5, before_seq=older["next_before_seq"])
    assert [e["seq"] for e in oldest["events"]] == [1, 2]
    assert oldest["next_before_seq"] is None, "nothing older"
    default = await history(late)
    assert len(default["events"]) == 12 and default["next_before_seq"] is None


async def test_history_shows_only_what_the_member_would_have_received(hub):
    server = await hub(**FAST_RATE)
    a, b, c = [await WsClient.connect(server.url, n) for n in ("alice", "bob", "carol")]
    for x in (a, b, c):
        await x.join("room")
    await publish(a, "for bob", to="bob")
    await publish(a, "no echo", echo=False)
    await publish(a, "all")
    texts = {}
    for x in (a, b, c):
        texts[x.agent_id] = [e["data"]["text"] for e in (await history(x))["events"]]
    assert texts == {
        "alice": ["for bob", "all"],
        "bob": ["for bob", "no echo", "all"],
        "carol": ["no echo", "all"],
    }


async def test_history_is_bounded_in_bytes(hub):
    server = await hub(max_frame_bytes=4096, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    await a.join("room")
    for i in range(10):
        await publish(a, f"{i} " + "x" * 1500)
    page = await history(a, limit=10)
    assert 1 <= len(page["events"]) <= 3
    assert page["events"][-1]["seq"] == 10
    assert page["next_before_seq"] == page["events"][0]["seq"]


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        ({"space": "elsewhere"}, "UNAUTHORIZED"),  # exists, not a member
        ({"space": "nowhere"}, "SPACE_NOT_FOUND"),
        ({"space": "room", "limit": 101}, "INVALID_REQUEST"),
        ({"space": "room", "limit": 0}, "INVALID_REQUEST"),
        ({"space": "room", "before_seq": 0}, "INVALID_REQUEST"),
        ({"space": "room", "limit": "5"}, "INVALID_REQUEST"),
        ({"space": "Bad Name"}, "INVALID_REQUEST"),
    ],
)
async def test_history_refusals(hub, request_, code):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("room")
    await b.join("elsewhere")
    reply = await a.request({"type": "space.history", **request_})
    assert reply["type"] == "error" and reply["code"] == code, reply


async def test_history_of_streams_carries_their_frames(hub):
    server = await hub(stream_threshold=64, stream_chunk=32, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    await a.join("room")
    text = "y" * 100
    await a.request({"type": "space.publish", "space": "room", "data": {"text": text}})
    page = await history(a)
    kinds = [e["type"] for e in page["events"]]
    assert kinds == ["space.event.delta"] * 4 + ["space.event.done"]
    assert "".join(e["data"]["text"] for e in page["events"][:-1]) == text


@pytest.mark.parametrize("echo", [True, False], ids=["echo", "no-echo"])
async def test_a_publishers_history_has_the_cancel_of_its_own_stream(hub, echo):
    """The publisher hears its stream's cancel live, apart from the fan-out
    (even with echo off): its history has it too, as the receiver's does."""
    server = await hub(**FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("room")
    await b.join("room")
    delta = {"type": "space.event.delta", "space": "room", "event_id": "s1",
             "data": {"text": "half"}}  # fmt: skip
    if not echo:
        delta["echo"] = False
    await a.send(delta)
    await a.send({"type": "space.event.cancel", "id": "c", "space": "room", "event_id": "s1"})
    live = await a.wait_for("space.event.cancel")
    assert await b.wait_for("space.event.cancel", seq=live["seq"])
    for viewer, kinds in (
        (a, ["space.event.cancel"]),
        (b, ["space.event.delta", "space.event.cancel"]),
    ):
        page = await history(viewer)
        if viewer is a and echo:
            kinds = ["space.event.delta", "space.event.cancel"]
        assert [e["type"] for e in page["events"]] == kinds, viewer.agent_id
        assert page["events"][-1]["seq"] == live["seq"]


# ── idempotent publish ──────────────────────────────────────────────────────


async def test_a_retry_is_answered_with_the_original_and_delivered_once(hub):
    server = await hub(**FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("room")
    await b.join("room")
    first = await publish(a, "once", idempotency_key="order-1")
    assert first["type"] == "space.event"
    retry = await publish(a, "once", idempotency_key="order-1")
    assert retry == {
        "type": "space.published",
        "id": retry["id"],
        "space": "room",
        "event_id": first["event_id"],
        "seq": first["seq"],
        "timestamp": first["timestamp"],
        "duplicate": True,
    }
    after = (await publish(a, "next"))["seq"]
    got = await frames_until(b, after)
    assert [m["data"]["text"] for m in got] == ["once", "next"], "delivered once"
    assert after == first["seq"] + 1


async def test_idempotency_key_scope_and_misuse(hub):
    server = await hub(**FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    for x in (a, b):
        await x.join("room")
        await x.join("other")
    first = await publish(a, "x", idempotency_key="k")
    # Another agent, another space: independent keys.
    assert (await publish(b, "x", idempotency_key="k"))["type"] == "space.event"
    assert (await publish(a, "x", space="other", idempotency_key="k"))["type"] == "space.event"
    # The same key for different data: refused, nothing published.
    reply = await a.request(
        {"type": "space.publish", "space": "room", "data": {"text": "y"}, "idempotency_key": "k"}
    )
    assert reply["type"] == "error" and reply["code"] == "INVALID_REQUEST"
    assert "different publish" in reply["message"]
    # An echo-off original is answered the same way.
    quiet = await publish(a, "q", echo=False, idempotency_key="k2")
    again = await publish(a, "q", echo=False, idempotency_key="k2")
    assert quiet["type"] == "space.published" and "duplicate" not in quiet
    assert again["seq"] == quiet["seq"] and again["duplicate"] is True
    too_long = await a.request(
        {"type": "space.publish", "space": "room", "data": {}, "idempotency_key": "k" * 129}
    )
    assert too_long["code"] == "INVALID_REQUEST"
    empty = await a.request(
        {"type": "space.publish", "space": "room", "data": {}, "idempotency_key": ""}
    )
    assert empty["code"] == "INVALID_REQUEST"
    assert first["seq"] >= 1


@pytest.mark.parametrize("backplane", ["memory", "redis"])
async def test_a_streamed_publish_is_idempotent_too(hub, request, backplane):
    """A retry is answered with the original's ``event_id``, ``seq`` and
    ``timestamp``: for a publish the hub streamed, those of its done (the
    acknowledgement), though its first delta claimed the key (found by an
    outside audit: the retry answered the first delta's seq)."""
    redis = {}
    if backplane == "redis":
        redis["redis_url"] = request.getfixturevalue("redis_server").url
    server = await hub(stream_threshold=64, stream_chunk=32, **FAST_RATE, **redis)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("room")
    await b.join("room")
    msg = {"type": "space.publish", "space": "room", "data": {"text": "z" * 200}}
    done = await a.request({**msg, "idempotency_key": "big"})
    assert done["type"] == "space.event.done"
    retry = await a.request({**msg, "idempotency_key": "big"})
    assert retry["type"] == "space.published" and retry["duplicate"] is True
    assert (retry["event_id"], retry["seq"]) == (done["event_id"], done["seq"]), (retry, done)
    assert retry["timestamp"] == done["timestamp"]
    last = (await publish(a, "after"))["seq"]
    got = await frames_until(b, last)
    assert sum(m["type"] == "space.event.done" for m in got) == 1, "streamed once"


async def test_reading_history_needs_the_right_to_join(hub, tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text('[[spaces]]\nid = "ops"\nallow_join = ["ops-*"]\n')
    server = await hub(config=str(config))
    ops = await WsClient.connect(server.url, "ops-1")
    bob = await WsClient.connect(server.url, "bob")
    epoch = (await ops.join("ops"))["epoch"]
    await publish(ops, "secret", space="ops")
    assert [e["data"]["text"] for e in (await history(ops, "ops"))["events"]] == ["secret"]
    reply = await history(bob, "ops")
    assert reply["code"] == "UNAUTHORIZED" and "not allowed to read" in reply["message"]
    resume = await bob.request(
        {"type": "space.join", "space": "ops", "since": {"seq": 0, "epoch": epoch}}
    )
    assert resume["code"] == "UNAUTHORIZED", "a resume is a join: the same rules"
