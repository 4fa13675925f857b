"""Who calls /mcp: bearer tokens (tokens file, JWT) with their claims, sessions
bound to their caller, and made-up ids with auth off."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import jwt
import orjson
import pytest

from tests.support.mcphttp import McpHttp, text_of
from tests.support.wsclient import WsClient

SECRET = "s" * 32


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def tokens(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_bytes(
        orjson.dumps(
            {
                "alice": "alice-token",
                "reader": {"token": "reader-token", "join": ["news", "lab"], "publish": ["news"]},
                "bob": "bob-token",
                "weather": {"token": "weather-token", "join": ["tools"]},
            }
        )
    )
    return str(path)


async def test_without_a_valid_token_the_caller_is_refused(hub, http, tokens):
    server = await hub(auth_mode="tokens", auth_tokens_file=tokens)
    for token in (None, "wrong"):
        mcp = McpHttp(http, server.http_url, token=token)
        reply = await mcp.rpc("tools/list")
        assert reply.status == 401 and reply.headers["WWW-Authenticate"].startswith("Bearer")
        assert reply.error["code"] == -32001
        async with http.get(mcp.url, headers=mcp.headers()) as resp:
            assert resp.status == 401
        assert await mcp.delete() == 401
    # ?agent_id= names nobody when auth is on.
    assert (await McpHttp(http, server.http_url, agent_id="alice").rpc("ping")).status == 401


async def test_the_token_names_the_caller_and_its_claims_apply(hub, http, tokens):
    server = await hub(auth_mode="tokens", auth_tokens_file=tokens)
    bob = await WsClient.connect(server.url, "bob", token="bob-token")
    for space in ("lab", "news", "secret"):
        await bob.join(space)
    reader = McpHttp(http, server.http_url, token="reader-token")
    await reader.initialize()
    spaces = {s["id"] for s in (await reader.call("spaces_list"))["structuredContent"]["spaces"]}
    assert {"lab", "news"} <= spaces and "secret" not in spaces
    denied = await reader.call("space_history", {"space": "secret"})
    assert denied["isError"] and "may not read" in text_of(denied)
    assert not (await reader.call("space_history", {"space": "lab"}))["isError"]
    no_publish = await reader.call("space_publish", {"space": "lab", "text": "x"})
    assert no_publish["isError"] and "may not publish" in text_of(no_publish)
    no_ask = await reader.call("space_ask", {"space": "lab", "text": "x"})
    assert no_ask["isError"] and "may not publish" in text_of(no_ask)
    hidden = await reader.call("agents_list", {"space": "secret"})
    assert hidden["isError"]
    ok = await reader.call("space_publish", {"space": "news", "text": "headline"})
    assert not ok["isError"]
    event = await bob.wait_for("space.event", space="news", **{"from": "mcp"})
    assert event["data"]["caller"] == "reader"
    await bob.close()


async def test_a_session_belongs_to_its_caller(hub, http, tokens):
    server = await hub(auth_mode="tokens", auth_tokens_file=tokens)
    alice = McpHttp(http, server.http_url, token="alice-token")
    await alice.initialize()
    thief = McpHttp(http, server.http_url, token="bob-token")
    thief.session_id, thief.revision = alice.session_id, alice.revision
    assert (await thief.rpc("tools/list")).status == 404
    assert await thief.delete() == 404
    assert (await alice.rpc("tools/list")).status == 200
    assert await alice.delete() == 200
    gone = await alice.rpc("tools/list")
    assert gone.status == 404
    assert gone.body["id"] is not None  # the answer names the request it refuses
    assert await alice.delete() == 404


async def test_agent_tools_are_listed_only_where_the_caller_may_publish(hub, http, tokens):
    server = await hub(
        auth_mode="tokens", auth_tokens_file=tokens, spaces=[{"id": "tools", "mcp": True}]
    )
    weather = await WsClient.connect(server.url, "weather", token="weather-token")
    await weather.request(
        {"type": "agent.register", "agent": {"id": "weather", "metadata": {"mcp_tools": [
            {"name": "forecast"}]}}}
    )  # fmt: skip
    await weather.join("tools")
    alice = McpHttp(http, server.http_url, token="alice-token")
    reader = McpHttp(http, server.http_url, token="reader-token")
    assert "weather.forecast" in await alice.tools()
    assert "weather.forecast" not in await reader.tools()
    refused = await reader.rpc("tools/call", {"name": "weather.forecast", "arguments": {}})
    assert refused.error["code"] == -32602
    await weather.close()


async def test_mcp_calls_observers_need_the_join_claim(hub, http, tokens):
    server = await hub(auth_mode="tokens", auth_tokens_file=tokens)
    reader = await WsClient.connect(server.url, "reader", token="reader-token")
    refused = await reader.request({"type": "space.join", "space": "mcp.calls"})
    assert refused["code"] == "UNAUTHORIZED"
    alice = await WsClient.connect(server.url, "alice", token="alice-token")
    await alice.join("mcp.calls")
    await McpHttp(http, server.http_url, token="bob-token").call("spaces_list")
    told = await alice.wait_for("space.event", space="mcp.calls")
    assert told["data"]["caller"] == "bob"
    await reader.close()
    await alice.close()


async def test_jwt_callers(hub, http):
    server = await hub(auth_mode="jwt", jwt_secret=SECRET)
    claims = {"sub": "carol", "exp": int(time.time()) + 60, "publish": ["nothing-*"]}
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    bob = await WsClient.connect(
        server.url, "bob", token=jwt.encode({"sub": "bob", "exp": int(time.time()) + 60}, SECRET)
    )
    await bob.join("lab")
    carol = McpHttp(http, server.http_url, token=token)
    await carol.initialize()
    refused = await carol.call("space_publish", {"space": "lab", "text": "x"})
    assert refused["isError"] and "may not publish" in text_of(refused)
    expired = jwt.encode({"sub": "carol", "exp": int(time.time()) - 600}, SECRET)
    assert (await McpHttp(http, server.http_url, token=expired).rpc("ping")).status == 401
    await bob.close()


async def test_with_auth_off_the_caller_is_named_or_made_up(hub, http):
    server = await hub()
    bob = await WsClient.connect(server.url, "bob")
    await bob.join("lab")
    named = McpHttp(http, server.http_url, agent_id="dora")
    await named.call("space_publish", {"space": "lab", "text": "1"})
    assert (await bob.wait_for("space.event", space="lab"))["data"]["caller"] == "dora"
    anonymous = McpHttp(http, server.http_url)
    await anonymous.initialize()
    await anonymous.call("space_publish", {"space": "lab", "text": "2"})
    await anonymous.call("space_publish", {"space": "lab", "text": "3"})
    second = (await bob.wait_for("space.event", space="lab"))["data"]["caller"]
    third = (await bob.wait_for("space.event", space="lab"))["data"]["caller"]
    assert second.startswith("mcp-") and second == third  # the session keeps its caller
    bad = McpHttp(http, server.http_url, agent_id="not%20valid")
    await bad.call("space_publish", {"space": "lab", "text": "4"})
    assert (await bob.wait_for("space.event", space="lab"))["data"]["caller"].startswith("mcp-")
    # The hub's own agent is nobody's to act as, here as on a WebSocket.
    reserved = await McpHttp(http, server.http_url, agent_id="mcp").rpc("tools/list")
    assert reserved.status == 409 and "hub's own" in reserved.error["message"]
    await bob.close()


async def test_browser_origins_are_checked_when_allowed_origins_is_set(hub, http):
    server = await hub(allowed_origins="https://ok.example")
    mcp = McpHttp(http, server.http_url)
    assert (await mcp.rpc("ping", Origin="https://evil.example")).status == 403
    assert (await mcp.rpc("ping", Origin="https://ok.example")).status == 200
    assert (await mcp.rpc("ping")).status == 200  # not a browser
