"""Real nginx and HAProxy, with the configs from deploy/, in front of two nodes."""

import asyncio

import pytest

from tests.support.proxies import HAProxy, Nginx, find_binary
from tests.support.wsclient import WsClient as _WsClient

pytestmark = pytest.mark.redis


class WsClient(_WsClient):
    """Cluster tests run for seconds: their clients heartbeat like real ones."""

    @classmethod
    async def connect(cls, *args, **kwargs):
        kwargs.setdefault("heartbeat", True)
        return await super().connect(*args, **kwargs)


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
    proxy_class, redis_server, hub_process
):
    cls, binary = proxy_class
    nodes = [hub_process(redis_url=redis_server.url, node_id=f"lb{i}", **CLUSTER) for i in range(2)]
    proxy = cls(binary, [n.settings["port"] for n in nodes]).start()
    try:
        if cls is HAProxy:
            assert proxy.check().returncode == 0, proxy.check().stderr
        clients = [await WsClient.connect(proxy.url, f"via-lb-{i}") for i in range(6)]
        tags = {c.registered["agent"]["connection_id"].split("-")[1] for c in clients}
        assert len(tags) == 2, "the balancer should use both nodes"
        for c in clients:
            await c.join("general")
        echo = await clients[0].request(
            {"type": "space.publish", "space": "general", "data": {"text": "through the balancer"}}
        )
        got = await asyncio.gather(
            *(c.wait_for("space.event", event_id=echo["event_id"]) for c in clients[1:])
        )
        assert {g["seq"] for g in got} == {echo["seq"]}
        # A quiet connection survives the proxy's idle timeout thanks to heartbeats.
        hb = await clients[-1].request({"type": "agent.heartbeat"})
        assert hb["type"] == "agent.heartbeat"
    finally:
        proxy.stop()
