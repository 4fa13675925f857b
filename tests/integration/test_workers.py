"""`agora-hub serve --workers 2`: two processes on one port, coordinated by Redis.

The agents are the project's own SDK (`agora_client.Client`), heartbeating on
the hub's interval like any real agent.
"""

import asyncio
import signal
import time
from typing import Any

import pytest

from agora_client import ConnectionClosed

pytestmark = pytest.mark.redis


async def closed_by_hub(sub: Any, timeout: float = 20) -> ConnectionClosed:
    """Read ``sub`` until the connection is lost; the error it ends with."""
    with pytest.raises(ConnectionClosed) as info:
        async with asyncio.timeout(timeout):
            async for _ in sub:
                pass
    return info.value


async def test_two_workers_share_the_port_and_the_spaces(redis_server, hub_process, clients):
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
    agents = [await clients(proc.url, f"w-{i}") for i in range(16)]
    tags = {c.registration.connection_id.split("-")[1] for c in agents}
    assert len(tags) == 2, "the kernel spreads connections over both workers"
    for c in agents:
        await c.join("shared")
    received = [c.events("shared") for c in agents]
    echo = await agents[0].publish("shared", {})
    got = await asyncio.gather(*(sub.get(timeout=10) for sub in received[1:]))
    assert {(g.event_id, g.seq) for g in got} == {(echo.event_id, echo.seq)}
    nodes = {e["node"] for e in proc.log_lines() if e.get("event") == "hub started"}
    assert nodes == {"multi-w0", "multi-w1"}

    proc.proc.send_signal(signal.SIGTERM)
    errors = await asyncio.gather(*(closed_by_hub(sub) for sub in received))
    assert {e.close_code for e in errors} == {1001}
    assert {e.code for e in errors} == {"UNAVAILABLE"}  # the hub said why: shutting down
    assert await asyncio.to_thread(proc.proc.wait, 30) == 0
