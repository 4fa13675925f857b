"""Real nginx and HAProxy, with the configs from deploy/, in front of two nodes.

The agents are the project's own SDK (`hub.client.Client`), heartbeating on
the hub's interval like any real agent.
"""

import asyncio

import pytest

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


async def test_clients_through_the_balancer_reach_each_other(
    proxy_class, redis_server, hub_process, clients
):
    cls, binary = proxy_class
    nodes = [hub_process(redis_url=redis_server.url, node_id=f"lb{i}", **CLUSTER) for i in range(2)]
    proxy = cls(binary, [n.settings["port"] for n in nodes]).start()
    try:
        if cls is HAProxy:
            assert proxy.check().returncode == 0, proxy.check().stderr
        agents = [await clients(proxy.url, f"via-lb-{i}") for i in range(6)]
        tags = {c.registration.connection_id.split("-")[1] for c in agents}
        assert len(tags) == 2, "the balancer should use both nodes"
        for c in agents:
            await c.join("general")
        received = [c.events("general") for c in agents[1:]]
        echo = await agents[0].publish("general", {"text": "through the balancer"})
        got = await asyncio.gather(*(sub.get(timeout=10) for sub in received))
        assert {g.event_id for g in got} == {echo.event_id}
        assert {g.seq for g in got} == {echo.seq}
        assert {g.sender for g in got} == {"via-lb-0"}
        # A quiet connection survives the proxy's idle timeout thanks to heartbeats.
        assert isinstance(await agents[-1].ping(), int)
        assert all(c.connected for c in agents)
    finally:
        proxy.stop()
