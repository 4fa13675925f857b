"""Liveness: what keeps a connection, and how fast a dead holder gives its id up."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest

from agora_client import Client, Event
from protocol.errors import CloseCode, ErrorCode
from tests.support.wsclient import WsClient

TIMEOUT = 10.0


async def next_status(sub, agent_id: str, timeout: float = TIMEOUT) -> Event:
    async with asyncio.timeout(timeout):
        while True:
            event = await sub.get()
            if event.data["agent"]["id"] == agent_id:
                return event


async def status_until(sub, agent_id: str, timeout: float = TIMEOUT) -> list[tuple[str, str]]:
    """(event, agent id) of every status event up to ``agent_id``'s online."""
    seen = []
    async with asyncio.timeout(timeout):
        while True:
            event = await sub.get()
            seen.append((event.data["event"], event.data["agent"]["id"]))
            if seen[-1] == ("online", agent_id):
                return seen


async def test_websocket_pings_count_as_liveness(hub):
    """Regression: a client pinging every 150 ms but sending no JSON was closed 4408."""
    server = await hub(heartbeat_interval=0.3, heartbeat_timeout=1.0)
    c = await WsClient.connect(server.url, "pinger")

    async def ping_for(seconds: float) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            await c.ws.ping()
            await asyncio.sleep(0.15)

    await ping_for(3.0)  # three heartbeat timeouts of nothing but pings
    assert c.ws.close_code is None
    assert (await c.request({"type": "agent.heartbeat"}))["type"] == "agent.heartbeat"
    # Silent for real (no frame at all): closed for it.
    code, frames = await c.closed(timeout=TIMEOUT)
    assert code == 4408 and frames[-1]["code"] == "HEARTBEAT_TIMEOUT"


async def test_a_half_dead_holder_is_replaced_within_its_allowance(hub):
    """Regression: the newcomer waited out the whole probe timeout (and the closing
    handshake of the holder the hub had already closed for silence)."""
    server = await hub(
        heartbeat_interval=0.5,
        heartbeat_timeout=1.0,
        liveness_probe_timeout=30.0,
        close_timeout=10.0,
    )
    holder = await WsClient.connect(server.url, "alice")
    holder.ws.transport.pause_reading()  # stops reading: no pong, no heartbeat
    loop = asyncio.get_running_loop()
    started = loop.time()
    newcomer = await WsClient.connect(server.url, "alice")
    elapsed = loop.time() - started
    assert newcomer.registered is not None
    # At most the holder's remaining allowance (1 s) plus cleanup; the probe
    # timeout (30 s) and the holder's close timeout (10 s) are not waited out.
    assert elapsed < 5.0, elapsed
    assert (await newcomer.request({"type": "agent.heartbeat"}))["type"] == "agent.heartbeat"
    holder.ws.transport.abort()
    await newcomer.close()


async def test_a_holder_closed_by_the_hub_answers_the_probe_at_once(hub):
    """The holder keeps heartbeating (a long allowance) but never answers pings,
    so the probe runs; when the hub closes the holder meanwhile the probe ends."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=30.0)
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    holder.ws.transport.pause_reading()
    peer = server.node.registry.connections[holder.registered["agent"]["connection_id"]]
    started = asyncio.get_running_loop().time()
    pending = asyncio.ensure_future(WsClient.connect(server.url, "alice"))
    async with asyncio.timeout(TIMEOUT):
        while peer._ending is None:  # noqa: ASYNC110 (the probe of the holder has begun)
            await asyncio.sleep(0.01)  # polling hub state: there is no event for it
    # The hub gives up on the holder for a reason of its own.
    peer.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "closed by the test")
    newcomer = await asyncio.wait_for(pending, TIMEOUT)
    assert asyncio.get_running_loop().time() - started < 10.0
    assert newcomer.registered is not None
    holder.ws.transport.abort()
    await newcomer.close()


async def test_an_evicted_holder_is_told_and_closed_4408(hub):
    """A holder that failed the liveness probe but still reads its socket
    later gets what the docs promise: error HEARTBEAT_TIMEOUT, then 4408."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=0.5)
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    holder.ws.transport.pause_reading()  # deaf to pings for a while
    newcomer = await WsClient.connect(server.url, "alice")
    assert newcomer.registered is not None
    holder.ws.transport.resume_reading()
    code, frames = await holder.closed(timeout=TIMEOUT)
    assert code == 4408, (code, frames)
    assert frames[-1]["type"] == "error" and frames[-1]["code"] == "HEARTBEAT_TIMEOUT"
    await newcomer.close()


async def test_a_client_that_gave_up_during_the_claim_is_never_announced(hub, clients):
    """Regression: the hub registered a connection its client had abandoned while the
    id was being claimed: watchers saw a phantom online/offline pair."""
    server = await hub(heartbeat_interval=0.5, heartbeat_timeout=30.0, liveness_probe_timeout=1.0)
    watcher = await clients(server, "watcher")
    await watcher.join("agent.status")
    status = watcher.events("agent.status")
    holder = await WsClient.connect(server.url, "alice", heartbeat=True)
    assert (await next_status(status, "alice")).data["event"] == "online"
    holder.ws.transport.pause_reading()  # alive by heartbeats, deaf to pings
    quitter = await WsClient.connect(server.url, "alice", registered=False)
    quitter.ws.transport.abort()  # gives up before the probe (1 s) ends
    # The probe fails: the holder is evicted...
    assert (await next_status(status, "alice")).data["event"] == "offline"
    # ...and the newcomer, gone meanwhile, is never announced.
    await clients(server, "marker")
    assert await status_until(status, "marker") == [("online", "marker")]
    # The id is free: the abandoned connection holds nothing.
    back = await clients(server, "alice")
    assert back.connected
    holder.ws.transport.abort()


# ── across nodes ────────────────────────────────────────────────────────────

CLUSTER = {
    "heartbeat_interval": 0.5,
    "heartbeat_timeout": 2.0,
    "rate_limit": 10_000,
    "rate_burst": 10_000,
}


@pytest.mark.redis
async def test_reclaiming_after_the_holders_node_was_killed(redis_server, hub_process, clients):
    """Regression: 11 s to reclaim an id held on a killed node (the SDK gives up after
    10 s), then a phantom online/offline pair and a duplicate offline. The dead
    connection's ``offline`` comes once, before the new one's ``online``."""
    settings = {**CLUSTER, "redis_url": redis_server.url, "liveness_probe_timeout": 5.0}
    n0 = hub_process(node_id="n0", **settings)
    n1 = hub_process(node_id="n1", **settings)
    watcher = await clients(n1.url, "watcher")
    await watcher.join("agent.status")
    await watcher.join("general")
    status = watcher.events("agent.status")
    members = watcher.events("general", members=True)
    victim = Client(n0.url, "alice")
    await victim.connect()
    await victim.join("general")
    assert (await next_status(status, "alice")).data["event"] == "online"
    os.kill(n0.proc.pid, signal.SIGKILL)
    loop = asyncio.get_running_loop()
    started = loop.time()
    back = await clients(n1.url, "alice", open_timeout=10.0)
    assert loop.time() - started < 5.0  # the node is gone: no probe to wait out
    # The reaper takes the dead connection out of "general" (alice did not rejoin).
    async with asyncio.timeout(20):
        while getattr(await members.get(), "left", None) != "alice":
            pass
    await clients(n1.url, "marker")
    seen = await status_until(status, "marker", timeout=20)
    assert seen == [("offline", "alice"), ("online", "alice"), ("online", "marker")]
    assert back.connected and await back.spaces()
    with contextlib.suppress(Exception):
        await victim.aclose()


async def test_the_sdk_heartbeat_is_a_valid_message(hub, clients):
    """Regression: the SDK's heartbeat frame was not JSON (each one got an error)."""
    server = await hub(heartbeat_interval=0.2, heartbeat_timeout=5.0)
    counters = server.node.counters
    await clients(server, "idle")
    async with asyncio.timeout(TIMEOUT):
        while counters.messages_in < 3:  # noqa: ASYNC110 (hub counters: no event to wait on)
            await asyncio.sleep(0.05)
    assert sum(counters.errors.values()) == 0
