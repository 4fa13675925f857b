"""Members that only listen keep receiving while other members go away.

Regression for a stall: a member closing with a normal closing handshake left
its transport half-closed (``write_eof``); the next flush pass raised on it
and every connection queued after it in that pass stayed unflushed until it
sent a frame of its own.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.support.wsclient import WsClient

SPACE = "general"


async def _collect(listener: WsClient, want: int, timeout: float = 20.0) -> list[int]:
    """Sequence numbers of the ``space.event`` frames the listener got."""
    seqs: list[int] = []
    async with asyncio.timeout(timeout):
        while len(seqs) < want:
            msg = await listener.recv(timeout)
            if msg.get("type") == "space.event":
                seqs.append(msg["seq"])
    return seqs


async def _leave(member: WsClient, how: str) -> None:
    if how == "close":
        await member.close()
    elif how == "half":
        # A close frame, then the peer stops reading: the hub has answered
        # and half-closed its side (write_eof) but the connection lingers
        # until close_timeout — the window in which the stall happened.
        member.ws.transport.pause_reading()
        member.ws.protocol.send_close(1000)
        member.ws.send_data()
    else:
        member.ws.transport.abort()


@pytest.mark.parametrize("how", ["close", "half", "abort"])
async def test_listeners_get_everything_while_others_leave(hub, how):
    server = await hub(rate_limit=1000, rate_burst=1000)
    url = server.url
    older = [await WsClient.connect(url, f"old-{i}") for i in range(20)]
    for m in older:
        await m.join(SPACE)
    listeners = [await WsClient.connect(url, f"listen-{i}") for i in range(10)]
    for m in listeners:
        await m.join(SPACE)
    publishers = [await WsClient.connect(url, f"pub-{i}") for i in range(4)]
    for p in publishers:
        await p.join(SPACE)

    per_publisher = 40

    async def publish(p: WsClient) -> None:
        for n in range(per_publisher):
            await p.send({"type": "space.publish", "space": SPACE, "data": {"n": n}})
            await asyncio.sleep(0.005)

    async def leave_all() -> None:
        for m in older:
            await _leave(m, how)
            await asyncio.sleep(0.005)

    await asyncio.gather(leave_all(), *(publish(p) for p in publishers))
    total = per_publisher * len(publishers)
    # The listeners send nothing: everything must arrive on its own.
    results = await asyncio.gather(*(_collect(m, total) for m in listeners))
    for seqs in results:
        assert seqs == sorted(seqs) and len(set(seqs)) == total
    for m in listeners + publishers:
        await m.close()


async def test_a_connection_failing_mid_flush_holds_back_nobody(hub):
    """A transport whose write raises is cut; everyone after it still gets the frame."""
    server = await hub()
    url = server.url
    members = [await WsClient.connect(url, f"m-{i}") for i in range(6)]
    for m in members:
        await m.join(SPACE)
    node = server.node
    # Break the *first* member's server-side transport so it fails in the
    # middle of a flush pass that also holds the others.
    victim = next(c for c in node.registry.connections.values() if c.agent_id == "m-0")

    def broken_write(data: bytes) -> None:
        raise RuntimeError("Cannot call write() after write_eof()")

    victim.transport.write = broken_write  # type: ignore[method-assign]
    sender = members[-1]
    await sender.send({"type": "space.publish", "space": SPACE, "data": {"n": 1}})
    for m in members[1:]:
        msg = await m.wait_for("space.event")
        assert msg["data"]["n"] == 1
    # The broken one is dropped, not left half-alive.
    code, _ = await members[0].closed()
    assert code is None or code >= 1000
    for m in members[1:]:
        await m.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
async def test_shuffled_closes_and_publishes_reach_every_open_member(hub, seed):
    """Property: whatever order closes and publishes come in, a member that stays
    open receives every event published while it was a member, in seq order."""
    rng = random.Random(seed)
    server = await hub(rate_limit=1000, rate_burst=1000)
    url = server.url
    stay = [await WsClient.connect(url, f"stay-{i}") for i in range(5)]
    going = [await WsClient.connect(url, f"go-{i}") for i in range(12)]
    for m in stay + going:
        await m.join(SPACE)
    steps: list[tuple[str, int]] = [("close", i) for i in range(len(going))]
    steps += [("publish", i) for i in range(60)]
    rng.shuffle(steps)
    published = 0
    for kind, i in steps:
        if kind == "close":
            how = rng.choice(["close", "half", "abort"])
            if how == "close":
                # Don't wait for the handshake: publishes race the close.
                asyncio.get_running_loop().create_task(going[i].close())
            else:
                await _leave(going[i], how)
        else:
            sender = rng.choice(stay)
            await sender.send({"type": "space.publish", "space": SPACE, "data": {"i": i}})
            published += 1
        if rng.random() < 0.3:
            await asyncio.sleep(0)
    results = await asyncio.gather(*(_collect(m, published) for m in stay))
    first = results[0]
    assert len(first) == published and first == sorted(first)
    for seqs in results[1:]:
        assert seqs == first  # every open member, same events, same order
    for m in stay:
        await m.close()
