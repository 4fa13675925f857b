"""Resume on one node, on the wire: ``space.join`` with ``since``.

Every test checks exact seq sequences: what a resuming member receives is
the replay of what it missed, then live events, with nothing missing and
nothing twice.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.support.wsclient import WsClient

FAST_RATE = {"rate_limit": 100_000, "rate_burst": 100_000}


async def publish(c: WsClient, text: str, space: str = "room", **extra: Any) -> dict[str, Any]:
    reply = await c.request(
        {"type": "space.publish", "space": space, "data": {"text": text}, **extra}
    )
    assert reply["type"] in ("space.event", "space.published"), reply
    return reply


async def resume(
    c: WsClient, since: int, epoch: str, space: str = "room"
) -> tuple[dict[str, Any], WsClient]:
    reply = await c.request(
        {"type": "space.join", "space": space, "since": {"seq": since, "epoch": epoch}}
    )
    assert reply["type"] == "space.joined", reply
    return reply, c


async def frames_until(c: WsClient, last_seq: int, space: str = "room") -> list[dict[str, Any]]:
    """Sequenced frames of ``space`` until one with seq ``last_seq`` arrives."""
    got: list[dict[str, Any]] = []
    while not got or got[-1]["seq"] < last_seq:
        msg = await c.recv()
        if msg.get("space") == space and isinstance(msg.get("seq"), int):
            got.append(msg)
    return got


async def test_joined_carries_epoch_and_seq(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    first = await a.join("room")
    assert isinstance(first["epoch"], str) and first["seq"] == 0
    assert "recovered" not in first, "only a join with since says recovered"
    for i in range(3):
        await publish(a, f"m{i}")
    b = await WsClient.connect(server.url, "bob")
    second = await b.join("room")
    assert second["epoch"] == first["epoch"] and second["seq"] == 3
    again = await a.request({"type": "space.join", "space": "room"})
    assert again["seq"] == 3 and again["epoch"] == first["epoch"]


async def test_resume_replays_what_was_missed_then_goes_live(hub):
    server = await hub(**FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    epoch = (await a.join("room"))["epoch"]
    await b.join("room")
    seen = [(await publish(b, f"before {i}"))["seq"] for i in range(3)]
    got = await frames_until(a, seen[-1])
    assert [m["seq"] for m in got] == seen
    await a.close()
    missed = [(await publish(b, f"missed {i}"))["seq"] for i in range(5)]

    a = await WsClient.connect(server.url, "alice")
    joined, _ = await resume(a, seen[-1], epoch)
    assert joined["recovered"] is True and joined["epoch"] == epoch
    assert joined["seq"] == missed[-1]
    live = (await publish(b, "live"))["seq"]
    got = await frames_until(a, live)
    assert [m["seq"] for m in got] == [*missed, live]
    assert [m["data"]["text"] for m in got] == [f"missed {i}" for i in range(5)] + ["live"]


async def test_nothing_missed_is_recovered_with_nothing_replayed(hub):
    server = await hub(history_size=0)  # no history at all
    a = await WsClient.connect(server.url, "alice")
    joined = await a.join("room")
    seq = (await publish(a, "one"))["seq"]
    b = await WsClient.connect(server.url, "bob")
    again, _ = await resume(b, seq, joined["epoch"])
    assert again["recovered"] is True and again["seq"] == seq
    live = (await publish(a, "two"))["seq"]
    assert [m["seq"] for m in await frames_until(b, live)] == [live]


@pytest.mark.parametrize(
    "case", ["wrong epoch", "seq from the future", "trimmed", "no history kept"]
)
async def test_unrecoverable_says_so_and_replays_nothing(hub, case):
    server = await hub(history_size=0 if case == "no history kept" else 5, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    epoch = (await a.join("room"))["epoch"]
    for i in range(10):
        await publish(a, str(i))
    since = {"wrong epoch": 9, "seq from the future": 11, "trimmed": 2, "no history kept": 9}[case]
    b = await WsClient.connect(server.url, "bob")
    joined, _ = await resume(b, since, "nope" if case == "wrong epoch" else epoch)
    assert joined["recovered"] is False
    assert joined["epoch"] == epoch and joined["seq"] == 10
    live = (await publish(a, "live"))["seq"]
    assert [m["seq"] for m in await frames_until(b, live)] == [live], "no replay"


async def test_last_retained_seq_is_still_recoverable(hub):
    server = await hub(history_size=5, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    epoch = (await a.join("room"))["epoch"]
    for i in range(10):
        await publish(a, str(i))
    b = await WsClient.connect(server.url, "bob")
    joined, _ = await resume(b, 5, epoch)  # 6..10 are held
    assert joined["recovered"] is True
    assert [m["seq"] for m in await frames_until(b, 10)] == [6, 7, 8, 9, 10]


async def test_a_restarted_single_node_has_a_new_epoch(hub):
    first = await hub()
    port = first.port
    a = await WsClient.connect(first.url, "alice")
    joined = await a.join("room")
    await publish(a, "one")
    await first.aclose()
    second = await hub(port=port)
    b = await WsClient.connect(second.url, "alice")
    again, _ = await resume(b, 1, joined["epoch"])
    assert again["recovered"] is False and again["epoch"] != joined["epoch"]


async def test_an_emptied_space_keeps_its_seq_and_history(hub):
    """The last member leaving does not restart the seq: it may come back."""
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    epoch = (await a.join("solo"))["epoch"]
    seq = (await publish(a, "one", space="solo"))["seq"]
    await a.close()  # the space is now empty
    b = await WsClient.connect(server.url, "bob")
    await b.join("solo")
    assert (await publish(b, "two", space="solo"))["seq"] == seq + 1
    a = await WsClient.connect(server.url, "alice")
    joined, _ = await resume(a, seq, epoch, space="solo")
    assert joined["recovered"] is True and joined["epoch"] == epoch
    got = await frames_until(a, seq + 1, space="solo")
    assert [m["data"]["text"] for m in got] == ["two"]


async def test_replay_respects_addressing_and_echo(hub):
    server = await hub(**FAST_RATE)
    a, b, c = [await WsClient.connect(server.url, n) for n in ("alice", "bob", "carol")]
    for x in (a, b, c):
        epoch = (await x.join("room"))["epoch"]
    await publish(b, "for carol", to="carol")
    await publish(b, "for alice", to=["alice", "carol"])
    await publish(b, "no echo for bob", echo=False)
    last = (await publish(c, "everyone"))["seq"]
    # Both read the space again from its start: each gets what it would have
    # received, and bob (the echo-off publisher) not his own event.
    seen = {}
    for x, name in ((a, "alice"), (b, "bob")):
        await x.close()
        x2 = await WsClient.connect(server.url, name)
        joined, _ = await resume(x2, 0, epoch)
        assert joined["recovered"] is True
        seen[name] = [m["data"]["text"] for m in await frames_until(x2, last)]
    assert seen["alice"] == ["for alice", "no echo for bob", "everyone"]
    assert seen["bob"] == ["for carol", "for alice", "everyone"]


async def test_replay_includes_complete_streams_only(hub):
    server = await hub(stream_threshold=64, stream_chunk=16, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    epoch = (await a.join("room"))["epoch"]
    await b.join("room")
    await a.close()
    big = "x" * 50 + "é" * 40  # hub-made stream, complete
    await b.request({"type": "space.publish", "space": "room", "data": {"text": big}})
    # A client stream cancelled, and one left open.
    await b.send({"type": "space.event.delta", "space": "room", "event_id": "c1",
                  "data": {"text": "cancelled "}})  # fmt: skip
    await b.request({"type": "space.event.cancel", "space": "room", "event_id": "c1"})
    await b.send({"type": "space.event.delta", "space": "room", "event_id": "open",
                  "data": {"text": "still going "}})  # fmt: skip
    last = (await publish(b, "after streams"))["seq"]

    a = await WsClient.connect(server.url, "alice")
    joined, _ = await resume(a, 0, epoch)
    assert joined["recovered"] is True
    got = await frames_until(a, last)
    ids = {m["event_id"] for m in got if m["type"] != "space.event"}
    assert len(ids) == 1, f"only the complete stream: {ids}"
    deltas = [m for m in got if m["type"] == "space.event.delta"]
    assert "".join(d["data"]["text"] for d in deltas) == big
    assert [m["type"] for m in got][-2:] == ["space.event.done", "space.event"]
    # The open stream's continuation does not reach the resumed member either.
    await b.send({"type": "space.event.delta", "space": "room", "event_id": "open",
                  "data": {"text": "more"}})  # fmt: skip
    await b.request({"type": "space.event.done", "space": "room", "event_id": "open"})
    final = (await publish(b, "final"))["seq"]
    rest = await frames_until(a, final)
    assert [m["type"] for m in rest] == ["space.event"]


async def test_a_replay_bigger_than_the_outbox_is_paced(hub):
    server = await hub(outbox_max_bytes=65536, max_frame_bytes=32768, **FAST_RATE)
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    epoch = (await a.join("room"))["epoch"]
    await b.join("room")
    await a.close()
    payload = "p" * 2000
    seqs = []
    for i in range(300):  # about 650 KB: ten times the outbound bound
        seqs.append((await publish(b, f"{i} {payload}"))["seq"])
    a = await WsClient.connect(server.url, "alice")
    joined, _ = await resume(a, 0, epoch)
    assert joined["recovered"] is True
    got = await frames_until(a, seqs[-1])
    assert [m["seq"] for m in got] == seqs
    assert server.node.counters.slow_consumer_closes == 0


@pytest.mark.parametrize("seed", range(6))
async def test_a_join_racing_a_burst_gets_exactly_the_published_range(hub, seed):
    """Property: replay ∪ live is exactly (since, last], in order, whatever the timing."""
    rng = random.Random(seed)
    server = await hub(**FAST_RATE)
    pubs = [await WsClient.connect(server.url, f"pub{i}") for i in range(3)]
    for p in pubs:
        epoch = (await p.join("room"))["epoch"]
    for i in range(rng.randrange(0, 40)):
        await publish(pubs[0], f"warm {i}")
    since = (await pubs[0].request({"type": "space.join", "space": "room"}))["seq"]
    since = rng.randrange(0, since + 1)
    burst = rng.randrange(50, 300)
    stop = asyncio.Event()

    async def publisher(p: WsClient, n: int) -> None:
        for i in range(n):
            await p.send({"type": "space.publish", "space": "room", "data": {"text": str(i)}})
            if rng.random() < 0.2:
                await asyncio.sleep(0)
        stop.set()

    tasks = [asyncio.create_task(publisher(p, burst)) for p in pubs]
    await asyncio.sleep(rng.random() * 0.01)
    joiner = await WsClient.connect(server.url, "joiner")
    joined, _ = await resume(joiner, since, epoch)
    assert joined["recovered"] is True
    await asyncio.gather(*tasks)
    last = (await publish(pubs[0], "last"))["seq"]
    got = await frames_until(joiner, last)
    assert [m["seq"] for m in got] == list(range(since + 1, last + 1))
