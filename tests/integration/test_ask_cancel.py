"""A caller that stops waiting stops the answering agent (contract §19, adapters/kit/asking.py).

Real hubs (two, over a real Redis, for the cluster case), a real Python SDK
agent answering with ``client.serve``, and an HTTP Agora caller on a raw
socket that goes away mid-answer. The agent's handler must be cancelled:

- its reply already streaming: by the hub's ``space.event.cancel`` to the
  producer (``receiver_cancelled``: the bridge cancelled its copy);
- its reply not started: by the bridge's ``{cancel: true, in_reply_to}``.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

from adapters.agora_http import AgoraHttpInbound, InboundOptions
from tests.support.agora_bridge import call
from tests.support.wsclient import WsClient

SPACE = "writers"
WAIT = 15.0


class Writer:
    """An agent that streams a long answer and reports how it was stopped."""

    def __init__(self, *, stream_first: bool):
        self.stream_first = stream_first
        self.asked = asyncio.Event()
        self.stopped: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.requests: list[Any] = []

    async def handler(self, request: Any) -> Any:
        self.requests.append(request)
        if self.stream_first:
            return self._stream()
        self.asked.set()
        try:
            await asyncio.Event().wait()  # thinks forever, unless cancelled
        except asyncio.CancelledError as exc:
            self._stop(exc)
            raise
        return "never"

    async def _stream(self) -> Any:
        try:
            yield "once upon a time "
            self.asked.set()
            await asyncio.Event().wait()  # the rest never comes, unless cancelled
            yield "the end"
        except asyncio.CancelledError as exc:
            self._stop(exc)
            raise

    def _stop(self, exc: BaseException) -> None:
        if not self.stopped.done():
            self.stopped.set_result(str(exc))


def inbound_with_delta_seen() -> tuple[AgoraHttpInbound, asyncio.Event]:
    """The HTTP Agora adapter, and an event set once its member got a reply delta."""
    inbound = AgoraHttpInbound({SPACE: {}}, InboundOptions())
    seen = asyncio.Event()
    feed = inbound.waiters.feed

    def feeding(msg: dict[str, Any]) -> None:
        feed(msg)
        if msg.get("type") == "space.event.delta":
            seen.set()

    inbound.waiters.feed = feeding  # type: ignore[method-assign]
    return inbound, seen


async def ask_and_go_away(http_url: str, ready: asyncio.Event) -> None:
    """POST a request on a raw socket, wait for ``ready``, close the socket."""
    url = urlsplit(http_url)
    body = orjson.dumps({"protocolHash": None, "body": "write me a saga"})
    head = (
        f"POST /agora/{SPACE} HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    _, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(head + body)
    await writer.drain()
    try:
        await asyncio.wait_for(ready.wait(), WAIT)
    finally:
        writer.close()
        await writer.wait_closed()


async def serving(clients: Any, server: Any, writer: Writer) -> asyncio.Task[None]:
    agent = await clients(server, "writer")
    await agent.join(SPACE)
    return asyncio.create_task(agent.serve(SPACE, writer.handler))


def http_url(server: Any) -> str:
    return str(server.http_url)


@pytest.mark.parametrize("stream_first", [True, False], ids=["streaming", "not-started"])
async def test_an_http_caller_that_goes_away_stops_the_agent(hub, clients, stream_first):
    inbound, delta_seen = inbound_with_delta_seen()
    server = await hub(adapters=[inbound], bridge_timeout=60)
    writer = Writer(stream_first=stream_first)
    task = await serving(clients, server, writer)
    try:
        ready = delta_seen if stream_first else writer.asked
        await ask_and_go_away(http_url(server), ready)
        reason = await asyncio.wait_for(writer.stopped, WAIT)
        assert reason.endswith("receiver_cancelled" if stream_first else "cancelled")
        assert not reason.endswith("asker_left")
        # The bridge forgot the request, and keeps answering others.
        assert len(inbound.waiters) == 0
    finally:
        task.cancel()
    assert [r.data.get("body") for r in writer.requests] == ["write me a saga"]


@pytest.mark.redis
async def test_the_producer_on_another_node_hears_the_caller_go_away(hub, clients, redis_server):
    """The agent streams from node one; the HTTP caller asked node two."""
    settings = {"redis_url": redis_server.url, "bridge_timeout": 60}
    one = await hub(**settings)
    inbound, delta_seen = inbound_with_delta_seen()
    two = await hub(adapters=[inbound], **settings)
    writer = Writer(stream_first=True)
    task = await serving(clients, one, writer)
    try:
        await ask_and_go_away(http_url(two), delta_seen)
        reason = await asyncio.wait_for(writer.stopped, WAIT)
        assert reason.endswith("receiver_cancelled")
    finally:
        task.cancel()


async def test_a_reply_that_came_whole_is_not_cancelled(hub, clients):
    """A caller that stays gets the answer, and the agent hears no cancel."""
    inbound, _ = inbound_with_delta_seen()
    server = await hub(adapters=[inbound])
    agent = await clients(server, "writer")
    await agent.join(SPACE)
    seen: list[Any] = []

    async def answer(request: Any) -> str:
        seen.append(request.data)
        return "short"

    task = asyncio.create_task(agent.serve(SPACE, answer))
    try:
        status, reply = await call("POST", f"{http_url(server)}/agora/{SPACE}", {"body": "hi"})
        assert (status, reply) == (200, {"status": "success", "body": "short"})
        assert [d.get("cancel") for d in seen] == [None]
    finally:
        task.cancel()


async def test_a_caller_whose_wait_timed_out_stops_the_agent_too(hub, clients):
    """``bridge_timeout``: the caller gets ``Timeout`` and the agent is told to
    stop — it costs nothing more once nobody waits for it."""
    inbound, _ = inbound_with_delta_seen()
    server = await hub(adapters=[inbound], bridge_timeout=0.5)
    writer = Writer(stream_first=False)
    task = await serving(clients, server, writer)
    try:
        status, reply = await call("POST", f"{http_url(server)}/agora/{SPACE}", {"body": "slow"})
        assert (status, reply) == (200, {"status": "failure", "error": "Timeout"})
        reason = await asyncio.wait_for(writer.stopped, WAIT)
        assert reason.endswith("cancelled")
    finally:
        task.cancel()


async def test_a_producer_whose_reply_others_receive_too_is_told_directly(hub):
    """An unaddressed reply stream goes on for the space's other members, so
    the bridge's receiver cancel does not reach its producer: the producer gets
    ``{cancel: true, in_reply_to}`` addressed to it as well."""
    inbound, delta_seen = inbound_with_delta_seen()
    server = await hub(adapters=[inbound], bridge_timeout=60)
    writer = await WsClient.connect(server.url, "writer")
    observer = await WsClient.connect(server.url, "observer")
    for agent in (writer, observer):
        agent.start_heartbeat()
        await agent.join(SPACE)
    asking = asyncio.create_task(ask_and_go_away(http_url(server), delta_seen))
    request = await writer.wait_for("space.event", WAIT)
    assert request["data"]["body"] == "write me a saga"
    await writer.send({
        "type": "space.event.delta", "space": SPACE, "event_id": "saga",
        "data": {"in_reply_to": request["event_id"], "text": "once upon a time "},
    })  # fmt: skip
    await asking  # the caller went away once the bridge had the first delta
    told = await writer.wait_for("space.event", WAIT)
    assert told["data"]["cancel"] is True
    assert told["data"]["in_reply_to"] == request["event_id"]
    assert told["to"] in ("writer", ["writer"]), "addressed to the producer"
    delta = await observer.wait_for("space.event.delta", WAIT)
    assert delta["data"]["text"] == "once upon a time ", "the others still receive it"
    await writer.close()
    await observer.close()
