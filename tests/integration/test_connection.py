"""Connecting, registering, heartbeats, HTTP endpoints."""

import asyncio
import urllib.request

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support.wsclient import WsClient


async def test_registered_arrives_first_with_intervals_in_ms(hub):
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=2.0)
    c = await WsClient.connect(
        server.url, "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
    )
    reg = c.registered
    assert reg["agent"]["id"].startswith("did:key:")
    assert reg["agent"]["connection_id"].startswith("ws-")
    assert (reg["heartbeat_interval"], reg["heartbeat_timeout"]) == (500, 2000)
    await c.close()


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?agent_id=",
        "?agent_id=-bad",
        "?agent_id=a%20b",
        "?agent_id=" + "x" * 129,
        "?agent_id=a&agent_id=b",
    ],
)
async def test_missing_or_invalid_agent_id_is_refused_with_400(hub, query):
    server = await hub()
    with pytest.raises(InvalidStatus) as info:
        async with connect(server.url + query):
            pass
    assert info.value.response.status_code == 400
    assert b"agent_id" in info.value.response.body


async def test_register_updates_and_echoes_the_request_id(hub):
    server = await hub()
    c = await WsClient.connect(server.url, "alice")
    reply = await c.request(
        {
            "type": "agent.register",
            "id": "msg_001",
            "agent": {
                "id": "alice",
                "type": "process",
                "capabilities": ["text"],
                "metadata": {"v": "1"},
            },
        }
    )
    assert reply["type"] == "agent.registered" and reply["id"] == "msg_001"
    assert reply["agent"]["id"] == "alice"
    err = await c.request({"type": "agent.register", "agent": {"id": "bob"}})
    assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
    await c.close()


async def test_heartbeat_is_answered_and_keeps_the_connection(hub):
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=0.8)
    c = await WsClient.connect(server.url, "alice")
    loop = asyncio.get_running_loop()
    end = loop.time() + 2.0  # well past the timeout
    while loop.time() < end:
        reply = await c.request({"type": "agent.heartbeat"})
        assert reply["type"] == "agent.heartbeat" and isinstance(reply["timestamp"], int)
        await asyncio.sleep(0.2)  # the client's heartbeat interval, not a wait for an event
    assert c.ws.close_code is None
    await c.close()


async def test_silence_past_the_timeout_gets_error_then_4408(hub):
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=0.6)
    c = await WsClient.connect(server.url, "quiet")
    code, frames = await c.closed(timeout=10)
    assert code == 4408
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "HEARTBEAT_TIMEOUT"


async def test_any_frame_counts_as_liveness(hub):
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=0.8)
    c = await WsClient.connect(server.url, "chatty")
    loop = asyncio.get_running_loop()
    end = loop.time() + 2.0
    while loop.time() < end:
        await c.request({"type": "space.list"})  # not a heartbeat
        await asyncio.sleep(0.2)
    assert c.ws.close_code is None
    await c.close()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def _server_headers(url: str) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.headers.get_all("Server") or []


async def test_websocket_port_answers_with_one_server_header(hub):
    server = await hub()
    for path in ("/healthz", "/readyz", "/metrics"):
        url = f"http://127.0.0.1:{server.port}{path}"
        headers = await asyncio.to_thread(_server_headers, url)
        assert len(headers) == 1 and headers[0].startswith("agora-hub/"), (path, headers)


async def test_http_endpoints(hub):
    server = await hub()
    base = f"http://127.0.0.1:{server.port}"
    c = await WsClient.connect(server.url, "alice")
    await c.join("general")
    await c.request({"type": "space.publish", "space": "general", "data": {"text": "x"}})
    status, _, body = await asyncio.to_thread(_get, base + "/healthz")
    assert status == 200 and body == b"ok\n"
    status, _, _ = await asyncio.to_thread(_get, base + "/readyz")
    assert status == 200
    status, ctype, body = await asyncio.to_thread(_get, base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    text = body.decode()
    for line in (
        "agora_hub_connections 1.0",
        "agora_hub_spaces 2.0",  # general, and mcp.calls (the mcp agent relays it)
        "agora_hub_deliveries_total 1.0",
        "agora_hub_backplane_ready 1.0",
    ):
        assert line in text, line
    assert "agora_hub_messages_in_total" in text and "agora_hub_slow_consumer_closes_total" in text
    # registered + joined + the echoed event, at least, were written to the agent
    out = next(
        line for line in text.splitlines() if line.startswith("agora_hub_messages_out_total")
    )
    assert float(out.split()[1]) >= 3
    status, _, _ = await asyncio.to_thread(_get, base + "/nope")
    assert status == 404
    await c.close()


async def test_readyz_is_503_once_shutting_down(hub):
    server = await hub()
    server.node.accepting = False
    status, _, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/readyz")
    assert status == 503


async def test_agent_status_reports_online_updated_offline(hub):
    server = await hub()
    watcher = await WsClient.connect(server.url, "watcher")
    await watcher.join("agent.status")
    bob = await WsClient.connect(server.url, "bob")
    online = await watcher.wait_for("space.event", space="agent.status")
    assert online["from"] == "@hub" and online["data"]["event"] == "online"
    assert online["data"]["agent"]["id"] == "bob"
    await bob.request(
        {"type": "agent.register", "agent": {"id": "bob", "type": "llm", "capabilities": ["chat"]}}
    )
    updated = await watcher.wait_for("space.event", space="agent.status")
    assert updated["data"]["event"] == "updated"
    assert updated["data"]["agent"]["capabilities"] == ["chat"]
    await bob.close()
    offline = await watcher.wait_for("space.event", space="agent.status")
    assert offline["data"]["event"] == "offline" and offline["data"]["agent"]["type"] == "llm"
    assert online["seq"] < updated["seq"] < offline["seq"]
    await watcher.close()


async def test_binary_and_garbage_frames_keep_the_connection(hub):
    server = await hub()
    c = await WsClient.connect(server.url, "alice")
    for frame in [b"\x00\xff", "{", "[]", '{"type":"nope","id":"u"}']:
        await c.send(frame)
        err = await c.expect("error")
        assert err["code"] == "INVALID_REQUEST"
    assert err["request_id"] == "u"
    reply = await c.request({"type": "space.list"})
    assert reply["type"] == "space.list"
    assert orjson.loads(orjson.dumps(reply))  # still a well-formed conversation
    await c.close()


async def test_an_internal_error_is_reported_and_the_connection_survives(hub, monkeypatch):
    from hub.handlers.membership import Membership

    async def broken(self, conn, action):
        raise RuntimeError("boom")

    monkeypatch.setattr(Membership, "list_spaces", broken)  # a bug in one handler
    server = await hub()
    node = server.node
    c = await WsClient.connect(server.url, "alice")
    err = await c.request({"type": "space.list", "id": "l1"})
    assert err == {
        "type": "error",
        "code": "INTERNAL_ERROR",
        "message": "internal error",
        "request_id": "l1",
    }
    assert (await c.request({"type": "agent.heartbeat"}))["type"] == "agent.heartbeat"
    assert node.counters.errors["INTERNAL_ERROR"] == 1
    await c.close()


def _send(url: str, method: str) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.headers.get("Allow", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Allow", "")


async def test_websocket_port_routes_are_get_only_as_on_the_http_port(hub):
    server = await hub()
    for path in ("/healthz", "/readyz", "/metrics", "/ws?agent_id=x"):
        for method in ("POST", "DELETE", "PUT"):
            url = f"http://127.0.0.1:{server.port}{path}"
            status, allow = await asyncio.to_thread(_send, url, method)
            assert (status, allow) == (405, "GET"), (method, path)
    status, _, _ = await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/healthz")
    assert status == 200


async def test_http_port_serves_health_metrics_and_identity(hub):
    server = await hub()
    base = server.http_url
    status, _, body = await asyncio.to_thread(_get, base + "/healthz")
    assert status == 200 and body == b"ok\n"
    status, _, _ = await asyncio.to_thread(_get, base + "/readyz")
    assert status == 200
    status, ctype, body = await asyncio.to_thread(_get, base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert b"agora_hub_connections 0.0" in body
    status, ctype, body = await asyncio.to_thread(_get, base + "/identity")
    identity = orjson.loads(body)
    assert status == 200 and ctype.startswith("application/json")
    assert identity["did"] == server.node.identity.did and identity["did"].startswith("did:key:z")
    status, _, _ = await asyncio.to_thread(_get, base + "/nope")
    assert status == 404


async def _answer_head(port: int, request: bytes) -> list[bytes]:
    """The status line and header lines the WebSocket port answers ``request`` with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    finally:
        writer.close()
    return head.split(b"\r\n")[:-2]


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        # Upgraded: the 101.
        (b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
         b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n", b"101"),
        # Refused by the WebSocket checks, after the hub's own: 426 (no Upgrade).
        (b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n", b"426"),
        # …and 400 (no key).
        (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", b"400"),
    ],
    ids=["101", "426", "400"],
)  # fmt: skip
async def test_a_handshake_answer_has_one_server_header(hub, extra: bytes, status: bytes):
    server = await hub()
    request = b"GET /ws?agent_id=alice HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + b"\r\n"
    head = await _answer_head(server.port, request)
    assert head[0].split(b" ")[1] == status, head
    servers = [line for line in head if line.lower().startswith(b"server:")]
    assert len(servers) == 1 and b"agora-hub/" in servers[0], head
