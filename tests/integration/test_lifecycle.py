"""Graceful shutdown and what the hub logs."""

import asyncio
import base64
import os
import signal
import struct

import orjson

from tests.support.servers import start_hub
from tests.support.wsclient import WsClient
from tests.support.wsframes import FIN, OP_CLOSE, OP_TEXT, RawFrame


async def test_shutdown_sends_error_then_1001_to_everyone():
    server = await start_hub(shutdown_timeout=5)
    clients = [await WsClient.connect(server.url, f"c{i}") for i in range(5)]
    await clients[0].join("general")
    await asyncio.wait_for(server.aclose(), 10)
    for c in clients:
        code, frames = await c.closed()
        assert code == 1001
        assert frames[-1]["type"] == "error" and frames[-1]["code"] == "UNAVAILABLE"
    await server.aclose()  # idempotent


async def test_process_sigterm_closes_1001_and_exits_0(hub_process):
    proc = hub_process()
    c = await WsClient.connect(proc.url, "worker")
    await c.join("general")
    for n in range(50):
        await c.request({"type": "space.publish", "space": "general", "data": {"n": n}})
    proc.proc.send_signal(signal.SIGTERM)
    code, _ = await c.closed(timeout=20)
    assert code == 1001
    status = await asyncio.to_thread(proc.proc.wait, 20)
    assert status == 0
    lines = proc.log_lines()
    started = [entry for entry in lines if entry.get("event") == "hub started"]
    assert started and started[0]["url"] == proc.url and started[0]["backplane"] == "memory"
    assert started[0]["node"]
    mine = [entry for entry in lines if entry.get("agent_id") == "worker"]
    # One line when the connection opened, one when it closed — never per message.
    assert [entry["event"] for entry in mine] == ["connection opened", "connection closed"]
    closed = mine[1]
    assert closed["messages_in"] == 51 and closed["close_code"] == 1001
    assert closed["connection_id"] == c.registered["agent"]["connection_id"]
    assert closed["duration"] >= 0


async def _say_and_leave(port: int, agent_id: str, frames: list[dict]) -> None:
    """Connect, then send ``frames`` and a close frame in one write, without
    waiting for any answer: a script that says its piece and goes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    key = base64.b64encode(os.urandom(16))
    writer.write(
        b"GET /ws?agent_id=%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
        % (agent_id.encode(), port, key)
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 101"), head
    key = os.urandom(4)
    wire = [RawFrame(FIN | OP_TEXT, orjson.dumps(f), key=key).wire for f in frames]
    wire.append(RawFrame(FIN | OP_CLOSE, struct.pack("!H", 1000), key=key).wire)
    writer.write(b"".join(wire))
    await asyncio.wait_for(reader.read(), 10)  # the hub's answers, its close, the end
    writer.close()


async def test_what_a_client_sent_before_it_closed_is_carried_out():
    """A join, a publish and the close frame in one write: the join happens
    (announced, then the departure), and the event reaches the members — a
    client that closes does not take back what it sent before."""
    server = await start_hub(member_events_interval=0.2)
    try:
        observer = await WsClient.connect(server.url, "observer")
        observer.start_heartbeat()
        await observer.join("lobby")
        for n in range(3):
            await _say_and_leave(server.port, f"teller{n}", [
                {"type": "space.join", "id": "j", "space": "lobby"},
                {"type": "space.publish", "id": "p", "space": "lobby", "data": {"n": n}},
            ])  # fmt: skip
            joined = event = left = False
            while not left:
                msg = await observer.recv(timeout=10)
                if msg["type"] == "space.members":
                    joined = joined or f"teller{n}" in _as_list(msg.get("joined"))
                    left = f"teller{n}" in _as_list(msg.get("left"))
                elif msg["type"] == "space.event":
                    assert joined, "an event from an agent whose join was not told"
                    assert msg["from"] == f"teller{n}" and msg["data"]["n"] == n
                    event = True
            assert joined and event
    finally:
        await server.aclose()


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [] if value is None else [value]
