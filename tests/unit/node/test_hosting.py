"""hub.node.hosting: what NodeHost gives the adapters a real Node hosts.

On a Node with memory stores (FlakyPresence, to make Redis fail): ``attach``
registers a virtual member and claims its id cluster-wide — or reserves it on
this node when shared — and ``aclose`` undoes all of it; an id held by a live
agent is AgentIdTaken and leaves nothing behind. HTTP callers are read from
real requests on the node's HTTP application (aiohttp's test server on a
loopback port): their bearer token, or with auth off the id they give, never
one of the hub's own ids; their address and the public origin behind trusted
proxies only. ``history`` gives what a viewer would have received, a finished
stream as one event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from hub.adapter_host import (
    ANONYMOUS,
    AdapterHost,
    AgentHosting,
    HttpFaces,
    SpaceReads,
    SystemSpaces,
)
from hub.cluster.backplane import Draft
from hub.config.settings import load_settings
from hub.core.stream_audiences import StreamOp
from hub.errors import AgentIdTaken, AuthError, BackplaneUnavailable
from hub.node.hosting import NodeAgents, NodeHttp, bearer_token
from hub.node.node import Node
from protocol import codec
from tests.support.handlers import FlakyPresence


@pytest.fixture
async def make_node() -> AsyncIterator[Callable[..., Any]]:
    nodes: list[Node] = []

    async def start(**settings: Any) -> Node:
        node = Node(load_settings({"node_id": "n1", **settings}), presence=FlakyPresence())
        await node.start()
        nodes.append(node)
        return node

    yield start
    for node in nodes:
        await node.aclose()


# ── the host ─────────────────────────────────────────────────────────────────


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")}


async def test_the_host_is_a_bundle_of_parts_each_one_small_protocol(make_node: Any) -> None:
    node = await make_node()
    host = node.host
    bundle = {"settings", "hosting", "http", "spaces", "system", "kv", "identity", "envelopes"}
    assert _members(AdapterHost) == bundle
    parts = {"hosting": AgentHosting, "http": HttpFaces, "spaces": SpaceReads,
             "system": SystemSpaces}  # fmt: skip
    for name, protocol in parts.items():
        part = getattr(host, name)
        assert _members(protocol) <= set(dir(part)), name
        for other in set(parts.values()) - {protocol}:
            assert not _members(other) & set(dir(part)), f"{name} is only {protocol.__name__}"
        # Only through the part: the bundle itself offers none of its members.
        assert not _members(protocol) & set(dir(host)), f"{name}'s members on the host"
    assert (host.settings, host.kv, host.identity) == (node.settings, node.kv, node.identity)


# ── virtual members ──────────────────────────────────────────────────────────


async def test_attach_claims_the_id_cluster_wide_and_aclose_gives_it_back(make_node: Any) -> None:
    node = await make_node()
    host: NodeAgents = node.host.hosting
    member = await host.attach("bridge", type="bridge", capabilities=("relay",))
    record = await node.presence.get_agent("bridge")
    assert record is not None and record.connection_id == member.connection_id
    assert (record.type, record.capabilities) == ("bridge", ("relay",))
    assert host.attached == 1 and node.registry.agents.get("bridge") is member
    with pytest.raises(AgentIdTaken):
        await host.attach("bridge")  # held by a live member
    assert host.attached == 1 and len(node.registry.connections) == 1, "nothing left behind"

    await member.aclose()
    assert await node.presence.get_agent("bridge") is None
    assert host.attached == 0 and not node.registry.connections
    assert member.cleaned_up.is_set()
    again = await host.attach("bridge")
    await again.aclose()


async def test_a_shared_member_is_reserved_on_the_node_and_claims_nothing(
    make_node: Any,
) -> None:
    node = await make_node()
    member = await node.host.hosting.attach("gateway", shared=True)
    assert "gateway" in node.reserved_ids
    assert await node.presence.get_agent("gateway") is None
    assert "claim_agent" not in node.presence.switches.calls
    await member.aclose()
    assert node.host.attached == 0


async def test_an_unreachable_presence_fails_attach_and_leaves_nothing(make_node: Any) -> None:
    node = await make_node()
    node.presence.switches.fail.add("claim_agent")
    with pytest.raises(BackplaneUnavailable):
        await node.host.hosting.attach("bridge")
    assert node.host.attached == 0 and not node.registry.connections


# ── HTTP callers ─────────────────────────────────────────────────────────────


async def client_of(node: Node, **route: Any) -> TestClient:
    """The node's HTTP application with a route answering who the caller is."""
    host: NodeHttp = node.host.http

    async def who(request: web.Request) -> web.Response:
        try:
            caller = await host.caller(request, public=request.query.get("public") == "1")
        except (AuthError, AgentIdTaken) as exc:
            return web.json_response({"refused": type(exc).__name__}, status=403)
        return web.json_response(
            {
                "agent_id": caller.agent_id, "key": caller.key, "anonymous": caller.anonymous,
                "join": caller.grant.join, "address": host.client_address(request),
                "url": host.public_url(request),
            }
        )  # fmt: skip

    host.mount([web.get("/who", who)], **route)
    client = TestClient(TestServer(node.http_app, host="127.0.0.1"))
    await client.start_server()
    return client


async def who(client: TestClient, query: str = "", **headers: str) -> dict[str, Any]:
    response = await client.get(f"/who{query}", headers=headers)
    return orjson.loads(await response.read())


async def test_with_auth_off_a_caller_is_the_id_it_gives_or_a_made_up_one(
    make_node: Any,
) -> None:
    node = await make_node(api_key="k" * 32)
    client = await client_of(node)
    try:
        named = await who(client, "?agent_id=alice")
        assert named["agent_id"] == "alice" and named["anonymous"] is True
        assert named["key"] == "ip:127.0.0.1", "counted by its address, not by the id it gave"
        made_up = await who(client, "?agent_id=not%20valid")
        assert made_up["agent_id"].startswith("caller-") and made_up["agent_id"] != "not valid"
        assert made_up["agent_id"] != (await who(client))["agent_id"]
        (reserved, *_) = sorted(node.reserved_ids)
        assert await who(client, f"?agent_id={reserved}") == {"refused": "AgentIdTaken"}
    finally:
        await client.close()


async def test_with_tokens_a_caller_is_who_its_bearer_token_names(
    make_node: Any, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice": {"token": "s3cret", "join": ["lobby"]}}))
    node = await make_node(auth_mode="tokens", auth_tokens_file=str(tokens))
    client = await client_of(node)
    try:
        alice = await who(client, Authorization="Bearer s3cret")
        assert alice["agent_id"] == "alice" and alice["key"] == "alice"
        assert alice["anonymous"] is False and alice["join"] == ["lobby"]
        assert await who(client, "?agent_id=alice") == {"refused": "AuthError"}
        assert await who(client, Authorization="Bearer wrong") == {"refused": "AuthError"}
        public = await who(client, "?public=1")
        assert public["agent_id"] == ANONYMOUS and public["anonymous"] is True
        assert public["key"] == "ip:127.0.0.1"
    finally:
        await client.close()


async def test_forwarded_headers_count_only_from_trusted_proxies(make_node: Any) -> None:
    forwarded = {
        "X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https",
        "X-Forwarded-Host": "hub.example",
    }  # fmt: skip
    trusting = await make_node(trusted_proxies="127.0.0.1")
    client = await client_of(trusting)
    try:
        seen = await who(client, **forwarded)
        assert seen["address"] == "203.0.113.9" and seen["key"] == "ip:203.0.113.9"
        assert seen["url"] == "https://hub.example"
    finally:
        await client.close()
    plain = await make_node()
    client = await client_of(plain)
    try:
        seen = await who(client, **forwarded)
        assert seen["address"] == "127.0.0.1" and seen["url"].startswith("http://127.0.0.1:")
    finally:
        await client.close()


async def test_a_mounted_routes_shutdown_runs_when_the_port_closes(make_node: Any) -> None:
    node = await make_node()
    stopped: list[bool] = []

    async def on_shutdown() -> None:
        stopped.append(True)

    client = await client_of(node, on_shutdown=on_shutdown)
    assert (await client.get("/who")).status == 200 and stopped == []
    await client.close()
    assert stopped == [True]


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer   abc  ", "abc"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


# ── history ──────────────────────────────────────────────────────────────────


async def record(
    node: Node, kind: str, event_id: str, data: dict[str, Any] | None = None, **routing: Any
) -> None:
    """A frame published on the space ``room`` as the publishing handler makes one."""
    rest: dict[str, Any] = {"from": "alice", "timestamp": 1}
    if data is not None:
        rest["data"] = data
    if kind == "space.event.cancel":
        rest["reason"] = "stopped"
    head, tail = codec.sequenced(kind, "room", event_id, rest)
    await node.backplane.publish("room", Draft(head, tail, **routing))


async def test_history_is_what_the_viewer_received_a_finished_stream_as_one_event(
    make_node: Any,
) -> None:
    node = await make_node()
    await record(node, "space.event", "e1", {"text": "first"})
    await record(node, "space.event", "e2", {"text": "for bob"}, to=("bob",))
    await record(node, "space.event", "e3", {"text": "not to carol"}, exclude="carol")
    s = {"stream": "alice/s"}
    await record(node, "space.event.delta", "alice/s", {"text": "Hel", "lang": "en"},
                 op=StreamOp.OPEN, **s)  # fmt: skip
    await record(node, "space.event", "e4", {"text": "between"})
    await record(node, "space.event.delta", "alice/s", {"text": "lo"}, op=StreamOp.DELTA, **s)
    await record(node, "space.event.done", "alice/s", op=StreamOp.END, **s)
    c = {"stream": "alice/c"}
    await record(node, "space.event.delta", "alice/c", {"text": "never"}, op=StreamOp.OPEN, **c)
    await record(node, "space.event.cancel", "alice/c", op=StreamOp.END, **c)
    await record(node, "space.event.delta", "alice/u", {"text": "unfinished"},
                 op=StreamOp.OPEN, stream="alice/u")  # fmt: skip

    def texts(events: list[dict[str, Any]]) -> list[str]:
        return [e["data"]["text"] for e in events]

    carol = await node.host.spaces.history("room", 10, "carol")
    assert texts(carol) == ["first", "Hello", "between"]
    stream = carol[1]
    assert stream["type"] == "space.event" and stream["event_id"] == "alice/s"
    assert stream["data"] == {"text": "Hello", "lang": "en"} and stream["seq"] == 4
    assert texts(await node.host.spaces.history("room", 10, "bob")) == [
        "first", "for bob", "not to carol", "Hello", "between",
    ]  # fmt: skip
    assert texts(await node.host.spaces.history("room", 2, "bob")) == ["Hello", "between"], "newest"


async def test_history_stays_within_about_one_largest_frame(make_node: Any) -> None:
    node = await make_node(max_frame_bytes=4096)
    for n in range(10):
        await record(node, "space.event", f"e{n}", {"text": str(n) * 1000})
    events = await node.host.spaces.history("room", 10, "carol")
    assert [e["event_id"] for e in events] == ["e7", "e8", "e9"], "the newest that fit"
    assert sum(len(orjson.dumps(e)) for e in events) <= 4096
