"""Streams through the SDK: publishing, receiving, reassembling, every way of cancelling."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agora_client import (
    AssembledEvent,
    Event,
    StreamAssembler,
    StreamCancelled,
    StreamChunk,
    Unauthorized,
)
from tests.support.sdk_clients import members_of

TIMEOUT = 10.0


async def test_stream_is_sent_received_and_reassembled(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    chunks = b.stream_events("s")
    whole = b.assembled_events("s")

    async with a.stream("s", data={"kind": "answer"}, coalesce=0) as s:
        for token in ["Hel", "lo ", "wörld"]:
            await s.send(token)
    assert s.state == "done" and s.seq is not None and s.sent == 3

    got: list[StreamChunk] = [await chunks.get(TIMEOUT) for _ in range(4)]
    assert [c.kind for c in got] == ["delta", "delta", "delta", "done"]
    assert {c.event_id for c in got} == {s.hub_event_id} and s.hub_event_id.startswith("alice/")
    assert got[0].data == {"kind": "answer", "from": "alice", "text": "Hel"}
    assert [c.seq for c in got] == sorted(c.seq for c in got)
    assert got[-1].seq == s.seq

    event = await whole.get(TIMEOUT)
    assert isinstance(event, AssembledEvent) and event.complete
    assert event.text == "Hello wörld" and event.data["kind"] == "answer"
    assert event.sender == "alice" and event.seq == s.seq and event.chunks == 3


async def test_an_exception_in_the_block_cancels_the_stream(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    whole = b.assembled_events("s")
    with pytest.raises(RuntimeError, match="model crashed"):
        async with a.stream("s") as s:
            await s.send("partial ")
            raise RuntimeError("model crashed")
    assert s.state == "cancelled"
    event = await whole.get(TIMEOUT)
    assert event.status == "cancelled" and event.reason == "error: RuntimeError"
    assert event.text == "partial "


async def test_explicit_cancel_reaches_receivers_and_stops_sending(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    chunks = b.stream_events("s")
    async with a.stream("s") as s:
        await s.send("one")
        await s.cancel("changed my mind")
        with pytest.raises(StreamCancelled) as info:
            await s.send("two")
        assert info.value.reason == "changed my mind"
    got = [await chunks.get(TIMEOUT) for _ in range(2)]
    assert [c.kind for c in got] == ["delta", "cancel"]
    assert got[1].reason == "changed my mind" and got[1].sender == "alice"


async def test_a_receiver_can_stop_receiving_one_stream(hub, clients):
    server = await hub()
    a, b, c = await members_of(server, clients, "s", "alice", "bob", "carol")
    b_items = b.subscribe("s", frozenset({"event", "delta", "done", "cancel"}))
    c_whole = c.assembled_events("s")

    async with a.stream("s") as s:
        await s.send("first ")
        first = await b_items.get(TIMEOUT)
        assert first.kind == "delta"
        await b.cancel_stream("s", first.event_id)
        await s.send("second")
    await a.publish("s", "after the stream")

    ack = await b_items.get(TIMEOUT)
    assert ack.kind == "cancel" and ack.reason == "receiver_cancelled"
    # Nothing more of the stream reached bob: the next thing is the later event.
    after = await b_items.get(TIMEOUT)
    assert isinstance(after, Event) and after.text == "after the stream"

    # Carol, who did not cancel, got all of it.
    whole = await c_whole.get(TIMEOUT)
    assert whole.complete and whole.text == "first second"


async def test_hub_cancels_a_stream_whose_publisher_disconnects(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    whole = b.assembled_events("s")
    s = a.stream("s")
    await s.send("cut off")
    await a.aclose()
    event = await whole.get(TIMEOUT)
    assert event.status == "cancelled" and event.reason == "publisher_disconnected"
    assert event.text == "cut off"
    with pytest.raises(StreamCancelled):
        await s.send("more")


async def test_hub_cancels_an_idle_stream_and_send_raises(hub, clients):
    server = await hub(stream_idle_timeout=0.3)
    a, b = await members_of(server, clients, "s", "alice", "bob")
    own = a.stream_events("s")
    whole = b.assembled_events("s")
    s = a.stream("s")
    await s.send("then nothing")
    echo = await own.get(TIMEOUT)
    assert echo.kind == "delta"
    cancel = await own.get(TIMEOUT)
    assert cancel.kind == "cancel" and cancel.reason == "idle_timeout"
    with pytest.raises(StreamCancelled) as info:
        await s.send("too late")
    assert info.value.reason == "idle_timeout"
    event = await whole.get(TIMEOUT)
    assert event.status == "cancelled" and event.reason == "idle_timeout"


async def test_a_refused_first_delta_raises_from_send(hub, clients):
    server = await hub()
    a = await clients(server, "alice")
    await members_of(server, clients, "s", "bob")
    with pytest.raises(Unauthorized):
        async with a.stream("s") as s:
            await s.send("not a member")
    assert s.state == "failed"
    # Nothing is left open on the client.
    assert await a.ping()


async def test_receiver_gives_up_on_an_incomplete_stream(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    whole = b.assembled_events("s", incomplete_timeout=0.3)
    async with a.stream("s") as s:
        await s.send("stalled")
        event = await whole.get(TIMEOUT)
        assert event.status == "incomplete" and event.reason == "incomplete_timeout"
        assert event.text == "stalled"
        await s.send(" and resumed")
    await a.publish("s", "next")
    # The late frames of the stream it gave up on are not reported again.
    nxt = b.assembled_events("s", events=True)
    whole.close()
    item = await nxt.get(TIMEOUT)
    assert isinstance(item, Event) and item.text == "next"


async def test_concurrent_streams_from_one_publisher(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    whole = b.assembled_events("s")

    async def speak(n: int) -> str:
        async with a.stream("s", data={"n": n}) as s:
            for i in range(5):
                await s.send(f"{n}.{i} ")
                await asyncio.sleep(0)  # let the other streams interleave
        return s.hub_event_id

    ids = await asyncio.gather(*(speak(n) for n in range(5)))
    got = {}
    for _ in ids:
        event = await whole.get(TIMEOUT)
        got[event.event_id] = event
    assert set(got) == set(ids)
    for event in got.values():
        n = event.data["n"]
        assert event.complete and event.text == "".join(f"{n}.{i} " for i in range(5))


async def test_stream_without_echo(hub, clients):
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    whole = b.assembled_events("s")
    async with a.stream("s", echo=False) as s:
        await s.send("quiet ")
        await s.send("stream")
    assert s.state == "done"
    event = await whole.get(TIMEOUT)
    assert event.complete and event.text == "quiet stream"


async def test_big_publish_arrives_as_deltas_and_is_reassembled(hub, clients):
    server = await hub(stream_threshold=1024, stream_chunk=256)
    a, b = await members_of(server, clients, "s", "alice", "bob")
    everything = b.assembled_events("s", events=True)
    text = "".join(f"línea {i} → ✓\n" for i in range(300))
    await a.publish("s", {"text": "small"})
    sent = await a.publish("s", {"text": text, "lang": "es"})
    assert sent.streamed
    small = await everything.get(TIMEOUT)
    assert isinstance(small, Event) and small.text == "small"
    big = await everything.get(TIMEOUT)
    assert isinstance(big, AssembledEvent) and big.complete
    assert big.text == text and big.data["lang"] == "es" and big.chunks > 1
    assert big.seq == sent.seq


def _chunk(kind: str, event_id: str, text: str = "", first: bool = False, **kw: Any):
    data = {"text": text} if kind == "delta" else {}
    if first:
        data["from"] = "alice"
    return StreamChunk(kind, "s", event_id, kw.pop("seq", 1), "alice", 1, data, **kw)  # type: ignore[arg-type]


def test_assembler_bookkeeping():
    now = [0.0]
    asm = StreamAssembler(incomplete_timeout=5.0, max_chars=10, clock=lambda: now[0])
    assert asm.feed(_chunk("delta", "alice/1", "ab", first=True)) is None
    assert asm.feed(_chunk("delta", "alice/2", "x", first=True)) is None
    assert asm.feed(_chunk("delta", "alice/3", "mid")) is None  # its first delta was missed
    assert asm.feed(_chunk("delta", "alice/1", "cd")) is None
    assert asm.next_deadline() == 5.0

    done = asm.feed(_chunk("done", "alice/1", seq=9))
    assert done is not None and done.complete and done.text == "abcd" and done.seq == 9
    missed = asm.feed(_chunk("done", "alice/3"))
    assert missed is not None and missed.status == "incomplete" and missed.reason == "missed_start"

    assert asm.feed(_chunk("delta", "alice/2", "0123456789")) is None  # over max_chars
    too_big = asm.feed(_chunk("done", "alice/2"))
    assert too_big is not None and too_big.reason == "too_large" and too_big.text == ""

    asm.feed(_chunk("delta", "alice/4", "slow", first=True))
    now[0] = 4.0
    assert asm.expire() == []
    now[0] = 9.5
    (expired,) = asm.expire()
    assert expired.reason == "incomplete_timeout" and expired.text == "slow"
    assert asm.feed(_chunk("delta", "alice/4", "late")) is None
    assert asm.feed(_chunk("done", "alice/4")) is None  # already reported
    assert len(asm) == 0

    asm.feed(_chunk("delta", "alice/5", "x", first=True))
    cancelled = asm.feed(_chunk("cancel", "alice/5", reason="idle_timeout"))
    assert cancelled is not None and cancelled.status == "cancelled"
    assert cancelled.reason == "idle_timeout"


async def test_the_producer_hears_that_its_only_receiver_cancelled(hub, clients):
    """Contract §19: bob, the one addressed receiver, cancels; alice's stream turns
    ``cancelled`` with ``receiver_cancelled``, ``on_cancel`` is called at once (before
    any further send), and the next send raises StreamCancelled."""
    server = await hub()
    a, b = await members_of(server, clients, "s", "alice", "bob")
    frames = b.stream_events("s")
    told: asyncio.Queue[str] = asyncio.Queue()
    s = a.stream("s", to="bob", echo=False, on_cancel=told.put_nowait)
    await s.send("first ")
    first = await frames.get(TIMEOUT)
    await b.cancel_stream("s", first.event_id)
    assert await asyncio.wait_for(told.get(), TIMEOUT) == "receiver_cancelled"
    assert s.cancelled and s.reason == "receiver_cancelled"
    with pytest.raises(StreamCancelled) as stopped:
        await s.send("second")
    assert stopped.value.reason == "receiver_cancelled"
    with pytest.raises(StreamCancelled):  # cancelled by others: close() says so too
        await s.close()


async def test_the_producer_hears_that_its_receivers_left(hub, clients):
    server = await hub()
    a, b, c = await members_of(server, clients, "s", "alice", "bob", "carol")
    told: asyncio.Queue[str] = asyncio.Queue()
    s = a.stream("s", to=["bob", "carol"], on_cancel=told.put_nowait)
    await s.send("for two")
    await b.leave("s")
    await c.close()
    assert await asyncio.wait_for(told.get(), TIMEOUT) == "receivers_left"
    with pytest.raises(StreamCancelled):
        await s.close()
