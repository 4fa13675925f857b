"""An MCP client hears a streamed reply as it comes (``notifications/progress``) and
stops a call (``notifications/cancelled``, or by going away) — which stops the agent
answering it (contract §19, §20).

A real hub, a real Python SDK agent answering with ``client.serve`` (its handler is
cancelled, or not), and a raw MCP client over HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.mcphttp import McpHttp, next_sse, text_of

SPACE = "tools"
WAIT = 15.0
_ids = itertools.count(100)


class Writer:
    """An agent's handler: streams (``stream_first``) or thinks, and reports how it stopped.
    ``gate`` lets the test release it, one chunk at a time."""

    def __init__(self, *, stream_first: bool):
        self.stream_first = stream_first
        self.asked = asyncio.Event()
        self.gate: asyncio.Queue[str | None] = asyncio.Queue()
        self.stopped: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def handler(self, request: Any) -> Any:
        if request.data.get("via") != "mcp":
            return None
        if self.stream_first:
            return self._stream()
        self.asked.set()
        try:
            return {"text": await self.gate.get()}
        except asyncio.CancelledError as exc:
            self._stop(exc)
            raise

    async def _stream(self) -> AsyncIterator[str]:
        self.asked.set()
        try:
            while (chunk := await self.gate.get()) is not None:
                yield chunk
        except asyncio.CancelledError as exc:
            self._stop(exc)
            raise

    def _stop(self, exc: BaseException) -> None:
        if not self.stopped.done():
            self.stopped.set_result(str(exc))


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def serving(hub: Any, clients: Any, writer: Writer) -> tuple[Any, asyncio.Task[None]]:
    server = await hub(spaces=[{"id": SPACE, "mcp": True}], bridge_timeout=60)
    agent = await clients(server, "writer", metadata={"mcp_tools": [{"name": "saga"}]})
    await agent.join(SPACE)
    task = asyncio.create_task(agent.serve(SPACE, writer.handler, addressed_only=True))
    return server, task


async def listed(mcp: McpHttp, name: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            if name in await mcp.tools():
                return
            await asyncio.sleep(0.05)


def call_body(request_id: int, *, token: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "writer.saga", "arguments": {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def cancel(mcp: McpHttp, request_id: int) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the user pressed stop"}}  # fmt: skip
    assert (await mcp.post(note)).status == 202


async def test_a_streamed_reply_is_heard_delta_by_delta(hub, clients, http):
    writer = Writer(stream_first=True)
    server, task = await serving(hub, clients, writer)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await listed(mcp, "writer.saga")
    body = orjson.dumps(call_body(next(_ids), token="p-1"))
    headers = {"Content-Type": "application/json", **mcp.headers()}
    await writer.gate.put("Once ")  # the answer's stream opens with the first delta
    async with http.post(mcp.url, data=body, headers=headers) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for n, chunk in enumerate(["Once ", "upon ", "a time."], start=1):
            if n > 1:
                await writer.gate.put(chunk)
            note = await next_sse(resp.content, WAIT)
            assert note["method"] == "notifications/progress"
            assert note["params"] == {"progressToken": "p-1", "progress": n, "message": chunk}
        await writer.gate.put(None)
        answer = await next_sse(resp.content, WAIT)
    assert text_of(answer["result"]) == "Once upon a time."
    # Without a progress token: the assembled reply alone, as JSON.
    for chunk in ("The ", "end.", None):
        await writer.gate.put(chunk)
    plain = await mcp.post(call_body(next(_ids)), Accept="application/json")
    assert plain.headers["Content-Type"].startswith("application/json")
    assert text_of(plain.result) == "The end."
    task.cancel()


@pytest.mark.parametrize("stream_first", [True, False], ids=["streaming", "not-started"])
async def test_notifications_cancelled_stops_the_agent(hub, clients, http, stream_first):
    writer = Writer(stream_first=stream_first)
    server, task = await serving(hub, clients, writer)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await listed(mcp, "writer.saga")
    request_id = next(_ids)
    body = orjson.dumps(call_body(request_id, token="p-2"))
    headers = {"Content-Type": "application/json", **mcp.headers()}
    bob = McpHttp(http, server.http_url, agent_id="bob")
    await bob.initialize()
    if stream_first:
        await writer.gate.put("once upon a time ")
        async with http.post(mcp.url, data=body, headers=headers) as resp:
            progress = await next_sse(resp.content, WAIT)  # the hub heard the reply stream
            assert progress["method"] == "notifications/progress"
            await cancel(bob, request_id)  # another caller naming the same id cancels nothing
            await cancel(mcp, request_id)
            reason = await asyncio.wait_for(writer.stopped, WAIT)
            answer = await next_sse(resp.content, WAIT)
    else:
        call = asyncio.create_task(mcp.post(body, Accept="application/json"))
        await asyncio.wait_for(writer.asked.wait(), WAIT)
        await cancel(bob, request_id)
        await cancel(mcp, request_id)
        reason = await asyncio.wait_for(writer.stopped, WAIT)
        answer = (await asyncio.wait_for(call, WAIT)).body
    assert reason.endswith("receiver_cancelled" if stream_first else "cancelled")
    assert answer["id"] == request_id
    assert answer["result"]["isError"] is True
    assert text_of(answer["result"]) == "Cancelled: the client stopped the call."
    task.cancel()


async def test_a_cancel_of_another_caller_or_session_is_ignored(hub, clients, http):
    writer = Writer(stream_first=False)
    server, task = await serving(hub, clients, writer)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await listed(mcp, "writer.saga")
    request_id = next(_ids)
    call = asyncio.create_task(mcp.post(call_body(request_id), Accept="application/json"))
    await asyncio.wait_for(writer.asked.wait(), WAIT)
    other_session = McpHttp(http, server.http_url, agent_id="alice")
    await other_session.initialize()
    await cancel(other_session, request_id)
    await cancel(McpHttp(http, server.http_url, agent_id="bob"), request_id)
    await writer.gate.put("answered")
    reply = await asyncio.wait_for(call, WAIT)
    assert text_of(reply.result) == "answered" and not writer.stopped.done()
    task.cancel()


@pytest.mark.parametrize("stream_first", [True, False], ids=["streaming", "not-started"])
async def test_a_client_that_goes_away_stops_the_agent(hub, clients, http, stream_first):
    writer = Writer(stream_first=stream_first)
    server, task = await serving(hub, clients, writer)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await listed(mcp, "writer.saga")
    body = orjson.dumps(call_body(next(_ids), token="p-3"))
    headers = {"Content-Type": "application/json", **mcp.headers()}
    async with aiohttp.ClientSession() as leaving:
        if stream_first:
            await writer.gate.put("once upon a time ")
            resp = await leaving.post(mcp.url, data=body, headers=headers)
            progress = await next_sse(resp.content, WAIT)
            assert progress["method"] == "notifications/progress"
            resp.close()  # the connection closes mid-stream
        else:
            call = asyncio.create_task(leaving.post(mcp.url, data=body, headers=headers))
            await asyncio.wait_for(writer.asked.wait(), WAIT)
            call.cancel()  # the connection closes
    reason = await asyncio.wait_for(writer.stopped, WAIT)
    assert reason.endswith("receiver_cancelled" if stream_first else "cancelled")
    # and the hub serves the next call
    await writer.gate.put("next")
    if stream_first:
        await writer.gate.put(None)
    assert text_of((await mcp.post(call_body(next(_ids)), Accept="application/json")).result)
    task.cancel()
