"""The client address a hub logs and limits by: the TCP peer, or — only from a
trusted proxy — the client that proxy forwards for.

127.0.0.1 is the trusted proxy here; 127.0.0.2 (also loopback on Linux) is an
untrusted client that tries to claim an address anyway.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.support.proxies import HAProxy, Nginx, NodePorts, find_binary
from tests.support.wsclient import WsClient

UNTRUSTED = "127.0.0.2"


async def opened_line(proc: Any, agent_id: str, timeout: float = 10) -> dict[str, Any]:
    """The hub's "connection opened" log line of ``agent_id``."""
    deadline = time.monotonic() + timeout
    while True:
        for entry in proc.log_lines():
            if entry.get("event") == "connection opened" and entry.get("agent_id") == agent_id:
                return entry
        assert time.monotonic() < deadline, proc.log()
        await asyncio.sleep(0.1)  # polling the log file of another process


def local(client: WsClient) -> str:
    host, port = client.ws.transport.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def test_forwarded_headers_are_believed_only_from_trusted_proxies(hub_process):
    proc = hub_process(trusted_proxies="127.0.0.1")
    spoof = {"X-Forwarded-For": "198.51.100.66, 203.0.113.9"}

    # From a trusted proxy: the rightmost hop it vouches for is the client.
    via_proxy = await WsClient.connect(proc.url, "via-proxy", additional_headers=spoof)
    line = await opened_line(proc, "via-proxy")
    assert line["remote"] == "203.0.113.9"
    assert line["via"] == local(via_proxy)

    rfc7239 = {"Forwarded": 'for=198.51.100.66, for="[2001:db8:cafe::17]:4711";proto=https'}
    await WsClient.connect(proc.url, "rfc7239", additional_headers=rfc7239)
    assert (await opened_line(proc, "rfc7239"))["remote"] == "2001:db8:cafe::17"

    # A trusted peer that forwards nothing is the client itself.
    plain = await WsClient.connect(proc.url, "plain")
    line = await opened_line(proc, "plain")
    assert line["remote"] == local(plain) and "via" not in line

    # From an untrusted peer the same headers are ignored.
    liar = await WsClient.connect(
        proc.url, "liar", additional_headers=spoof, local_addr=(UNTRUSTED, 0)
    )
    line = await opened_line(proc, "liar")
    assert line["remote"] == local(liar) and line["remote"].startswith(f"{UNTRUSTED}:")
    assert "via" not in line


async def test_without_trusted_proxies_no_header_is_believed(hub_process):
    proc = hub_process()
    c = await WsClient.connect(proc.url, "c", additional_headers={"X-Forwarded-For": "192.0.2.1"})
    line = await opened_line(proc, "c")
    assert line["remote"] == local(c) and "via" not in line


async def test_the_handshake_exposes_the_client_address(hub):
    """What per-client limits key on: the connection's ``client``, set at the
    handshake by ``HubServer.client_address``."""
    server = await hub(trusted_proxies=["127.0.0.1"])
    await WsClient.connect(server.url, "a", additional_headers={"X-Forwarded-For": "192.0.2.1"})
    await WsClient.connect(server.url, "b", local_addr=(UNTRUSTED, 0))
    conns = {c.agent_id: c for c in server.node.registry}
    assert conns["a"].client.ip == "192.0.2.1" and conns["a"].client.via.startswith("127.0.0.1:")
    assert conns["b"].client.ip == UNTRUSTED and conns["b"].client.via is None


@pytest.mark.parametrize("cls", [Nginx, HAProxy], ids=["nginx", "haproxy"])
async def test_behind_the_shipped_balancer_the_hub_logs_the_real_client(cls, hub_process):
    binary = find_binary(cls.kind)
    if binary is None:
        from tests.conftest import IN_CI

        if IN_CI:
            pytest.fail(f"{cls.kind} is not installed")
        pytest.skip(f"{cls.kind} is not installed")
    node = hub_process(trusted_proxies="127.0.0.1")
    proxy = cls(binary, [NodePorts(node.settings["port"], node.settings["http_port"])]).start()
    try:
        # The client lies; the edge proxy replaces the header with what it saw.
        liar = await WsClient.connect(
            proxy.url,
            "behind-lb",
            additional_headers={"X-Forwarded-For": "198.51.100.66"},
            local_addr=(UNTRUSTED, 0),
        )
        line = await opened_line(node, "behind-lb")
        assert line["remote"] == UNTRUSTED, proxy.output()
        assert line["via"].startswith("127.0.0.1:")
        await liar.close()
    finally:
        proxy.stop()
