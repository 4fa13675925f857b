"""Graceful shutdown and what the hub logs."""

import asyncio
import signal

from tests.support.servers import start_hub
from tests.support.wsclient import WsClient


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
