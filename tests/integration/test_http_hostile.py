"""The HTTP port under hostile input (issue 27): slow clients, idle uploads, deep
JSON, bad forms, error pages. Each test ends with the hub still serving and
no traceback in its log."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import orjson
import pytest

from adapters.agora_http import AgoraHttpInbound, InboundOptions
from adapters.envelope.gateway import EnvelopeGateway
from hub.config.settings import load_settings
from tests import fuzz_http
from tests.fuzz import log_problems
from tests.support import rawhttp
from tests.support.agora_bridge import Responder
from tests.support.envelopes import agora_request
from tests.support.servers import HubProcess

KEY = "apikey-SECRET-4f1c9a0b7e"
TOKEN = "admintoken-SECRET-8d2e6b3a"
CONFIG = """
[[spaces]]
id = "w"
agora_http = true

[[spaces]]
id = "plain"
"""
#: Sub-second deadlines; every wait below is generous.
DEADLINES = {"http_header_timeout": 0.5, "http_body_timeout": 0.5, "http_keepalive_timeout": 1}


@pytest.fixture(scope="module")
def port_hub(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One hub process with the API, the status page and an HTTP Agora space."""
    config = tmp_path_factory.mktemp("hostile") / "hub.toml"
    config.write_text(CONFIG)
    proc = HubProcess(
        config=str(config), api_key=KEY, admin_token=TOKEN, bridge_timeout=5, log_level="info",
        **DEADLINES,
    ).start()  # fmt: skip
    yield proc
    proc.close()


def http_port(proc: HubProcess) -> int:
    return int(proc.http_url.rsplit(":", 1)[1])


async def still_serving(proc: HubProcess) -> None:
    """A plain request is answered and the log holds no traceback or error."""
    reply = await rawhttp.exchange(http_port(proc), rawhttp.build("GET", "/healthz"))
    assert reply.status == 200, reply
    assert not log_problems(proc.log_lines(), proc.log())


def nested(depth: int) -> str:
    """``{"a": {"a": … 1 …}}``: ``depth`` objects deep."""
    return '{"a":' * depth + "1" + "}" * depth


# ── 1. slow clients ────────────────────────────────────────────────────────


async def test_connections_that_never_finish_their_headers_are_closed(port_hub):
    port = http_port(port_hub)
    fds = len(os.listdir(f"/proc/{port_hub.proc.pid}/fd"))
    opened = []
    for head in (b"", b"GET /healthz HTTP/1.1\r\n", b"GET /healthz HTTP/1.1\r\nHost: x\r\n"):
        for _ in range(10):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(head)
            opened.append((reader, writer))

    async def trickle(writer: asyncio.StreamWriter, reader: asyncio.StreamReader) -> bytes:
        async def one_byte_at_a_time() -> None:
            with contextlib.suppress(ConnectionError):
                for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
                    writer.write(bytes([byte]))
                    await asyncio.sleep(0.05)

        sender = asyncio.create_task(one_byte_at_a_time())
        try:
            return await rawhttp.closed(reader)
        finally:
            sender.cancel()

    trickled = []
    for _ in range(20):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        trickled.append((reader, writer))
    got = await asyncio.gather(
        *(rawhttp.closed(r) for r, _ in opened), *(trickle(w, r) for r, w in trickled)
    )
    # Nothing sent: closed silently; a head begun: 408, then closed.
    assert got[:10] == [b""] * 10
    for answer in got[10:]:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
    for _, writer in opened + trickled:
        writer.close()
    async with asyncio.timeout(rawhttp.TIMEOUT):  # the hub let go of every socket
        while len(os.listdir(f"/proc/{port_hub.proc.pid}/fd")) > fds + 2:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    await still_serving(port_hub)


async def test_kept_alive_connections_get_the_same_deadlines(port_hub):
    port = http_port(port_hub)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):  # kept alive between requests
        writer.write(rawhttp.build("GET", "/healthz"))
        assert (await rawhttp.read_reply(reader)).status == 200
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # a head begun, never finished
    assert (await rawhttp.closed(reader)).startswith(b"HTTP/1.1 408 ")
    writer.close()
    # Idle after an answer: closed after http_keepalive_timeout, without a word.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(rawhttp.build("GET", "/healthz"))
    assert (await rawhttp.read_reply(reader)).status == 200
    assert await rawhttp.closed(reader) == b""
    writer.close()
    await still_serving(port_hub)


async def test_a_body_slower_than_the_grace_but_at_the_minimum_rate_is_taken(port_hub):
    """A 64 KiB body sent over about a second (64 KiB/s): past http_body_timeout
    (0.5 s), well within the 8 s its size earns at http_body_min_rate."""
    port = http_port(port_hub)
    body = orjson.dumps({"space": "plain", "data": {"text": "x" * 65_000}})
    headers = {"X-API-Key": KEY, "Content-Type": "application/json"}
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(rawhttp.build("POST", "/api/publish", b"", headers, length=len(body)))
    for i in range(0, len(body), 6500):
        await asyncio.sleep(0.1)
        writer.write(body[i : i + 6500])
    async with asyncio.timeout(rawhttp.TIMEOUT):
        reply = await rawhttp.read_reply(reader)
    writer.close()
    assert reply.status == 200, reply
    assert orjson.loads(reply.body)["space"] == "plain"
    await still_serving(port_hub)


STALLED_BODIES = {
    "/agora/w": {},
    "/envelope/plain": {},
    "/agentprotocol/plain": {},
    "/api/publish": {"X-API-Key": KEY, "Content-Type": "application/json"},
    "/api/agents/x/disconnect": {"X-API-Key": KEY, "Content-Type": "application/json"},
    "/admin/login": {"Content-Type": "application/x-www-form-urlencoded"},
    "/admin/agents/x/disconnect": {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
    },
    "/healthz": {},
}


@pytest.mark.parametrize("trickle", [False, True], ids=["stalled", "trickled"])
async def test_bodies_that_stall_or_trickle_are_answered_408_and_closed(port_hub, trickle):
    port = http_port(port_hub)

    async def upload(path: str, headers: dict[str, str]) -> bytes:
        method = "GET" if path == "/healthz" else "POST"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(rawhttp.build(method, path, '{"body": "', headers, length=50_000))

        async def more() -> None:
            with contextlib.suppress(ConnectionError):
                while trickle:  # 20 bytes/s, far below http_body_min_rate
                    await asyncio.sleep(0.05)
                    writer.write(b"x")

        sender = asyncio.create_task(more())
        try:
            return await rawhttp.closed(reader)
        finally:
            sender.cancel()
            writer.close()

    answers = await asyncio.gather(*(upload(p, h) for p, h in STALLED_BODIES.items()))
    for path, answer in zip(STALLED_BODIES, answers, strict=True):
        if path == "/healthz":  # answered at once; the unread body drained, then closed
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:80]
        else:
            assert answer.startswith(b"HTTP/1.1 408 "), (path, answer[:80])
    await still_serving(port_hub)


# ── 2. idle uploads take no waiting slot ───────────────────────────────────


async def test_idle_uploads_take_no_waiting_slot_on_any_bridge_route(hub, tmp_path):
    config = tmp_path / "hub.toml"
    config.write_text(CONFIG)
    settings = {"envelope_max_waits": 2, "bridge_timeout": 1}
    adapters = [
        AgoraHttpInbound({"w": {}}, InboundOptions(max_waiting=2)),
        EnvelopeGateway(load_settings(settings, config)),
    ]
    server = await hub(config=str(config), adapters=adapters, **settings)
    responder = await Responder(server.url, "answerer", "w").start()
    port = server.http_port
    stats = server.node.counters.http

    def arrived() -> int:  # requests whose head the hub has read
        return stats.in_progress + sum(stats.requests.values())

    before = arrived()
    idle = []
    for path in ("/agora/w", "/envelope/plain") * 20:  # ten times the slots
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(rawhttp.build("POST", path, '{"body": "', length=100))
        idle.append((reader, writer))
    # Every upload has reached the hub (a slot would be taken on arrival).
    async with asyncio.timeout(rawhttp.TIMEOUT):
        while arrived() < before + len(idle):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    reply = await rawhttp.exchange(port, rawhttp.build("POST", "/agora/w", '{"body": "hi"}'))
    assert reply.status == 200, reply
    assert orjson.loads(reply.body) == {"status": "success", "body": "echo:hi"}
    # An envelope REQUEST nobody answers waits its time out: 408, not 503.
    envelope = orjson.dumps(agora_request(timeout=1))
    reply = await rawhttp.exchange(port, rawhttp.build("POST", "/envelope/plain", envelope))
    assert reply.status == 408, reply
    for _, writer in idle:
        writer.close()
    await responder.aclose()


# ── 3. deep JSON in a bridge body ──────────────────────────────────────────


async def test_deep_json_in_a_bridge_body_is_400_at_every_depth(port_hub):
    port = http_port(port_hub)
    responder = Responder(port_hub.url, "deep-answerer", "w", lambda d: {"body": "ok"})
    await responder.start()
    try:
        # The body is published one level down (data.body), and events nest 64.
        for depth in (1, 62):
            body = f'{{"body": {nested(depth)}}}'
            reply = await rawhttp.exchange(port, rawhttp.build("POST", "/agora/w", body))
            assert reply.status == 200, (depth, reply)
            assert orjson.loads(reply.body) == {"status": "success", "body": "ok"}
        for depth in (63, 64, 100, 200, 253, 254, 255, 300, 1000, 1023, 1024, 1025, 5000):
            body = f'{{"body": {nested(depth)}}}'
            reply = await rawhttp.exchange(port, rawhttp.build("POST", "/agora/w", body))
            assert reply.status == 400, (depth, reply)
            answer = orjson.loads(reply.body)
            assert answer["status"] == "failure" and "nested deeper than" in answer["error"], answer
        assert len(responder.seen) == 2  # no deep request reached the space
    finally:
        await responder.aclose()
    await still_serving(port_hub)


# ── 4. malformed forms on /admin/login ─────────────────────────────────────


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data", "garbage"),
        ("multipart/form-data; boundary=xyz", "garbage"),
        ("multipart/form-data; boundary=xyz", '--xyz\r\nContent-Disposition: form-data; name="t'),
        (
            "multipart/form-data; boundary=xyz",
            '--xyz\r\nContent-Disposition: form-data; name="token"\r\n\r\nabc',
        ),
        ("multipart/form-data; boundary=" + "b" * 100, "--" + "b" * 100 + "\r\n\r\n"),
        ("application/x-www-form-urlencoded; charset=nonsense-42", "token=x"),
    ],
)
async def test_malformed_login_forms_are_400(port_hub, content_type, body):
    port = http_port(port_hub)
    request = rawhttp.build("POST", "/admin/login", body, {"Content-Type": content_type})
    reply = await rawhttp.exchange(port, request)
    assert reply.status == 400, reply
    assert "That form could not be read" in reply.text
    # The right token, in the form the login page sends, still logs in.
    good = rawhttp.build(
        "POST",
        "/admin/login",
        f"token={TOKEN}",
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (await rawhttp.exchange(port, good)).status == 303
    await still_serving(port_hub)


# ── 5. deep JSON on the status page's disconnect ───────────────────────────


@pytest.mark.parametrize("depth", [65, 300, 990, 2000])
async def test_deep_json_to_admin_disconnect_is_400(port_hub, depth):
    port = http_port(port_hub)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body = f'{{"reason": {nested(depth)}}}'
    reply = await rawhttp.exchange(
        port, rawhttp.build("POST", "/admin/agents/nobody/disconnect", body, headers)
    )
    assert reply.status == 400, reply
    error = orjson.loads(reply.body)["error"]
    assert error["code"] == "INVALID_REQUEST" and "nested deeper than" in error["message"]
    await still_serving(port_hub)


async def test_a_disconnect_body_over_64_kib_is_413(port_hub):
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body = orjson.dumps({"reason": "r" * 70_000})
    reply = await rawhttp.exchange(
        http_port(port_hub), rawhttp.build("POST", "/admin/agents/x/disconnect", body, headers)
    )
    assert reply.status == 413 and orjson.loads(reply.body)["error"]["code"] == "PAYLOAD_TOO_LARGE"
    await still_serving(port_hub)


# ── 6. error pages echo nothing ────────────────────────────────────────────


@pytest.mark.parametrize(
    "header",
    [
        f"X-API-Key: {KEY}\x01",
        f"Authorization: Bearer {TOKEN}\x7f",
        f"Authorization: apikey {KEY}\x00",
        f"X-Token-{KEY}\x01: x",
        "X-Big: " + KEY * 4000,
        f"{KEY}",
    ],
)
async def test_error_pages_echo_nothing_of_the_request(port_hub, header):
    port = http_port(port_hub)
    request = f"GET /api/spaces HTTP/1.1\r\nHost: hub\r\n{header}\r\n\r\n".encode("latin-1")
    reply = await rawhttp.exchange(port, request)
    assert reply.status == 400, reply
    assert reply.body.startswith(b"400 Bad Request"), reply.body[:200]
    for secret in (KEY, TOKEN, KEY[:12], TOKEN[:12], "SECRET"):
        assert secret.encode() not in reply.raw
    await still_serving(port_hub)


# ── a short ``make fuzz-http`` ─────────────────────────────────────────────


async def test_seeded_hostile_requests_get_no_5xx_echo_no_secret_and_leave_no_trace(tmp_path):
    proc = fuzz_http.start_hub(tmp_path)
    try:
        report = await fuzz_http.run_against(proc, seed=20261127, requests=600, connections=6)
    finally:
        proc.stop()
    problems = report.problems + log_problems(proc.log_lines(), proc.log())
    proc.close()
    assert report.requests >= 600
    assert not problems, problems
    # The mix really contained what it is for.
    for kind in ("json-body", "envelope", "form", "bad-head", "chunked", "slow-stalled", "valid"):
        assert report.by_kind[kind] > 0, kind
    assert report.statuses["400"] > 100 and report.statuses["408"] > 0
