"""The server API and the status page across a Redis cluster of two nodes.

Whichever node a request lands on, it acts on the whole cluster: an API
publish on one node reaches members on the other in seq order, a disconnect
reaches an agent on the other node (through a ``disconnect`` node message),
and ``/api/nodes`` lists every live node — a stopped node drops out.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from agora_client import HubAPI
from agora_client.errors import HubRejected
from tests.support.wsclient import WsClient

KEY = "cluster-api-key-0123456789"
TOKEN = "cluster-admin-token-0123456789"
WAIT = 15.0
pytestmark = pytest.mark.redis


async def two_nodes(hub: Any, redis_url: str) -> tuple[Any, Any]:
    settings = {"redis_url": redis_url, "api_key": KEY, "admin_token": TOKEN}
    return await hub(node_id="n0", **settings), await hub(node_id="n1", **settings)


async def until(predicate: Any, what: str) -> Any:
    """Poll an async predicate until it returns something truthy (nodes report every 2 s)."""
    deadline = time.monotonic() + WAIT
    while not (result := await predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)
    return result


async def test_publish_and_disconnect_reach_the_other_node(redis_server, hub):
    n0, n1 = await two_nodes(hub, redis_server.url)
    far = await WsClient.connect(n1.url, "far-agent")
    await far.join("general")
    near = await WsClient.connect(n0.url, "near-agent")
    await near.join("general")
    async with HubAPI(n0.http_url, KEY) as api:
        first = await api.publish("general", {"text": "one"})
        second = await api.publish("general", {"text": "two"}, to="far-agent")
        got = [await far.wait_for("space.event") for _ in range(2)]
        assert [(e["seq"], e["from"]) for e in got] == [(first.seq, "api"), (second.seq, "api")]
        assert second.seq == first.seq + 1
        result = await api.disconnect("far-agent", reason="moving you")
        assert result["node"] == "n1"
        code, frames = await far.closed()
        assert code == 4403 and frames[-1]["code"] == "DISCONNECTED"
        assert "moving you" in frames[-1]["message"]
        # Gone from the directory once its node has cleaned up.
        await until(
            lambda: _agent_ids_without(api, "far-agent"), "far-agent to leave the directory"
        )
        with pytest.raises(HubRejected) as err:
            await api.disconnect("far-agent")
        assert err.value.code == "AGENT_NOT_FOUND"
    await near.close()


async def _agent_ids_without(api: HubAPI, agent_id: str) -> bool:
    return agent_id not in [a.id for a in await api.find_agents()]


async def test_every_node_is_listed_and_a_stopped_one_drops_out(redis_server, hub):
    n0, n1 = await two_nodes(hub, redis_server.url)
    alice = await WsClient.connect(n1.url, "alice")
    async with HubAPI(n0.http_url, KEY) as api:

        async def both_report() -> Any:
            nodes = {n.id: n for n in await api.nodes()}
            return nodes if set(nodes) == {"n0", "n1"} and nodes["n1"].connections == 1 else None

        nodes = await until(both_report, "both nodes to report")
        assert nodes["n0"].connections == 0 and nodes["n1"].backplane_ready
        await alice.close()
        await n1.aclose()  # a node leaving removes its document at once
        assert [n.id for n in await api.nodes()] == ["n0"]


async def test_the_status_page_shows_the_whole_cluster(redis_server, hub, clients):
    n0, n1 = await two_nodes(hub, redis_server.url)
    far = await clients(n1, "far", capabilities=["urn:far"])
    await far.join("far-space")
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=bearer) as http:

        async def busy_everywhere() -> Any:
            await far.publish("far-space", {"tick": 1})
            async with http.get(n0.http_url + "/admin/state") as r:
                assert r.status == 200
                state = await r.json()
            spaces = {s["id"]: s for s in state["spaces"]}
            nodes = {n["id"] for n in state["nodes"]}
            rate = spaces.get("far-space", {}).get("events_per_s", 0)
            return state if nodes == {"n0", "n1"} and rate > 0 else None

        state = await until(busy_everywhere, "n0's page to show n1's space and its rate")
    (agent,) = [a for a in state["agents"] if a["id"] == "far"]
    assert agent["node"] == "n1" and agent["capabilities"] == ["urn:far"]
