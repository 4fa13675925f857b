"""Redis faults with a real redis-server: killed, restarted empty, frozen, flushed.

Readiness is awaited through the handler's ``backplane_ready`` callbacks with
generous timeouts; nothing waits for an event by sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from hub.cluster.backplane import Delivery
from hub.cluster.backplane.redis import RedisBackplane
from hub.cluster.presence import AgentRecord, ReapedAgent
from hub.cluster.presence.redis import RedisPresence
from hub.errors import BackplaneUnavailable
from tests.contract.test_backplane_contract import Recorder, draft
from tests.support.servers import RedisServer
from tests.support.stores import Connections

pytestmark = pytest.mark.redis

WAIT = 20.0
FAST_FAIL = 5.0  # a publisher must hear "unavailable" within this


@pytest.fixture
async def make_backplane(redis_server: RedisServer, connect: Connections) -> AsyncIterator[Any]:
    made: list[RedisBackplane] = []

    async def make(node_id: str, wait: bool = True, **kwargs: Any) -> tuple[Any, Recorder]:
        timeouts = {k: kwargs.pop(k) for k in ("socket_timeout", "connect_timeout") if k in kwargs}
        redis = connect(redis_server.url, **timeouts)
        backplane = RedisBackplane(redis, prefix="f", node_id=node_id, **kwargs)
        made.append(backplane)
        handler = Recorder()
        await backplane.start(handler)
        if wait:
            await handler.wait_ready(True, WAIT)
        return backplane, handler

    yield make
    for backplane in made:
        await backplane.aclose()


async def raises_unavailable_quickly(call: Any) -> None:
    started = time.monotonic()
    with pytest.raises(BackplaneUnavailable):
        await call
    assert time.monotonic() - started < FAST_FAIL


async def test_outage_then_restart_restores_subscriptions_and_seq(
    redis_server: RedisServer, make_backplane: Any
) -> None:
    a, ha = await make_backplane("a")
    b, hb = await make_backplane("b")
    await a.subscribe("room")
    await b.subscribe("room")
    before = [await a.publish("room", draft(str(i))) for i in range(3)]
    await hb.wait_until(lambda: len(hb.of("room")) == 3)

    redis_server.kill()
    await ha.wait_ready(False, WAIT)
    await hb.wait_ready(False, WAIT)
    assert not a.ready and not b.ready
    await raises_unavailable_quickly(a.publish("room", draft("lost")))
    await raises_unavailable_quickly(a.send(Delivery("room", b"{}")))
    await raises_unavailable_quickly(a.send_to_node("b", b"x"))
    await raises_unavailable_quickly(b.subscribe("elsewhere"))
    await b.unsubscribe("nothing")  # best effort: never raises

    redis_server.start()  # same port, empty: no persistence
    await ha.wait_ready(True, WAIT)
    await hb.wait_ready(True, WAIT)
    assert a.ready and b.ready
    # Both nodes raised the space's seq to what they had delivered before
    # resubscribing, so it keeps increasing although Redis forgot it.
    after = await b.publish("room", draft("back"))
    assert after > max(before)
    await ha.wait_until(lambda: ha.seqs("room")[-1:] == [after])
    await hb.wait_until(lambda: hb.seqs("room")[-1:] == [after])
    for h in (ha, hb):
        seqs = h.seqs("room")
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # The node channel is back too, and new subscriptions work.
    await a.send_to_node("b", b"hello again")
    await hb.wait_until(lambda: hb.node_messages == [b"hello again"])
    await a.subscribe("new")
    await b.publish("new", draft("n"))
    await ha.wait_until(lambda: bool(ha.of("new")))
    assert ha.readiness == [True, False, True]


async def test_start_while_redis_is_down(redis_server: RedisServer, make_backplane: Any) -> None:
    redis_server.kill()
    started = time.monotonic()
    a, ha = await make_backplane("a", wait=False)
    assert time.monotonic() - started < 1.0, "start must not wait for Redis"
    await ha.wait_ready(False, WAIT)
    assert not a.ready
    await raises_unavailable_quickly(a.subscribe("room"))
    await raises_unavailable_quickly(a.publish("room", draft("x")))
    redis_server.start()
    await ha.wait_ready(True, WAIT)
    await a.subscribe("room")
    seq = await a.publish("room", draft("x"))
    await ha.wait_until(lambda: ha.seqs("room") == [seq])


async def test_frozen_redis_times_out_and_recovers(
    redis_server: RedisServer, make_backplane: Any
) -> None:
    """A Redis that stops answering (SIGSTOP) must not hang publishers."""
    a, ha = await make_backplane("a", socket_timeout=0.5, ping_interval=0.2)
    await a.subscribe("room")
    assert redis_server.proc is not None
    redis_server.proc.send_signal(signal.SIGSTOP)
    try:
        await raises_unavailable_quickly(a.publish("room", draft("x")))
        await ha.wait_ready(False, WAIT)  # the silent pub/sub link was dropped
    finally:
        redis_server.proc.send_signal(signal.SIGCONT)
    await ha.wait_ready(True, WAIT)
    # The publish that timed out may or may not have run; later ones keep order.
    seq = await a.publish("room", draft("y"))
    await ha.wait_until(lambda: ha.seqs("room")[-1:] == [seq])


async def test_script_cache_flush_is_survived(
    redis_server: RedisServer, make_backplane: Any
) -> None:
    a, ha = await make_backplane("a")
    await a.subscribe("room")
    assert await a.publish("room", draft("1")) == 1
    client = Redis.from_url(redis_server.url)
    try:
        await client.script_flush()
    finally:
        await client.aclose()
    assert await a.publish("room", draft("2")) == 2  # NOSCRIPT: reloaded, run once
    await ha.wait_until(lambda: ha.seqs("room") == [1, 2])


async def test_close_is_safe_in_any_state(redis_server: RedisServer, connect: Connections) -> None:
    never = RedisBackplane(connect(redis_server.url), node_id="never")
    await never.aclose()
    await never.aclose()
    down = RedisBackplane(connect(redis_server.url), node_id="down")
    redis_server.kill()
    await down.start(Recorder())
    started = time.monotonic()
    await down.aclose()
    await down.aclose()
    assert time.monotonic() - started < FAST_FAIL
    with pytest.raises(BackplaneUnavailable):
        await down.publish("room", draft("x"))
    presence = RedisPresence(connect(redis_server.url), node_id="p", ttl=5.0)
    await presence.start()  # Redis down: still starts
    await presence.aclose()
    await presence.aclose()


# ── presence ───────────────────────────────────────────────────────────────


async def test_presence_outage_and_restore(redis_server: RedisServer, connect: Connections) -> None:
    a = RedisPresence(connect(redis_server.url), prefix="f", node_id="a", ttl=5.0)
    try:
        await a.start()
        assert await a.touch_node() is True
        x = AgentRecord("x", "a", "ws-x", type="llm")
        await a.claim_agent(x)
        await a.join_space("room", "x", 10)

        redis_server.kill()
        for call in (
            a.claim_agent(AgentRecord("y", "a", "ws-y")),
            a.release_agent("x", "ws-x"),
            a.update_agent(x),
            a.get_agent("x"),
            a.join_space("room", "y", 10),
            a.leave_space("room", "x"),
            a.space_members("room", 10),
            a.space_sizes(),
            a.touch_node(),
            a.restore([x], {"room": ["x"]}),
            a.reap_dead_nodes(5.0),
            a.leave_cluster(),
        ):
            await raises_unavailable_quickly(call)

        redis_server.start()  # empty
        assert await a.touch_node() is True, "the registration was lost"
        assert await a.restore([x], {"room": ["x"]}) == []
        assert await a.get_agent("x") == x
        assert await a.space_members("room", 10) == (["x"], 1)
    finally:
        await a.aclose()


async def test_restarted_node_id_hands_old_agents_to_reapers(
    redis_server: RedisServer, connect: Connections
) -> None:
    """A process restarted under the same node id doesn't keep ghosts alive."""
    old = RedisPresence(connect(redis_server.url), prefix="f", node_id="n1", ttl=5.0)
    other = RedisPresence(connect(redis_server.url), prefix="f", node_id="n2", ttl=5.0)
    new = RedisPresence(connect(redis_server.url), prefix="f", node_id="n1", ttl=5.0)
    try:
        await old.start()
        await old.touch_node()
        ghost = AgentRecord("ghost", "n1", "ws-old")
        await old.claim_agent(ghost)
        await old.join_space("room", "ghost", 10)
        await old.aclose()  # crashed: nothing released

        await new.start()  # the same node id, a new process
        await new.touch_node()
        await other.touch_node()
        reaped = await other.reap_dead_nodes(60.0)
        assert reaped == [ReapedAgent(ghost, ("room",))]
        assert await new.space_members("room", 10) == ([], 0)
        assert await new.reap_dead_nodes(60.0) == []
    finally:
        for p in (old, other, new):
            with contextlib.suppress(Exception):
                await p.aclose()


async def test_no_silent_loss_while_redis_flaps(
    redis_server: RedisServer, make_backplane: Any
) -> None:
    """Every publish either raises or returns a seq that subscribers receive."""
    a, ha = await make_backplane("a")
    b, hb = await make_backplane("b")
    await a.subscribe("room")  # a publisher is a member: its node is subscribed
    await b.subscribe("room")
    acked: list[int] = []
    must_arrive: list[int] = []  # acked while b's subscription was confirmed
    progress = Recorder()  # its event wakes the test on publisher progress
    failures = 0
    gate = asyncio.Lock()  # the test kills Redis between publishes, not inside one
    stop = asyncio.Event()

    async def publisher() -> None:
        nonlocal failures
        i = 0
        while not stop.is_set():
            async with gate:
                b_ready = b.ready
                try:
                    seq = await a.publish("room", draft(str(i)))
                except BackplaneUnavailable:
                    failures += 1
                else:
                    acked.append(seq)
                    if b_ready:
                        must_arrive.append(seq)
                progress.node_message(b"")
            i += 1
            await asyncio.sleep(0.005)

    task = asyncio.get_running_loop().create_task(publisher())
    try:
        await progress.wait_until(lambda: len(acked) >= 20, WAIT)
        async with gate:
            # Redis acknowledges a script before it flushes the messages it
            # published: a crash in between loses them (at most once, see
            # docs/cluster.md). Kill after the last ack arrived, to test ours.
            await hb.wait_until(lambda: acked[-1] in hb.seqs("room"))
            await ha.wait_until(lambda: acked[-1] in ha.seqs("room"))
            redis_server.kill()
        await progress.wait_until(lambda: failures >= 3, WAIT)
        await hb.wait_ready(False, WAIT)
        redis_server.start()
        await hb.wait_ready(True, WAIT)
        resumed = len(must_arrive)
        await progress.wait_until(lambda: len(must_arrive) >= resumed + 20, WAIT)
    finally:
        stop.set()
        await task
    await hb.wait_until(lambda: set(must_arrive) <= set(hb.seqs("room")))
    delivered = hb.seqs("room")
    assert delivered == sorted(delivered) and len(set(delivered)) == len(delivered)
    assert set(delivered) <= set(acked), "nothing delivered that its publisher was told failed"
    # Publishes succeed only on a ready node, after it raised the seq to what
    # it had seen: acknowledged seqs keep increasing across the empty restart.
    assert acked == sorted(acked) and len(set(acked)) == len(acked)
    await ha.wait_until(lambda: acked[-1] in ha.seqs("room"))
    assert set(acked) - set(ha.seqs("room")) == set(), "the publisher's node got every ack"
