"""A node killed with ``kill -9``: its agents are gone from the others' view in
seconds (contract §8) — two real ``agora-hub serve`` processes, a real redis-server."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from agora_client import Client, InvalidRequest, MembersChanged

pytestmark = pytest.mark.redis

SPACE = "general"


async def next_matching(sub: Any, predicate: Callable[[Any], bool], timeout: float) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            item = await sub.get()
            if predicate(item):
                return item


async def _kill_and_time_departures(n0: Any, n1: Any, clients: Any) -> tuple[float, Client]:
    """``doomed`` on n0, ``survivor`` on n1; kill n0; seconds until the survivor
    has both the ``space.members`` left and the ``agent.status`` offline."""
    survivor = await clients(n1.url, "survivor")
    await survivor.join(SPACE)
    await survivor.join("agent.status")
    members = survivor.events(SPACE, members=True)
    status = survivor.events("agent.status")
    doomed = await clients(n0.url, "doomed")
    await doomed.join(SPACE)
    await next_matching(members, lambda m: isinstance(m, MembersChanged), timeout=10)
    # Addressed to the doomed agent: accepted while it is a member.
    await survivor.publish(SPACE, "are you there?", to="doomed")
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    os.kill(n0.proc.pid, signal.SIGKILL)
    left, offline = await asyncio.gather(
        next_matching(members, lambda m: isinstance(m, MembersChanged) and m.left == "doomed", 30),
        next_matching(status, lambda e: e.data.get("event") == "offline", 30),
    )
    elapsed = loop.time() - killed_at
    assert left.members == ["survivor"] and left.member_count == 1
    assert offline.sender == "@hub" and offline.data["agent"]["id"] == "doomed"
    # Not a member any more: an addressed publish to it is refused, not lost.
    with pytest.raises(InvalidRequest, match="not members"):
        await survivor.publish(SPACE, "hello?", to="doomed")
    return elapsed, survivor


async def test_a_killed_nodes_agents_are_gone_within_10_s_on_default_settings(
    redis_server, hub_process, clients
):
    # The agents' heartbeats on their defaults too (30 s / 60 s): the node's own
    # beat (node_heartbeat_interval 1 s, node_heartbeat_timeout 5 s) decides.
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 30, "heartbeat_timeout": 60}
    n0 = hub_process(node_id="node0", **settings)
    n1 = hub_process(node_id="node1", **settings)
    elapsed, _ = await _kill_and_time_departures(n0, n1, clients)
    assert elapsed < 10.0, f"departures took {elapsed:.1f} s"


async def test_sub_second_node_liveness_settings_find_a_dead_node_in_about_a_second(
    redis_server, hub_process, clients
):
    settings = {
        "redis_url": redis_server.url,
        "node_heartbeat_interval": 0.2,
        "node_heartbeat_timeout": 0.8,
    }
    n0 = hub_process(node_id="node0", **settings)
    n1 = hub_process(node_id="node1", **settings)
    elapsed, survivor = await _kill_and_time_departures(n0, n1, clients)
    assert elapsed < 5.0, f"departures took {elapsed:.1f} s"  # ~1 s; generous for a busy box
    # The id is free again, on the surviving node, and addressable there.
    back = await clients(n1.url, "doomed")
    await back.join(SPACE)
    assert (await survivor.publish(SPACE, "welcome back", to="doomed")).seq > 0
