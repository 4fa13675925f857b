"""Real nginx and HAProxy, with the configs from deploy/, in front of two nodes.

The proxies run under an ordinary file-descriptor limit (see
tests/support/proxies.py). The agents are the project's own SDK
(`agora_client.Client`), heartbeating on the hub's interval like any real agent.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from hub.config.settings import Settings
from tests.support.proxies import HAProxy, Nginx, NodePorts, find_binary
from tests.support.servers import free_port

CLUSTER = {"heartbeat_interval": 0.5, "heartbeat_timeout": 3.0}
HAS_HTTP_PORT = "http_port" in Settings.model_fields
#: A space with the A2A and MCP gateways on (the nodes of the routes test).
GATEWAYS = "desk"
# Requests the HTTP port answers without changing anything: unknown spaces,
# malformed bodies, the identity document, the gateways' cards.
HTTP_ROUTES = [
    ("GET", "/identity", None),
    ("POST", "/agora/no-such-space", b"{}"),
    ("GET", "/agora/no-such-space/wellknown", None),
    ("POST", "/envelope/no-such-space", b"not json"),
    ("POST", "/agentprotocol", b"not json"),
    ("POST", "/agentprotocol/no-such-space", b"not json"),
    ("GET", "/api/", None),
    ("GET", "/admin", None),
    ("POST", "/mcp", b"not json"),
    ("GET", f"/a2a/{GATEWAYS}/.well-known/agent-card.json", None),
    ("POST", "/a2a/no-such-space", b"{}"),
    ("GET", "/.well-known/agent-card.json", None),
]


@pytest.fixture(params=[Nginx, HAProxy], ids=["nginx", "haproxy"])
def proxy_class(request):
    return request.param, _binary(request.param.kind)


def _binary(kind: str) -> str:
    binary = find_binary(kind)
    if binary is None:
        from tests.conftest import IN_CI

        if IN_CI:
            pytest.fail(f"{kind} is not installed: .ci/run installs it")
        pytest.skip(f"{kind} is not installed")
    return binary


def _node_settings() -> dict[str, Any]:
    # Two nodes on one host must not share the default http_port.
    return {"http_port": free_port()} if HAS_HTTP_PORT else {}


def _ports(node) -> NodePorts:
    return NodePorts(node.settings["port"], node.settings.get("http_port"))


def _request(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.redis
async def test_clients_through_the_balancer_reach_each_other(
    proxy_class, redis_server, hub_process, clients
):
    cls, binary = proxy_class
    nodes = [
        hub_process(redis_url=redis_server.url, node_id=f"lb{i}", **CLUSTER, **_node_settings())
        for i in range(2)
    ]
    proxy = cls(binary, [_ports(n) for n in nodes]).start()
    try:
        if cls is HAProxy:
            check = proxy.check()
            assert check.returncode == 0, check.stdout + check.stderr
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
        # Only the routes in the config are proxied; node endpoints are not.
        status, _ = await asyncio.to_thread(_request, "GET", f"{proxy.http}/metrics")
        assert status == 404
    finally:
        proxy.stop()


async def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


@pytest.mark.redis
async def test_haproxy_health_checks_readyz(redis_server, hub_process, clients):
    """Nodes that lose Redis answer /readyz 503: HAProxy takes them out, then back."""
    nodes = [
        hub_process(redis_url=redis_server.url, node_id=f"hc{i}", **CLUSTER, **_node_settings())
        for i in range(2)
    ]
    proxy = HAProxy(_binary("haproxy"), [_ports(n) for n in nodes]).start()
    no_server = b"No server is available"

    def all_out() -> bool:
        status, body = _request("GET", proxy.url.replace("ws://", "http://"))
        return status == 503 and no_server in body

    try:
        await clients(proxy.url, "before")
        redis_server.kill()
        await _wait_for(all_out, 30, f"HAProxy to mark both nodes down:\n{proxy.output()}")
        redis_server.start()
        await _wait_for(lambda: not all_out(), 30, f"nodes back in HAProxy:\n{proxy.output()}")
        after = await clients(proxy.url, "after")
        assert after.connected
    finally:
        proxy.stop()


def test_http_routes_reach_the_http_port(proxy_class, hub_process, tmp_path):
    if not HAS_HTTP_PORT:
        pytest.skip("the hub has no http_port setting yet: bridge routes cannot be exercised")
    cls, binary = proxy_class
    config = tmp_path / "hub.toml"
    config.write_text(
        f'trusted_proxies = ["127.0.0.1"]\n[[spaces]]\nid = "{GATEWAYS}"\na2a = true\nmcp = true\n'
    )
    nodes = [
        hub_process(node_id=f"http{i}", config=str(config), **_node_settings()) for i in range(2)
    ]
    proxy = cls(binary, [_ports(n) for n in nodes]).start()
    try:
        ws_port_404 = _request("GET", f"{nodes[0].http}/no-such-route")
        proxy_404 = _request("GET", f"{proxy.http}/no-such-route")
        direct = f"http://127.0.0.1:{nodes[0].settings['http_port']}"
        for method, path, body in HTTP_ROUTES:
            want, _ = _request(method, direct + path, body)
            got, text = _request(method, proxy.http + path, body)
            assert got == want, f"{method} {path}: {got} through the proxy, {want} direct"
            assert (got, text) != ws_port_404, f"{path} went to the WebSocket port"
            assert (got, text) != proxy_404, f"{path} is not routed by the proxy"
        status, identity = _request("GET", f"{proxy.http}/identity")
        assert status == 200 and b'"did"' in identity
        # The card names the balancer's address, whatever host a client claims.
        card_url = f"{proxy.http}/a2a/{GATEWAYS}/.well-known/agent-card.json"
        spoofed = urllib.request.Request(card_url, headers={"X-Forwarded-Host": "evil.example"})
        with urllib.request.urlopen(spoofed, timeout=10) as resp:
            card = json.loads(resp.read())
        url = card["supportedInterfaces"][0]["url"]
        assert url == f"{proxy.http}/a2a/{GATEWAYS}", card["supportedInterfaces"]
    finally:
        proxy.stop()
