"""Isolation between spaces and faces (contract §18), one regression test per
defect the outside matrix run found (issue 39), each failing on the code
before the fix:

1. a reply resolves a wait only from the request's space and from an
   addressee — MCP ``space_ask`` and agent tools, A2A tasks, HTTP Agora;
2. ``mcp.calls`` shows a call only to observers who may join its space;
3. under auth every face authenticates, envelopes need a mapped signer,
   discovery shows only what the caller may join, and a refusal looks like
   an absence;
4. ``/mcp`` refuses a browser ``Origin`` from elsewhere (DNS rebinding);
5. one caller cannot take every slot of a shared per-node bound;
6. an A2A task that cannot be stored is refused, not acknowledged.

The hub: tokens-file auth; ``open`` (anyone), ``secret`` (``allow_join``:
carol, keeper, other, reader), both served by the A2A, HTTP Agora and MCP
gateways. mallory is an outsider kept out of ``secret`` by its rules;
reader may join ``secret`` but publish only to ``open``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from adapters.agora_http import AgoraHttpInbound
from adapters.agora_http import InboundOptions as AgoraOptions
from adapters.mcp import McpOptions, McpServer
from protocol.identity import did_key
from tests.support import a2a_http as a2a
from tests.support.envelopes import ALICE, BOB, agora_env
from tests.support.mcphttp import McpHttp, text_of
from tests.support.wsclient import WsClient

TOKENS = {
    "carol": "carol-token",
    "keeper": "keeper-token",
    "other": "other-token",
    "mallory": "mallory-token",
    "reader": {"token": "reader-token", "publish": ["open"]},
    # Kept to two spaces by its own claims.
    "scoped": {"token": "scoped-token", "join": ["open", "mcp.calls"]},
}
RULED = {"allow_join": ["carol", "keeper", "other", "reader"]}
SPACES = [
    {"id": "open", "a2a": True, "agora_http": True, "mcp": True},
    {"id": "secret", "a2a": True, "agora_http": True, "mcp": True, **RULED},
]


def bearer(agent: str) -> dict[str, str]:
    entry = TOKENS[agent]
    token = entry if isinstance(entry, str) else entry["token"]
    return {"Authorization": f"Bearer {token}"}


def token_of(agent: str) -> str:
    return bearer(agent)["Authorization"].removeprefix("Bearer ")


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
def authed(tmp_path) -> dict[str, Any]:
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps(TOKENS))
    return {"auth_mode": "tokens", "auth_tokens_file": str(path), "spaces": SPACES}


async def agent(server: Any, name: str, *spaces: str, tools: list[str] = ()) -> WsClient:
    client = await WsClient.connect(server.url, name, token=token_of(name), heartbeat=True)
    if tools:
        meta = {"mcp_tools": [{"name": t} for t in tools]}
        register = {"type": "agent.register", "agent": {"id": name, "metadata": meta}}
        assert (await client.request(register))["type"] == "agent.registered"
    for space in spaces:
        await client.join(space)
    return client


async def publish(client: WsClient, space: str, data: dict[str, Any], to: Any = None) -> None:
    msg: dict[str, Any] = {"type": "space.publish", "space": space, "data": data}
    if to is not None:
        msg["to"] = to
    reply = await client.request(msg)
    assert reply["type"] in ("space.event", "space.published"), reply


async def forge(
    mallory: WsClient, other: WsClient, request: dict[str, Any], gateway: str, text: str
) -> None:
    """Everything but the genuine answer: the request's event id (as if
    predicted) answered from another space by mallory, and from its own space
    by a member it was not addressed to."""
    answered = {"in_reply_to": request["event_id"], "text": f"FORGED {text}"}
    await publish(mallory, "open", answered, to=[gateway])
    await publish(other, "secret", {**answered, "text": "NOT ADDRESSED"}, to=[gateway])


# ── 1. forged answers ─────────────────────────────────────────────────────────


async def test_an_mcp_ask_is_answered_only_from_its_space_by_its_addressee(hub, http, authed):
    server = await hub(**authed)
    keeper = await agent(server, "keeper", "secret")
    other = await agent(server, "other", "secret")
    mallory = await agent(server, "mallory", "open")
    # mallory pulls the mcp agent into a space she is in.
    pulled = McpHttp(http, server.http_url, token=token_of("mallory"))
    assert not (await pulled.call("space_publish", {"space": "open", "text": "hi"}))["isError"]
    carol = McpHttp(http, server.http_url, token=token_of("carol"))
    args = {"space": "secret", "text": "the code?", "to": "keeper", "timeout": 20}
    ask = asyncio.ensure_future(carol.call("space_ask", args))
    request = await keeper.wait_for("space.event", space="secret")
    await forge(mallory, other, request, "mcp", "ask")
    await publish(keeper, "secret", {"in_reply_to": request["event_id"], "text": "genuine"}, "mcp")
    result = await ask
    assert not result["isError"], result
    reply = result["structuredContent"]["reply"]
    assert reply["from"] == "keeper" and reply["data"]["text"] == "genuine"


async def test_an_agent_tool_is_answered_only_by_its_agent_in_its_space(hub, http, authed):
    server = await hub(**authed)
    keeper = await agent(server, "keeper", "secret", tools=["vault"])
    other = await agent(server, "other", "secret")
    mallory = await agent(server, "mallory", "open")
    pulled = McpHttp(http, server.http_url, token=token_of("mallory"))
    await pulled.call("space_publish", {"space": "open", "text": "hi"})
    carol = McpHttp(http, server.http_url, token=token_of("carol"))
    call = asyncio.ensure_future(carol.call("keeper.vault", {"what": "code"}))
    request = await keeper.wait_for("space.event", space="secret")
    await forge(mallory, other, request, "mcp", "tool")
    await publish(keeper, "secret", {"in_reply_to": request["event_id"], "text": "genuine"}, "mcp")
    result = await call
    assert not result["isError"] and text_of(result) == "genuine", result


async def test_an_a2a_task_is_answered_only_by_its_agent_in_its_space(hub, authed):
    server = await hub(**authed)
    keeper = await agent(server, "keeper", "secret")
    other = await agent(server, "other", "secret")
    mallory = await agent(server, "mallory", "open")
    url = f"{server.http_url}/a2a/secret/keeper"
    params = {"message": a2a.message("the code?")}
    send = asyncio.ensure_future(a2a.call(url, "SendMessage", params, headers=bearer("carol")))
    request = await keeper.wait_for("space.event", space="secret")
    await forge(mallory, other, request, "a2a", "task")
    await publish(keeper, "secret", {"in_reply_to": request["event_id"], "text": "genuine"}, "a2a")
    task = (await send)["result"]["task"]
    assert a2a.state(task) == "TASK_STATE_COMPLETED", task
    assert task["artifacts"][0]["parts"] == [{"text": "genuine"}]


async def test_an_agora_request_is_answered_only_from_its_space(hub, authed):
    server = await hub(**authed)
    keeper = await agent(server, "keeper", "secret")
    mallory = await agent(server, "mallory", "open")
    url = f"{server.http_url}/agora/secret"

    async def ask() -> dict[str, Any]:
        body = {"body": "the code?", "protocolHash": None}
        async with (
            aiohttp.ClientSession() as h,
            h.post(url, json=body, headers=bearer("carol")) as r,
        ):
            assert r.status == 200
            return await r.json()

    asked = asyncio.ensure_future(ask())
    request = await keeper.wait_for("space.event", space="secret")
    forged = {"in_reply_to": request["event_id"], "body": "FORGED"}
    await publish(mallory, "open", forged, to=["agora-http"])
    await publish(keeper, "secret", {"in_reply_to": request["event_id"], "body": "genuine"})
    assert await asked == {"status": "success", "body": "genuine"}


# ── 2. mcp.calls ──────────────────────────────────────────────────────────────


async def test_mcp_calls_shows_a_call_only_to_who_may_join_its_space(hub, http, authed):
    server = await hub(**authed)
    keeper = await agent(server, "keeper", "secret", tools=["vault"])
    mallory = await agent(server, "mallory", "mcp.calls")
    other = await agent(server, "other", "mcp.calls")
    carol = McpHttp(http, server.http_url, token=token_of("carol"))
    secret_calls = [
        ("space_publish", {"space": "secret", "text": "launch code 0000"}),
        ("space_ask", {"space": "secret", "text": "launch code?", "timeout": 0.2}),
        ("space_history", {"space": "secret"}),
        ("agents_list", {"space": "secret"}),
        # Refused (space must be a string), yet their arguments name secret.
        ("space_publish", {"space": ["secret"], "text": "launch code 1111"}),
        ("space_ask", {"space": {"id": "secret"}, "text": "launch code?"}),
        ("keeper.vault", {"what": "launch code"}),
    ]
    for name, arguments in secret_calls:
        if name == "keeper.vault":
            call = asyncio.ensure_future(carol.call(name, arguments))
            request = await keeper.wait_for("space.event", space="secret", to=["keeper"])
            answer = {"in_reply_to": request["event_id"], "text": "x"}
            await publish(keeper, "secret", answer, "mcp")
            assert not (await call)["isError"]
        else:
            await carol.call(name, arguments)
    await carol.call("space_publish", {"space": "open", "text": "hello all"})
    seen: list[dict[str, Any]] = []
    while not any(e["data"].get("arguments", {}).get("text") == "hello all" for e in seen):
        seen.append(await mallory.wait_for("space.event", space="mcp.calls"))
    for event in seen:
        assert "secret" not in orjson.dumps(event).decode(), event
        assert event["data"]["tool"] != "keeper.vault"
    # One who may join secret sees every call, in order.
    told = [await other.wait_for("space.event", space="mcp.calls") for _ in range(16)]
    calls = [e["data"]["tool"] for e in told if e["data"]["event"] == "call"]
    assert calls == [name for name, _ in secret_calls] + ["space_publish"]


async def test_mcp_calls_without_a_space_are_not_shown_to_an_observer_kept_to_some(
    hub, http, authed
):
    """A discovery call names no space: an observer whose claims keep it to
    some spaces does not see another caller's (its filter, that it asked),
    one whose credentials do not limit its spaces does."""
    server = await hub(**authed)
    scoped = await agent(server, "scoped", "mcp.calls")
    other = await agent(server, "other", "mcp.calls")
    carol = McpHttp(http, server.http_url, token=token_of("carol"))
    await carol.call("agents_list", {"capability": "payroll"})
    await carol.call("space_publish", {"space": "open", "text": "hello all"})
    calls = [await other.wait_for("space.event", space="mcp.calls") for _ in range(4)]
    assert [(e["data"]["event"], e["data"]["tool"]) for e in calls] == [
        ("call", "agents_list"), ("result", "agents_list"),
        ("call", "space_publish"), ("result", "space_publish"),
    ]  # fmt: skip
    shown = [await scoped.wait_for("space.event", space="mcp.calls") for _ in range(2)]
    assert [e["data"]["tool"] for e in shown] == ["space_publish", "space_publish"]
    assert "payroll" not in orjson.dumps(shown).decode()


# ── 3. every face authenticates; discovery; no existence oracle ───────────────


async def status_of(method: str, url: str, **kwargs: Any) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as h, h.request(method, url, **kwargs) as resp:
        return resp.status, await resp.read()


async def test_under_auth_every_http_face_wants_a_bearer_token(hub, authed):
    server = await hub(**authed)
    base = server.http_url
    agora = {"json": {"body": "x", "protocolHash": None}}
    for method, path, body in (
        ("POST", "/agora/open", agora),
        ("GET", "/agora/open/wellknown", {}),
        ("GET", "/a2a/open/.well-known/agent-card.json", {}),
        ("POST", "/envelope/open", {"json": agora_env("STATUS", {"status": "x1"}, ALICE)}),
        ("POST", "/mcp", {"json": {"jsonrpc": "2.0", "id": 1, "method": "ping"}}),
    ):
        status, answer = await status_of(method, base + path, **body)
        assert status == 401, (path, status, answer)
        status, answer = await status_of(
            method, base + path, headers={"Authorization": "Bearer wrong"}, **body
        )
        assert status == 401, (path, status, answer)


async def test_an_envelope_needs_a_signer_mapped_to_an_identity_that_may_publish(hub, authed):
    alice = did_key(ALICE.verify_key.encode())
    signers = [{"did": alice, "agent_id": "keeper"}]
    spaces = [*SPACES, {"id": "drop", "envelope_public": True}]
    server = await hub(**{**authed, "spaces": spaces}, signers=signers)
    keeper = await agent(server, "keeper", "secret", "drop")
    base = f"{server.http_url}/envelope"
    # keeper's bearer token, but a self-made key nobody mapped: refused, nothing delivered.
    status, refused = await status_of(
        "POST",
        f"{base}/secret",
        json=agora_env("STATUS", {"status": "x1"}, BOB),
        headers=bearer("keeper"),
    )
    assert status == 401 and b"signer" in refused
    # The mapped signer, as the identity it is mapped to: delivered.
    mapped = agora_env("STATUS", {"status": "x2"}, ALICE)
    status, _ = await status_of("POST", f"{base}/secret", json=mapped, headers=bearer("carol"))
    assert status == 202
    event = await keeper.wait_for("space.event", space="secret")
    assert event["verified"] is True and event["data"]["payload"] == {"status": "x2"}
    # A space declared envelope_public takes any valid signer.
    status, _ = await status_of(
        "POST",
        f"{base}/drop",
        json=agora_env("STATUS", {"status": "x3"}, BOB),
        headers=bearer("carol"),
    )
    assert status == 202
    assert (await keeper.wait_for("space.event", space="drop"))["data"]["payload"] == {
        "status": "x3"
    }


async def test_discovery_shows_only_what_the_caller_may_join(hub, http, authed):
    server = await hub(**authed)
    await agent(server, "keeper", "secret", tools=["vault"])
    mallory = await agent(server, "mallory", "open")
    listed = await mallory.request({"type": "agent.list"})
    assert "keeper" not in {a["id"] for a in listed["agents"]}, listed
    mcp = McpHttp(http, server.http_url, token=token_of("mallory"))
    agents = (await mcp.call("agents_list"))["structuredContent"]["agents"]
    assert "keeper" not in {a["id"] for a in agents}
    # The HELLO of an outsider: as if the space did not exist.
    hello = agora_env("HELLO", {"name": "x"}, ALICE)
    secret = await status_of("POST", f"{server.http_url}/envelope/secret", json=hello,
                             headers=bearer("mallory"))  # fmt: skip
    assert secret[0] == 404 and b"keeper" not in secret[1]
    # Reader may join secret: its card lists keeper's tool-less skills, the outsider's is absent.
    card = "/.well-known/agent-card.json"
    assert (await status_of("GET", f"{server.http_url}/a2a/secret{card}",
                            headers=bearer("reader")))[0] == 200  # fmt: skip


async def test_a_refusal_looks_like_an_absence(hub, authed):
    server = await hub(**authed)
    await agent(server, "keeper", "secret")
    base = server.http_url
    card = "/.well-known/agent-card.json"
    for refused, absent in (
        (f"/a2a/secret/keeper{card}", f"/a2a/secret/nobody{card}"),
        (f"/a2a/secret{card}", f"/a2a/missing{card}"),
        ("/agora/secret/wellknown", "/agora/missing/wellknown"),
        ("/agora/secret", "/agora/missing"),  # GET: 405 would say "it exists"
    ):
        got = await status_of("GET", base + refused, headers=bearer("mallory"))
        expected = await status_of("GET", base + absent, headers=bearer("mallory"))
        assert got[0] == expected[0] == 404, (refused, got, expected)
        assert _named(got[1], refused) == _named(expected[1], absent), (got, expected)
    envelope = agora_env("STATUS", {"status": "x"}, ALICE)
    got = await status_of("POST", f"{base}/envelope/secret", json=envelope,
                          headers=bearer("mallory"))  # fmt: skip
    expected = await status_of("POST", f"{base}/envelope/missing", json=envelope,
                               headers=bearer("mallory"))  # fmt: skip
    assert got[0] == expected[0] == 404
    got_error, expected_error = orjson.loads(got[1]), orjson.loads(expected[1])
    assert _named(orjson.dumps(got_error["payload"]), "secret") == _named(
        orjson.dumps(expected_error["payload"]), "missing"
    )


async def test_publishing_where_one_may_not_says_nothing_of_whether_the_space_exists(hub, authed):
    """On the WebSocket too: a publish, or a stream's first delta, to a space
    the caller's claims keep it out of is refused the same way whether
    someone made that space or nobody did."""
    server = await hub(**authed)
    await agent(server, "keeper", "task.keeper.hidden")  # made on the fly: listed nowhere
    scoped = await agent(server, "scoped", "open")
    answers = []
    for space in ("task.keeper.hidden", "task.keeper.nothere"):
        name = space.rsplit(".", 1)[1]
        published = await scoped.request(
            {"type": "space.publish", "space": space, "data": {"text": "probe"}}
        )
        opening = {"type": "space.event.delta", "space": space, "event_id": f"s-{name}"}
        streamed = await scoped.request({**opening, "data": {"text": "x"}})
        answers.append([
            (a["type"], a.get("code"), _named(a.get("message", "").encode(), name))
            for a in (published, streamed)
        ])  # fmt: skip
    assert answers[0] == answers[1], answers
    assert [a[:2] for a in answers[0]] == [("error", "UNAUTHORIZED")] * 2, answers
    # A space it may use still tells "not a member" from "does not exist".
    member_of_none = await agent(server, "other")
    published = await member_of_none.request(
        {"type": "space.publish", "space": "task.keeper.nothere", "data": {"text": "x"}}
    )
    assert published["code"] == "SPACE_NOT_FOUND", published


def _named(body: bytes, path: str) -> bytes:
    """``body`` with the names ``path`` is made of blanked out."""
    for part in sorted(filter(None, path.split("/")), key=len, reverse=True):
        body = body.replace(part.encode(), b"_")
    return body


# ── 4. Origin ─────────────────────────────────────────────────────────────────


async def test_mcp_refuses_a_rebinding_origin_on_defaults(hub, http):
    server = await hub()
    mcp = McpHttp(http, server.http_url)
    evil = await mcp.rpc("ping", Host="evil.example.com", Origin="http://evil.example.com")
    assert evil.status == 403, evil
    port = server.http_url.rsplit(":", 1)[1]
    same = await mcp.rpc("ping", Origin=f"http://127.0.0.1:{port}")
    assert same.status == 200
    assert (await mcp.rpc("ping")).status == 200  # no Origin: not a browser


# ── 5. shares of the shared bounds ────────────────────────────────────────────


async def test_one_caller_cannot_take_every_mcp_call_slot_or_session(hub, http, authed):
    adapter = McpServer(["open", "secret"], options=McpOptions(max_calls=8, max_sessions=8))
    server = await hub(adapters=[adapter], **authed)
    keeper = await agent(server, "keeper", "secret")  # never answers
    carol = McpHttp(http, server.http_url, token=token_of("carol"))
    args = {"space": "secret", "text": "?", "to": "keeper", "timeout": 30}
    asks = [asyncio.ensure_future(carol.call("space_ask", args)) for _ in range(2)]
    for _ in asks:  # both calls hold their slot once their question is out
        await keeper.wait_for("space.event", space="secret")
    assert adapter.calling == 2
    beyond = await carol.rpc("tools/call", {"name": "space_ask", "arguments": args})
    assert beyond.status == 429 and int(beyond.headers["Retry-After"]) >= 1, beyond
    reader = McpHttp(http, server.http_url, token=token_of("reader"))
    assert not (await reader.call("spaces_list"))["isError"]  # others are served
    for ask in asks:
        ask.cancel()
    sessions = [McpHttp(http, server.http_url, token=token_of("other")) for _ in range(3)]
    for session in sessions[:2]:
        await session.initialize()
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}}
    refused = await sessions[2].rpc("initialize", hello)
    assert refused.status == 429 and "Retry-After" in refused.headers
    await McpHttp(http, server.http_url, token=token_of("mallory")).initialize()


async def test_one_caller_cannot_take_every_a2a_task_or_bridge_wait(hub, authed):
    gateway = A2aGateway({"open": SpaceCard()}, InboundOptions(max_open_tasks=8))
    inbound = AgoraHttpInbound({"open": {}}, AgoraOptions(max_waiting=8))
    server = await hub(adapters=[gateway, inbound], bridge_timeout=30, **authed)
    listener = await agent(server, "other", "open")
    url = f"{server.http_url}/a2a/open"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": a2a.message("?"), "configuration": {"returnImmediately": True}},
    }
    for _ in range(2):
        assert (await a2a.post(url, body, headers=bearer("carol")))[0] == 200
    status, busy = await a2a.post(url, body, headers=bearer("carol"))
    assert status == 429 and busy["error"]["code"] == -32603
    assert (await a2a.post(url, body, headers=bearer("mallory")))[0] == 200
    agora = f"{server.http_url}/agora/open"
    waiting = [
        asyncio.ensure_future(status_of("POST", agora, json={"body": "?"}, headers=bearer("carol")))
        for _ in range(2)
    ]
    for _ in waiting:  # both requests hold their slot once they are published
        await listener.wait_for("space.event", space="open", **{"from": "agora-http"})
    assert inbound.slots.taken == 2
    status, _ = await status_of("POST", agora, json={"body": "?"}, headers=bearer("carol"))
    assert status == 429
    for wait in waiting:
        wait.cancel()


# ── 6. nothing acknowledged that was not kept ─────────────────────────────────


async def test_an_a2a_task_that_cannot_be_stored_is_refused(hub):
    gateway = A2aGateway({"open": SpaceCard()}, InboundOptions(max_open_tasks=64))
    server = await hub(adapters=[gateway], kv_max_entries=3, bridge_timeout=30)
    url = f"{server.http_url}/a2a/open"
    params = {"message": a2a.message("?"), "configuration": {"returnImmediately": True}}
    answers = []
    for n in range(5):
        status, answer = await a2a.post(
            url, {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": params}
        )
        answers.append((status, answer))
    accepted = [a["result"]["task"]["id"] for s, a in answers if s == 200]
    refused = [a for s, a in answers if s != 200]
    assert refused and all(a["error"]["code"] == -32603 for a in refused), answers
    for task_id in accepted:
        got = await a2a.call(url, "GetTask", {"id": task_id})
        assert got["result"]["id"] == task_id, got


async def test_event_ids_are_not_predictable(hub):
    """Ids others can read say nothing of the next one: past what two
    consecutive ids share, a third carries at least 64 fresh random bits."""
    server = await hub()
    alice = await WsClient.connect(server.url, "alice", heartbeat=True)
    await alice.join("lobby")
    ids = []
    for _ in range(3):
        echo = await alice.request({"type": "space.publish", "space": "lobby", "data": {}})
        ids.append(echo["event_id"])
    first, second, third = ids
    shared = next(
        n for n, (a, b) in enumerate(zip(first + "$", second + "#", strict=False)) if a != b
    )
    assert len(third) - shared >= 16, ids
