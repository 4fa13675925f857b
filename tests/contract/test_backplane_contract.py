"""One contract, every backplane: the same test bodies run in memory and on Redis.

A *cluster* hands out nodes by id. In memory there is only ever one node, so
every id returns that node (what two nodes see is then trivially the same,
and the rest of each body still holds). On Redis every id is its own
:class:`RedisBackplane` on one private redis-server, so "two nodes" are two
independent connections and subscriptions.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hub.cluster.backplane import Backplane, Delivery, Draft, MemoryBackplane, StreamOp
from hub.cluster.backplane.redis import RedisBackplane
from hub.cluster.redis_connection import RedisConnection
from hub.errors import BackplaneUnavailable
from protocol.codec import complete

WAIT = 15.0  # generous: a slow machine must not fail a correct backplane


class Recorder:
    """A DeliveryHandler that records everything and lets a test wait for it."""

    def __init__(self) -> None:
        self.envelopes: list[Delivery] = []
        self.node_messages: list[bytes] = []
        self.readiness: list[bool] = []
        self.gaps: list[tuple[str, int, int]] = []
        self.lost_spaces: list[str] = []
        self._changed = asyncio.Event()

    def deliver(self, envelope: Delivery) -> None:
        self.envelopes.append(envelope)
        self._changed.set()

    def backplane_ready(self, ready: bool) -> None:
        self.readiness.append(ready)
        self._changed.set()

    def node_message(self, payload: bytes) -> None:
        self.node_messages.append(payload)
        self._changed.set()

    def missed(self, space: str, after: int, upto: int) -> None:
        self.gaps.append((space, after, upto))
        self._changed.set()

    def lost(self, space: str) -> None:
        self.lost_spaces.append(space)
        self._changed.set()

    async def wait_until(self, condition: Callable[[], bool], timeout: float = WAIT) -> None:
        async with asyncio.timeout(timeout):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    async def wait_ready(self, ready: bool = True, timeout: float = WAIT) -> None:
        await self.wait_until(lambda: bool(self.readiness) and self.readiness[-1] is ready, timeout)

    def of(self, space: str) -> list[Delivery]:
        return [e for e in self.envelopes if e.space == space]

    def seqs(self, space: str) -> list[int | None]:
        return [e.seq for e in self.of(space)]


@dataclass
class Member:
    node_id: str
    backplane: Any
    handler: Recorder


@dataclass
class BackplaneCluster:
    """Nodes by id on one backplane backend."""

    make: Callable[[str], Any] | None  # None: the single in-memory node
    distributed: bool
    members: dict[str, Member] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # of the in-memory node

    async def node(self, node_id: str) -> Member:
        if not self.distributed and self.members:
            return next(iter(self.members.values()))
        member = self.members.get(node_id)
        if member is None:
            backplane = MemoryBackplane(**self.options) if self.make is None else self.make(node_id)
            member = self.members[node_id] = Member(node_id, backplane, Recorder())
            await backplane.start(member.handler)
            await member.handler.wait_ready(True)
        return member

    async def aclose(self) -> None:
        for member in self.members.values():
            await member.backplane.aclose()
            redis = getattr(member.backplane, "_redis", None)  # a Redis node's own
            if redis is not None:
                await redis.aclose()


def redis_backplane_factory(url: str, **kwargs: Any) -> Callable[[str], RedisBackplane]:
    prefix = f"t{secrets.token_hex(3)}"

    def make(node_id: str) -> RedisBackplane:
        return RedisBackplane(RedisConnection(url), prefix=prefix, node_id=node_id, **kwargs)

    return make


@pytest.fixture
async def cluster(backend: Any) -> AsyncIterator[BackplaneCluster]:
    if backend is None:
        c = BackplaneCluster(None, distributed=False)
    else:
        c = BackplaneCluster(redis_backplane_factory(backend.url), distributed=True)
    yield c
    await c.aclose()


def draft(text: str, **kwargs: Any) -> Draft:
    return Draft(b'{"t":"' + text.encode() + b'","seq":', b"}", **kwargs)


def expected_frame(d: Draft, seq: int) -> bytes:
    return complete(d.head, seq, d.tail)


# ── tests ──────────────────────────────────────────────────────────────────


async def test_satisfies_the_protocol(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    backplane: Backplane = a.backplane  # static check of the Protocol
    assert backplane.ready is True
    assert isinstance(backplane.lag, float) and backplane.lag >= 0.0
    assert a.handler.readiness[-1] is True


async def test_seq_strictly_increasing_and_identical_on_every_node(
    cluster: BackplaneCluster,
) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.backplane.subscribe("room")
    await b.backplane.subscribe("room")

    async def burst(member: Member, name: str) -> list[int]:
        return [await member.backplane.publish("room", draft(f"{name}{i}")) for i in range(25)]

    returned = await asyncio.gather(burst(a, "a"), burst(b, "b"))
    sent = sorted(returned[0] + returned[1])
    assert len(set(sent)) == 50
    for member in (a, b):
        await member.handler.wait_until(lambda m=member: len(m.handler.of("room")) >= 50)
    seqs_a, seqs_b = a.handler.seqs("room"), b.handler.seqs("room")
    assert seqs_a == seqs_b, "every node delivers the same order"
    assert seqs_a == sorted(seqs_a) and len(set(seqs_a)) == 50, "strictly increasing"
    assert seqs_a == sent, "each publish's returned seq is the one delivered"
    frames = [e.frame for e in a.handler.of("room")]
    assert frames == [e.frame for e in b.handler.of("room")]
    # Each frame is head + seq + tail of the publish that got that seq.
    for env in a.handler.of("room"):
        assert env.frame.endswith(b',"seq":%d}' % env.seq)


async def test_seq_is_per_space_and_starts_at_one(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    got = []
    for _ in range(3):
        got.append(await a.backplane.publish("one", draft("x")))
        got.append(await a.backplane.publish("two", draft("y")))
    assert got == [1, 1, 2, 2, 3, 3]


async def test_frame_exclude_stream_and_op_pass_through(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await b.backplane.subscribe("s")
    drafts = [
        Draft(b'{"text":"caf\xc3\xa9 \\n |","seq":', b',"x":"\xe2\x9c\x93"}'),
        Draft(b"[", b"]", exclude="agent-1"),
        Draft(b"{", b"}", stream="agent-2/evt 1|\n\u00e9", op=StreamOp.OPEN),
        Draft(b"{", b"}", exclude="a:b.c-d", stream="s/2", op=StreamOp.DELTA),
        Draft(b"", b"", stream="s/2", op=StreamOp.END),
    ]
    seqs = [await a.backplane.publish("s", d) for d in drafts]
    await b.handler.wait_until(lambda: len(b.handler.of("s")) >= len(drafts))
    for d, seq, env in zip(drafts, seqs, b.handler.of("s"), strict=True):
        assert env == Delivery("s", expected_frame(d, seq), seq, d.exclude, d.stream, d.op)
        assert isinstance(env.op, StreamOp)


async def test_send_is_unsequenced_and_keeps_its_fields(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await b.backplane.subscribe("s")
    first = await a.backplane.publish("s", draft("before"))
    members = Delivery("s", b'{"type":"space.members","n":"\xc3\xa9"}', exclude="joiner")
    await a.backplane.send(members)
    second = await a.backplane.publish("s", draft("after"))
    assert second == first + 1, "send does not consume a seq"
    await b.handler.wait_until(lambda: len(b.handler.of("s")) >= 3)
    unsequenced = [e for e in b.handler.of("s") if e.seq is None]
    assert unsequenced == [members]


async def test_send_says_how_many_nodes_it_reached(cluster: BackplaneCluster) -> None:
    """A stream census counts its answers against it (hub/handlers/stream_stops.py):
    one per node subscribed to the space, however many spaces each has."""
    a, b = await cluster.node("a"), await cluster.node("b")
    signal = Delivery("s", b'{"op":"census"}', op=StreamOp.SIGNAL)
    assert await a.backplane.send(Delivery("nobody-here", b"{}", op=StreamOp.SIGNAL)) == 0
    for node in (a, b):
        await node.backplane.subscribe("other")
        await node.backplane.subscribe("s")
    nodes = len({id(a.backplane), id(b.backplane)})  # (in memory: one node)
    assert await a.backplane.send(signal) == nodes
    await b.handler.wait_until(lambda: signal in b.handler.of("s"))
    assert [e.op for e in b.handler.of("s")] == [StreamOp.SIGNAL]


async def test_subscribe_then_publish_never_loses(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    spaces = [f"fresh-{i}" for i in range(20)]
    for space in spaces:
        await b.backplane.subscribe(space)
        await a.backplane.publish(space, draft(space))
    await b.handler.wait_until(lambda: all(b.handler.seqs(s) == [1] for s in spaces))


async def test_concurrent_subscribes_deliver_once(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await asyncio.gather(*(b.backplane.subscribe("dup") for _ in range(5)))
    await b.backplane.subscribe("dup")  # already subscribed: returns at once
    await a.backplane.publish("dup", draft("once"))
    await a.backplane.publish("dup", draft("twice"))
    await b.handler.wait_until(lambda: len(b.handler.of("dup")) >= 2)
    assert b.handler.seqs("dup") == [1, 2]


async def test_unsubscribed_space_is_not_delivered(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await b.backplane.subscribe("gone")
    await b.backplane.subscribe("kept")
    await b.backplane.unsubscribe("gone")
    await b.backplane.unsubscribe("never-subscribed")  # harmless
    await a.backplane.publish("gone", draft("lost"))
    await a.backplane.publish("kept", draft("seen"))
    # Messages of one publisher reach a subscriber in publish order, so once
    # the second arrived the first would have too.
    await b.handler.wait_until(lambda: bool(b.handler.of("kept")))
    assert b.handler.of("gone") == []
    # Subscribing again works.
    await b.backplane.subscribe("gone")
    seq = await a.backplane.publish("gone", draft("again"))
    await b.handler.wait_until(lambda: b.handler.seqs("gone") == [seq])


async def test_publish_without_subscribers_still_sequences(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    assert [await a.backplane.publish("empty", draft("x")) for _ in range(3)] == [1, 2, 3]
    assert a.handler.of("empty") == []


async def test_send_to_node(cluster: BackplaneCluster) -> None:
    a, b = await cluster.node("a"), await cluster.node("b")
    await a.backplane.send_to_node("b", b'{"op":"probe"}')
    await a.backplane.send_to_node("nobody", b"lost")  # at most once: no error
    if cluster.distributed:
        await b.handler.wait_until(lambda: bool(b.handler.node_messages))
        await b.backplane.send_to_node("a", b"back")
        await a.handler.wait_until(lambda: bool(a.handler.node_messages))
        assert b.handler.node_messages == [b'{"op":"probe"}']
        assert a.handler.node_messages == [b"back"]
    else:
        # A single node has no other node: nothing is delivered anywhere.
        assert a.handler.node_messages == []


async def test_forget_keeps_publishing_working(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    await a.backplane.subscribe("f")
    await a.backplane.publish("f", draft("1"))
    await a.backplane.forget("f")
    seq = await a.backplane.publish("f", draft("2"))
    assert seq >= 1
    await a.handler.wait_until(lambda: len(a.handler.of("f")) == 2)


async def test_aclose_is_idempotent(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    await a.backplane.aclose()
    await a.backplane.aclose()
    # Never started: closing must still be safe.
    fresh = MemoryBackplane() if cluster.make is None else cluster.make("never-started")
    await fresh.aclose()
    await fresh.aclose()


async def test_publish_nowait_keeps_submission_order(cluster: BackplaneCluster) -> None:
    a = await cluster.node("a")
    b = await cluster.node("b")
    for member in (a, b):
        await member.backplane.subscribe("burst")
    drafts = [draft(f"m{i}") for i in range(600)]  # more than one pipeline batch
    futures = [a.backplane.publish_nowait("burst", d) for d in drafts]
    assert a.backplane.backlog >= 0
    seqs = await asyncio.gather(*futures)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for member in (a, b):
        await member.handler.wait_until(lambda m=member: len(m.handler.of("burst")) >= 600)
        got = member.handler.of("burst")
        assert [e.seq for e in got] == seqs
        assert [e.frame for e in got] == [
            expected_frame(d, s) for d, s in zip(drafts, seqs, strict=True)
        ]
    assert a.backplane.backlog == 0


async def test_publish_nowait_fails_fast_when_not_ready(cluster: BackplaneCluster) -> None:
    if not cluster.distributed:
        pytest.skip("the in-memory backplane is never unready")
    a = await cluster.node("a")
    await a.backplane.aclose()
    future = a.backplane.publish_nowait("gone", draft("x"))
    with pytest.raises(BackplaneUnavailable):
        await future
