"""/mcp against hostile input and at each of its bounds: a clear error, never a
5xx or a traceback, and the hub keeps serving."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from adapters.mcp import McpOptions, McpServer
from tests.support.mcphttp import META, McpHttp, next_sse, text_of
from tests.support.wsclient import WsClient


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def bounded(hub: Any, spaces: tuple[str, ...] = (), **options: Any) -> tuple[Any, McpServer]:
    """A hub whose MCP server has ``options``; its one test client may take
    every slot of a bound (``caller_share = 1``: the shares are
    test_authz_isolation's)."""
    adapter = McpServer(spaces, options=McpOptions(**options))
    declared = [{"id": s, "mcp": True} for s in spaces]
    server = await hub(adapters=[adapter], spaces=declared, stream_threshold=1024, caller_share=1)
    return server, adapter


async def still_serving(mcp: McpHttp) -> None:
    assert "spaces_list" in await mcp.tools()


MALFORMED = [
    (b"", 400, -32700),
    (b"{", 400, -32700),
    (b"\xff\x00garbage", 400, -32700),
    (b"[" * 5000, 400, -32600),  # too deep to read: the nesting bound says so
    (b"[]", 400, -32600),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', 400, -32600),
    (b"42", 400, -32600),
    (b'{"jsonrpc":"2.0","id":1}', 400, -32600),
    (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', 400, -32600),
    (b'{"jsonrpc":"2.0","id":1,"method":"nope/nope"}', 200, -32601),
    (b'{"jsonrpc":"2.0","id":1,"method":"prompts/list"}', 200, -32601),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}', 200, -32602),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}', 200, -32602),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}', 200, -32602),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"spaces_list","arguments":[1]}}',
        200,
        -32602,
    ),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"no.such.tool","arguments":{}}}',
        200,
        -32602,
    ),
    (b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":[]}', 200, -32602),
    (b'{"jsonrpc":"2.0","id":1,"method":"resources/read"}', 200, -32002),
    (b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":{}}}', 200, -32002),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"agora://spaces/"}}',
        200,
        -32002,
    ),
    (b'{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":[1]}}', 200, -32002),
]


async def test_malformed_json_rpc_gets_json_rpc_errors(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    for body, status, code in MALFORMED:
        reply = await mcp.post(body)
        assert (reply.status, reply.error["code"]) == (status, code), body
    await still_serving(mcp)


async def test_the_stateless_revision_answers_with_its_statuses(hub, http):
    server = await hub()
    modern = McpHttp(http, server.http_url, modern=True)
    assert (await modern.rpc("nope")).status == 404
    assert (await modern.rpc("ping")).status == 404  # no ping in 2026-07-28
    mismatch = await modern.rpc("tools/list", **{"Mcp-Method": "tools/call"})
    assert (mismatch.status, mismatch.error["code"]) == (400, -32020)
    unknown = await modern.rpc("tools/call", {"name": "x.y"})
    assert (unknown.status, unknown.error["code"]) == (400, -32602)
    discover = await modern.rpc("server/discover")
    assert discover.result["supportedVersions"] == ["2026-07-28"]
    # A discover probe that is not a valid stateless request still gets an
    # answer at once, with the stateless revision's status: a client falls
    # back to the handshake on a JSON-RPC error or a 4xx alike.
    legacy = McpHttp(http, server.http_url)
    probe = await legacy.rpc("server/discover")
    assert probe.status == 400 and probe.error["code"] == -32602  # no params._meta
    future = "2027-01-01"
    meta = {**META, "io.modelcontextprotocol/protocolVersion": future}
    headers = {"MCP-Protocol-Version": future, "Mcp-Method": "server/discover"}
    newer = await legacy.rpc("server/discover", {"_meta": meta}, **headers)
    assert (newer.status, newer.error["code"]) == (400, -32022)
    assert newer.error["data"]["requested"] == future
    assert "2026-07-28" in newer.error["data"]["supported"]


async def test_wrong_argument_types_are_tool_errors(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    for name, arguments in [
        ("space_publish", {"space": 42, "text": "x"}),
        ("space_history", {"space": "lab", "limit": "all"}),
        ("space_ask", {"space": "lab", "text": ["x"]}),
        ("agents_list", {"capability": {}}),
        ("spaces_list", {"unexpected": True}),
    ]:
        result = await mcp.call(name, arguments)
        assert result["isError"] is True and text_of(result)
    await still_serving(mcp)


async def test_a_20_mb_body_is_refused_and_the_hub_keeps_serving(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    raw = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"x" * 20_000_000 + b'"}}'
    refused = await mcp.post(raw)  # refused from its Content-Length
    assert refused.status == 413 and "exceeds" in refused.error["message"]

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 1 << 20):
            yield raw[start : start + (1 << 20)]

    headers = {"Content-Type": "application/json"}
    async with http.post(mcp.url, data=chunks(), headers=headers) as resp:  # no Content-Length
        assert resp.status == 413
    await still_serving(mcp)


@pytest.mark.parametrize("depth", [63, 65, 300, 2000])
async def test_deep_json_is_a_clear_400_at_every_depth(hub, http, depth):
    """Arguments nested past what an event may carry (64 levels, as frames)
    are refused before anything is published, never a 5xx."""
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    nested = "[" * depth + "]" * depth
    raw = (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"space_publish",'
        b'"arguments":{"space":"lab","data":{"x":' + nested.encode() + b"}}}}"
    )
    answer = await mcp.post(raw)
    if depth + 6 > 64:  # the body itself: params, arguments, data, x …
        assert answer.status == 400 and "nested deeper than 64" in answer.error["message"]
    else:
        assert answer.status < 500
    await still_serving(mcp)


async def test_session_errors(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    async with http.get(mcp.url) as resp:
        assert resp.status == 405 and "POST" in resp.headers["Allow"]
    async with http.delete(mcp.url) as resp:
        assert resp.status == 400
    mcp.session_id = "no-such-session"
    assert (await mcp.rpc("tools/list")).status == 404
    async with http.get(mcp.url, headers=mcp.headers()) as resp:
        assert resp.status == 404
    note = await mcp.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status == 404
    await mcp.initialize()
    odd = await mcp.rpc("tools/list", **{"MCP-Protocol-Version": "1999-01-01"})
    assert odd.status == 400
    reply = await mcp.post({"jsonrpc": "2.0", "id": 5, "result": {}})  # a client's response
    assert reply.status == 202


async def test_a_fuzz_of_bodies_never_gets_a_5xx(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    rng = random.Random(23)
    pieces: list[Any] = [None, 1, -1.5, "", "x", [], {}, True, "tools/call", "spaces_list"]
    for _ in range(150):
        msg: dict[str, Any] = {}
        for key in ("jsonrpc", "id", "method", "params", "result", "error"):
            if rng.random() < 0.6:
                msg[key] = rng.choice([*pieces, "2.0"])
        if rng.random() < 0.5:
            msg["params"] = {
                "name": rng.choice(pieces),
                "arguments": rng.choice([*pieces, {"space": rng.choice(pieces)}]),
            }
        body = orjson.dumps(msg)
        if rng.random() < 0.2:
            body = body[: rng.randrange(len(body) + 1)]
        reply = await mcp.post(body)
        assert reply.status < 500, (body, reply)
    await still_serving(mcp)


async def test_calls_over_the_bridge_rate_limit_are_tool_errors(hub, http):
    """All MCP calls of a node publish through its one ``mcp`` member: over
    ``bridge_rate_limit`` a call is a tool error, and nothing is published."""
    server = await hub(bridge_rate_limit=0.1, bridge_rate_burst=3)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url)
    results = [await mcp.call("space_publish", {"space": "lab", "text": f"n{n}"}) for n in range(5)]
    refused = [r for r in results if r["isError"]]
    assert refused and not results[0]["isError"], results
    assert all("too many MCP calls" in text_of(r) for r in refused)
    for _ in range(len(results) - len(refused)):
        await bob.wait_for("space.event", space="lab")
    marker = await bob.request({"type": "space.publish", "space": "lab", "data": {"n": "end"}})
    assert marker["type"] == "space.event"
    assert not [m for m in bob.backlog if m.get("from") == "mcp"]  # the refused: never published
    await bob.close()
    await still_serving(mcp)


async def test_calls_beyond_max_calls_are_refused_503(hub, http):
    server, _ = await bounded(hub, max_calls=1)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url)
    waiting = asyncio.ensure_future(mcp.call("space_ask", {"space": "lab", "text": "hold"}))
    request = await bob.wait_for("space.event", space="lab", **{"from": "mcp"})
    busy = await mcp.rpc("tools/call", {"name": "spaces_list", "arguments": {}})
    assert busy.status == 503 and busy.headers["Retry-After"] == "1"
    assert busy.error["code"] == -32000
    assert (await mcp.rpc("tools/list")).status == 200  # only calls take a slot
    await bob.send({
        "type": "space.publish", "space": "lab",
        "data": {"in_reply_to": request["event_id"], "text": "done"},
    })  # fmt: skip
    assert (await waiting)["structuredContent"]["reply"]["data"]["text"] == "done"
    assert not (await mcp.call("spaces_list"))["isError"]
    await bob.close()


async def test_sessions_beyond_max_sessions_are_refused_503(hub, http):
    server, _ = await bounded(hub, max_sessions=2)
    first, second, third = (McpHttp(http, server.http_url) for _ in range(3))
    await first.initialize()
    await second.initialize()
    refused = await third.rpc("initialize", {"protocolVersion": "2025-11-25"})
    assert refused.status == 503
    assert await first.delete() == 200
    await third.initialize()


async def test_streams_beyond_max_streams_are_refused_503(hub, http):
    server, _ = await bounded(hub, max_streams=1)
    mcp = McpHttp(http, server.http_url)
    await mcp.initialize()
    async with http.get(mcp.url, headers=mcp.headers()) as held:
        assert held.status == 200
        async with http.get(mcp.url, headers=mcp.headers()) as refused:
            assert refused.status == 503


async def test_a_streamed_reply_beyond_max_answer_bytes_is_a_tool_error(hub, http):
    server, _ = await bounded(hub, max_answer_bytes=4000)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url)
    asking = asyncio.ensure_future(mcp.call("space_ask", {"space": "lab", "text": "big?"}))
    request = await bob.wait_for("space.event", space="lab", **{"from": "mcp"})
    await bob.send({
        "type": "space.publish", "space": "lab",
        "data": {"in_reply_to": request["event_id"], "text": "y" * 10_000},
    })  # fmt: skip
    result = await asking
    assert result["isError"] and "larger than 4000 bytes" in text_of(result)
    await bob.close()


async def test_waits_are_bounded_by_max_wait(hub, http):
    server, _ = await bounded(hub, max_wait=2.0)
    mcp = McpHttp(http, server.http_url)
    schema = (await mcp.tools())["space_ask"]["inputSchema"]["properties"]["timeout"]
    assert schema["maximum"] == 2.0
    result = await mcp.call("space_ask", {"space": "lab", "text": "q", "timeout": 3})
    assert result["isError"] and "at most 2" in text_of(result)


async def test_lists_are_bounded_by_max_listed(hub, http):
    server, _ = await bounded(hub, max_listed=1)
    mcp = McpHttp(http, server.http_url)
    assert len((await mcp.call("spaces_list"))["structuredContent"]["spaces"]) == 1


async def test_the_mcp_agent_stays_in_at_most_max_joined_spaces(hub, http):
    server, adapter = await bounded(hub, ("tools",), max_joined_spaces=2)
    members = []
    for space in ("s1", "s2", "s3"):
        member = await WsClient.connect(server.url, f"in-{space}")
        await member.join(space)
        members.append(member)
    mcp = McpHttp(http, server.http_url)
    for space in ("s1", "s2", "s3"):
        assert not (await mcp.call("space_publish", {"space": space, "text": "x"}))["isError"]
    assert adapter.agent.member is not None
    # "tools" (mcp = true) and mcp.calls stay; of the others the two most recently used.
    assert set(adapter.agent.member.session.spaces) == {"tools", "mcp.calls", "s2", "s3"}
    assert not (await mcp.call("space_publish", {"space": "s1", "text": "again"}))["isError"]
    assert set(adapter.agent.member.session.spaces) == {"tools", "mcp.calls", "s3", "s1"}
    for member in members:
        await member.close()


async def test_an_oversized_event_is_a_tool_error(hub, http):
    server = await hub(max_frame_bytes=16_384)
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    mcp = McpHttp(http, server.http_url)
    result = await mcp.call("space_publish", {"space": "lab", "text": "z" * 20_000})
    assert result["isError"] and "too large" in text_of(result)
    await bob.close()


async def test_agents_list_answers_within_about_max_frame_bytes(hub, http):
    server = await hub(max_frame_bytes=16_384)
    agents = []
    for n in range(3):
        agent = await WsClient.connect(server.url, f"big{n}")
        metadata = {"notes": "m" * 7000}
        await agent.request(
            {"type": "agent.register", "agent": {"id": f"big{n}", "metadata": metadata}}
        )
        agents.append(agent)
    mcp = McpHttp(http, server.http_url)
    listed = (await mcp.call("agents_list"))["structuredContent"]
    assert len(listed["agents"]) == 2 and listed["more"] is True
    for agent in agents:
        await agent.close()


async def test_hostile_notifications_and_listen_filters_are_harmless(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url, agent_id="alice")
    await mcp.initialize()
    hostile_ids: list[Any] = [None, [1], True, "x" * 10_000, {"a": 1}]
    for params in [{}, *({"requestId": i} for i in hostile_ids)]:
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        assert (await mcp.post(note)).status == 202
    long_uri = "agora://spaces/" + "a" * 600
    filters: list[Any] = [
        [],
        {"resourceSubscriptions": "agora://spaces/x"},
        {"resourceSubscriptions": [7, None, long_uri, "agora://spaces/nowhere"]},
    ]
    headers = {
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    for wanted in filters:
        params = {"notifications": wanted, "_meta": META}
        body = {"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": params}
        async with http.post(mcp.url, json=body, headers=headers) as resp:
            assert resp.status == 200
            ack = await next_sse(resp.content)
        assert ack["params"]["notifications"] == {}
    await still_serving(mcp)
