"""``Client.serve``: one request handler (contract §19), against a real hub.

What every answering agent needs and the copied loops got wrong: replies of
every shape, failures as failure replies, the handler cancelled when the asker
stops waiting (leaves, cancels the request, cancels the streamed reply), and
nothing raised or leaked when hundreds of askers leave mid-answer.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agora_client import AssembledEvent, Client, Event, MembersChanged, ReplyTimeout, StreamChunk

TIMEOUT = 15.0
SPACE = "general"


def serving_tasks() -> list[asyncio.Task[Any]]:
    """The tasks ``serve`` runs handlers in (named ``serve <space> <event id>``)."""
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("serve ")]


async def handlers_ended() -> None:
    """Wait until no handler task is left (those started meanwhile included)."""
    async with asyncio.timeout(TIMEOUT):
        while tasks := serving_tasks():
            await asyncio.wait(tasks)


@pytest.fixture
async def serving(hub, clients):
    """``server, agent, task = await serving(handler, **options)``: an agent
    ``server-bot`` serving ``general``; the task is cancelled afterwards."""
    tasks: list[asyncio.Task[None]] = []

    async def _start(handler: Any, *, hub_settings: dict[str, Any] | None = None, **options: Any):
        server = await hub(**(hub_settings or {}))
        agent = await clients(server, "server-bot")
        await agent.join(SPACE)  # serve joins by itself; here its askers must find it
        task = asyncio.create_task(agent.serve(SPACE, handler, **options))
        tasks.append(task)
        return server, agent, task

    yield _start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert serving_tasks() == []


async def asker(clients, server, name: str = "asker") -> Client:
    c = await clients(server, name)
    await c.join(SPACE)
    return c


async def test_every_kind_of_answer(serving, clients):
    async def tokens(text: str) -> AsyncIterator[str]:
        for word in text.split():
            await asyncio.sleep(0.01)
            yield word + " "

    def handler(event: Event | AssembledEvent) -> Any:
        text = event.text or ""
        if text == "dict":
            return {"text": "as a dict", "score": 3}
        if text == "stream":
            return tokens("streamed word by word")
        if text == "generator":
            return (w for w in ["plain ", "generator"])
        if text == "nothing":
            return None
        if text == "fail":
            raise ValueError("no such city")
        if text == "bad":
            return 42
        if text == "not json":  # an outside audit: no reply at all, a task error logged
            return {"when": object()}
        return f"you said: {text}"

    server, _, _ = await serving(handler)
    c = await asker(clients, server)
    plain = await c.request(SPACE, "hello", to="server-bot", timeout=TIMEOUT)
    assert plain.text == "you said: hello" and plain.sender == "server-bot"
    assert (await c.request(SPACE, "dict", timeout=TIMEOUT)).data["score"] == 3
    streamed = await c.request(SPACE, "stream", timeout=TIMEOUT)
    assert isinstance(streamed, AssembledEvent) and streamed.complete
    assert streamed.text == "streamed word by word "
    assert (await c.request(SPACE, "generator", timeout=TIMEOUT)).text == "plain generator"
    failed = await c.request(SPACE, "fail", timeout=TIMEOUT)
    assert (failed.data["status"], failed.data["error"]) == ("failure", "no such city")
    bad = await c.request(SPACE, "bad", timeout=TIMEOUT)
    assert bad.data["status"] == "failure" and "not int" in bad.data["error"]
    unsent = await c.request(SPACE, "not json", timeout=TIMEOUT)
    assert unsent.data["status"] == "failure" and "JSON" in unsent.data["error"], unsent.data
    with pytest.raises(TimeoutError):
        await c.request(SPACE, "nothing", timeout=0.5)


async def test_a_big_request_reaches_the_handler_whole(serving, clients):
    """A publish over ``stream_threshold`` is delivered as a stream: still one request."""
    small = {"stream_threshold": 1024, "stream_chunk": 512}
    server, _, _ = await serving(lambda e: f"{len(e.text or '')} chars", hub_settings=small)
    c = await asker(clients, server)
    answer = await c.request(SPACE, "x" * 5000, timeout=TIMEOUT)
    assert answer.text == "5000 chars"


async def test_addressed_only_leaves_the_rest_alone(serving, clients):
    server, _, _ = await serving(lambda e: "mine", addressed_only=True)
    c = await asker(clients, server)
    assert (await c.request(SPACE, "to me", to="server-bot", timeout=TIMEOUT)).text == "mine"
    with pytest.raises(TimeoutError):
        await c.request(SPACE, "to everyone", timeout=0.5)


async def test_the_handler_is_cancelled_when_the_asker_leaves(serving, clients):
    started, stopped = asyncio.Event(), asyncio.Event()

    async def handler(event: Event) -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "too late"

    server, agent, _ = await serving(handler)
    seen = agent.events(SPACE, members=True)
    c = await asker(clients, server)
    async with asyncio.timeout(TIMEOUT):  # the asker's join is announced
        while not (isinstance(item := await seen.get(), MembersChanged) and item.joined_ids):
            pass
    await c.publish(SPACE, "slow question", to="server-bot")
    async with asyncio.timeout(TIMEOUT):
        await started.wait()
    await c.close()
    async with asyncio.timeout(TIMEOUT):
        await stopped.wait()


async def test_a_cancel_note_cancels_the_handler_before_it_answers(serving, clients):
    """``{cancel: true, in_reply_to}`` from the asker — what the hub's bridges send
    when their caller goes away — stops the handler; another asker's does not."""
    started, stopped = asyncio.Event(), asyncio.Event()

    async def handler(event: Event) -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "too late"

    server, _, _ = await serving(handler)
    c = await asker(clients, server)
    other = await asker(clients, server, "other")
    question = await c.publish(SPACE, "slow question", to="server-bot")
    async with asyncio.timeout(TIMEOUT):
        await started.wait()
    forged = {"cancel": True, "in_reply_to": question.event_id}
    await other.publish(SPACE, forged, to="server-bot")
    await asyncio.sleep(0.3)
    assert not stopped.is_set(), "only the asker may cancel its request"
    await c.publish(SPACE, forged, to="server-bot")
    async with asyncio.timeout(TIMEOUT):
        await stopped.wait()


async def test_an_ask_that_stops_waiting_stops_the_handler(serving, clients):
    """``request()`` that times out, or whose task is cancelled, tells the agent
    asked (contract §19; an outside audit: the handler ran on to the end)."""
    started, stopped = asyncio.Queue[str](), asyncio.Queue[str]()

    async def handler(event: Event) -> str:
        text = event.text or ""
        await started.put(text)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await stopped.put(text)
            raise
        return "too late"

    server, _, _ = await serving(handler)
    c = await asker(clients, server)
    with pytest.raises(ReplyTimeout):
        await c.request(SPACE, "timed out", to="server-bot", timeout=1.0)
    async with asyncio.timeout(TIMEOUT):
        assert await stopped.get() == "timed out"
    waiting = asyncio.ensure_future(c.request(SPACE, "given up", to="server-bot", timeout=60))
    async with asyncio.timeout(TIMEOUT):
        assert await started.get() == "timed out"
        assert await started.get() == "given up"
    waiting.cancel()
    async with asyncio.timeout(TIMEOUT):
        assert await stopped.get() == "given up"


async def test_a_streamed_reply_cancelled_by_the_asker_stops_the_handler(serving, clients):
    """The asker cancels the reply stream after its first delta: the hub tells the
    producer (space.event.cancel, receiver_cancelled), and the handler — between
    two tokens — is cancelled within a second."""
    produced: list[int] = []
    stopped = asyncio.Event()

    async def handler(event: Event) -> AsyncIterator[str]:
        try:
            for i in range(400):
                produced.append(i)
                yield f"token {i} "
                await asyncio.sleep(0.05)
        finally:
            stopped.set()

    server, _, _ = await serving(handler)
    c = await asker(clients, server)
    frames = c.stream_events(SPACE)
    await c.publish(SPACE, "stream me a long answer", to="server-bot")
    async with asyncio.timeout(TIMEOUT):
        first = await frames.get()
        while not (isinstance(first, StreamChunk) and first.kind == "delta"):
            first = await frames.get()
    await c.cancel_stream(SPACE, first.event_id)
    async with asyncio.timeout(1.0):
        await stopped.wait()
    assert len(produced) < 400


async def test_two_hundred_askers_that_leave_mid_answer(serving, clients, caplog):
    """200 askers each ask and leave while the answer is being made — before it
    starts, while it streams, just as it is sent. ``serve`` neither raises nor logs
    anything above INFO, every handler task ends, and it still answers."""
    caplog.set_level(logging.INFO, logger="agora_client")

    async def handler(event: Event) -> Any:
        if (event.text or "").startswith("stream"):
            return slow_tokens()
        await asyncio.sleep(random.uniform(0.0, 0.3))
        return f"answer to {event.text}"

    async def slow_tokens() -> AsyncIterator[str]:
        for i in range(20):
            await asyncio.sleep(0.02)
            yield f"{i} "

    # Lifted so that 200 replies in a burst are not refused for their rate.
    hub_settings = {"rate_limit": 2000, "rate_burst": 4000}
    # concurrency 16: the hub's max_streams_per_agent (more streamed replies are refused)
    server, _, task = await serving(handler, hub_settings=hub_settings, concurrency=16)
    slots = asyncio.Semaphore(50)

    async def ask_and_leave(i: int) -> None:
        async with slots:
            c = Client(server.url, f"hit-{i}")
            await c.connect()
            try:
                await c.join(SPACE)
                kind = "stream" if i % 2 else "plain"
                await c.publish(SPACE, f"{kind} question {i}", to="server-bot")
                await asyncio.sleep(random.uniform(0.0, 0.3))
            finally:
                await c.close()

    await asyncio.gather(*(ask_and_leave(i) for i in range(200)))
    await handlers_ended()
    assert not task.done()
    c = await asker(clients, server, "last-asker")
    assert (await c.request(SPACE, "plain last", timeout=TIMEOUT)).text == "answer to plain last"
    loud = [r for r in caplog.records if r.name == "agora_client" and r.levelno > logging.INFO]
    assert loud == [], [r.getMessage() for r in loud]
    assert not any(r.exc_info for r in caplog.records if r.name == "agora_client")


async def test_serve_ends_when_the_client_closes(hub, clients):
    server = await hub()
    agent = await clients(server, "server-bot")
    task = asyncio.create_task(agent.serve(SPACE, lambda e: "hi"))
    c = await asker(clients, server)
    assert (await c.request(SPACE, "there?", timeout=TIMEOUT)).text == "hi"  # it joined
    await agent.close()
    async with asyncio.timeout(TIMEOUT):
        assert await task is None
