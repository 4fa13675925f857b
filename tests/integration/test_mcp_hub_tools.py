"""The hub's five MCP tools against a real hub and real WebSocket agents."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.support.mcphttp import McpHttp, text_of
from tests.support.wsclient import WsClient


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def answering(
    agent: WsClient, space: str, reply: Callable[[dict[str, Any]], dict[str, Any] | None]
) -> asyncio.Task[None]:
    """A task answering every event from ``mcp`` in ``space`` with ``reply(data)``
    (``None``: stay silent), addressed back to ``mcp``."""

    async def run() -> None:
        while True:
            event = await agent.wait_for("space.event", timeout=60, space=space, **{"from": "mcp"})
            data = reply(event["data"])
            if data is not None:
                await agent.send({
                    "type": "space.publish", "space": space, "to": "mcp",
                    "data": {"in_reply_to": event["event_id"], **data},
                })  # fmt: skip

    return asyncio.get_running_loop().create_task(run())


async def test_initialize_and_list_the_hub_tools(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    result = await mcp.initialize("2025-06-18")
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert mcp.session_id
    tools = await mcp.tools()
    assert list(tools) == [
        "spaces_list", "agents_list", "space_publish", "space_history", "space_ask",
    ]  # fmt: skip
    assert (await mcp.rpc("ping")).result == {}


async def test_spaces_list_and_agents_list(hub, http):
    server = await hub(spaces=[{"id": "lobby"}])
    bob = await WsClient.connect(server.url, "bob")
    await bob.request({
        "type": "agent.register",
        "agent": {"id": "bob", "capabilities": ["urn:weather"], "metadata": {"k": 1}},
    })  # fmt: skip
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    spaces = (await mcp.call("spaces_list"))["structuredContent"]["spaces"]
    by_id = {s["id"]: s for s in spaces}
    assert by_id["lab"] == {"id": "lab", "type": "public", "member_count": 1}
    assert by_id["lobby"]["member_count"] == 0 and "mcp.calls" in by_id
    found = await mcp.call("agents_list", {"capability": "urn:weather"})
    agents = found["structuredContent"]["agents"]
    assert [a["id"] for a in agents] == ["bob"] and agents[0]["metadata"] == {"k": 1}
    in_lab = await mcp.call("agents_list", {"space": "lab"})
    assert [a["id"] for a in in_lab["structuredContent"]["agents"]] == ["bob"]
    assert (await mcp.call("agents_list", {"space": "lobby"}))["structuredContent"]["agents"] == []
    await bob.close()


async def test_space_publish_reaches_the_members_naming_the_caller(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    carol = await WsClient.connect(server.url, "carol")
    await bob.join("lab")
    await carol.join("lab")
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    result = await mcp.call(
        "space_publish", {"space": "lab", "text": "hello", "data": {"caller": "spoofed", "n": 1}}
    )
    assert result["isError"] is False
    published = result["structuredContent"]
    event = await bob.wait_for("space.event", space="lab", **{"from": "mcp"})
    assert (event["event_id"], event["seq"]) == (published["event_id"], published["seq"])
    assert event["data"] == {
        "text": "hello",
        "n": 1,
        "via": "mcp",
        "caller": "alice",
        "from": "mcp",
    }
    # Addressed: only bob gets it.
    await mcp.call("space_publish", {"space": "lab", "text": "psst", "to": "bob"})
    event = await bob.wait_for("space.event", space="lab", **{"from": "mcp"})
    assert event["data"]["text"] == "psst" and event["to"] == ["bob"]
    # carol's own event comes after anything published before it: no "psst" on the way.
    seen = await carol.request({"type": "space.publish", "space": "lab", "data": {"text": "x"}})
    assert seen["type"] == "space.event" and seen["from"] == "carol"
    assert all(m.get("data", {}).get("text") != "psst" for m in carol.backlog)
    # Refusals are tool errors.
    missing = await mcp.call("space_publish", {"space": "nowhere", "text": "x"})
    assert missing["isError"] and "does not exist" in text_of(missing)
    system = await mcp.call("space_publish", {"space": "mcp.calls", "text": "x"})
    assert system["isError"] and "system space" in text_of(system)
    stranger = await mcp.call("space_publish", {"space": "lab", "text": "x", "to": "nobody"})
    assert stranger["isError"]
    # The hub's word to an answering agent that an MCP caller stopped: published
    # from mcp, it would stop any caller's request (an outside audit).
    forged = {"cancel": True, "in_reply_to": published["event_id"]}
    cancel = await mcp.call("space_publish", {"space": "lab", "to": "bob", "data": forged})
    assert cancel["isError"] and "notifications/cancelled" in text_of(cancel)
    await bob.close()
    await carol.close()


async def test_space_history_returns_the_latest_events_oldest_first(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    for n in range(5):
        await bob.request({"type": "space.publish", "space": "lab", "data": {"text": f"m{n}"}})
    await bob.request(
        {"type": "space.publish", "space": "lab", "to": "bob", "data": {"text": "own"}}
    )
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    result = await mcp.call("space_history", {"space": "lab", "limit": 3})
    events = result["structuredContent"]["events"]
    # The addressed event is not alice's to read.
    assert [e["data"]["text"] for e in events] == ["m2", "m3", "m4"]
    assert all(e["space"] == "lab" and e["from"] == "bob" for e in events)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
    as_bob = McpHttp(http, server.http_url, agent_id="bob")
    own = await as_bob.call("space_history", {"space": "lab", "limit": 1})
    assert own["structuredContent"]["events"][0]["data"]["text"] == "own"
    missing = await mcp.call("space_history", {"space": "gone"})
    assert missing["isError"] and "does not exist" in text_of(missing)
    await bob.close()


async def test_space_history_gives_a_stream_as_one_whole_event(hub, http):
    server = await hub(stream_threshold=100, stream_chunk=40)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")

    async def stream(event_id: str, texts: list[str], end: str) -> None:
        for n, text in enumerate(texts):
            data = {"text": text, "kind": "story"} if n == 0 else {"text": text}
            await bob.send({"type": "space.event.delta", "space": "lab", "event_id": event_id,
                            "data": data})  # fmt: skip
        if end:
            await bob.send({"type": end, "space": "lab", "event_id": event_id})

    await bob.request({"type": "space.publish", "space": "lab", "data": {"text": "plain"}})
    await stream("s1", ["hello ", "wor", "ld"], "space.event.done")
    await stream("s2", ["never ", "mind"], "space.event.cancel")
    big = "".join(chr(0x41 + n % 26) for n in range(250))  # split by the hub: 7 deltas
    await bob.request({"type": "space.publish", "space": "lab", "data": {"text": big, "n": 1}})
    await stream("s3", ["still ", "going"], "")  # unfinished
    await bob.request({"type": "space.publish", "space": "lab", "data": {"text": "last"}})
    await bob.request({"type": "space.list", "id": "sync"})  # every frame above is recorded
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    result = await mcp.call("space_history", {"space": "lab", "limit": 10})
    events = result["structuredContent"]["events"]
    assert [e["data"]["text"] for e in events] == ["plain", "hello world", big, "last"]
    assert all(e["type"] == "space.event" for e in events)
    assert events[1]["data"]["kind"] == "story" and events[2]["data"]["n"] == 1
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    # ``limit`` counts whole events, the newest ones.
    last_two = await mcp.call("space_history", {"space": "lab", "limit": 2})
    assert [e["data"]["text"] for e in last_two["structuredContent"]["events"]] == [big, "last"]
    await bob.close()


async def test_space_history_leaves_out_a_stream_larger_than_its_budget(hub, http):
    server = await hub(max_frame_bytes=4096)  # the history's byte budget too
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    await bob.request({"type": "space.publish", "space": "lab", "data": {"text": "before"}})
    for _ in range(60):  # some 10 KB of frames in all, each delta small
        delta = {"type": "space.event.delta", "space": "lab", "event_id": "big",
                 "data": {"text": "x" * 50}}  # fmt: skip
        await bob.send(delta)
    await bob.send({"type": "space.event.done", "space": "lab", "event_id": "big"})
    await bob.request({"type": "space.publish", "space": "lab", "data": {"text": "after"}})
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    result = await mcp.call("space_history", {"space": "lab", "limit": 10})
    assert [e["data"]["text"] for e in result["structuredContent"]["events"]] == [
        "before",
        "after",
    ]
    await bob.close()


async def test_space_ask_returns_the_first_reply(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    task = await answering(bob, "lab", lambda d: {"text": f"echo: {d['text']}", "by": "bob"})
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    result = await mcp.call("space_ask", {"space": "lab", "text": "ping?", "to": "bob"})
    assert result["isError"] is False
    answer = result["structuredContent"]
    assert answer["reply"]["from"] == "bob"
    assert answer["reply"]["data"]["text"] == "echo: ping?"
    assert answer["reply"]["data"]["in_reply_to"] == answer["event_id"]
    task.cancel()
    await bob.close()


async def test_space_ask_assembles_a_streamed_reply(hub, http):
    server = await hub(stream_threshold=1024, stream_chunk=256)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    long_text = "0123456789" * 500  # streamed by the hub in 256-byte deltas
    task = await answering(bob, "lab", lambda d: {"text": long_text})
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    result = await mcp.call("space_ask", {"space": "lab", "text": "long one please"})
    assert result["isError"] is False
    assert result["structuredContent"]["reply"]["data"]["text"] == long_text
    task.cancel()
    await bob.close()


async def test_space_ask_failure_and_timeout_are_tool_errors(hub, http):
    server = await hub(bridge_timeout=0.5)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")

    def reply(data: dict[str, Any]) -> dict[str, Any] | None:
        if data["text"] == "fail":
            return {"status": "failure", "error": "cannot do that"}
        return None  # silence

    task = await answering(bob, "lab", reply)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    failed = await mcp.call("space_ask", {"space": "lab", "text": "fail"})
    assert failed["isError"] is True and text_of(failed) == "cannot do that"
    timed_out = await mcp.call("space_ask", {"space": "lab", "text": "hello?", "timeout": 0.3})
    assert timed_out["isError"] is True and text_of(timed_out) == "Timeout"
    by_default = await mcp.call("space_ask", {"space": "lab", "text": "anyone?"})
    assert text_of(by_default) == "Timeout"  # bridge_timeout
    task.cancel()
    await bob.close()


async def test_mcp_calls_tells_every_call_and_outcome(hub, http):
    server = await hub()
    observer = await WsClient.connect(server.url, "observer")
    await observer.join("mcp.calls")
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    await mcp.call("spaces_list")
    await mcp.call("space_publish", {"space": "nowhere", "text": "x"})
    call = await observer.wait_for("space.event", space="mcp.calls")
    assert call["from"] == "@hub"
    assert call["data"]["event"] == "call" and call["data"]["tool"] == "spaces_list"
    assert call["data"]["caller"] == "alice" and call["data"]["arguments"] == {}
    done = await observer.wait_for("space.event", space="mcp.calls")
    assert done["data"]["event"] == "result" and done["data"]["is_error"] is False
    assert done["data"]["call_id"] == call["data"]["call_id"]
    await observer.wait_for("space.event", space="mcp.calls")
    failed = await observer.wait_for("space.event", space="mcp.calls")
    assert failed["data"]["is_error"] is True and "does not exist" in failed["data"]["error"]
    refused = await observer.request(
        {"type": "space.publish", "space": "mcp.calls", "data": {"text": "x"}}
    )
    assert refused["type"] == "error" and refused["code"] == "UNAUTHORIZED"
    await observer.close()


async def test_without_mcp_server_there_is_no_route_and_no_system_space(hub, http):
    server = await hub(mcp_server=False)
    async with http.post(f"{server.http_url}/mcp", json={}) as resp:
        assert resp.status in (404, 405)
    agent = await WsClient.connect(server.url, "x")
    missing = await agent.request({"type": "space.join", "space": "mcp.calls"})
    assert missing["code"] == "SPACE_NOT_FOUND"
    await agent.close()


async def test_waiting_calls_are_answered_when_the_hub_shuts_down(hub, http):
    server = await hub(bridge_timeout=60)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url)
    waiting = asyncio.ensure_future(mcp.call("space_ask", {"space": "lab", "text": "anyone?"}))
    await bob.wait_for("space.event", space="lab", **{"from": "mcp"})
    started = time.monotonic()
    await server.aclose()
    result = await waiting
    assert result["isError"] and "shutting down" in text_of(result)
    assert time.monotonic() - started < 10
