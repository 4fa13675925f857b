"""History, epochs and idempotent publish: one contract, both backplanes.

The same bodies run on the in-memory backplane and on a real redis-server
(see ``test_backplane_contract``). Where time must pass (``history_ttl``) the
in-memory node runs on a clock the test moves; the Redis one on real time
with a one-second TTL, polled until the history is gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from hub.cluster.backplane import Delivery, Draft, Duplicate, MemoryBackplane, Once, StreamOp
from hub.cluster.backplane.base import complete_streams
from tests.contract.test_backplane_contract import (
    WAIT,
    BackplaneCluster,
    draft,
    expected_frame,
    redis_backplane_factory,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def make_cluster(backend: Any) -> AsyncIterator[Callable[..., BackplaneCluster]]:
    """``make_cluster(history_size=…, history_ttl=…)``: a cluster with those settings."""
    made: list[BackplaneCluster] = []

    def make(**options: Any) -> BackplaneCluster:
        if backend is None:
            c = BackplaneCluster(None, distributed=False, options={"clock": FakeClock(), **options})
        else:
            c = BackplaneCluster(redis_backplane_factory(backend.url, **options), distributed=True)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.aclose()


async def eventually(check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll ``await check()`` until it returns something true (a TTL ran out)."""
    async with asyncio.timeout(timeout):
        while True:
            result = await check()
            if result:
                return result
            await asyncio.sleep(0.1)


async def let_time_pass(cluster: BackplaneCluster, backplane: Any, space: str, ttl: float) -> None:
    """Until ``space``'s history has expired: move the fake clock, or wait for Redis."""
    if not cluster.distributed:
        cluster.options["clock"].now += ttl + 1
        return

    async def expired() -> bool:
        return not (await backplane.history(space, limit=1)).events

    await eventually(expired, ttl + WAIT)


def once(key: str, event_id: str = "evt-1", digest: str = "d1") -> Once:
    return Once(f"alice\n{key}", event_id, 1234, digest)


# ── position and epoch ──────────────────────────────────────────────────────


async def test_position_of_a_new_space_and_after_publishes(make_cluster: Any) -> None:
    cluster = make_cluster()
    a, b = await cluster.node("a"), await cluster.node("b")
    first = await a.backplane.position("fresh")
    assert first.seq == 0 and isinstance(first.epoch, str) and first.epoch
    seqs = [await a.backplane.publish("fresh", draft(str(i))) for i in range(3)]
    seen_by_b = await b.backplane.position("fresh")
    assert seen_by_b.seq == seqs[-1] == 3
    assert seen_by_b.epoch == first.epoch, "publishing does not change the epoch"
    other = await a.backplane.position("other")
    assert other.seq == 0


async def test_forget_keeps_seq_and_epoch(make_cluster: Any) -> None:
    """A space that empties and fills again never reuses a seq under one epoch."""
    cluster = make_cluster()
    a = await cluster.node("a")
    await a.backplane.subscribe("room")
    for i in range(3):
        await a.backplane.publish("room", draft(str(i)))
    before = await a.backplane.position("room")
    await a.backplane.unsubscribe("room")
    await a.backplane.forget("room")
    await a.backplane.subscribe("room")
    seq = await a.backplane.publish("room", draft("again"))
    after = await a.backplane.position("room")
    assert seq == 4 and after.epoch == before.epoch
    history = await a.backplane.history("room", after=0, limit=10)
    assert [e.seq for e in history.events] == [1, 2, 3, 4]


async def test_a_new_backplane_process_has_a_new_epoch_in_memory() -> None:
    one, two = MemoryBackplane(), MemoryBackplane()
    assert (await one.position("s")).epoch != (await two.position("s")).epoch


async def test_an_abandoned_memory_space_comes_back_with_a_new_epoch() -> None:
    clock = FakeClock()
    bp = MemoryBackplane(history_ttl=10, clock=clock)
    await bp.publish("gone", draft("x"))
    old = await bp.position("gone")
    await bp.forget("gone")
    clock.now += 5
    await bp.forget("other")  # a later forget sweeps, but not yet
    assert await bp.position("gone") == old
    clock.now += 6
    await bp.forget("other")
    new = await bp.position("gone")
    assert new.epoch != old.epoch and new.seq == 0
    assert await bp.publish("gone", draft("y")) == 1


async def test_a_memory_space_joined_again_after_the_ttl_starts_afresh() -> None:
    """Its members gone longer than ``history_ttl``, a space joined again has a
    new epoch and counts from 1 — though no other space emptied meanwhile (on
    Redis the seq and the epoch live a day: docs/delivery.md)."""
    clock = FakeClock()
    bp = MemoryBackplane(history_ttl=10, clock=clock)
    await bp.subscribe("room")
    await bp.publish("room", draft("x"))
    old = await bp.position("room")
    await bp.unsubscribe("room")
    await bp.forget("room")
    clock.now += 5
    await bp.subscribe("room")  # back within the ttl: the same epoch
    assert await bp.position("room") == old
    await bp.unsubscribe("room")
    await bp.forget("room")
    clock.now += 11
    await bp.subscribe("room")
    new = await bp.position("room")
    assert new.epoch != old.epoch and new.seq == 0
    assert await bp.publish("room", draft("y")) == 1


# ── reading history ─────────────────────────────────────────────────────────


async def test_history_after_a_seq_returns_what_was_delivered(make_cluster: Any) -> None:
    cluster = make_cluster()
    a, b = await cluster.node("a"), await cluster.node("b")
    await b.backplane.subscribe("h")
    drafts = [
        draft("plain"),
        draft("echo-off", exclude="alice"),
        draft("addressed", to=("bob", "carol")),
        Draft(b'{"type":"space.event.delta","seq":', b"}", stream="alice/s1", op=StreamOp.OPEN),
        Draft(b'{"type":"space.event.done","seq":', b"}", stream="alice/s1", op=StreamOp.END),
        draft("last"),
    ]
    seqs = [await a.backplane.publish("h", d) for d in drafts]
    await b.handler.wait_until(lambda: len(b.handler.of("h")) == len(drafts))
    history = await b.backplane.history("h", after=2, limit=100)
    assert history.seq == seqs[-1] == 6
    assert history.oldest == 1
    assert history.events == b.handler.of("h")[2:], "the same envelopes as delivered live"
    assert [e.seq for e in history.events] == [3, 4, 5, 6]
    assert history.events[0].to == ("bob", "carol")
    assert history.events[1].op is StreamOp.OPEN and history.events[1].stream == "alice/s1"
    whole = await b.backplane.history("h", after=0, limit=100)
    assert whole.events[1].exclude == "alice"
    for d, s, env in zip(drafts, seqs, whole.events, strict=True):
        assert env.frame == expected_frame(d, s)
    page = await b.backplane.history("h", after=1, limit=2)
    assert [e.seq for e in page.events] == [2, 3]
    assert (await b.backplane.history("h", after=6, limit=10)).events == []


async def test_history_newest_and_before(make_cluster: Any) -> None:
    cluster = make_cluster()
    a = await cluster.node("a")
    for i in range(10):
        await a.backplane.publish("n", draft(str(i)))
    newest = await a.backplane.history("n", limit=3)
    assert [e.seq for e in newest.events] == [8, 9, 10], "newest, oldest first"
    before = await a.backplane.history("n", before=5, limit=3)
    assert [e.seq for e in before.events] == [2, 3, 4]
    assert [e.seq for e in (await a.backplane.history("n", before=3, limit=5)).events] == [1, 2]
    assert (await a.backplane.history("n", before=1, limit=5)).events == []
    empty = await a.backplane.history("never", limit=5)
    assert empty.events == [] and empty.oldest is None and empty.seq == 0


async def test_history_bounds_up_to_int64_read_like_any_other(make_cluster: Any) -> None:
    """A resume from, or a page before, a huge seq is valid input: it reads
    nothing after it, or the newest before it (Redis Lua once turned such
    bounds into ``1e+14-0`` stream ids and failed)."""
    cluster = make_cluster()
    a = await cluster.node("a")
    for i in range(3):
        await a.backplane.publish("big", draft(str(i)))
    for after in (10**14, 10**15, 2**63 - 1):
        assert (await a.backplane.history("big", after=after, limit=10)).events == []
    for before in (10**14, 2**63 - 1):
        page = await a.backplane.history("big", before=before, limit=10)
        assert [e.seq for e in page.events] == [1, 2, 3]


async def test_history_keeps_the_last_history_size(make_cluster: Any) -> None:
    cluster = make_cluster(history_size=5)
    a = await cluster.node("a")
    for i in range(12):
        await a.backplane.publish("small", draft(str(i)))
    history = await a.backplane.history("small", after=0, limit=100)
    assert [e.seq for e in history.events] == [8, 9, 10, 11, 12]
    assert history.oldest == 8 and history.seq == 12


async def test_history_size_zero_keeps_nothing_but_the_seq(make_cluster: Any) -> None:
    cluster = make_cluster(history_size=0)
    a = await cluster.node("a")
    for i in range(3):
        await a.backplane.publish("none", draft(str(i)))
    history = await a.backplane.history("none", after=0, limit=100)
    assert history.events == [] and history.oldest is None and history.seq == 3


async def test_history_expires_after_history_ttl_but_the_position_stays(
    make_cluster: Any,
) -> None:
    cluster = make_cluster(history_ttl=1)
    a = await cluster.node("a")
    for i in range(3):
        await a.backplane.publish("t", draft(str(i)))
    before = await a.backplane.position("t")
    await let_time_pass(cluster, a.backplane, "t", 1)
    history = await a.backplane.history("t", after=0, limit=10)
    assert history.events == [] and history.oldest is None
    assert history.position == before, "seq and epoch outlive the history"
    assert await a.backplane.publish("t", draft("next")) == 4


async def test_complete_streams_in_a_window(make_cluster: Any) -> None:
    """Only streams that open and finish with a done inside the window are complete."""
    cluster = make_cluster()
    a = await cluster.node("a")

    def frame(kind: str, stream: str, op: StreamOp) -> Draft:
        return Draft(b'{"type":"space.event.%s","seq":' % kind.encode(), b"}", stream=stream, op=op)

    sequence = [
        frame("delta", "x/early", StreamOp.OPEN),  # 1: opens before the window
        draft("plain"),  # 2
        frame("delta", "x/early", StreamOp.DELTA),  # 3
        frame("delta", "x/done", StreamOp.OPEN),  # 4
        frame("delta", "x/cancelled", StreamOp.OPEN),  # 5
        frame("done", "x/early", StreamOp.END),  # 6
        frame("delta", "x/done", StreamOp.DELTA),  # 7
        frame("cancel", "x/cancelled", StreamOp.END),  # 8
        frame("done", "x/done", StreamOp.END),  # 9
        frame("delta", "x/open", StreamOp.OPEN),  # 10: unfinished
        draft("last"),  # 11
    ]
    for d in sequence:
        await a.backplane.publish("st", d)
    for limit in (100, 3):  # the whole window in one page, and not
        page = await a.backplane.history("st", after=1, limit=limit, streams=True)
        assert page.complete == {"x/done"}, limit
        assert [e.seq for e in page.events] == list(range(2, 2 + min(limit, 10)))
    everything = await a.backplane.history("st", after=0, limit=100)
    assert complete_streams(everything.events) == {"x/early", "x/done"}
    later = await a.backplane.history("st", after=4, limit=2, streams=True)
    assert later.complete == frozenset(), "x/done opened before the window"


# ── idempotent publish ──────────────────────────────────────────────────────


async def test_a_retry_is_answered_with_the_original_and_not_published(make_cluster: Any) -> None:
    cluster = make_cluster()
    a, b = await cluster.node("a"), await cluster.node("b")
    await b.backplane.subscribe("i")
    first = await a.backplane.publish("i", draft("once", once=once("k1", "evt-a")))
    assert not isinstance(first, Duplicate)
    again = await b.backplane.publish("i", draft("once", once=once("k1", "evt-b")))
    assert isinstance(again, Duplicate)
    assert (int(again), again.event_id, again.timestamp, again.digest) == (
        first,
        "evt-a",
        1234,
        "d1",
    )
    other_key = await a.backplane.publish("i", draft("twice", once=once("k2")))
    assert other_key == first + 1, "a duplicate takes no seq"
    other_agent = Once("bob\nk1", "evt-c", 1, "d1")
    assert not isinstance(await a.backplane.publish("i", draft("bob", once=other_agent)), Duplicate)
    other_space = await a.backplane.publish("j", draft("j", once=once("k1")))
    assert not isinstance(other_space, Duplicate)
    await b.handler.wait_until(lambda: len(b.handler.of("i")) >= 3)
    assert b.handler.seqs("i") == [first, first + 1, first + 2], "delivered once"
    history = await a.backplane.history("i", after=0, limit=10)
    assert len(history.events) == 3


async def test_concurrent_retries_on_two_nodes_publish_once(make_cluster: Any) -> None:
    cluster = make_cluster()
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.backplane.subscribe("race")
    for round_ in range(20):
        key = once(f"k{round_}", f"evt-{round_}")
        results = await asyncio.gather(
            a.backplane.publish("race", draft("x", once=key)),
            b.backplane.publish("race", draft("x", once=key)),
            a.backplane.publish_nowait("race", draft("x", once=key)),
        )
        originals = [r for r in results if not isinstance(r, Duplicate)]
        assert len(originals) == 1, results
        assert all(int(r) == originals[0] for r in results)
    await a.handler.wait_until(lambda: len(a.handler.of("race")) >= 20)
    assert a.handler.seqs("race") == list(range(1, 21))


async def test_idempotency_keys_expire_with_history_ttl(make_cluster: Any) -> None:
    cluster = make_cluster(history_ttl=1)
    a = await cluster.node("a")
    first = await a.backplane.publish("e", draft("x", once=once("k")))
    assert isinstance(await a.backplane.publish("e", draft("x", once=once("k"))), Duplicate)
    await let_time_pass(cluster, a.backplane, "e", 1)

    async def published() -> int | None:
        seq = await a.backplane.publish("e", draft("x", once=once("k")))
        return None if isinstance(seq, Duplicate) else seq

    # Redis expires the key on its own clock: polled (each duplicate publishes nothing).
    seq = await eventually(published)
    assert seq == first + 1


def test_duplicate_parses_a_receipt() -> None:
    dup = Duplicate.parse(b"41 1700000000000 0a1b alice/evt 1")
    assert (int(dup), dup.timestamp, dup.digest, dup.event_id) == (
        41,
        1700000000000,
        "0a1b",
        "alice/evt 1",
    )
    assert isinstance(dup, int) and dup == 41


def test_envelope_equality_is_by_value() -> None:
    # History reads are compared with what was delivered: plain dataclass equality.
    assert Delivery("s", b"x", 1) == Delivery("s", b"x", 1)
