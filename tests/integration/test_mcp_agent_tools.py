"""Agent tools over MCP: offered by members of ``mcp = true`` spaces, called as
addressed events, answered by the first reply; list changes on the streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support.mcphttp import McpHttp, next_sse, text_of
from tests.support.wsclient import WsClient

TOOLS_SPACE = [{"id": "tools", "mcp": True}]
FORECAST = {
    "name": "forecast",
    "description": "Tomorrow's weather in a city.",
    "inputSchema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def offer(
    server: Any, agent_id: str, *tools: dict[str, Any], space: str = "tools"
) -> WsClient:
    agent = await WsClient.connect(server.url, agent_id, heartbeat=True)
    registered = await agent.request(
        {
            "type": "agent.register",
            "agent": {"id": agent_id, "metadata": {"mcp_tools": list(tools)}},
        }
    )
    assert registered["type"] == "agent.registered"
    await agent.join(space)
    return agent


async def until_listed(mcp: McpHttp, name: str, present: bool = True) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            tools = await mcp.tools()
            if (name in tools) == present:
                return tools
            await asyncio.sleep(0.05)


async def serve_tool(agent: WsClient, answer: Any) -> asyncio.Task[None]:
    """Answer each tool call addressed to ``agent`` with ``answer(data)``."""

    async def run() -> None:
        while True:
            event = await agent.wait_for("space.event", timeout=60, **{"from": "mcp"})
            reply = answer(event["data"])
            if reply is not None:
                await agent.send({
                    "type": "space.publish", "space": event["space"], "to": "mcp",
                    "data": {"in_reply_to": event["event_id"], **reply},
                })  # fmt: skip

    return asyncio.get_running_loop().create_task(run())


async def test_a_members_tools_appear_and_disappear_with_its_membership(hub, http):
    server = await hub(spaces=TOOLS_SPACE)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    assert "weather.forecast" not in await mcp.tools()
    weather = await offer(server, "weather", FORECAST, {"name": "plain"})
    tools = await until_listed(mcp, "weather.forecast")
    assert tools["weather.forecast"] == {
        "name": "weather.forecast",
        "description": FORECAST["description"],
        "inputSchema": FORECAST["inputSchema"],
    }
    assert tools["weather.plain"]["inputSchema"] == {"type": "object"}
    # In a space that is not mcp = true, the same registration offers nothing.
    other = await offer(server, "other", FORECAST, space="lab")
    assert "other.forecast" not in await mcp.tools()
    await weather.request({"type": "space.leave", "space": "tools"})
    await until_listed(mcp, "weather.forecast", present=False)
    unknown = await mcp.rpc("tools/call", {"name": "weather.forecast", "arguments": {}})
    assert unknown.error["code"] == -32602
    await weather.close()
    await other.close()


async def test_a_tool_call_is_an_addressed_event_and_the_reply_answers(hub, http):
    server = await hub(spaces=TOOLS_SPACE)
    weather = await offer(server, "weather", FORECAST, {"name": "echo"}, {"name": "broken"})
    watcher = await WsClient.connect(server.url, "watcher", heartbeat=True)
    await watcher.join("tools")
    calls: list[dict[str, Any]] = []

    def answer(data: dict[str, Any]) -> dict[str, Any]:
        calls.append(data)
        if data["tool"] == "forecast":
            return {"result": {"city": data["arguments"]["city"], "forecast": "sunny"}}
        if data["tool"] == "echo":
            return {"text": f"you said {data['arguments'].get('say')}"}
        return {"status": "failure", "error": "out of order"}

    task = await serve_tool(weather, answer)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await until_listed(mcp, "weather.forecast")
    result = await mcp.call("weather.forecast", {"city": "Oslo"})
    assert result == {
        "content": [{"type": "text", "text": '{"city":"Oslo","forecast":"sunny"}'}],
        "structuredContent": {"city": "Oslo", "forecast": "sunny"},
        "isError": False,
    }
    assert calls[0] == {
        "via": "mcp", "tool": "forecast", "arguments": {"city": "Oslo"}, "caller": "alice",
        "from": "mcp",
    }  # fmt: skip
    echoed = await mcp.call("weather.echo", {"say": "hi"})
    assert text_of(echoed) == "you said hi" and "structuredContent" not in echoed
    broken = await mcp.call("weather.broken")
    assert broken["isError"] is True and text_of(broken) == "out of order"
    # The calls were addressed: the other member saw none of them.
    marker = await watcher.request({"type": "space.publish", "space": "tools", "data": {}})
    assert marker["from"] == "watcher"
    assert not [m for m in watcher.backlog if m.get("from") == "mcp"]
    task.cancel()
    await weather.close()
    await watcher.close()


async def test_an_agent_that_does_not_answer_times_out(hub, http):
    server = await hub(spaces=TOOLS_SPACE, bridge_timeout=0.5)
    weather = await offer(server, "weather", FORECAST)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await until_listed(mcp, "weather.forecast")
    result = await mcp.call("weather.forecast", {"city": "Oslo"})
    assert result["isError"] is True and text_of(result) == "Timeout"
    await weather.close()


async def test_a_session_stream_hears_that_the_tools_changed(hub, http):
    server = await hub(spaces=TOOLS_SPACE)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await mcp.tools()
    async with http.get(
        mcp.url, headers=mcp.headers(Accept="text/event-stream"), timeout=aiohttp.ClientTimeout(20)
    ) as stream:
        assert stream.status == 200
        assert stream.headers["Content-Type"] == "text/event-stream"
        weather = await offer(server, "weather", FORECAST)
        notice = await next_sse(stream.content)
        assert notice == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        assert "weather.forecast" in await mcp.tools()
        await weather.close()  # gone: its tools go too
        assert await next_sse(stream.content) == notice
        await until_listed(mcp, "weather.forecast", present=False)
        # Ending the session ends its stream.
        assert await mcp.delete() == 200
        async with asyncio.timeout(10):
            assert (await stream.content.read()).strip() == b""  # and then its end


async def test_a_stateless_subscription_hears_that_the_tools_changed(hub, http):
    server = await hub(spaces=TOOLS_SPACE)
    mcp = McpHttp(http, server.http_url, agent_id="alice", modern=True)
    body = {
        "jsonrpc": "2.0",
        "id": "listen-1",
        "method": "subscriptions/listen",
        "params": {
            "_meta": mcp_meta(),
            "notifications": {"toolsListChanged": True, "promptsListChanged": True},
        },
    }
    headers = {
        **mcp.headers(),
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    async with http.post(mcp.url, json=body, headers=headers) as stream:
        assert stream.status == 200
        ack = await next_sse(stream.content)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"toolsListChanged": True}
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
        weather = await offer(server, "weather", FORECAST)
        notice = await next_sse(stream.content)
        assert notice["method"] == "notifications/tools/list_changed"
        assert notice["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
        listed = (await mcp.rpc("tools/list")).result
        assert "weather.forecast" in {t["name"] for t in listed["tools"]}
        assert listed["resultType"] == "complete" and listed["cacheScope"] == "private"
        await weather.close()


def mcp_meta() -> dict[str, Any]:
    from tests.support.mcphttp import META

    return META


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


async def test_an_agent_answers_mcp_content_blocks_checked_on_the_way(hub, http):
    server = await hub(spaces=TOOLS_SPACE)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    painter = await offer(server, "painter", {"name": "paint"})
    await until_listed(mcp, "painter.paint")
    blocks = {
        "good": [{"type": "text", "text": "a red pixel"},
                 {"type": "image", "data": PNG, "mimeType": "image/png"},
                 {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
                 {"type": "resource", "resource": {"uri": "agora://spaces/tools",
                                                   "mimeType": "text/plain", "text": "x"}}],
        "bad": [{"type": "image", "data": "<not base64>", "mimeType": "image/png"}],
        "odd": "a string, not a list",
    }  # fmt: skip
    task = await serve_tool(painter, lambda data: {"content": blocks[data["arguments"]["kind"]]})
    good = await mcp.call("painter.paint", {"kind": "good"})
    assert good["isError"] is False and good["content"] == blocks["good"]
    bad = await mcp.call("painter.paint", {"kind": "bad"})
    assert bad["isError"] is True
    assert text_of(bad) == "The agent's reply has invalid content: content[0].data is not base64"
    odd = await mcp.call("painter.paint", {"kind": "odd"})
    assert odd["isError"] is True and "non-empty list" in text_of(odd)
    # and the hub goes on serving
    assert (await mcp.call("painter.paint", {"kind": "good"}))["content"] == blocks["good"]
    task.cancel()
    await painter.close()
