"""Epochs on a real redis-server: lost history is detected from what is missing.

A flushed Redis, a Redis restarted without persistence, and evicted keys
each either keep the epoch (nothing recorded was lost) or change it, and a
(space, epoch) pair never gives one seq to two messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from hub.cluster.backplane.redis import RedisBackplane
from tests.contract.test_backplane_contract import Recorder, draft
from tests.support.servers import RedisServer
from tests.support.stores import Connections

pytestmark = pytest.mark.redis

WAIT = 20.0


@pytest.fixture
async def node(
    redis_server: RedisServer, connect: Connections
) -> AsyncIterator[tuple[RedisBackplane, Recorder]]:
    backplane = RedisBackplane(connect(redis_server.url), prefix="e", node_id="n1")
    handler = Recorder()
    await backplane.start(handler)
    await handler.wait_ready(True, WAIT)
    yield backplane, handler
    await backplane.aclose()


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def publish_three(bp: RedisBackplane, space: str) -> None:
    for i in range(3):
        await bp.publish(space, draft(str(i)))


async def test_flushed_redis_gives_a_new_epoch(node: Any, redis: Redis) -> None:
    bp, _ = node
    await publish_three(bp, "room")
    before = await bp.position("room")
    await redis.flushall()
    after = await bp.position("room")
    assert after.epoch != before.epoch and after.seq == 0
    assert await bp.publish("room", draft("new")) == 1
    assert (await bp.position("room")).epoch == after.epoch


async def test_restart_without_persistence_gives_a_new_epoch_and_a_higher_seq(
    node: Any, redis_server: RedisServer
) -> None:
    bp, handler = node
    await bp.subscribe("room")
    await publish_three(bp, "room")
    before = await bp.position("room")
    redis_server.kill()
    await handler.wait_ready(False, WAIT)
    redis_server.start()
    await handler.wait_ready(True, WAIT)
    # The node raised the seq to what it had delivered; the history is gone.
    after = await bp.position("room")
    assert after.epoch != before.epoch
    assert after.seq >= before.seq
    seq = await bp.publish("room", draft("after"))
    assert seq > before.seq
    history = await bp.history("room", after=0, limit=10)
    assert [e.seq for e in history.events] == [seq]


async def test_an_evicted_seq_is_restored_from_history_under_the_same_epoch(
    node: Any, redis: Redis
) -> None:
    bp, _ = node
    await publish_three(bp, "room")
    before = await bp.position("room")
    await redis.delete("e:seq:room")
    assert await bp.position("room") == before
    assert await bp.publish("room", draft("next")) == 4


async def test_losing_seq_and_history_gives_a_new_epoch(node: Any, redis: Redis) -> None:
    bp, _ = node
    await publish_three(bp, "room")
    before = await bp.position("room")
    await redis.delete("e:seq:room", "e:history:room")
    assert await bp.publish("room", draft("restart")) == 1
    assert (await bp.position("room")).epoch != before.epoch


async def test_an_evicted_epoch_is_replaced(node: Any, redis: Redis) -> None:
    bp, _ = node
    await publish_three(bp, "room")
    before = await bp.position("room")
    await redis.delete("e:epoch:room")
    seq = await bp.publish("room", draft("next"))
    after = await bp.position("room")
    assert seq == 4 and after.epoch != before.epoch


async def test_keys_and_their_lifetimes(node: Any, redis: Redis) -> None:
    bp, _ = node
    await bp.publish("room", draft("x", stream="a/1"))
    assert 86000 < await redis.ttl("e:seq:room") <= 86400
    assert 86000 < await redis.ttl("e:epoch:room") <= 86400
    assert 0 < await redis.ttl("e:history:room") <= 300
    entries = await redis.xrange("e:history:room")
    assert [entry_id for entry_id, _ in entries] == [b"1-0"]
    assert entries[0][1][b"s"] == b"a/1"


async def test_a_reconnect_after_an_evicted_seq_continues_after_the_history(
    redis_server: RedisServer, connect: Connections
) -> None:
    """The seq a reconnecting node raises to is never below the newest recorded
    message (it once was: publishes then failed and the epoch was dropped)."""
    a = RedisBackplane(connect(redis_server.url), prefix="v", node_id="a")
    b = RedisBackplane(connect(redis_server.url), prefix="v", node_id="b")
    ha, hb = Recorder(), Recorder()
    client = Redis.from_url(redis_server.url)
    try:
        for bp, h in ((a, ha), (b, hb)):
            await bp.start(h)
            await h.wait_ready(True, WAIT)
        await a.subscribe("room")
        await b.subscribe("room")
        first = [await a.publish("room", draft(str(i))) for i in range(3)]
        await hb.wait_until(lambda: hb.seqs("room") == first)
        before = await a.position("room")
        assert b._conn is not None
        await b._conn.disconnect(nowait=True)  # b's link drops; a goes on
        await hb.wait_ready(False, WAIT)
        more = [await a.publish("room", draft(f"m{i}")) for i in range(5)]
        await client.delete("v:seq:room")  # evicted meanwhile
        await hb.wait_ready(True, WAIT)  # b raised the seq on its way back
        nxt = [await a.publish("room", draft(f"n{i}")) for i in range(3)]
        assert nxt == [more[-1] + 1, more[-1] + 2, more[-1] + 3]
        assert (await a.position("room")).epoch == before.epoch
    finally:
        await client.aclose()
        await a.aclose()
        await b.aclose()


async def test_a_node_that_missed_messages_hears_of_the_gap(
    redis_server: RedisServer, connect: Connections
) -> None:
    a = RedisBackplane(connect(redis_server.url), prefix="g", node_id="a")
    b = RedisBackplane(connect(redis_server.url), prefix="g", node_id="b", backoff_min=1.0)
    ha, hb = Recorder(), Recorder()
    try:
        for bp, h in ((a, ha), (b, hb)):
            await bp.start(h)
            await h.wait_ready(True, WAIT)
        await b.subscribe("room")
        first = [await a.publish("room", draft(str(i))) for i in range(3)]
        await hb.wait_until(lambda: hb.seqs("room") == first)
        assert b._conn is not None
        await b._conn.disconnect(nowait=True)  # b's pub/sub link drops
        await hb.wait_ready(False, WAIT)
        missed = [await a.publish("room", draft(f"m{i}")) for i in range(4)]
        await hb.wait_ready(True, WAIT)
        after = await a.publish("room", draft("after"))
        await hb.wait_until(lambda: after in hb.seqs("room"))
        assert hb.gaps == [("room", first[-1], after)]
        assert hb.seqs("room") == [*first, after], "the missed ones are in the history"
        history = await b.history("room", after=first[-1], limit=10)
        assert [e.seq for e in history.events] == [*missed, after]
        # Unsubscribing forgets the position: a later subscribe reports no gap.
        await b.unsubscribe("room")
        await a.publish("room", draft("unseen"))
        await b.subscribe("room")
        last = await a.publish("room", draft("last"))
        await hb.wait_until(lambda: last in hb.seqs("room"))
        assert len(hb.gaps) == 1
    finally:
        await a.aclose()
        await b.aclose()
