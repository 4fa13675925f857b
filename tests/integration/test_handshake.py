"""Handshake hardening (contract §11): token transports, origins, per-IP and
handshake bounds, and tokens never in a log line."""

from __future__ import annotations

import asyncio
import socket
import struct

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from hub.net.handshake import LINE_FACTOR
from tests.support.wsclient import WsClient

TOKENS = {"alice": "tok-alice-7f3a91", "bob": "tok-bob-0c55e2"}


@pytest.fixture
def tokens_file(tmp_path):
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps(TOKENS))
    return path


async def _status(url: str, **kwargs) -> int:
    """The HTTP status a refused handshake gets (101 when it is accepted)."""
    try:
        ws = await connect(url, open_timeout=10, **kwargs)
    except InvalidStatus as exc:
        return exc.response.status_code
    await ws.close()
    return 101


async def test_three_token_transports(hub, tokens_file):
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens_file))
    base = server.url
    a = await WsClient.connect(base, "alice", token=TOKENS["alice"])  # ?token=
    b = await WsClient.connect(
        base, "bob", additional_headers={"Authorization": f"Bearer {TOKENS['bob']}"}
    )
    await a.close()
    await b.close()
    # A browser: the token as a subprotocol; the hub selects it.
    ws = await connect(
        f"{base}?agent_id=alice", subprotocols=[f"bearer.{TOKENS['alice']}", "other"]
    )
    assert ws.subprotocol == f"bearer.{TOKENS['alice']}"
    first = orjson.loads(await ws.recv())
    assert first["type"] == "agent.registered"
    await ws.close()
    # A wrong token in any transport: error UNAUTHORIZED, close 4401.
    bad = await WsClient.connect(
        base, "alice", registered=False, subprotocols=["bearer.not-the-token"]
    )
    code, frames = await bad.closed()
    assert code == 4401 and frames[-1]["code"] == "UNAUTHORIZED"


async def test_ambiguous_credentials_are_refused_400(hub, tokens_file):
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens_file))
    t = TOKENS["alice"]
    url = f"{server.url}?agent_id=alice&token={t}"
    assert await _status(url, additional_headers={"Authorization": f"Bearer {t}"}) == 400
    assert await _status(url, subprotocols=[f"bearer.{t}"]) == 400
    assert (
        await _status(f"{server.url}?agent_id=alice", subprotocols=[f"bearer.{t}", "bearer.other"])
        == 400
    )
    assert await _status(f"{server.url}?agent_id=alice&token={t}") == 101


async def test_a_header_sent_twice_that_must_be_one_is_refused_400(hub, tokens_file):
    """Two Authorization or two Origin headers are ambiguous: 400 naming the
    header (they were a 500 and a traceback in the log)."""
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens_file))
    url = f"{server.url}?agent_id=alice"
    for name, value in (("Authorization", f"Bearer {TOKENS['alice']}"), ("Origin", "https://a")):
        with pytest.raises(InvalidStatus) as refused:
            await connect(url, open_timeout=10, additional_headers=[(name, value), (name, value)])
        response = refused.value.response
        assert response.status_code == 400
        assert response.body == f"more than one '{name}' header\n".encode()
    auth = [("Authorization", f"Bearer {TOKENS['alice']}")]
    assert await _status(url, additional_headers=auth) == 101


async def test_allowed_origins(hub):
    server = await hub(allowed_origins="https://app.example, https://ops.example")
    url = f"{server.url}?agent_id=browser"
    assert await _status(url, origin="https://app.example") == 101
    assert await _status(url, origin="https://evil.example") == 403
    assert await _status(url) == 101  # no Origin: not a browser


async def test_max_connections_per_ip(hub):
    server = await hub(max_connections_per_ip=2)
    a = await WsClient.connect(server.url, "a1")
    b = await WsClient.connect(server.url, "a2")
    assert await _status(f"{server.url}?agent_id=a3") == 429
    await a.close()
    await a.ws.wait_closed()
    # The slot is free once the hub has seen the connection go.
    async with asyncio.timeout(10):
        while len(server.per_ip) >= 2:  # noqa: ASYNC110 - the hub's own count, no event
            await asyncio.sleep(0.02)
    c = await WsClient.connect(server.url, "a3")
    await b.close()
    await c.close()


def _stall(port: int, n: int) -> list[socket.socket]:
    """``n`` TCP connections that send half a request line and stop."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /ws?agent_id=slow HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    return socks


async def test_stalled_handshakes_do_not_keep_others_out(hub):
    server = await hub(handshake_timeout=3)
    socks = await asyncio.to_thread(_stall, server.port, 300)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        c = await WsClient.connect(server.url, "normal")
        assert loop.time() - started < 2.5  # well before any stalled handshake times out
        assert server.handshakes.in_progress >= 250
        await c.close()
        # The stalled ones are cut at the handshake timeout.
        async with asyncio.timeout(20):
            while server.handshakes.in_progress:  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.05)
    finally:
        for s in socks:
            s.close()


async def test_a_client_gone_before_its_request_ends_its_handshake_at_once(hub):
    """No deadline needed: a connection closed mid-request frees its slot, its
    deadline and its handler right away (not at handshake_timeout)."""
    server = await hub(handshake_timeout=60)
    socks = await asyncio.to_thread(_stall, server.port, 40)
    async with asyncio.timeout(10):
        while server.handshakes.in_progress < 40:  # noqa: ASYNC110 - the hub's count
            await asyncio.sleep(0.02)
    assert len(server.deadlines) >= 40
    for s in socks:
        s.close()
    async with asyncio.timeout(10):
        while server.handshakes.in_progress or len(server.deadlines):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    # The hub still answers, and the one after them opens normally.
    c = await WsClient.connect(server.url, "after")
    await c.close()


async def test_a_failing_handshake_hook_is_a_500_and_the_hub_goes_on(hub, monkeypatch):
    """A bug in the hub's upgrade checks answers that one handshake 500 (run
    once, logged by websockets); the next handshake is served normally."""
    server = await hub()
    calls = 0

    def broken(*_args: object) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("bug in an upgrade check")

    with monkeypatch.context() as patch:
        patch.setattr(server, "_upgrade", broken)
        assert await _status(server.url + "?agent_id=a1") == 500
    assert calls == 1
    c = await WsClient.connect(server.url, "after-the-bug")
    await c.close()


async def test_the_upgrade_and_the_registration_arrive_together(hub):
    """The 101 waits in the outbox for ``agent.registered`` (one write, see
    test_outbox): a raw client reads the 101, then that frame, nothing else."""
    server = await hub()

    def upgrade() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(
                b"GET /ws?agent_id=raw HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"Sec-WebSocket-Version: 13\r\n\r\n"
            )
            data = b""
            while b"agent.registered" not in data or not data.endswith(b"}"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    data = await asyncio.to_thread(upgrade)
    head, _, frame = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101 ")
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
    assert frame[0] == 0x81  # one unfragmented text frame
    payload = frame[4:] if frame[1] == 126 else frame[2:]
    event = orjson.loads(payload)
    assert event["type"] == "agent.registered" and event["agent"]["id"] == "raw"


def _masked_text(payload: bytes) -> bytes:
    mask = b"\x01\x02\x03\x04"
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + body


async def test_an_upgrade_in_pieces_or_with_a_frame_behind_it_goes_through_websockets(hub):
    """The plain upgrade's fast path takes a request that is whole in one read
    and nothing else; split over reads, or with a frame sent before the 101,
    websockets' own parser reads it and the agent opens all the same."""
    server = await hub()
    request = (
        b"GET /ws?agent_id=%s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    join = _masked_text(b'{"type":"space.join","id":"j1","space":"pieces"}')

    def talk(parts: list[bytes], until: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for part in parts:
                s.sendall(part)
                if part is not parts[-1]:
                    # The hub reads the first piece alone before the rest comes.
                    s.settimeout(0.3)
                    try:
                        early = s.recv(1)
                    except TimeoutError:
                        early = None  # nothing is answered to half a request
                    assert early is None, f"half a request answered: {early!r}"
                    s.settimeout(10)
            data = b""
            while until not in data:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    split = request % b"split"
    data = await asyncio.to_thread(talk, [split[:40], split[40:]], b"agent.registered")
    assert data.startswith(b"HTTP/1.1 101 ") and b'"id":"split"' in data
    data = await asyncio.to_thread(talk, [request % b"eager" + join], b"space.joined")
    assert data.startswith(b"HTTP/1.1 101 ")
    assert b"agent.registered" in data and b'"space":"pieces"' in data


async def test_handshakes_in_progress_are_bounded(hub):
    server = await hub(max_handshakes=20, handshake_timeout=30)
    socks = await asyncio.to_thread(_stall, server.port, 20 + 20 * LINE_FACTOR + 10)
    try:

        def closed_by_hub(s: socket.socket) -> bool:
            s.settimeout(5)
            try:
                return s.recv(1) == b""
            except (ConnectionResetError, TimeoutError, OSError) as exc:
                return not isinstance(exc, TimeoutError)

        # 20 in their handshake, 80 waiting in line (LINE_FACTOR); the ten beyond are
        # dropped at once.
        cut = await asyncio.to_thread(
            lambda: [closed_by_hub(s) for s in socks[20 + 20 * LINE_FACTOR :]]
        )
        assert all(cut)
        assert server.handshakes.in_progress == 20
        assert server.handshakes.waiting == 20 * LINE_FACTOR
        assert server.handshakes.refused >= 10
    finally:
        for s in socks:
            s.close()


async def test_a_handshake_waiting_in_line_goes_through_when_a_slot_frees(hub):
    """A storm's connections beyond max_handshakes wait their turn, not refused."""
    server = await hub(max_handshakes=2, handshake_timeout=30)
    socks = await asyncio.to_thread(_stall, server.port, 2)
    try:
        async with asyncio.timeout(10):
            while server.handshakes.in_progress < 2:  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.02)
        joining = asyncio.create_task(WsClient.connect(server.url, "patient"))
        async with asyncio.timeout(10):
            while not server.handshakes.waiting:  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.02)
        assert not joining.done()  # both slots are held by the stalled ones
        socks[0].close()  # one stalled handshake ends: its slot passes on
        c = await asyncio.wait_for(joining, 10)
        assert server.handshakes.waiting == 0
        assert server.handshakes.refused == 0
        await c.close()
    finally:
        for s in socks:
            s.close()


async def test_tokens_never_appear_in_the_log(hub_process, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps(TOKENS))
    proc = hub_process(auth_mode="tokens", auth_tokens_file=str(tokens), log_level="debug")
    secrets = [TOKENS["alice"], TOKENS["bob"], "wrong-secret-4d2f"]
    good = await WsClient.connect(proc.url, "alice", token=TOKENS["alice"])
    await good.close()
    for agent, token in (("alice", "wrong-secret-4d2f"), ("bob", TOKENS["bob"])):
        c = await WsClient.connect(proc.url, agent, token=token, registered=False)
        await c.closed()
    await _status(
        f"{proc.url}?agent_id=bob", additional_headers={"Authorization": f"Bearer {TOKENS['bob']}"}
    )
    await _status(f"{proc.url}?agent_id=alice", subprotocols=[f"bearer.{TOKENS['alice']}"])
    await _status(f"{proc.url}?agent_id=bad%20id&token={TOKENS['alice']}")
    await _status(f"{proc.url}?agent_id=x&token=a&token={TOKENS['bob']}")
    proc.stop()
    log = proc.log()
    assert "connection opened" in log and "connection refused" in log
    for secret in secrets:
        assert secret not in log


def _request_then_leave(port: int, agent_id: str, *, reset: bool) -> socket.socket:
    """A complete upgrade request, then the client gives up: a reset (abort)
    or an orderly close."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(
        f"GET /ws?agent_id={agent_id} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    if reset:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return s


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
async def test_a_handshake_whose_client_left_while_waiting_in_line_is_never_upgraded(hub, reset):
    """A storm's client that gave up while its handshake waited in line: when
    the slot frees, its request is not read, nor the agent registered."""
    server = await hub(max_handshakes=1, handshake_timeout=30)
    counters = server.node.counters
    stalled = await asyncio.to_thread(_stall, server.port, 1)
    try:
        async with asyncio.timeout(10):
            while server.handshakes.in_progress < 1:  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.02)
        await asyncio.to_thread(_request_then_leave, server.port, "gone", reset=reset)
        async with asyncio.timeout(10):
            while not server.handshakes.waiting:  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.02)
        stalled[0].close()  # the slot frees: the one in line has its turn
        async with asyncio.timeout(10):
            while server.handshakes.waiting or server.handshakes.in_progress:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        # One who comes after goes through: by then the one that left is done with.
        after = await WsClient.connect(server.url, "after")
        await after.close()
        assert counters.connections_opened == 1, "only the client still there was upgraded"
        assert server.handshakes.abandoned == 1
    finally:
        for s in stalled:
            s.close()


async def test_a_client_that_has_not_written_yet_holds_no_handshake_slot(hub):
    """A storm's connection accepted before its client sent the request does
    not keep one whose request is there waiting in line."""
    server = await hub(max_handshakes=1, handshake_timeout=30)
    silent = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", server.port))
    try:
        async with asyncio.timeout(10):
            while not len(server.deadlines):  # noqa: ASYNC110 - the hub's count
                await asyncio.sleep(0.02)
        c = await WsClient.connect(server.url, "ready-to-talk")  # not held in line for 30 s
        assert server.handshakes.refused == 0
        await c.close()
    finally:
        silent.close()


async def test_clients_that_hang_up_before_their_request_is_whole_cost_one_line_at_debug(
    hub_process,
):
    """A TCP check (connect, close), a half request then a reset: at debug,
    websockets' line for each, never a traceback."""
    proc = hub_process(log_level="debug")
    port = proc.settings["port"]
    socket.create_connection(("127.0.0.1", port)).close()
    half = socket.create_connection(("127.0.0.1", port))
    half.sendall(b"GET /ws?agent_id=x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    half.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    half.close()  # a reset
    c = await WsClient.connect(proc.url, "after")  # the hub went on
    await c.close()
    proc.stop()
    log = proc.log()
    hangups = [line for line in log.splitlines() if "no valid HTTP request" in line]
    assert len(hangups) == 2, log
    assert all("connection closed while reading HTTP" in line for line in hangups), hangups
    assert "Traceback" not in log, log
