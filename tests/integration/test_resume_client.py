"""The SDK and the CLI resume by themselves: connections cut by a proxy mid-traffic."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from agora_client import Backoff, Client, Position, Resumed
from agora_client import client as client_module
from protocol.messages import MessageType
from tests.integration.test_cli_tools import finish, joined, json_lines, start_cli
from tests.support.events import collect

TIMEOUT = 20.0
FAST = Backoff(initial=0.05, maximum=0.3)
FAST_RATE = {"rate_limit": 100_000, "rate_burst": 100_000}


def test_the_heartbeat_frame_is_json() -> None:
    assert orjson.loads(client_module._HEARTBEAT) == {"type": MessageType.AGENT_HEARTBEAT}


async def test_no_gap_no_duplicate_across_dropped_connections(hub, clients, proxy):
    server = await hub(**FAST_RATE)
    via = await proxy(server.port)
    resumes: asyncio.Queue[Resumed] = asyncio.Queue()
    alice = await clients(
        via.url, "alice", reconnect=True, backoff=FAST, on_resume=resumes.put_nowait
    )
    bob = await clients(server, "bob")
    events = alice.events("room")
    await bob.join("room")
    sent: list[int] = []
    cuts_done, flowing = asyncio.Event(), asyncio.Event()

    async def traffic() -> None:
        while not cuts_done.is_set() or len(sent) < 50:
            sent.append((await bob.publish("room", f"m{len(sent)}")).seq)
            if len(sent) == 5:
                flowing.set()
            await asyncio.sleep(0.002)

    publisher = asyncio.create_task(traffic())
    await flowing.wait()  # alice joins while bob is publishing
    joined = await alice.join("room")
    notes = []
    for _ in range(3):  # cut mid-traffic, three times
        await asyncio.sleep(0.05)
        via.drop()
        async with asyncio.timeout(TIMEOUT):
            notes.append(await resumes.get())
    cuts_done.set()
    await publisher
    got = await collect(events, sent[-1])
    assert got[0].seq <= joined.seq + 1
    assert [e.seq for e in got] == [s for s in sent if s >= got[0].seq]
    assert len({e.event_id for e in got}) == len(got)
    assert alice.reconnects == 3 and all(n.recovered for n in notes)
    assert alice.position("room") == Position(notes[0].epoch, sent[-1])


async def test_lost_history_is_never_silent(hub, clients):
    first = await hub()
    port = first.port
    notes: list[Resumed] = []
    called = asyncio.Event()

    async def on_resume(note: Resumed) -> None:
        notes.append(note)
        called.set()

    alice = await clients(first, "alice", reconnect=True, backoff=FAST, on_resume=on_resume)
    resumed = alice.subscribe("room", kinds=frozenset({"resumed"}))
    joined_first = await alice.join("room")
    await alice.publish("room", "before the restart")
    before = alice.position("room")
    assert before == Position(joined_first.epoch, joined_first.seq + 1)

    await first.aclose()  # a single node keeps history in memory: it is gone
    await hub(port=port)
    note = await resumed.get(TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        await called.wait()
    assert notes == [note]
    assert note.recovered is False and note.since == before
    assert note.epoch != before.epoch
    assert alice.position("room") == Position(note.epoch, note.seq)


async def test_join_since_a_saved_position(hub, clients):
    server = await hub()
    bob = await clients(server, "bob")
    await bob.join("room")
    alice = await clients(server, "alice")
    await alice.join("room")
    await bob.publish("room", "one")
    await alice.publish("room", "mine")
    saved = alice.position("room")
    await alice.aclose()
    await bob.publish("room", "two")
    page = await bob.history("room", limit=2)
    assert [e.text for e in page.events] == ["mine", "two"]  # type: ignore[union-attr]
    assert page.next_before_seq == page.events[0].seq

    again = await clients(server, "alice")
    events = again.events("room")
    result = await again.join("room", since=saved)
    assert result.recovered is True and result.seq == saved.seq + 1
    (got,) = await collect(events, result.seq)
    assert got.text == "two"


async def test_idempotent_publish_is_sent_again_after_a_cut(hub, clients, proxy):
    server = await hub()
    via = await proxy(server.port)
    alice = await clients(via.url, "alice", reconnect=True, backoff=FAST)
    bob = await clients(server, "bob")
    seen = bob.events("room")
    await bob.join("room")
    await alice.join("room")
    via.cut_when(lambda data: b"retry-me" in data)  # the acknowledgement never arrives
    event = await alice.publish("room", "retry-me", idempotency_key="order-7")
    assert event.duplicate is True and alice.reconnects == 1
    after = await bob.publish("room", "after")
    got = await collect(seen, after.seq)
    assert [e.text for e in got] == ["retry-me", "after"], "published once"
    assert got[0].seq == event.seq and got[0].event_id == event.event_id


async def watch(clients: Any, server: Any, space: str) -> Any:
    """Member changes of ``space`` seen by an observer (to know a CLI has joined)."""
    observer = await clients(server, f"observer-{server.port}")
    changes = observer.events(space, members=True)
    await observer.join(space)
    return changes


async def test_tail_resumes_across_cut_connections(hub, clients, proxy):
    server = await hub()
    via = await proxy(server.port)
    changes = await watch(clients, server, "room")
    tail = await start_cli(
        "tail", "room", "--url", via.url, "--agent-id", "tailer", "-n", "6", "--no-members"
    )
    await joined(changes, "tailer")
    bob = Client(server.url, "bob")
    try:
        await bob.connect()
        await bob.join("room")
        for i in range(3):
            await bob.publish("room", f"m{i}")
        via.drop()
        for i in range(3, 6):  # while the tail is away
            await bob.publish("room", f"m{i}")
        status, out, err = await finish(tail)
    finally:
        await bob.aclose()
    assert status == 0, err
    assert [e["data"]["text"] for e in json_lines(out)] == [f"m{i}" for i in range(6)]


async def test_tail_says_when_events_may_be_missing(hub, clients):
    first = await hub()
    port = first.port
    changes = await watch(clients, first, "room")
    tail = await start_cli(
        "tail", "room", "--url", first.url, "--agent-id", "tailer", "-n", "1", "--no-members"
    )
    await joined(changes, "tailer")
    await first.aclose()
    second = await hub(port=port)
    bob = Client(second.url, "bob")
    try:
        await bob.connect()
        changes = bob.events("room", members=True)
        await bob.join("room")
        if "tailer" not in (bob.known_members("room") or []):
            await joined(changes, "tailer")
        await bob.publish("room", "after the restart")
        status, out, err = await finish(tail)
    finally:
        await bob.aclose()
    assert status == 0, err
    assert "may be missing" in err and "was lost" in err
    assert "rejoined" not in err, "said once, by tail's own line"
    assert [e["data"]["text"] for e in json_lines(out)] == ["after the restart"]
