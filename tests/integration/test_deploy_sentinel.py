"""deploy/sentinel/compose.yaml, checked without a container engine.

The wiring is read from the file (services, what the hub waits for, its
``redis+sentinel://`` URL naming every sentinel and the monitored master, the
grace period); then the file's own Redis commands and sentinel configuration
run for real on loopback — service names and ports mapped to 127.0.0.1 and
free ports — and a hub node given the file's URL (mapped the same way)
becomes ready on them.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hub.config.redis_url import parse_redis_url
from tests.support.redis_ha import _Server
from tests.support.servers import ROOT, free_port, redis_server_binary

COMPOSE = ROOT / "deploy" / "sentinel" / "compose.yaml"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def sentinel_conf(service: dict[str, Any]) -> str:
    script = service["command"][-1]
    return script.split("<<CONF\n", 1)[1].split("\nCONF", 1)[0]


def test_wiring() -> None:
    services = compose()["services"]
    assert set(services) == {
        "redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "hub", "nginx",
    }  # fmt: skip
    hub = services["hub"]
    assert (COMPOSE.parent / hub["build"]["context"] / hub["build"]["dockerfile"]).is_file()
    target = parse_redis_url(hub["environment"]["AGORA_HUB_REDIS_URL"])
    assert target.mode == "sentinel"
    assert {h for h, _ in target.hosts} == {f"sentinel-{i}" for i in (1, 2, 3)}
    assert set(hub["depends_on"]) == {f"sentinel-{i}" for i in (1, 2, 3)}
    grace = float(hub["stop_grace_period"].rstrip("s"))
    assert grace > float(hub["environment"]["AGORA_HUB_SHUTDOWN_TIMEOUT"])
    replica = services["redis-replica"]["command"]
    assert replica[replica.index("--replicaof") + 1] == "redis-primary"
    for i in (1, 2, 3):
        conf = sentinel_conf(services[f"sentinel-{i}"])
        monitor = re.search(r"sentinel monitor (\S+) (\S+) (\d+) (\d+)", conf)
        assert monitor is not None
        assert monitor.group(1) == target.master and monitor.group(2) == "redis-primary"
        assert int(monitor.group(4)) == 2  # quorum: a majority of three
    mount = services["nginx"]["volumes"][0].split(":")[0]
    assert (COMPOSE.parent / mount).resolve() == ROOT / "deploy" / "nginx" / "compose.conf"


@pytest.mark.redis
async def test_the_files_redis_and_sentinels_run_and_a_hub_is_ready_on_them(hub) -> None:
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("redis-server is not installed")  # CI fails a skipped redis test
    services = compose()["services"]
    ports = {name: free_port() for name in services if name.startswith(("redis-", "sentinel-"))}

    def local(args: list[str]) -> list[str]:
        mapped = [a for a in args[1:]]  # without "redis-server"
        for i, a in enumerate(mapped):
            if a in ports:  # a service name: loopback (its port follows where one does)
                mapped[i] = "127.0.0.1"
                if i + 1 < len(mapped) and mapped[i + 1] == "6379":
                    mapped[i + 1] = str(ports[a])
        return mapped

    servers: list[_Server] = []
    node = None
    try:
        for name in ("redis-primary", "redis-replica"):
            servers.append(_Server(binary, ports[name], local(services[name]["command"])).start())
        for i in (1, 2, 3):
            name = f"sentinel-{i}"
            conf = sentinel_conf(services[name])
            conf = conf.replace("port 26379\n", "")
            conf = conf.replace("redis-primary 6379", f"127.0.0.1 {ports['redis-primary']}")
            servers.append(_Server(binary, ports[name], ["--sentinel"], config=conf).start())
        url = services["hub"]["environment"]["AGORA_HUB_REDIS_URL"]
        for i in (1, 2, 3):
            url = url.replace(f"sentinel-{i}:26379", f"127.0.0.1:{ports[f'sentinel-{i}']}")
        node = await hub(redis_url=url, redis_prefix="deploy")
        async with asyncio.timeout(30):
            while not node.node.ready:  # noqa: ASYNC110 (a readiness flag: nothing to await)
                await asyncio.sleep(0.05)
    finally:
        if node is not None:
            await node.aclose()  # before its Redis goes
        for server in servers:
            await asyncio.to_thread(server.remove)


def test_the_compose_path_is_documented() -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    assert str(COMPOSE.relative_to(ROOT)) in readme
    assert Path(ROOT / "docs" / "cluster.md").read_text().count("redis+sentinel://") >= 1
