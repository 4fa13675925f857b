"""The listening sockets: the backlog they get (``listen_backlog``, read back
from the kernel with ``ss``), on both ports, with SO_REUSEPORT too."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from hub.config.settings import load_settings
from hub.node.node import Node
from hub.process.os_limits import effective_backlog
from hub.process.server import HubServer
from tests.support.servers import FAST, free_port

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def listen_backlog(port: int) -> int:
    """The backlog of the socket listening on ``port``: ss's Send-Q column."""
    out = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    (line,) = [row for row in out if row.strip()]
    return int(line.split()[2])


async def test_both_ports_listen_with_the_configured_backlog(hub):
    server = await hub(listen_backlog=777, http_port=0)
    assert listen_backlog(server.port) == effective_backlog(777)
    assert listen_backlog(server.http_port) == effective_backlog(777)


async def test_the_default_backlog_is_sized_for_storms(hub):
    server = await hub(http_port=0)
    assert listen_backlog(server.port) == effective_backlog(4096) > 100
    assert listen_backlog(server.http_port) == effective_backlog(4096)


async def test_workers_sharing_a_port_get_the_backlog_too():
    settings = load_settings({**FAST, "port": free_port(), "http_port": 0, "listen_backlog": 555})
    server = HubServer(Node(settings), reuse_port=True)
    await server.start()
    try:
        assert listen_backlog(server.port) == effective_backlog(555)
        assert listen_backlog(server.http_port) == effective_backlog(555)
    finally:
        await server.aclose()


def test_a_started_hub_logs_the_backlog_its_sockets_get(hub_process):
    proc = hub_process(listen_backlog=1234)
    (line,) = [e for e in proc.log_lines() if e["event"] == "listen backlog"] or [
        e for e in proc.log_lines() if "net.core.somaxconn" in e["event"]
    ]
    assert line.get("backlog", line.get("effective")) == effective_backlog(1234)
    assert listen_backlog(proc.settings["port"]) == effective_backlog(1234)
    assert proc.stop() == 0
