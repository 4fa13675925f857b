"""Real nginx and HAProxy, with the configs from deploy/, in front of two nodes.

The agents are the project's own SDK (`hub.client.Client`), heartbeating on
the hub's interval like any real agent.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from hub.client import Client
from tests.support.proxies import HAProxy, Nginx, find_binary

pytestmark = pytest.mark.redis

CLUSTER = {"heartbeat_interval": 0.5, "heartbeat_timeout": 3.0}


@pytest.fixture(params=[Nginx, HAProxy], ids=["nginx", "haproxy"])
def proxy_class(request):
    binary = find_binary(request.param.kind)
    if binary is None:
        from tests.conftest import IN_CI

        if IN_CI:
            pytest.fail(f"{request.param.kind} is not installed: .ci/run installs it")
        pytest.skip(f"{request.param.kind} is not installed")
    return request.param, binary


@pytest.fixture
async def connect() -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``c = await connect(url, agent_id)``; all closed afterwards."""
    opened: list[Client] = []

    async def _connect(url: str, agent_id: str, **options: Any) -> Client:
        client = Client(url, agent_id, **options)
        opened.append(client)
        return await client.connect()

    yield _connect
    await asyncio.gather(*(c.aclose() for c in opened))


async def test_clients_through_the_balancer_reach_each_other(
    proxy_class, redis_server, hub_process, connect
):
    cls, binary = proxy_class
    nodes = [hub_process(redis_url=redis_server.url, node_id=f"lb{i}", **CLUSTER) for i in range(2)]
    proxy = cls(binary, [n.settings["port"] for n in nodes]).start()
    try:
        if cls is HAProxy:
            assert proxy.check().returncode == 0, proxy.check().stderr
        clients = [await connect(proxy.url, f"via-lb-{i}") for i in range(6)]
        tags = {c.registration.connection_id.split("-")[1] for c in clients}
        assert len(tags) == 2, "the balancer should use both nodes"
        for c in clients:
            await c.join("general")
        received = [c.events("general") for c in clients[1:]]
        echo = await clients[0].publish("general", {"text": "through the balancer"})
        got = await asyncio.gather(*(sub.get(timeout=10) for sub in received))
        assert {g.event_id for g in got} == {echo.event_id}
        assert {g.seq for g in got} == {echo.seq}
        assert {g.sender for g in got} == {"via-lb-0"}
        # A quiet connection survives the proxy's idle timeout thanks to heartbeats.
        assert isinstance(await clients[-1].ping(), int)
        assert all(c.connected for c in clients)
    finally:
        proxy.stop()
