"""`agora-hub serve --workers 2`: two processes on one port, coordinated by Redis."""

import asyncio
import signal
import time

import pytest

from tests.support.wsclient import WsClient as _WsClient

pytestmark = pytest.mark.redis


class WsClient(_WsClient):
    """Cluster tests run for seconds: their clients heartbeat like real ones."""

    @classmethod
    async def connect(cls, *args, **kwargs):
        kwargs.setdefault("heartbeat", True)
        return await super().connect(*args, **kwargs)


async def test_two_workers_share_the_port_and_the_spaces(redis_server, hub_process):
    proc = hub_process(
        redis_url=redis_server.url,
        workers=2,
        node_id="multi",
        heartbeat_interval=0.5,
        heartbeat_timeout=3.0,
    )
    deadline = time.monotonic() + 30
    while sum(e.get("event") == "hub started" for e in proc.log_lines()) < 2:
        assert time.monotonic() < deadline, proc.log()
        await asyncio.sleep(0.1)  # polling the log file of another process
    clients = [await WsClient.connect(proc.url, f"w-{i}") for i in range(16)]
    tags = {c.registered["agent"]["connection_id"].split("-")[1] for c in clients}
    assert len(tags) == 2, "the kernel spreads connections over both workers"
    for c in clients:
        await c.join("shared")
    echo = await clients[0].request({"type": "space.publish", "space": "shared", "data": {}})
    await asyncio.gather(
        *(c.wait_for("space.event", event_id=echo["event_id"]) for c in clients[1:])
    )
    nodes = {e["node"] for e in proc.log_lines() if e.get("event") == "hub started"}
    assert nodes == {"multi-w0", "multi-w1"}

    proc.proc.send_signal(signal.SIGTERM)
    codes = await asyncio.gather(*(c.closed(timeout=20) for c in clients))
    assert {code for code, _ in codes} == {1001}
    assert await asyncio.to_thread(proc.proc.wait, 30) == 0
