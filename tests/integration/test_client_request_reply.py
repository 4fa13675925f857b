"""The SDK's addressed publish, request/reply and coalesced streams, against a real hub."""

from __future__ import annotations

import asyncio

import pytest

from agora_client import (
    AssembledEvent,
    Client,
    Event,
    InvalidRequest,
    ReplyTimeout,
    StreamChunk,
)
from agora_client.streams import MAX_DELTA_CHARS
from tests.support.sdk_clients import members_of

TIMEOUT = 10.0


async def nothing_more(c: Client, space: str, sender: Client) -> list[Event]:
    """What ``c`` received in ``space`` up to a marker ``sender`` publishes to all."""
    sub = c.events(space)
    marker = await sender.publish(space, "marker")
    seen = []
    while (event := await sub.get(TIMEOUT)).event_id != marker.event_id:
        seen.append(event)
    return seen


async def test_an_addressed_publish_reaches_only_its_recipients(hub, clients):
    server = await hub()
    alice, bob, carol = await members_of(server, clients, "room", "alice", "bob", "carol")
    at_bob, at_carol = bob.events("room"), carol.events("room")

    sent = await alice.publish("room", "for bob", to="bob")
    assert sent.to == "bob"
    got = await at_bob.get(TIMEOUT)
    assert (got.event_id, got.text, got.to) == (sent.event_id, "for bob", "bob")
    assert await nothing_more(carol, "room", alice) == []
    del at_carol

    both = await alice.publish("room", "for both", to=["bob", "carol"])
    assert (await carol.events("room").get(TIMEOUT)).event_id == both.event_id


async def test_to_is_checked_before_sending_and_by_the_hub(hub, clients):
    server = await hub()
    (alice,) = await members_of(server, clients, "room", "alice")
    with pytest.raises(ValueError, match="invalid agent id"):
        await alice.publish("room", "x", to="not an id")
    with pytest.raises(ValueError, match="1-100 agents"):
        await alice.publish("room", "x", to=[])
    with pytest.raises(InvalidRequest, match="not members"):
        await alice.publish("room", "x", to="nobody")


async def answer_with(c: Client, space: str, how: str) -> None:
    """Answer every question in ``space``: a plain reply, or a streamed one."""
    async for question in c.events(space):
        if question.sender == c.agent_id or question.in_reply_to is not None:
            continue
        if how == "plain":
            await c.reply(question, {"text": f"re: {question.text}", "status": "success"})
        else:
            async with c.stream_reply(question, data={"model": "m1"}) as s:
                for word in ("streamed ", "answer ", "to ", question.text or ""):
                    await s.send(word)


async def test_request_returns_the_first_reply_addressed_to_the_requester(hub, clients):
    server = await hub()
    alice, bob, carol = await members_of(server, clients, "ask", "alice", "bob", "carol")
    answering = asyncio.create_task(answer_with(bob, "ask", "plain"))
    try:
        reply = await alice.request("ask", "what time is it?", to="bob", timeout=TIMEOUT)
        assert isinstance(reply, Event)
        assert reply.sender == "bob" and reply.text == "re: what time is it?"
        assert reply.to == "alice" and reply.in_reply_to is not None
        # The reply went to the requester only; the request to bob only.
        assert await nothing_more(carol, "ask", alice) == []

        # Many at once, from several tasks: each gets its own answer.
        questions = [f"q{i}" for i in range(20)]
        replies = await asyncio.gather(
            *(alice.request("ask", q, to="bob", timeout=TIMEOUT) for q in questions)
        )
        assert [r.text for r in replies] == [f"re: {q}" for q in questions]
    finally:
        answering.cancel()


async def test_a_streamed_reply_is_assembled(hub, clients):
    server = await hub()
    alice, bob = await members_of(server, clients, "ask", "alice", "bob")
    answering = asyncio.create_task(answer_with(bob, "ask", "stream"))
    try:
        reply = await alice.request("ask", "hello", timeout=TIMEOUT)
    finally:
        answering.cancel()
    assert isinstance(reply, AssembledEvent) and reply.complete
    assert reply.text == "streamed answer to hello" and reply.sender == "bob"
    assert reply.data["model"] == "m1" and reply.in_reply_to is not None


async def test_no_reply_raises_a_typed_timeout(hub, clients):
    server = await hub()
    (alice,) = await members_of(server, clients, "ask", "alice")
    sub = alice.events("ask")
    with pytest.raises(ReplyTimeout) as caught:
        await alice.request("ask", "anyone?", timeout=0.5)
    assert isinstance(caught.value, TimeoutError)
    # It was published all the same, under the id the error names.
    assert (await sub.get(TIMEOUT)).event_id == caught.value.event_id


async def test_a_reply_to_the_hubs_own_event_is_not_addressed(hub, clients):
    server = await hub()
    (alice,) = await members_of(server, clients, "room", "alice")
    hub_event = Event("room", "e1", 1, "@hub", None, {})
    sent = await alice.reply(hub_event, "noted")
    assert sent.to is None and sent.in_reply_to == "e1"


async def test_a_fast_token_stream_is_coalesced_in_order(hub, clients):
    server = await hub()
    alice, bob = await members_of(server, clients, "s", "alice", "bob")
    chunks = bob.stream_events("s")
    tokens = [f"t{i} " for i in range(300)]
    async with alice.stream("s", echo=False) as s:
        for token in tokens:
            await s.send(token)  # far faster than a model: all within a few ms
    got: list[StreamChunk] = []
    while not got or got[-1].kind != "done":
        got.append(await chunks.get(TIMEOUT))
    deltas = [c for c in got if c.kind == "delta"]
    assert "".join(c.text for c in deltas) == "".join(tokens)
    assert s.written == 300 and s.sent == len(deltas) < 20


async def test_coalescing_keeps_deltas_bounded_and_flushes_on_cancel(hub, clients):
    server = await hub()
    alice, bob = await members_of(server, clients, "s", "alice", "bob")
    chunks = bob.stream_events("s")
    pieces = [f"{i:04d}" * 250 for i in range(3 * MAX_DELTA_CHARS // 1000)]  # 1000 chars each
    async with alice.stream("s", echo=False, coalesce=60.0) as s:
        await s.send("first ")
        for piece in pieces:
            await s.send(piece)  # sent as the bound is reached, not after 60 s
        assert s.sent >= 3
        await s.send("last words")
        await s.cancel("stopped")
    got: list[StreamChunk] = []
    while not got or got[-1].kind != "cancel":
        got.append(await chunks.get(TIMEOUT))
    deltas = [c.text for c in got if c.kind == "delta"]
    assert "".join(deltas) == "first " + "".join(pieces) + "last words"  # in order, all of it
    assert max(len(d) for d in deltas) <= MAX_DELTA_CHARS
    assert got[-1].reason == "stopped"


async def test_only_a_reply_in_the_requests_space_from_an_addressee_answers_it(hub, clients):
    # §18: mallory, who knows the request's id, answers it from another space,
    # and in its space though it was not asked (plainly and streamed): the
    # request goes on waiting for helper's genuine reply.
    server = await hub()
    names = ("alice", "helper", "mallory")
    alice, helper, mallory = await members_of(server, clients, "other", *names)
    for c in (alice, helper, mallory):
        await c.join("pub")
    questions = helper.events("other")
    seen = {space: alice.events(space) for space in ("pub", "other")}
    asking = asyncio.create_task(alice.request("other", "a question", to="helper", timeout=TIMEOUT))
    question = await questions.get(TIMEOUT)
    assert question.text == "a question"
    forged = {"in_reply_to": question.event_id}

    await mallory.publish("pub", {**forged, "text": "forged in pub"})
    await mallory.publish("other", {**forged, "text": "forged, not asked"})
    async with mallory.stream("other", data=forged) as s:
        await s.send("forged stream")
    await helper.publish("pub", {**forged, "text": "helper, in pub"})
    for space, sub in seen.items():  # alice's reader has handled all of it
        marker = await mallory.publish(space, "marker")
        while (await sub.get(TIMEOUT)).event_id != marker.event_id:
            pass
    assert not asking.done()

    await helper.reply(question, "genuine")
    reply = await asking
    assert (reply.space, reply.sender, reply.text) == ("other", "helper", "genuine")


async def test_an_unaddressed_request_is_answered_from_its_space_only(hub, clients):
    server = await hub()
    alice, carol, mallory = await members_of(server, clients, "other", "alice", "carol", "mallory")
    for c in (alice, mallory):
        await c.join("pub")
    questions = carol.events("other")
    asking = asyncio.create_task(alice.request("other", "anyone?", timeout=TIMEOUT))
    question = await questions.get(TIMEOUT)
    seen = alice.events("pub")
    forged = await mallory.publish("pub", {"in_reply_to": question.event_id, "text": "in pub"})
    assert (await seen.get(TIMEOUT)).event_id == forged.event_id  # alice's reader had it
    async with carol.stream_reply(question) as s:
        await s.send("streamed ")
        await s.send("answer")
    reply = await asking
    assert isinstance(reply, AssembledEvent)
    assert (reply.space, reply.sender, reply.text) == ("other", "carol", "streamed answer")
