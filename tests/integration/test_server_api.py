"""The server API (``/api/*`` on the HTTP port) against a real hub.

Publishes through the API go the way an agent's do — same seq, limits,
envelope verification, addressed delivery, streaming — and every refusal is
a JSON error with a code that loses nothing (the next event's seq follows
the last delivered one).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson
import pytest

from agora_client import HubAPI, InvalidRequest, SpaceNotFound
from agora_client.errors import ConnectionFailed, HubRejected, RateLimited, Unauthorized
from protocol.identity import did_key
from tests.support.envelopes import ALICE, agora_request, bad_signature
from tests.support.servers import free_port
from tests.support.wsclient import WsClient

KEY = "test-api-key-0123456789"
WAIT = 10.0


async def call(
    server: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    key: str | None = KEY,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> tuple[int, Any, Any]:
    """One request: (status, decoded JSON body or text, response headers)."""
    sent = dict(headers or {})
    if key is not None:
        sent.setdefault("Authorization", f"apikey {key}")
    if body is not None:
        data = orjson.dumps(body)
        sent.setdefault("Content-Type", "application/json")
    async with aiohttp.ClientSession() as http:
        async with http.request(method, server.http_url + path, data=data, headers=sent) as r:
            raw = await r.read()
            try:
                decoded = orjson.loads(raw)
            except orjson.JSONDecodeError:
                decoded = raw.decode(errors="replace")
            return r.status, decoded, r.headers


def error_code(body: Any) -> str:
    return body["error"]["code"]


async def member(server: Any, agent_id: str, space: str = "general") -> WsClient:
    client = await WsClient.connect(server.url, agent_id)
    await client.join(space)
    return client


async def next_event(client: WsClient, after_seq: int = 0) -> dict[str, Any]:
    while True:
        event = await client.wait_for("space.event")
        if event["seq"] > after_seq:
            return event


# ── on, off, keys ───────────────────────────────────────────────────────────


async def test_without_api_key_the_api_is_off(hub):
    server = await hub()
    for method, path in [("GET", "/api/spaces"), ("POST", "/api/publish"), ("GET", "/api/")]:
        status, body, _ = await call(server, method, path)
        assert status == 404
        assert error_code(body) == "NOT_FOUND" and "api_key" in body["error"]["message"]


async def test_the_key_is_required_and_compared(hub):
    server = await hub(api_key=KEY)
    status, body, headers = await call(server, "GET", "/api/spaces", key=None)
    assert (status, error_code(body)) == (401, "UNAUTHENTICATED")
    assert headers["WWW-Authenticate"] == "apikey"
    for wrong in ("wrong", KEY[:-1], KEY + "x", ""):
        status, body, _ = await call(server, "GET", "/api/spaces", key=wrong)
        assert status == 401, wrong
    status, _, _ = await call(
        server, "GET", "/api/spaces", headers={"Authorization": f"Bearer {KEY}"}, key=None
    )
    assert status == 401
    status, body, _ = await call(server, "GET", "/api/spaces", key=None, headers={"X-API-Key": KEY})
    assert status == 200 and body["spaces"]
    # Unknown paths and wrong methods answer JSON too, once the key is right.
    status, body, _ = await call(server, "GET", "/api/nope")
    assert (status, error_code(body)) == (404, "NOT_FOUND")
    status, body, headers = await call(server, "GET", "/api/publish")
    assert (status, error_code(body)) == (405, "METHOD_NOT_ALLOWED")
    assert headers["Allow"] == "POST"


# ── publishing ──────────────────────────────────────────────────────────────


async def test_an_api_publish_takes_the_spaces_next_seq_like_any_other(hub):
    server = await hub(api_key=KEY)
    alice = await member(server, "alice")
    bob = await member(server, "bob")
    first = await alice.request({"type": "space.publish", "space": "general", "data": {"n": 1}})
    status, body, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": {"text": "from a backend"}}
    )
    assert status == 200, body
    assert body["from"] == "api" and body["space"] == "general"
    assert body["seq"] == first["seq"] + 1
    third = await alice.request({"type": "space.publish", "space": "general", "data": {"n": 3}})
    assert third["seq"] == body["seq"] + 1
    got = [await next_event(bob, after_seq=first["seq"] - 1) for _ in range(3)]
    assert [e["seq"] for e in got] == [first["seq"], body["seq"], third["seq"]]
    api_event = got[1]
    assert api_event["from"] == "api" and api_event["event_id"] == body["event_id"]
    assert api_event["data"] == {"text": "from a backend", "from": "api"}
    assert api_event["timestamp"] == body["timestamp"]
    await alice.close()
    await bob.close()


async def test_a_declared_service_name_is_the_sender_and_no_agent_may_take_it(hub):
    server = await hub(api_key=KEY, api_services="billing")
    bob = await member(server, "bob")
    status, body, _ = await call(
        server,
        "POST",
        "/api/publish",
        {"space": "general", "data": {"text": "invoice"}, "service": "billing"},
    )
    assert status == 200 and body["from"] == "billing"
    event = await next_event(bob)
    assert event["from"] == "billing" and event["data"]["from"] == "billing"
    for service in ("unknown", 7, ["billing"]):
        status, body, _ = await call(
            server, "POST", "/api/publish", {"space": "general", "data": {}, "service": service}
        )
        assert (status, error_code(body)) == (400, "INVALID_REQUEST"), service
        assert "api_services" in body["error"]["message"]
    # The API's senders are the hub's own ids while the API is on.
    for agent_id in ("api", "billing"):
        intruder = await WsClient.connect(server.url, agent_id, registered=False)
        code, frames = await intruder.closed()
        assert code == 4409 and frames[0]["code"] == "AGENT_EXISTS"
    await bob.close()


async def test_an_addressed_api_publish_reaches_only_its_recipients(hub):
    server = await hub(api_key=KEY)
    alice, bob, carol = [await member(server, n) for n in ("alice", "bob", "carol")]
    status, body, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": {"q": 1}, "to": "bob"}
    )
    assert status == 200, body
    event = await next_event(bob)
    assert event["to"] == "bob" and event["seq"] == body["seq"]
    status, body, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": {"q": 2}, "to": ["nobody"]}
    )
    assert (status, error_code(body)) == (400, "INVALID_REQUEST")
    assert "not members" in body["error"]["message"]
    # carol got neither: her next event is the marker.
    marker = await alice.request({"type": "space.publish", "space": "general", "data": {}})
    got = await next_event(carol)
    assert got["event_id"] == marker["event_id"]
    for c in (alice, bob, carol):
        await c.close()


async def test_refused_publishes_are_clear_and_publish_nothing(hub):
    server = await hub(api_key=KEY, max_frame_bytes=4096)
    bob = await member(server, "bob")
    last = (await call(server, "POST", "/api/publish", {"space": "general", "data": {}}))[1]
    refused = [
        ({"space": "nowhere", "data": {}}, 404, "SPACE_NOT_FOUND"),
        ({"space": "agent.status", "data": {}}, 403, "UNAUTHORIZED"),
        ({"space": "Not A Name", "data": {}}, 400, "INVALID_REQUEST"),
        ({"space": "general"}, 400, "INVALID_REQUEST"),
        ({"space": "general", "data": "text"}, 400, "INVALID_REQUEST"),
        ({"space": "general", "data": {"from": "alice"}}, 400, "INVALID_REQUEST"),
        ({"space": "general", "data": {}, "echo": False}, 400, "INVALID_REQUEST"),
        ({"space": "general", "data": {"text": "x" * 5000}}, 413, "PAYLOAD_TOO_LARGE"),
        ([1, 2], 400, "INVALID_REQUEST"),
    ]
    for body, want_status, want_code in refused:
        status, answer, _ = await call(server, "POST", "/api/publish", body)
        assert (status, error_code(answer)) == (want_status, want_code), body
    nested: Any = {}
    for _ in range(70):
        nested = {"a": nested}
    status, answer, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": nested}
    )
    assert (status, error_code(answer)) == (400, "INVALID_REQUEST")
    too_big_int = b'{"space": "general", "data": {"n": 18446744073709551616}}'
    for raw in (b"{not json", b"\xff\xfe", b"", too_big_int):
        status, answer, _ = await call(server, "POST", "/api/publish", data=raw)
        assert (status, error_code(answer)) == (400, "INVALID_REQUEST"), raw
    status, marker, _ = await call(server, "POST", "/api/publish", {"space": "general", "data": {}})
    assert status == 200 and marker["seq"] == last["seq"] + 1
    seen = [await next_event(bob) for _ in range(2)]
    assert [e["seq"] for e in seen] == [last["seq"], marker["seq"]]
    await bob.close()


async def test_api_publishes_are_rate_limited_per_sender(hub):
    server = await hub(api_key=KEY, api_services="billing", rate_limit=0.5, rate_burst=2)
    bob = await member(server, "bob")
    outcomes = []
    for _ in range(3):
        outcomes.append(
            await call(server, "POST", "/api/publish", {"space": "general", "data": {}})
        )
    assert [s for s, _, _ in outcomes] == [200, 200, 429]
    assert outcomes[2][2]["Retry-After"] == "1"
    assert error_code(outcomes[2][1]) == "RATE_LIMITED"
    # Another sender has its own allowance.
    status, other, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": {}, "service": "billing"}
    )
    assert status == 200 and other["seq"] == outcomes[1][1]["seq"] + 1
    await bob.close()


async def test_a_long_text_is_streamed_like_an_agents(hub, clients):
    server = await hub(api_key=KEY, stream_threshold=1024, stream_chunk=256)
    bob = await clients(server, "bob")
    assembled = bob.assembled_events("general")
    await bob.join("general")
    text = "ä" * 3000
    status, body, _ = await call(
        server, "POST", "/api/publish", {"space": "general", "data": {"text": text, "k": 1}}
    )
    assert status == 200, body
    whole = await asyncio.wait_for(assembled.__anext__(), WAIT)
    assert whole.text == text and whole.sender == "api" and whole.data["k"] == 1
    assert whole.event_id == body["event_id"]


async def test_signed_envelopes_are_verified_before_fan_out(hub):
    server = await hub(api_key=KEY, spaces=[{"id": "vault", "require_signed": True}])
    bob = await member(server, "bob", "vault")
    env = agora_request(ALICE)
    status, body, _ = await call(server, "POST", "/api/publish", {"space": "vault", "data": env})
    assert status == 200, body
    got = await next_event(bob)
    assert got["verified"] is True and got["signer"] == did_key(bytes(ALICE.verify_key))
    assert got["data"] == env and got["from"] == "api"
    for data in (bad_signature(agora_request(ALICE)), env, {"text": "unsigned"}):
        status, answer, _ = await call(
            server, "POST", "/api/publish", {"space": "vault", "data": data}
        )
        assert (status, error_code(answer)) == (403, "UNAUTHORIZED"), data
    await bob.close()


# ── reading ─────────────────────────────────────────────────────────────────


async def test_spaces_members_and_agents(hub, clients):
    server = await hub(api_key=KEY)
    for i in range(3):
        agent = await clients(
            server, f"agent-{i}", agent_type="worker", capabilities=[f"urn:img:{i}"]
        )
        await agent.join("general")
    status, body, _ = await call(server, "GET", "/api/spaces")
    assert status == 200
    assert {"id": "general", "type": "public", "member_count": 3} in body["spaces"]
    status, page, _ = await call(server, "GET", "/api/spaces/general/members?limit=2")
    assert status == 200 and page["members"] == ["agent-0", "agent-1"]
    assert page["member_count"] == 3 and page["next_cursor"]
    status, rest, _ = await call(
        server, "GET", f"/api/spaces/general/members?limit=2&cursor={page['next_cursor']}"
    )
    assert rest["members"] == ["agent-2"] and rest["next_cursor"] is None
    for path, want_status, want_code in [
        ("/api/spaces/nowhere/members", 404, "SPACE_NOT_FOUND"),
        ("/api/spaces/general/members?limit=0", 400, "INVALID_REQUEST"),
        ("/api/spaces/general/members?limit=1001", 400, "INVALID_REQUEST"),
        ("/api/spaces/general/members?limit=two", 400, "INVALID_REQUEST"),
        ("/api/spaces/general/members?cursor=forged", 400, "INVALID_REQUEST"),
        ("/api/agents?capability=" + "x" * 300, 400, "INVALID_REQUEST"),
        ("/api/agents?space=Bad%20Space", 400, "INVALID_REQUEST"),
    ]:
        status, answer, _ = await call(server, "GET", path)
        assert (status, error_code(answer)) == (want_status, want_code), path
    status, listing, _ = await call(server, "GET", "/api/agents?capability=urn:img:1")
    assert [a["id"] for a in listing["agents"]] == ["agent-1"]
    entry = listing["agents"][0]
    assert entry["type"] == "worker" and entry["capabilities"] == ["urn:img:1"]
    assert entry["node"] == server.node.node_id and entry["connected_at"] <= time.time() * 1000
    status, listing, _ = await call(server, "GET", "/api/agents?capability=urn:img:*&limit=2")
    assert [a["id"] for a in listing["agents"]] == ["agent-0", "agent-1"]
    assert listing["next_cursor"]


async def test_nodes_report_their_figures(hub):
    server = await hub(api_key=KEY)
    alice = await member(server, "alice")
    deadline = time.monotonic() + WAIT
    while True:  # the node reports every two seconds
        status, body, _ = await call(server, "GET", "/api/nodes")
        assert status == 200
        (node,) = body["nodes"]
        if node["connections"] == 1:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)
    from hub import __version__

    assert node["id"] == server.node.node_id and node["version"] == __version__
    # alice's space and mcp.calls (MCP is on by default: its agent relays it)
    assert node["spaces"] == 2 and node["backplane_ready"] is True
    for field in ("deliveries_per_s", "messages_in_per_s", "backplane_lag"):
        assert isinstance(node[field], int | float) and node[field] >= 0
    assert "space_rates" not in node
    await alice.close()


# ── disconnecting ───────────────────────────────────────────────────────────


async def test_disconnect_sends_an_error_and_closes_4403(hub, clients):
    server = await hub(api_key=KEY)
    victim = await WsClient.connect(server.url, "victim")
    status, body, _ = await call(
        server, "POST", "/api/agents/victim/disconnect", {"reason": "maintenance"}
    )
    assert status == 200, body
    assert body == {
        "agent": "victim",
        "node": server.node.node_id,
        "connection_id": victim.registered["agent"]["connection_id"],
        "reason": "maintenance",
    }
    code, frames = await victim.closed()
    assert code == 4403
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "DISCONNECTED"
    assert "maintenance" in frames[-1]["message"]
    # The SDK does not come back by itself after an operator's disconnect.
    agent = await clients(server, "sdk-agent", reconnect=True)
    status, _, _ = await call(server, "POST", "/api/agents/sdk-agent/disconnect", data=b"")
    assert status == 200
    await asyncio.wait_for(agent._stopped.wait(), WAIT)
    assert agent.closed_error is not None and agent.closed_error.close_code == 4403
    for path, body, want in [
        ("/api/agents/nobody/disconnect", {}, (404, "AGENT_NOT_FOUND")),
        ("/api/agents/victim/disconnect", {}, (404, "AGENT_NOT_FOUND")),  # already gone
        ("/api/agents/x/disconnect", {"reason": "r" * 201}, (400, "INVALID_REQUEST")),
        ("/api/agents/x/disconnect", {"reason": 5}, (400, "INVALID_REQUEST")),
        ("/api/agents/x/disconnect", {"why": "?"}, (400, "INVALID_REQUEST")),
    ]:
        status, answer, _ = await call(server, "POST", path, body)
        assert (status, error_code(answer)) == want, (path, body)


async def test_the_hubs_own_members_cannot_be_disconnected(hub):
    server = await hub(api_key=KEY)
    bridge = await server.node.host.hosting.attach("bridge-agent", type="bridge")
    status, body, _ = await call(server, "POST", "/api/agents/bridge-agent/disconnect", {})
    assert (status, error_code(body)) == (409, "CONFLICT")
    assert not bridge.closing
    await bridge.aclose()
    # Members every node hosts under one reserved id (the HTTP gateways', the
    # API's own sender) are the hub's own too: never "not connected".
    shared = await server.node.host.hosting.attach("gateway-agent", type="bridge", shared=True)
    for agent in ("gateway-agent", "api"):
        status, body, _ = await call(server, "POST", f"/api/agents/{agent}/disconnect", {})
        assert (status, error_code(body)) == (409, "CONFLICT"), agent
    assert not shared.closing
    await shared.aclose()


# ── the SDK's HubAPI ────────────────────────────────────────────────────────


async def test_hubapi_client(hub):
    server = await hub(api_key=KEY, api_services="ops")
    alice = await member(server, "alice")
    async with HubAPI(server.http_url, KEY) as api:
        published = await api.publish("general", {"text": "hi"}, service="ops")
        assert published.sender == "ops" and published.space == "general"
        assert (await next_event(alice))["seq"] == published.seq
        spaces = {s.id: s for s in await api.spaces()}
        assert spaces["general"].member_count == 1
        assert await api.all_members("general", page_size=1) == ["alice"]
        assert [a.id for a in await api.find_agents(space="general")] == ["alice"]
        with pytest.raises(SpaceNotFound) as err:
            await api.publish("nowhere", {})
        assert err.value.status == 404
        with pytest.raises(InvalidRequest):
            await api.members("general", limit=0)
        result = await api.disconnect("alice", reason="bye")
        assert result["node"] == server.node.node_id
        with pytest.raises(HubRejected) as err:
            await api.disconnect("alice")
        assert err.value.code == "AGENT_NOT_FOUND" and err.value.status == 404
        nodes = await api.nodes()
        assert [n.id for n in nodes] == [server.node.node_id]
    async with HubAPI(server.http_url, "not-the-key-0000000") as api:
        with pytest.raises(HubRejected) as err:
            await api.spaces()
        assert err.value.code == "UNAUTHENTICATED" and err.value.status == 401
        assert not isinstance(err.value, Unauthorized | RateLimited)
    async with HubAPI(f"http://127.0.0.1:{free_port()}", KEY, timeout=2) as api:
        with pytest.raises(ConnectionFailed):
            await api.spaces()
    with pytest.raises(ValueError):
        HubAPI("ws://127.0.0.1:1/ws", KEY)


async def test_http_requests_are_counted_and_timed_by_route(hub):
    server = await hub(api_key=KEY)
    await call(server, "GET", "/api/spaces")
    await call(server, "GET", "/api/spaces", key="wrong")
    await call(server, "GET", "/no/such/path")
    async with aiohttp.ClientSession() as http:
        async with http.get(server.http_url + "/metrics") as r:
            text = await r.text()
    assert (
        'agora_hub_http_requests_total{method="GET",route="/api/spaces",status="200"} 1.0' in text
    )
    assert (
        'agora_hub_http_requests_total{method="GET",route="/api/spaces",status="401"} 1.0' in text
    )
    assert 'route="unmatched",status="404"' in text
    assert 'agora_hub_http_request_duration_seconds_count{route="/api/spaces"} 2.0' in text
