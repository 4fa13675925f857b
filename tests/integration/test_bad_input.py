"""Bad input from the outside: refused clearly, nothing half done, hub unharmed."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import orjson

from tests.fuzz import log_problems, run
from tests.support.wsclient import WsClient


def _metric(server, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric family from the hub's /metrics."""
    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key[len(name) :]] = float(value)
    return out


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_seeded_bad_input_mix_then_a_fresh_client_is_served(hub_process):
    """A short ``make fuzz``: every bad frame refused or closed as documented, no
    INTERNAL_ERROR, a fresh client works afterwards and the log holds no traceback."""
    proc = hub_process(
        max_frame_bytes=65536, rate_limit=1_000_000, rate_burst=1_000_000, log_level="info"
    )
    report = await run(proc.url, seed=20261122, frames=3000, connections=6, max_frame=65536)
    proc.stop()
    problems = report.problems + log_problems(proc.log_lines(), proc.log())
    assert report.frames >= 2994
    assert not problems, problems
    # The mix really contained what it is for.
    for kind in ("deep-publish", "deep-register", "big-int", "garbage", "binary"):
        assert report.by_kind[kind] > 0, kind
    assert report.errors["INVALID_REQUEST"] > 1000
    assert "INTERNAL_ERROR" not in report.errors


async def test_deep_register_is_refused_and_changes_nothing(hub):
    server = await hub()
    watcher = await WsClient.connect(server.url, "watcher")
    await watcher.join("agent.status")
    agent = await WsClient.connect(server.url, "alice")
    online = await watcher.wait_for("space.event")
    assert online["data"]["event"] == "online"
    frame = (
        '{"type":"agent.register","id":"deep","agent":{"id":"alice","type":"bot",'
        f'"metadata":{{"x":{_deep(300)}}}}}}}'
    )
    await agent.send(frame)
    reply = await agent.request({"type": "agent.heartbeat"})  # handled after the register
    errors = [m for m in agent.backlog if m.get("type") == "error"]
    assert reply["type"] == "agent.heartbeat"
    assert [e["code"] for e in errors] == ["INVALID_REQUEST"]
    assert errors[0]["request_id"] == "deep" and "nested deeper" in errors[0]["message"]
    assert not any(m.get("type") == "agent.registered" for m in agent.backlog)
    # A valid register afterwards is announced; the refused one never was.
    ok = await agent.request(
        {"type": "agent.register", "agent": {"id": "alice", "type": "bot", "metadata": {"a": 1}}}
    )
    assert ok["type"] == "agent.registered"
    updated = await watcher.wait_for("space.event")
    assert updated["data"]["event"] == "updated"
    assert updated["data"]["agent"]["metadata"] == {"a": 1}
    await agent.close()
    offline = await watcher.wait_for("space.event")
    assert offline["data"]["event"] == "offline"
    await watcher.close()


async def test_deep_publish_and_delta_are_refused_with_nothing_delivered(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    b = await WsClient.connect(server.url, "bob")
    await a.join("general")
    await b.join("general")
    for depth in (64, 255, 300, 1100):
        await a.send(
            f'{{"type":"space.publish","id":"p{depth}","space":"general",'
            f'"data":{{"x":{_deep(depth)}}}}}'
        )
        err = await a.wait_for("error")
        assert err["code"] == "INVALID_REQUEST"
        if depth < 1000:  # past orjson's own limit the id can't be read
            assert err["request_id"] == f"p{depth}"
    await a.send(
        '{"type":"space.event.delta","id":"d","space":"general","event_id":"s1",'
        f'"data":{{"text":"t","x":{_deep(100)}}}}}'
    )
    assert (await a.wait_for("error"))["request_id"] == "d"
    # Depth 62 inside data (64 counting the message and data) is fine.
    ok = await a.request(
        {"type": "space.publish", "space": "general", "data": {"x": orjson.loads(_deep(62))}}
    )
    assert ok["type"] == "space.event"
    got = await b.wait_for("space.event")
    assert got["event_id"] == ok["event_id"]  # the first event bob ever sees
    await a.close()
    await b.close()


async def test_integers_arrive_exactly_or_are_refused(hub):
    server = await hub()
    a = await WsClient.connect(server.url, "alice")
    await a.join("general")
    for big in ("18446744073709551617", "12345678901234567890123", "-9223372036854775809"):
        await a.send(f'{{"type":"space.publish","id":"b","space":"general","data":{{"n":{big}}}}}')
        err = await a.wait_for("error")
        assert err["code"] == "INVALID_REQUEST" and "64 bits" in err["message"]
    for edge in (2**64 - 1, -(2**63), 2**53 + 1):
        reply = await a.request({"type": "space.publish", "space": "general", "data": {"n": edge}})
        assert reply["data"]["n"] == edge and isinstance(reply["data"]["n"], int)
    # Digits inside strings are just text.
    reply = await a.request(
        {"type": "space.publish", "space": "general", "data": {"n": "18446744073709551617"}}
    )
    assert reply["data"]["n"] == "18446744073709551617"
    await a.close()


async def test_invalid_utf8_gets_an_error_then_1007_and_is_counted(hub):
    server = await hub()
    c = await WsClient.connect(server.url, "alice")
    c.ws.protocol.send_text(b'{"type":"\xed\xa0\x80"}')
    c.ws.send_data()
    code, frames = await c.closed()
    assert code == 1007
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "INVALID_REQUEST"
    assert "UTF-8" in frames[-1]["message"]
    closes = await asyncio.to_thread(_metric, server, "agora_hub_closes_total")
    assert closes['{code="1007"}'] == 1


async def test_every_hub_close_is_counted_by_code(hub):
    server = await hub(
        max_frame_bytes=4096, outbox_max_bytes=65536, rate_limit=100_000, rate_burst=100_000
    )
    for i in range(3):
        c = await WsClient.connect(server.url, f"big-{i}")
        await c.send("x" * 5000)
        assert (await c.closed())[0] == 1009
    pub = await WsClient.connect(server.url, "pub")
    slow = await WsClient.connect(server.url, "slow")
    await pub.join("firehose")
    await slow.join("firehose")
    slow.ws.transport.pause_reading()
    try:
        async with asyncio.timeout(30):
            while server.node.counters.slow_consumer_closes == 0:
                await pub.send(
                    {
                        "type": "space.publish",
                        "space": "firehose",
                        "echo": False,
                        "data": {"text": "z" * 3000},
                    }
                )
                await asyncio.sleep(0)
    finally:
        slow.ws.transport.resume_reading()
    assert (await slow.closed(timeout=30))[0] == 4008
    closes = await asyncio.to_thread(_metric, server, "agora_hub_closes_total")
    assert closes['{code="1009"}'] == 3
    assert closes['{code="4008"}'] == 1
    await pub.close()


async def test_repeated_token_parameter_is_refused_400(hub):
    server = await hub()
    url = f"http://127.0.0.1:{server.port}/ws?agent_id=alice&token=a&token=b"
    req = urllib.request.Request(
        url,
        headers={
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
        },
    )

    def get() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    status, body = await asyncio.to_thread(get)
    assert status == 400 and b"token" in body


def _raw_http_status(port: int, request: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        head = sock.recv(4096)
    return int(head.split(b" ", 2)[1])


async def test_unparsable_http_requests_get_400_and_leave_no_traceback_in_the_log(hub_process):
    """aiohttp logs a request it cannot parse at ERROR with a traceback; the
    fault is the client's (it is answered 400), so the hub's log stays clean."""
    proc = hub_process(log_level="info")
    port = int(proc.http_url.rsplit(":", 1)[1])
    for request in (
        b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 200 + b"\r\n",
        b"POST /agora/x HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n\r\n",
    ):
        assert await asyncio.to_thread(_raw_http_status, port, request) == 400, request[:40]
    healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    assert await asyncio.to_thread(_raw_http_status, port, healthz) == 200
    proc.stop()
    assert not log_problems(proc.log_lines(), proc.log())


def _send_and_hang_up(port: int, request: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)


async def test_a_client_gone_mid_body_is_counted_499_and_not_logged_as_an_error(
    hub_process, tmp_path
):
    """A client that closes while sending its body is nobody's error: no
    ERROR line, no traceback, no INTERNAL_ERROR; the request counts as 499."""
    config = tmp_path / "hub.toml"
    config.write_text('[[spaces]]\nid = "w"\nagora_http = true\n')
    key = "k" * 20
    proc = hub_process(log_level="info", config=str(config), api_key=key)
    port = int(proc.http_url.rsplit(":", 1)[1])
    routes = ("/agora/w", "/envelope/w", "/agentprotocol/w", "/api/publish")
    for path in routes:
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\nContent-Length: 500\r\n"
        await asyncio.to_thread(_send_and_hang_up, port, (head + '\r\n{"body": ').encode())

    def counted() -> set[str]:
        with urllib.request.urlopen(proc.http_url + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return {
            line.split('route="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("agora_hub_http_requests_total") and 'status="499"' in line
        }

    patterns = {"/agora/{space}", "/envelope/{space}", "/agentprotocol/{space}", "/api/publish"}
    async with asyncio.timeout(10):
        while await asyncio.to_thread(counted) != patterns:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    proc.stop()
    assert not log_problems(proc.log_lines(), proc.log())
