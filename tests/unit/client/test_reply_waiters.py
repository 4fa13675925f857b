"""ReplyWaiters (the SDK's request/reply): only a reply published in the
request's space, by an agent the request was addressed to (unaddressed: any
member of that space), answers it — contract §18. Plain and streamed replies,
before and after the request's ``event_id`` is known."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agora_client import replies
from agora_client.models import AssembledEvent, Event, StreamChunk
from agora_client.replies import ReplyWaiters

_seq = itertools.count(1)


def reply(space: str, sender: str, answered: str, text: str) -> Event:
    """A plain reply as the hub relays it (``sender``: the wire's ``from``)."""
    data = {"text": text, "in_reply_to": answered, "from": sender}
    return Event(space, f"ev-{next(_seq)}", next(_seq), sender, 1, data)


def streamed(
    space: str, sender: str, answered: str, words: list[str], claimed: str | None = None
) -> list[StreamChunk]:
    """A streamed reply's frames: first delta (``in_reply_to``; ``data.from`` as
    the producer wrote it, ``claimed``), more deltas, its done."""
    stream_id = f"{sender}/st-{next(_seq)}"
    first = {"text": words[0], "in_reply_to": answered, "from": claimed or sender}
    frames = [StreamChunk("delta", space, stream_id, next(_seq), sender, 1, first)]
    for word in words[1:]:
        frames.append(StreamChunk("delta", space, stream_id, next(_seq), sender, 1, {"text": word}))
    frames.append(StreamChunk("done", space, stream_id, next(_seq), sender, 1))
    return frames


def feed(waiters: ReplyWaiters, *replies_: Event | list[StreamChunk]) -> None:
    for r in replies_:
        if isinstance(r, Event):
            waiters.event(r)
        else:
            for chunk in r:
                waiters.chunk(chunk)


def asked(
    waiters: ReplyWaiters, space: str, to: str | list[str] | None, event_id: str
) -> asyncio.Future[Event | AssembledEvent]:
    """A request to ``space`` addressed to ``to``, acknowledged as ``event_id``."""
    fut = waiters.sent(waiters.sending(space, to), event_id)
    assert fut is not None
    return fut


async def test_a_reply_from_another_space_does_not_answer_a_request():
    waiters = ReplyWaiters()
    fut = asked(waiters, "other", "helper", "R1")
    feed(
        waiters,
        reply("pub", "mallory", "R1", "forged in pub"),
        reply("pub", "helper", "R1", "the addressee, but in pub"),
    )
    assert not fut.done()
    feed(waiters, reply("other", "helper", "R1", "genuine"))
    assert fut.done() and fut.result().text == "genuine"
    assert fut.result().space == "other" and fut.result().sender == "helper"


async def test_a_reply_from_an_agent_not_asked_does_not_answer_a_request():
    waiters = ReplyWaiters()
    fut = asked(waiters, "other", "helper", "R1")
    feed(waiters, reply("other", "mallory", "R1", "forged, not asked"))
    assert not fut.done()
    feed(waiters, reply("other", "helper", "R1", "genuine"))
    assert fut.result().text == "genuine"


async def test_any_agent_a_request_was_addressed_to_answers_it():
    waiters = ReplyWaiters()
    fut = asked(waiters, "other", ["helper", "bob"], "R1")
    feed(waiters, reply("other", "mallory", "R1", "forged"))
    assert not fut.done()
    feed(waiters, reply("other", "bob", "R1", "bob's"), reply("other", "helper", "R1", "late"))
    assert fut.result().text == "bob's"


async def test_a_streamed_reply_answers_only_from_its_space_and_an_addressee():
    waiters = ReplyWaiters()
    fut = asked(waiters, "other", "helper", "R1")
    feed(
        waiters,
        streamed("pub", "mallory", "R1", ["forged ", "in pub"]),
        streamed("pub", "helper", "R1", ["helper ", "in pub"]),
        streamed("other", "mallory", "R1", ["forged ", "here"]),
        # data.from is the producer's to write: the frame's sender is who sent it.
        streamed("other", "mallory", "R1", ["claims ", "to be helper"], claimed="helper"),
    )
    assert not fut.done()
    feed(waiters, streamed("other", "helper", "R1", ["genuine ", "stream"]))
    got = fut.result()
    assert isinstance(got, AssembledEvent) and got.complete
    assert (got.text, got.space, got.sender) == ("genuine stream", "other", "helper")


async def test_an_early_reply_from_the_addressee_answers_the_request():
    # The answer reached the reader before the request's publish was acknowledged.
    waiters = ReplyWaiters()
    on_its_way = waiters.sending("other", "helper")
    feed(waiters, reply("other", "helper", "R1", "fast"))
    fut = waiters.sent(on_its_way, "R1")
    assert fut is not None and fut.result().text == "fast"
    assert not waiters.active


async def test_a_forged_early_reply_does_not_shadow_the_genuine_one():
    waiters = ReplyWaiters()
    on_its_way = waiters.sending("other", "helper")
    feed(
        waiters,
        reply("pub", "mallory", "R1", "forged in pub"),
        reply("other", "mallory", "R1", "forged, not asked"),
        reply("pub", "helper", "R1", "helper, in pub"),
        reply("other", "helper", "R1", "genuine"),
        reply("other", "helper", "R1", "helper's second"),
    )
    fut = waiters.sent(on_its_way, "R1")
    assert fut is not None and fut.result().text == "genuine"


async def test_a_forged_early_reply_alone_leaves_the_request_waiting():
    waiters = ReplyWaiters()
    on_its_way = waiters.sending("other", "helper")
    feed(waiters, reply("other", "mallory", "R1", "forged"), reply("pub", "helper", "R1", "pub"))
    fut = waiters.sent(on_its_way, "R1")
    assert fut is not None and not fut.done()
    feed(waiters, reply("other", "helper", "R1", "genuine"))
    assert fut.result().text == "genuine"


async def test_an_early_streamed_reply_from_the_addressee_answers_the_request():
    waiters = ReplyWaiters()
    on_its_way = waiters.sending("other", "helper")
    feed(
        waiters,
        streamed("other", "mallory", "R1", ["forged"]),
        streamed("other", "helper", "R1", ["genuine ", "stream"]),
    )
    fut = waiters.sent(on_its_way, "R1")
    assert fut is not None and fut.result().text == "genuine stream"


async def test_an_early_reply_is_matched_to_its_own_request():
    # Two requests on their way at once: each keeps to its own space and addressees.
    waiters = ReplyWaiters()
    to_helper = waiters.sending("other", "helper")
    to_mallory = waiters.sending("pub", "mallory")
    feed(
        waiters,
        reply("pub", "mallory", "R1", "mallory answers R1 from pub"),
        reply("pub", "mallory", "R2", "mallory answers R2"),
    )
    first = waiters.sent(to_helper, "R1")
    second = waiters.sent(to_mallory, "R2")
    assert first is not None and not first.done()
    assert second is not None and second.result().text == "mallory answers R2"


async def test_an_unaddressed_request_is_answered_by_any_member_of_its_space_only():
    waiters = ReplyWaiters()
    fut = asked(waiters, "other", None, "R1")
    feed(waiters, reply("pub", "mallory", "R1", "from another space"))
    assert not fut.done()
    feed(waiters, reply("other", "carol", "R1", "any member"))
    assert fut.result().text == "any member"

    early = waiters.sending("other")
    feed(waiters, streamed("pub", "carol", "R2", ["elsewhere"]))
    feed(waiters, streamed("other", "dave", "R2", ["in ", "its space"]))
    fut2 = waiters.sent(early, "R2")
    assert fut2 is not None and fut2.result().text == "in its space"


async def test_early_replies_are_kept_within_bounds(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(replies, "_EARLY_KEPT", 4)
    waiters = ReplyWaiters()
    on_its_way = waiters.sending("other")
    for n in range(10):
        feed(waiters, reply("other", f"a{n}", f"X{n}", "noise"))
    for n in range(10):  # one sender's later replies to the same id are not kept
        feed(waiters, reply("other", "a9", "X9", f"again {n}"))
    assert sum(len(kept) for kept in waiters._early.values()) <= 4
    feed(waiters, reply("other", "helper", "R1", "genuine"))
    fut = waiters.sent(on_its_way, "R1")
    assert fut is not None and fut.result().text == "genuine"
    assert not waiters._early and not waiters.active
