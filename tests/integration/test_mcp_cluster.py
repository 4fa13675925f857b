"""MCP across a cluster (two nodes, a real redis-server): tools of an agent on
node two called through node one's /mcp; sessions valid on every node."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support.mcphttp import McpHttp, next_sse
from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

TOOLS = [{"id": "tools", "mcp": True}]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def two_nodes(hub: Any, redis_url: str) -> tuple[Any, Any]:
    settings = {"redis_url": redis_url, "spaces": TOOLS}
    return await hub(node_id="node-one", **settings), await hub(node_id="node-two", **settings)


async def weather_agent(server: Any) -> tuple[WsClient, asyncio.Task[None]]:
    agent = await WsClient.connect(server.url, "weather", heartbeat=True)
    tools = [{"name": "forecast", "inputSchema": {"type": "object"}}]
    await agent.request(
        {"type": "agent.register", "agent": {"id": "weather", "metadata": {"mcp_tools": tools}}}
    )

    async def answer() -> None:
        while True:
            event = await agent.wait_for("space.event", timeout=60, **{"from": "mcp"})
            data = event["data"]
            reply = (
                {"result": {"city": data["arguments"]["city"], "forecast": "windy"}}
                if "tool" in data
                else {"text": f"weather says hi to {data['caller']}"}
            )
            await agent.send({
                "type": "space.publish", "space": event["space"], "to": "mcp",
                "data": {"in_reply_to": event["event_id"], **reply},
            })  # fmt: skip

    return agent, asyncio.get_running_loop().create_task(answer())


async def until_listed(mcp: McpHttp, name: str) -> None:
    async with asyncio.timeout(10):
        while True:
            if name in await mcp.tools():
                return
            await asyncio.sleep(0.05)  # polling what a client would see


async def test_an_agent_tool_on_node_two_called_through_node_one(hub, http, redis_server):
    one, two = await two_nodes(hub, redis_server.url)
    mcp = McpHttp(http, one.http_url, agent_id="alice")
    await mcp.initialize()
    async with http.get(mcp.url, headers=mcp.headers()) as stream:
        agent, task = await weather_agent(two)
        await agent.join("tools")
        notice = await next_sse(stream.content)  # node one hears of a join on node two
        assert notice["method"] == "notifications/tools/list_changed"
    await until_listed(mcp, "weather.forecast")
    result = await mcp.call("weather.forecast", {"city": "Bergen"})
    assert result["structuredContent"] == {"city": "Bergen", "forecast": "windy"}
    asked = await mcp.call("space_ask", {"space": "tools", "text": "hi", "to": "weather"})
    assert asked["structuredContent"]["reply"]["data"]["text"] == "weather says hi to alice"
    task.cancel()
    await agent.close()


async def test_a_session_opened_on_one_node_is_served_and_ended_on_the_other(
    hub, http, redis_server
):
    one, two = await two_nodes(hub, redis_server.url)
    on_one = McpHttp(http, one.http_url)
    await on_one.initialize()
    on_two = McpHttp(http, two.http_url)
    on_two.session_id, on_two.revision = on_one.session_id, on_one.revision
    assert "spaces_list" in await on_two.tools()
    bob = await WsClient.connect(two.url, "bob")
    await bob.join("lab")
    await on_one.call("space_publish", {"space": "lab", "text": "a"})
    await on_two.call("space_publish", {"space": "lab", "text": "b"})
    first = await bob.wait_for("space.event", space="lab")
    second = await bob.wait_for("space.event", space="lab")
    assert first["data"]["caller"] == second["data"]["caller"]  # one session, one caller
    assert await on_two.delete() == 200
    assert (await on_one.rpc("tools/list")).status == 404
    await bob.close()


async def test_a_stream_on_one_node_ends_when_its_session_ends_on_another(hub, http, redis_server):
    from adapters.mcp import McpOptions, McpServer

    settings = {"redis_url": redis_server.url}
    one = await hub(adapters=[McpServer(options=McpOptions(keepalive=0.2))], **settings)
    two = await hub(**settings)
    on_one = McpHttp(http, one.http_url)
    await on_one.initialize()
    async with http.get(on_one.url, headers=on_one.headers()) as stream:
        assert stream.status == 200
        on_two = McpHttp(http, two.http_url)
        on_two.session_id = on_one.session_id
        assert await on_two.delete() == 200
        started = time.monotonic()
        async with asyncio.timeout(10):
            rest = await stream.content.read()  # ends at the next keep-alive check
        assert b"data:" not in rest and time.monotonic() - started < 10


async def test_a_space_followed_through_one_node_notifies_on_the_other(hub, http, redis_server):
    """The session's stream is on node two; the subscription arrives through node
    one; the event is published on node one."""
    from adapters.mcp import McpOptions, McpServer

    settings = {"redis_url": redis_server.url}
    one = await hub(**settings)
    two = await hub(adapters=[McpServer(options=McpOptions(keepalive=0.2))], **settings)
    bob = await WsClient.connect(one.url, "bob", heartbeat=True)
    await bob.join("lab")
    via_one = McpHttp(http, one.http_url, agent_id="alice")
    await via_one.initialize()
    via_two = McpHttp(http, two.http_url, agent_id="alice")
    via_two.session_id, via_two.revision = via_one.session_id, via_one.revision
    stream = await http.get(via_two.url, headers=via_two.headers(Accept="text/event-stream"))
    assert stream.status == 200
    listed = (await via_one.rpc("resources/list")).result["resources"]
    assert "agora://spaces/lab" in {r["uri"] for r in listed}
    assert (await via_one.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})).result == {}
    # Node two picks the subscription up at its stream's next keep-alive (0.2 s
    # here); a member event tells when its mcp agent joined the space.
    await bob.wait_for("space.members", timeout=30, space="lab")
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "news"}})
    async with asyncio.timeout(30):
        while True:
            note = await next_sse(stream.content, 30)
            if note.get("method") == "notifications/resources/updated":
                break
    assert note["params"] == {"uri": "agora://spaces/lab"}
    # Published through node one's mcp agent: node two's copy hears it too.
    published = await via_one.call("space_publish", {"space": "lab", "text": "via mcp"})
    assert not published["isError"], published
    async with asyncio.timeout(30):
        while True:
            note = await next_sse(stream.content, 30)
            if note.get("method") == "notifications/resources/updated":
                break
    stream.close()
    await bob.close()


async def until_relaying(node: Any, mcp: McpHttp) -> None:
    """Until the node's ``mcp`` agent relays ``mcp.calls`` (it joins it in the
    background once the node is ready): an observer there sees a call."""
    observer = await WsClient.connect(node.url, "observer", heartbeat=True)
    await observer.join("mcp.calls")
    async with asyncio.timeout(15):
        while True:
            await mcp.call("spaces_list")
            with contextlib.suppress(TimeoutError):
                await observer.wait_for("space.event", timeout=0.5, space="mcp.calls")
                break
    await observer.close()


async def test_a_cancel_through_one_node_stops_the_call_running_on_another(
    hub, http, clients, redis_server
):
    """The call runs on node two (its HTTP request is there); the client's
    ``notifications/cancelled`` reaches node one: the agent is still told."""
    settings = {"redis_url": redis_server.url, "spaces": TOOLS, "bridge_timeout": 60}
    one, two = await hub(**settings), await hub(**settings)
    asked, stopped = asyncio.Event(), asyncio.get_running_loop().create_future()

    async def think(request: Any) -> str:
        asked.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            stopped.set_result(str(exc))
            raise
        return "never"

    agent = await clients(one, "slow", metadata={"mcp_tools": [{"name": "think"}]})
    await agent.join("tools")
    serving = asyncio.create_task(agent.serve("tools", think, addressed_only=True))
    on_two = McpHttp(http, two.http_url, agent_id="alice")
    await on_two.initialize()
    await until_relaying(two, on_two)
    await until_listed(on_two, "slow.think")
    call = {"jsonrpc": "2.0", "id": 41, "method": "tools/call",
            "params": {"name": "slow.think", "arguments": {}}}  # fmt: skip
    running = asyncio.create_task(on_two.post(call, Accept="application/json"))
    await asyncio.wait_for(asked.wait(), 15)
    on_one = McpHttp(http, one.http_url, agent_id="alice")
    on_one.session_id, on_one.revision = on_two.session_id, on_two.revision
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 41}}
    assert (await on_one.post(cancel)).status == 202
    assert (await asyncio.wait_for(stopped, 15)).endswith("cancelled")
    answer = await asyncio.wait_for(running, 15)
    assert answer.result["isError"] is True and "Cancelled" in answer.result["content"][0]["text"]
    serving.cancel()


async def test_another_callers_publish_through_another_node_answers_no_ask(hub, http, redis_server):
    """§18: a reply from ``mcp`` never answers ``mcp``'s own request. Through
    the same node a caller's ``space_publish`` naming another's ask was ignored;
    through another node it came back ``from: mcp`` and answered it (an outside
    audit). The asker waits on for a real answer, here until its timeout."""
    one, two = await two_nodes(hub, redis_server.url)
    watcher = await WsClient.connect(one.url, "watcher", heartbeat=True)
    await watcher.join("tools")
    alice = McpHttp(http, one.http_url, agent_id="alice")
    eve = McpHttp(http, two.http_url, agent_id="eve")
    await alice.initialize()
    await eve.initialize()
    ask = asyncio.ensure_future(
        alice.call("space_ask", {"space": "tools", "text": "?", "timeout": 3})
    )
    asked = await watcher.wait_for("space.event", space="tools", **{"from": "mcp"})
    forged = {"in_reply_to": asked["event_id"], "text": "FORGED"}
    published = await eve.call("space_publish", {"space": "tools", "data": forged})
    assert published["isError"] is False
    result = await asyncio.wait_for(ask, 30)
    assert result["isError"] is True and "FORGED" not in str(result), result
    await watcher.close()
