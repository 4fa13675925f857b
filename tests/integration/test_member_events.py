"""Coalesced membership events on a real hub process (``agora-hub serve``,
default settings): a crowd joining or leaving one space at once is told to
the others in a few ``space.members`` events, not one per agent."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.servers import HubProcess
from tests.support.wsclient import WsClient

CROWD = 50
TIMEOUT = 20.0


def ids_of(value: Any) -> list[str]:
    """``joined``/``left``: an id (one change, the seed's shape) or a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


async def changes(observer: WsClient, field: str, expected: set[str]) -> list[dict[str, Any]]:
    """``space.members`` events until their ``field`` ids cover ``expected``."""
    events: list[dict[str, Any]] = []
    seen: list[str] = []
    async with asyncio.timeout(TIMEOUT):
        while not expected <= set(seen):
            event = await observer.wait_for("space.members", space="crowd")
            events.append(event)
            seen += ids_of(event[field])
    assert sorted(seen) == sorted(expected), "each one announced once, nobody else"
    return events


async def test_a_crowd_joining_and_leaving_at_once_gets_few_events() -> None:
    proc = HubProcess()
    await asyncio.to_thread(proc.start)
    crowd: list[WsClient] = []
    try:
        observer = await WsClient.connect(proc.url, "observer")
        await observer.join("crowd")
        names = [f"c{i:02}" for i in range(CROWD)]
        crowd = list(await asyncio.gather(*(WsClient.connect(proc.url, n) for n in names)))
        await asyncio.gather(*(c.join("crowd") for c in crowd))

        joins = await changes(observer, "joined", set(names))
        assert len(joins) <= CROWD // 5, f"{len(joins)} events for {CROWD} joins"
        assert all(not ids_of(e["left"]) for e in joins)
        assert joins[-1]["member_count"] == CROWD + 1

        await asyncio.gather(*(c.close() for c in crowd))  # a mass departure
        leaves = await changes(observer, "left", set(names))
        assert len(leaves) <= CROWD // 5, f"{len(leaves)} events for {CROWD} departures"
        assert any(isinstance(e["left"], list) and len(e["left"]) > 1 for e in leaves)
        assert leaves[-1]["member_count"] == 1 and leaves[-1]["members"] == ["observer"]
        await observer.close()
    finally:
        await asyncio.gather(*(c.close() for c in crowd), return_exceptions=True)
        await asyncio.to_thread(proc.stop)
        proc.close()


async def test_the_sdk_lists_every_agent_of_an_event(hub, clients) -> None:
    from agora_client import MembersChanged

    server = await hub()
    a = await clients(server, "a")
    await a.join("room")
    changes = a.events("room", members=True)
    others = [await clients(server, f"o{i}") for i in range(3)]
    await asyncio.gather(*(o.join("room") for o in others))
    joined: list[str] = []
    async with asyncio.timeout(TIMEOUT):
        while len(joined) < 3:
            item = await changes.get()
            if isinstance(item, MembersChanged):
                assert item.left_ids == [] and item.left is None
                assert item.joined == (item.joined_ids[0] if len(item.joined_ids) == 1 else None)
                joined += item.joined_ids
    assert sorted(joined) == ["o0", "o1", "o2"]
    assert a.known_members("room") == ["a", "o0", "o1", "o2"], "the list of the last event"


# ── coalesced, never dropped (contract §21) ─────────────────────────────────
# A long window (2 s) so that the changes below fall in one on a busy machine.
WINDOW = {"member_events_interval": 2.0}


async def test_a_join_and_leave_within_a_window_are_both_told(hub) -> None:
    """The issue's repro: alice joins; bob joins within her join's window and
    leaves again. Alice is told both (the old coalescing told her nothing)."""
    server = await hub(**WINDOW)
    alice = await WsClient.connect(server.url, "alice")
    bob = await WsClient.connect(server.url, "bob")
    await alice.join("room")
    await bob.join("room")
    left = await bob.request({"type": "space.leave", "space": "room"})
    assert left["type"] == "space.left"
    event = await alice.wait_for("space.members", space="room", timeout=TIMEOUT)
    assert (ids_of(event["joined"]), ids_of(event["left"])) == (["bob"], ["bob"])
    assert event["member_count"] == 1 and event["members"] == ["alice"]


async def read_until_event_from(client: WsClient, sender: str) -> list[dict[str, Any]]:
    """Frames up to and including the first ``space.event`` from ``sender``."""
    frames: list[dict[str, Any]] = []
    async with asyncio.timeout(TIMEOUT):
        while not frames or frames[-1].get("from") != sender:
            frames.append(await client.recv(TIMEOUT))
    return frames


@pytest.mark.redis
async def test_a_held_join_reaches_other_nodes_before_the_joiners_event(hub, redis_server) -> None:
    """Bob's join is held by his node's window (carol's join opened it); bob
    publishes at once: alice, on the other node, is told of his join first."""
    prefix = f"t{secrets.token_hex(3)}"
    n0, n1 = [
        await hub(redis_url=redis_server.url, redis_prefix=prefix, node_id=f"{prefix}-{i}",
                  **WINDOW)
        for i in range(2)
    ]  # fmt: skip
    alice = await WsClient.connect(n0.url, "alice")
    await alice.join("room")
    carol = await WsClient.connect(n1.url, "carol")
    bob = await WsClient.connect(n1.url, "bob")
    await carol.join("room")  # at once, and it opens n1's window for the room
    await bob.join("room")  # held in that window
    await bob.send({"type": "space.publish", "space": "room", "data": {"text": "hi"}})
    frames = await read_until_event_from(alice, "bob")
    told = [f for f in frames if f["type"] == "space.members"]
    assert "bob" in [a for f in told for a in ids_of(f["joined"])], frames


# ── never dropped across nodes: a node's death, a reconnect elsewhere ───────
# Real processes on a real redis-server; sub-second node liveness.
FAST_NODES = {"node_heartbeat_interval": 0.2, "node_heartbeat_timeout": 0.8}
LONG = 30.0


class Observer:
    """What a member can know of ``space``'s members: a page of the members
    when it starts, then every ``space.members`` event applied (an agent in
    both ``joined`` and ``left`` keeps what it had, as docs/protocol.md says)."""

    def __init__(self, client: WsClient, space: str):
        self.client, self.space = client, space
        self.members: set[str] = set()
        self.events: list[dict[str, Any]] = []

    async def start(self) -> Observer:
        await self.client.join(self.space)
        self.members = set(await page(self.client, self.space))
        return self

    async def until(self, field: str, agent: str) -> None:
        """Apply events until one names ``agent`` in ``field``."""
        async with asyncio.timeout(LONG):
            while True:
                event = await self.client.wait_for("space.members", LONG, space=self.space)
                if "id" in event:  # (a reply to another request)
                    continue
                self.events.append(event)
                joined, left = ids_of(event.get("joined")), ids_of(event.get("left"))
                self.members |= {a for a in joined if a not in left}
                self.members -= {a for a in left if a not in joined}
                if agent in ids_of(event.get(field)):
                    return


async def page(client: WsClient, space: str) -> list[str]:
    """Every member, paged with ``space.members`` requests (the truth)."""
    out: list[str] = []
    cursor = None
    while True:
        msg: dict[str, Any] = {"type": "space.members", "space": space, "limit": 2}
        if cursor is not None:
            msg["cursor"] = cursor
        reply = await client.request(msg, timeout=LONG)
        assert reply["type"] == "space.members", reply
        out += reply["members"]
        cursor = reply.get("next_cursor")
        if cursor is None:
            return out


@pytest.mark.redis
async def test_a_leave_held_by_a_killed_node_is_told_by_its_reaper(redis_server, hub_process):
    """x and y on node A leave inside A's window (held: a long interval), then
    A is killed: the observer on B still hears both leave — the reaper tells
    what A held (the held leave used to be lost with A)."""
    prefix = f"t{secrets.token_hex(3)}"
    common = {"redis_url": redis_server.url, "redis_prefix": prefix, **FAST_NODES}
    a = hub_process(node_id=f"{prefix}-a", member_events_interval=5.0, **common)
    b = hub_process(node_id=f"{prefix}-b", member_events_interval=0.2, **common)
    x = await WsClient.connect(a.url, "x", heartbeat=True)
    y = await WsClient.connect(a.url, "y", heartbeat=True)
    await x.join("room")  # opens A's window for 5 s
    await y.join("room")
    o = await Observer(await WsClient.connect(b.url, "o", heartbeat=True), "room").start()
    assert o.members == {"o", "x", "y"}
    for agent in (y, x):  # held in A's window
        assert (await agent.request({"type": "space.leave", "space": "room"}))["type"] == (
            "space.left"
        )
    os.kill(a.proc.pid, signal.SIGKILL)
    await o.until("left", "x")
    if "y" in o.members:
        await o.until("left", "y")
    assert o.members == {"o"}, o.events
    assert await page(o.client, "room") == ["o"]
    await o.client.close()


@pytest.mark.redis
async def test_a_leave_held_then_a_rejoin_on_another_node_keeps_the_member(
    redis_server, hub_process
):
    """m closes on A (its leave held in A's window), reconnects to B and
    rejoins, told at once by B; A's window then tells the leave. Observers on
    both nodes (no member lists: members_list_limit 1) still count m in: the
    late leave lists m in both joined and left (it used to drop m)."""
    prefix = f"t{secrets.token_hex(3)}"
    common = {"redis_url": redis_server.url, "redis_prefix": prefix, "members_list_limit": 1}
    a = hub_process(node_id=f"{prefix}-a", member_events_interval=4.0, **common)
    b = hub_process(node_id=f"{prefix}-b", member_events_interval=0, **common)  # never holds
    m = await WsClient.connect(a.url, "m")
    await m.join("room")  # told at once; opens A's window
    oa = await Observer(await WsClient.connect(a.url, "oa", heartbeat=True), "room").start()
    ob = await Observer(await WsClient.connect(b.url, "ob", heartbeat=True), "room").start()
    assert "m" in oa.members and "m" in ob.members  # its join was told
    h = await WsClient.connect(a.url, "h", heartbeat=True)
    await h.join("room")  # held
    await m.close()  # its leave is held in A's window
    async with asyncio.timeout(LONG):
        while True:  # until A has let m's id go
            m2 = await WsClient.connect(b.url, "m", registered=False)
            with contextlib.suppress(ConnectionClosed):
                first = await m2.recv(LONG)
                if first.get("type") == "agent.registered":
                    m2.registered = first
                    m2.start_heartbeat()
                    break
            await m2.close()
    await m2.join("room")  # told at once by B: before A's window tells m's leave
    for o in (oa, ob):
        await o.until("left", "m")
    truth = set(await page(ob.client, "room"))
    assert truth == {"oa", "ob", "h", "m"}
    for o in (oa, ob):
        assert o.members == truth, (o.client.agent_id, o.events)
    for c in (oa.client, ob.client, h, m2):
        await c.close()
