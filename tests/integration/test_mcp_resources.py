"""Spaces as MCP resources (contract §20) against a real hub and real agents:
listed, read, followed live through the session's stream, refused like absent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.mcphttp import McpHttp, next_sse
from tests.support.wsclient import WsClient


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def open_stream(mcp: McpHttp) -> aiohttp.ClientResponse:
    headers = mcp.headers(Accept="text/event-stream")
    resp = await mcp.http.get(mcp.url, headers=headers)
    assert resp.status == 200, resp.status
    return resp


async def next_notification(resp: aiohttp.ClientResponse, method: str, timeout: float = 10):
    while True:
        msg = await next_sse(resp.content, timeout)
        if msg.get("method") == method:
            return msg


async def test_spaces_are_listed_read_and_templated(hub, http):
    server = await hub(spaces=[{"id": "lobby"}])
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "first"}})
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "second"}})
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    init = await mcp.initialize()
    assert init["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    listed = (await mcp.rpc("resources/list")).result["resources"]
    by_uri = {r["uri"]: r for r in listed}
    assert by_uri["agora://spaces/lab"]["name"] == "lab"
    assert by_uri["agora://spaces/lab"]["mimeType"] == "application/json"
    assert "agora://spaces/lobby" in by_uri
    templates = (await mcp.rpc("resources/templates/list")).result["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["agora://spaces/{space}"]
    async with asyncio.timeout(10):
        while True:  # the second publish is recorded once bob's own echo of it came
            read = await mcp.rpc("resources/read", {"uri": "agora://spaces/lab"})
            (content,) = read.result["contents"]
            history = orjson.loads(content["text"])
            if len(history["events"]) == 2:
                break
            await asyncio.sleep(0.05)
    assert content["uri"] == "agora://spaces/lab" and content["mimeType"] == "application/json"
    assert [e["data"]["text"] for e in history["events"]] == ["first", "second"]
    # The same read on the stateless revision.
    modern = McpHttp(http, server.http_url, agent_id="alice", modern=True)
    again = (await modern.rpc("resources/read", {"uri": "agora://spaces/lab"})).result
    assert again["resultType"] == "complete" and again["contents"][0]["text"] == content["text"]
    # Following needs a session, which that revision has none of (mcp.md): -32602, 400;
    # unsubscribing stops nothing.
    refused = await modern.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})
    assert refused.status == 400 and refused.error["code"] == -32602, refused.body
    assert "needs a session" in refused.error["message"]
    stopped = await modern.rpc("resources/unsubscribe", {"uri": "agora://spaces/lab"})
    assert stopped.result["resultType"] == "complete"
    await bob.close()


@pytest.mark.parametrize(
    "uri", ["agora://spaces/nowhere", "agora://spaces/BAD NAME", "test://static-text", 7, None]
)
async def test_an_unknown_resource_is_not_found(hub, http, uri: Any):
    server = await hub(auto_create_spaces=False)
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    for method in ("resources/read", "resources/subscribe"):
        error = (await mcp.rpc(method, {"uri": uri})).error
        assert error["code"] == -32002, (method, error)
    # unsubscribing from what is not followed is fine
    assert (await mcp.rpc("resources/unsubscribe", {"uri": uri})).result == {}


async def test_a_subscription_notifies_each_new_event_until_unsubscribed(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    stream = await open_stream(mcp)
    assert (await mcp.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})).result == {}
    await bob.wait_for("space.members", timeout=10, space="lab")  # mcp joined to follow it
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "news"}})
    note = await next_notification(stream, "notifications/resources/updated")
    assert note["params"] == {"uri": "agora://spaces/lab"}
    # An event addressed to someone else is not told.
    carol = await WsClient.connect(server.url, "carol")
    await carol.join("lab")
    await bob.send({"type": "space.publish", "space": "lab", "to": "carol",
                    "data": {"text": "secret"}})  # fmt: skip
    await carol.wait_for("space.event", timeout=10, space="lab")
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "more"}})
    note = await next_notification(stream, "notifications/resources/updated")
    assert note["params"] == {"uri": "agora://spaces/lab"}
    assert (await mcp.rpc("resources/unsubscribe", {"uri": "agora://spaces/lab"})).result == {}
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "unheard"}})
    with pytest.raises(TimeoutError):
        await next_notification(stream, "notifications/resources/updated", timeout=1.5)
    stream.close()
    await bob.close()
    await carol.close()


async def test_an_event_published_through_mcp_itself_is_told_too(hub, http):
    """``space_publish`` (the hub's ``mcp`` agent publishing) is an event of the
    space like any other: a session following the space hears of it — its
    own call's or another caller's. (It used to be told of nobody's: ``mcp``
    published without echo, so no copy of it heard its own events.)"""
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    other = McpHttp(http, server.http_url, agent_id="carol")
    await other.initialize()
    stream = await open_stream(mcp)
    assert (await mcp.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})).result == {}
    await bob.wait_for("space.members", timeout=10, space="lab")  # mcp joined to follow it
    for caller in (mcp, other, mcp):
        published = await caller.call("space_publish", {"space": "lab", "text": "via mcp"})
        assert not published["isError"], published
        note = await next_notification(stream, "notifications/resources/updated")
        assert note["params"] == {"uri": "agora://spaces/lab"}
        seen = await bob.wait_for("space.event", timeout=10, space="lab")
        assert seen["from"] == "mcp" and seen["data"]["text"] == "via mcp"
    stream.close()
    await bob.close()


async def test_subscriptions_outlive_the_stream_and_need_a_session(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    sessionless = McpHttp(http, server.http_url, agent_id="alice")
    refused = (await sessionless.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})).error
    assert refused["code"] == -32602 and "session" in refused["message"]
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    # Subscribed before any stream is open: the stream opened later follows it.
    assert (await mcp.rpc("resources/subscribe", {"uri": "agora://spaces/lab"})).result == {}
    stream = await open_stream(mcp)
    await bob.wait_for("space.members", timeout=10, space="lab")
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "news"}})
    note = await next_notification(stream, "notifications/resources/updated")
    assert note["params"]["uri"] == "agora://spaces/lab"
    stream.close()
    await bob.close()


async def test_list_changed_when_a_space_appears_for_those_who_may_see_it(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    stream = await open_stream(mcp)
    bob = await WsClient.connect(server.url, "bob", heartbeat=True)
    await bob.join("fresh")
    note = await next_notification(stream, "notifications/resources/list_changed", timeout=15)
    assert note["method"] == "notifications/resources/list_changed"
    listed = {r["uri"] for r in (await mcp.rpc("resources/list")).result["resources"]}
    assert "agora://spaces/fresh" in listed
    stream.close()
    await bob.close()
