"""Interop with the real client: PyPI ``mcp`` 2.3.0's ``mcp.client.Client``, in
its ``legacy`` mode (initialize handshake, session, GET stream) and its default
``auto`` mode (``server/discover`` first, then the stateless revision), against
a hub with auth on and real WebSocket agents answering."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.support.mcp_peer import McpPeer, require_mcp_peer
from tests.support.wsclient import WsClient

#: Connecting must not wait for the client's 10 s fallback from a silent probe.
CONNECT_BOUND = 5.0


@pytest.fixture(scope="session")
def mcp_peer() -> McpPeer:
    return require_mcp_peer()


async def tool_agent(server: Any, agent_id: str, token: str, tool: str) -> WsClient:
    """An agent offering ``tool`` in ``tools`` and answering every call and ask."""
    agent = await WsClient.connect(server.url, agent_id, token=token, heartbeat=True)
    metadata = {"mcp_tools": [{"name": tool, "inputSchema": {"type": "object", "properties": {
        "city": {"type": "string"}}}}]}  # fmt: skip
    await agent.request({"type": "agent.register", "agent": {"id": agent_id, "metadata": metadata}})
    await agent.join("tools")

    async def answer() -> None:
        while True:
            event = await agent.wait_for("space.event", timeout=120, **{"from": "mcp"})
            data = event["data"]
            if "tool" in data:
                reply = {"result": {"city": data["arguments"].get("city"), "forecast": "sunny"}}
            else:
                reply = {"text": f"{agent_id} heard: {data['text']}"}
            await agent.send({
                "type": "space.publish", "space": "tools", "to": "mcp",
                "data": {"in_reply_to": event["event_id"], **reply},
            })  # fmt: skip

    agent.answering = asyncio.get_running_loop().create_task(answer())  # type: ignore[attr-defined]
    return agent


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_real_mcp_client_connects_lists_calls_and_hears_changes(
    hub, tmp_path, mcp_peer, mode
):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"host": "host-token", "weather": "w", "late": "l"}))
    server = await hub(
        auth_mode="tokens", auth_tokens_file=str(tokens), spaces=[{"id": "tools", "mcp": True}]
    )
    weather = await tool_agent(server, "weather", "w", "forecast")
    steps = [
        {"op": "list"},
        {"op": "call", "name": "weather.forecast", "arguments": {"city": "Oslo"}},
        {"op": "call", "name": "space_ask", "arguments": {"space": "tools", "text": "hello",
                                                           "to": "weather"}},
        {"op": "call", "name": "space_history", "arguments": {"space": "tools", "limit": "x"}},
        {"op": "call", "name": "no_such_tool", "arguments": {}},
        {"op": "await_list_changed", "timeout": 15},
        {"op": "list"},
    ]  # fmt: skip
    late = None
    url = f"{server.http_url}/mcp"
    async with mcp_peer.session(url, steps, mode=mode, token="host-token") as peer:
        connected = await peer.next()
        assert connected["connected"] < CONNECT_BOUND
        if mode == "legacy":
            assert (connected["era"], connected["protocol"]) == ("handshake", "2025-11-25")
        else:
            assert connected["era"] == "stateless"
        listed = await peer.next()
        assert listed["tools"] == [
            "spaces_list", "agents_list", "space_publish", "space_history", "space_ask",
            "weather.forecast",
        ]  # fmt: skip
        forecast = await peer.next()
        assert forecast == {
            "text": '{"city":"Oslo","forecast":"sunny"}',
            "structured": {"city": "Oslo", "forecast": "sunny"},
            "is_error": False,
        }
        asked = await peer.next()
        assert asked["is_error"] is False
        assert asked["structured"]["reply"]["data"]["text"] == "weather heard: hello"
        wrong = await peer.next()
        assert wrong["is_error"] is True and "limit must be" in wrong["text"]
        unknown = await peer.next()
        assert (
            unknown["error"]["type"] == "MCPError" and "Unknown tool" in unknown["error"]["message"]
        )
        assert await peer.next() == {"waiting": True}
        late = await tool_agent(server, "late", "l", "arrive")
        assert await peer.next() == {"list_changed": True}
        relisted = await peer.next()
        assert "late.arrive" in relisted["tools"]
        assert await peer.next() == {"done": True}
    for agent in (weather, late):
        if agent is not None:
            agent.answering.cancel()  # type: ignore[attr-defined]
            await agent.close()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_real_mcp_client_lists_reads_and_follows_a_space(hub, mcp_peer, mode):
    """Spaces as resources through ``mcp.client.Client``: ``resources/subscribe``
    on a session (legacy), ``subscriptions/listen`` on the stateless revision (auto)."""
    server = await hub()
    bob = await WsClient.connect(server.url, "bob", heartbeat=True)
    await bob.join("lab")
    await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "first"}})
    await bob.wait_for("space.event", timeout=10, space="lab")
    uri = "agora://spaces/lab"
    steps = [
        {"op": "resources"},
        {"op": "read", "uri": uri},
        {"op": "follow", "uri": uri, "timeout": 15},
    ]
    async with mcp_peer.session(f"{server.http_url}/mcp?agent_id=host", steps, mode=mode) as peer:
        connected = await peer.next()
        assert connected["era"] == ("handshake" if mode == "legacy" else "stateless")
        listed = await peer.next()
        assert uri in listed["resources"] and listed["templates"] == ["agora://spaces/{space}"]
        (content,) = (await peer.next())["contents"]
        assert content["uri"] == uri and content["mimeType"] == "application/json"
        assert [e["data"]["text"] for e in orjson.loads(content["text"])["events"]] == ["first"]
        assert await peer.next() == {"following": [uri]}
        await bob.wait_for("space.members", timeout=10, space="lab")  # mcp joined to follow
        await bob.send({"type": "space.publish", "space": "lab", "data": {"text": "news"}})
        assert await peer.next() == {"updated": uri}
        assert await peer.next() == {"done": True}
    await bob.close()
