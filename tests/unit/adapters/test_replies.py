"""Streams put back together and replies matched to waiting requests (no I/O)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.kit.replies import Asked, RelayStopped, ReplyWaiters, StreamAssembler


def asked(event_id: str, to: Any = None) -> Asked:
    return Asked.of("s", event_id, to)


def event(event_id: str, data: dict[str, Any], **stamps: Any) -> dict[str, Any]:
    return {"type": "space.event", "space": "s", "event_id": event_id, "data": data, **stamps}


def delta(stream_id: str, text: str, *, stamps: Any = None, **data: Any) -> dict[str, Any]:
    return {"type": "space.event.delta", "space": "s", "event_id": stream_id,
            "data": {"text": text, **data}, **(stamps or {})}  # fmt: skip


def done(stream_id: str) -> dict[str, Any]:
    return {"type": "space.event.done", "space": "s", "event_id": stream_id}


def cancel(stream_id: str, reason: str = "cancelled") -> dict[str, Any]:
    return {"type": "space.event.cancel", "space": "s", "event_id": stream_id, "reason": reason}


# ── StreamAssembler ────────────────────────────────────────────────────────


def test_a_stream_is_put_back_together():
    asm = StreamAssembler(max_bytes=100)
    assert asm.start(delta("a/1", "Hel", model="m", in_reply_to="e1")) is None
    assert asm.feed(delta("a/1", "lo ")) is None
    assert asm.feed(delta("other", "ignored")) is None
    assert asm.feed(delta("a/1", "wörld")) is None
    whole = asm.feed(done("a/1"))
    assert whole is not None and whole.failure is None
    assert whole.event["type"] == "space.event" and whole.event["event_id"] == "a/1"
    assert whole.data == {"text": "Hello wörld", "model": "m", "in_reply_to": "e1"}
    assert len(asm) == 0 and asm.feed(done("a/1")) is None


def test_bounds_in_bytes_and_in_streams():
    asm = StreamAssembler(max_bytes=10, max_streams=2)
    assert asm.start(delta("a/1", "ü" * 5)) is None  # 10 bytes: at the bound
    lost = asm.feed(delta("a/1", "x"))
    assert lost is not None and lost.failure == "stream larger than 10 bytes"
    assert "a/1" not in asm
    assert asm.start(delta("a/2", "")) is None
    assert asm.start(delta("a/3", "")) is None
    refused = asm.start(delta("a/4", ""))
    assert refused is not None and "more than 2 streams" in refused.failure
    asm.drop("a/2")
    assert asm.start(delta("a/4", "")) is None


def test_a_cancelled_stream_is_a_failure_and_odd_frames_are_ignored():
    asm = StreamAssembler(max_bytes=100)
    asm.start(delta("a/1", "x"))
    assert asm.feed({"type": "space.event.delta", "event_id": "a/1", "data": "no"}) is None
    assert asm.feed({"type": "space.event.delta", "event_id": "a/1"}) is None
    assert asm.feed({"type": "space.members", "event_id": "a/1"}) is None
    lost = asm.feed(cancel("a/1", "publisher_disconnected"))
    assert lost is not None and lost.failure == "stream cancelled (publisher_disconnected)"
    assert asm.start({"type": "space.event.delta"}) is None  # no event id: not tracked


# ── ReplyWaiters ───────────────────────────────────────────────────────────


async def test_the_first_reply_resolves_and_others_are_ignored():
    waiters = ReplyWaiters(100)
    future = waiters.expect(asked("e1"))
    waiters.feed(event("x", {"body": "not a reply"}))
    waiters.feed(event("x", {"in_reply_to": "e2", "body": "someone else's"}))
    assert not future.done()
    waiters.feed(event("r1", {"in_reply_to": "e1", "body": "first"}))
    waiters.feed(event("r2", {"in_reply_to": "e1", "body": "second"}))
    assert future.result().data["body"] == "first"
    waiters.forget("e1")
    assert len(waiters) == 0


async def test_only_the_requests_space_and_addressees_may_answer():
    """Contract §18: the same ``in_reply_to`` from another space, or in the
    space from an agent the request was not addressed to, is no answer — and
    does not stand in the real answer's way, whole or streamed."""
    waiters = ReplyWaiters(100)
    addressed = waiters.expect(asked("e1", to="keeper"))
    open_ = waiters.expect(asked("e2"))
    for answered in ("e1", "e2"):
        waiters.feed(event("f", {"in_reply_to": answered, "body": "forged"},
                           space="elsewhere", **{"from": "keeper"}))  # fmt: skip
        waiters.feed(delta("m/1", "forged", in_reply_to=answered,
                           stamps={"space": "elsewhere", "from": "keeper"}))  # fmt: skip
    waiters.feed(event("f", {"in_reply_to": "e1", "body": "not asked"}, **{"from": "other"}))
    waiters.feed(delta("o/1", "not asked", in_reply_to="e1", stamps={"from": "other"}))
    assert not addressed.done() and not open_.done()
    waiters.feed(event("r", {"in_reply_to": "e1", "body": "genuine"}, **{"from": "keeper"}))
    waiters.feed(event("r", {"in_reply_to": "e2", "body": "anyone here"}, **{"from": "other"}))
    assert addressed.result().data["body"] == "genuine"
    assert open_.result().data["body"] == "anyone here"


async def test_the_asker_never_answers_its_own_request():
    """A shared member (``mcp``: a copy per node under one id) publishes for
    other callers too; through another node, a caller's ``space_publish``
    naming the request came back ``from: mcp`` and answered it (an outside
    audit). Its own id is no answerer, whole or streamed."""
    waiters = ReplyWaiters(100, own="mcp")
    open_ = waiters.expect(asked("e1"))
    waiters.feed(event("f", {"in_reply_to": "e1", "text": "forged"}, **{"from": "mcp"}))
    waiters.feed(delta("mcp/1", "forged", in_reply_to="e1", stamps={"from": "mcp"}))
    assert not open_.done()
    waiters.feed(event("r", {"in_reply_to": "e1", "text": "genuine"}, **{"from": "agent"}))
    assert open_.result().data["text"] == "genuine"


async def test_a_stream_answering_is_followed_only_in_its_space():
    waiters = ReplyWaiters(100)
    relay = waiters.relay(asked("e1", to=["keeper", "helper"]))
    waiters.feed(delta("k/1", "par", in_reply_to="e1", stamps={"from": "helper"}))
    # The same stream id in another space (another stream of that agent) is not this one.
    waiters.feed(delta("k/1", "XX", stamps={"space": "elsewhere", "from": "helper"}))
    waiters.feed({"type": "space.event.done", "space": "elsewhere", "event_id": "k/1"})
    waiters.feed(delta("k/1", "ts", stamps={"from": "helper"}))
    waiters.feed(done("k/1"))
    got = [await asyncio.wait_for(relay.next(), 1) for _ in range(3)]
    assert [(p.kind, p.data.get("text")) for p in got] == [
        ("delta", "par"), ("delta", "ts"), ("done", None),
    ]  # fmt: skip


def test_asked_of_takes_one_addressee_or_many():
    assert Asked.of("s", "e").to is None
    assert Asked.of("s", "e", "a").to == frozenset({"a"})
    assert Asked.of("s", "e", ["a", "b"]).to == frozenset({"a", "b"})
    assert not Asked.of("s", "e", "a").admits({"space": "s", "from": "b"})
    assert not Asked.of("s", "e").admits({"space": "t", "from": "a"})
    assert Asked.of("s", "e").admits({"space": "s"})


async def test_a_streamed_reply_claims_the_request():
    waiters = ReplyWaiters(100)
    future = waiters.expect(asked("e1"))
    waiters.feed(delta("b/1", "par", in_reply_to="e1", status="success"))
    # A later plain reply does not overtake the stream that answered first.
    waiters.feed(event("r2", {"in_reply_to": "e1", "body": "later"}))
    waiters.feed(delta("b/1", "ts"))
    assert not future.done()
    waiters.feed(done("b/1"))
    assert future.result().data == {"text": "parts", "in_reply_to": "e1", "status": "success"}
    waiters.forget("e1")
    assert waiters.assembling == 0


async def test_a_lost_stream_resolves_with_its_failure():
    waiters = ReplyWaiters(4)
    future = waiters.expect(asked("e1"))
    waiters.feed(delta("b/1", "12345", in_reply_to="e1"))
    assert future.result().failure == "stream larger than 4 bytes"
    other = waiters.expect(asked("e2"))
    waiters.feed(delta("b/2", "1", in_reply_to="e2"))
    waiters.feed(cancel("b/2"))
    assert other.result().failure == "stream cancelled (cancelled)"


@pytest.mark.parametrize(
    ("to", "told"),
    [(None, "b"), (["me", "carol"], "b"), ("me", None), (["me"], None)],
    ids=["unaddressed", "to-several", "to-this-member", "to-this-member-as-list"],
)
async def test_the_producer_to_tell_is_known_while_others_receive_its_stream(to, told):
    """A receiver cancel reaches a producer only from its last receiver."""
    waiters = ReplyWaiters(100)
    waiters.expect(asked("e1"))
    assert waiters.producer_to_tell("e1") is None, "nothing streams yet"
    stamps = {"from": "b"} if to is None else {"from": "b", "to": to}
    waiters.feed(delta("b/1", "x", in_reply_to="e1", stamps=stamps))
    assert waiters.producer_to_tell("e1") == told
    waiters.forget("e1")
    assert waiters.producer_to_tell("e1") is None and not waiters._shared


async def test_forgetting_drops_a_half_assembled_stream():
    waiters = ReplyWaiters(100)
    waiters.expect(asked("e1"))
    waiters.feed(delta("b/1", "x", in_reply_to="e1"))
    assert waiters.assembling == 1
    waiters.forget("e1")  # the request timed out
    assert waiters.assembling == 0
    waiters.feed(delta("b/1", "y"))
    waiters.feed(done("b/1"))
    assert len(waiters) == 0


async def test_a_reply_that_overtakes_the_publish_is_kept_for_it():
    waiters = ReplyWaiters(100)
    with waiters.publishing():
        waiters.feed(event("r1", {"in_reply_to": "e1", "body": "quick"}))
        waiters.feed(delta("b/9", "st", in_reply_to="e9"))
        waiters.feed(delta("b/9", "ream"))
        waiters.feed(done("b/9"))
        quick = waiters.expect(asked("e1"))
        streamed = waiters.expect(asked("e9"))
    assert quick.result().data["body"] == "quick"
    assert streamed.result().data["text"] == "stream"
    # Outside a publish nothing is kept: a reply to an unknown request is dropped.
    waiters.feed(event("r3", {"in_reply_to": "e3", "body": "late"}))
    assert not waiters.expect(asked("e3")).done()


async def test_the_stash_is_bounded():
    waiters = ReplyWaiters(100, stash_size=3)
    with waiters.publishing():
        for n in range(10):
            waiters.feed(event(f"r{n}", {"in_reply_to": f"e{n}", "body": n}))
        assert not waiters.expect(asked("e0")).done()  # pushed out by later ones
        assert waiters.expect(asked("e9")).result().data["body"] == 9


async def test_fail_all_raises_in_every_waiter():
    waiters = ReplyWaiters(100)
    futures = [waiters.expect(asked(f"e{n}")) for n in range(3)]
    futures[0].set_result(None)  # type: ignore[arg-type]
    waiters.fail_all(RuntimeError("shutting down"))
    for future in futures[1:]:
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(future, 1)


# ── ReplyRelay: answers passed on piece by piece ───────────────────────────


async def pieces(relay, n):
    return [await asyncio.wait_for(relay.next(), 1) for _ in range(n)]


async def test_a_streamed_reply_is_relayed_piece_by_piece():
    waiters = ReplyWaiters(100)
    relay = waiters.relay(asked("e1"))
    waiters.feed(delta("b/1", "par", in_reply_to="e1"))
    waiters.feed(event("r2", {"in_reply_to": "e1", "body": "later"}))  # the stream came first
    waiters.feed(delta("b/1", "ts"))
    waiters.feed(delta("b/2", "someone else's", in_reply_to="e7"))
    waiters.feed(done("b/1"))
    got = await pieces(relay, 3)
    assert [(p.kind, p.data.get("text")) for p in got] == [
        ("delta", "par"), ("delta", "ts"), ("done", None),
    ]  # fmt: skip
    assert relay.stream_id == "b/1" and relay.ended and got[-1].final
    waiters.feed(delta("b/1", "after done"))  # nothing more reaches it
    waiters.forget("e1")
    assert len(waiters) == 0


async def test_a_plain_reply_or_a_cancel_ends_a_relay():
    waiters = ReplyWaiters(100)
    plain, cancelled = waiters.relay(asked("e1")), waiters.relay(asked("e2"))
    waiters.feed(event("r1", {"in_reply_to": "e1", "text": "hi"}))
    waiters.feed(event("r1b", {"in_reply_to": "e1", "text": "second"}))
    waiters.feed(delta("b/2", "x", in_reply_to="e2"))
    waiters.feed(cancel("b/2", "publisher_disconnected"))
    (only,) = await pieces(plain, 1)
    assert (only.kind, only.data["text"]) == ("event", "hi")
    assert [p.kind for p in await pieces(cancelled, 2)] == ["delta", "cancel"]
    with waiters.publishing():  # a reply overtaking the publish is kept for the relay too
        waiters.feed(event("r3", {"in_reply_to": "e3", "text": "quick"}))
        quick = waiters.relay(asked("e3"))
    assert (await pieces(quick, 1))[0].data["text"] == "quick"


async def test_a_stopped_relay_wakes_its_reader():
    waiters = ReplyWaiters(100)
    relay = waiters.relay(asked("e1"))
    reader = asyncio.ensure_future(relay.next())
    await asyncio.sleep(0)
    relay.stop()
    with pytest.raises(RelayStopped):
        await asyncio.wait_for(reader, 1)
