"""Issue 28's server-side papercuts, each as a newcomer met it: ``/agora/*``
answers JSON on a hub that serves no HTTP Agora space, and ``GET /api/nodes``
counts an agent the moment it is connected."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from tests.support.wsclient import WsClient

KEY = "test-api-key-0123456789"


async def http(server: Any, method: str, path: str, **kwargs: Any) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, server.http_url + path, **kwargs) as r:
            raw = await r.read()
            assert r.content_type == "application/json", (r.status, raw[:200])
            return r.status, orjson.loads(raw), r.headers


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/agora/weather"),
        ("POST", "/agora/weather/conversations/abc"),
        ("DELETE", "/agora/weather/conversations/abc"),
        ("GET", "/agora/weather/wellknown"),
        ("GET", "/agora/weather"),
        ("POST", "/agora/weather/no/such/route"),
        ("GET", "/agora"),
        ("GET", "/agora/"),
    ],
)
async def test_agora_routes_answer_json_on_a_hub_without_agora_spaces(hub, method, path):
    server = await hub()
    status, body, _ = await http(server, method, path, json={"body": "hi"})
    assert status == 404
    assert body["status"] == "failure" and isinstance(body["error"], str) and body["error"]


async def test_agora_routes_of_a_served_space_answer_json_too(hub, tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text('[[spaces]]\nid = "weather"\nagora_http = true\n')
    server = await hub(config=config)
    status, body, headers = await http(server, "GET", "/agora/weather")
    assert status == 405 and headers["Allow"] == "POST" and body["status"] == "failure"
    status, body, headers = await http(server, "PUT", "/agora/weather/conversations/x")
    assert status == 405 and headers["Allow"] == "DELETE, POST"
    status, body, _ = await http(server, "GET", "/agora/weather/elsewhere")
    assert status == 404 and body["status"] == "failure"
    status, body, _ = await http(server, "POST", "/agora/other", json={"body": "hi"})
    assert status == 404 and "other" in body["error"]
    status, body, _ = await http(server, "GET", "/agora/weather/wellknown")
    assert status == 200 and body == {}


async def test_api_nodes_counts_a_new_connection_at_once(hub):
    # The node reports its figures every 2 s; the one answering reads its own now.
    server = await hub(api_key=KEY)
    headers = {"Authorization": f"apikey {KEY}"}
    _, body, _ = await http(server, "GET", "/api/nodes", headers=headers)
    assert [n["connections"] for n in body["nodes"]] == [0]
    alice = await WsClient.connect(server.url, "alice")
    await alice.join("general")
    _, body, _ = await http(server, "GET", "/api/nodes", headers=headers)
    (node,) = body["nodes"]
    assert node["id"] == server.node.node_id
    # general, and mcp.calls (MCP is on by default: its agent relays mcp.calls)
    assert node["connections"] == 1 and node["spaces"] == 2 and node["backplane_ready"] is True
    assert "deliveries_per_s" in node and "space_rates" not in node
    await alice.close()
