"""Operating `agora-hub serve --workers 2`: every scrape shows both workers'
metrics, and SIGHUP to the parent reloads every worker without dropping anyone."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hub.process.worker_metrics import SNAPSHOT_INTERVAL
from tests.support.wsclient import WsClient

pytestmark = pytest.mark.redis

# A generous heartbeat timeout: on a starved machine a late heartbeat must not
# close a connection and change the figures under test.
WORKERS = {"workers": 2, "node_id": "multi", "heartbeat_interval": 0.5, "heartbeat_timeout": 30}


async def started(proc: Any, count: int = 2, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while sum(e.get("event") == "hub started" for e in proc.log_lines()) < count:
        assert time.monotonic() < deadline, proc.log()
        await asyncio.sleep(0.1)  # polling the log file of another process


def scrape(url: str) -> tuple[str, dict[str, dict[tuple, float]]]:
    """(answering worker from the header, {sample name: {labels: value}})."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        worker = resp.headers["Agora-Hub-Worker"]
        text = resp.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return worker, samples


def per_worker(samples: dict[str, dict[tuple, float]], name: str) -> dict[str, float]:
    return {dict(labels)["worker"]: v for labels, v in samples.get(name, {}).items()}


async def test_every_scrape_shows_every_worker(redis_server, hub_process):
    proc = hub_process(redis_url=redis_server.url, **WORKERS)
    await started(proc)
    agents = [await WsClient.connect(proc.url, f"m-{i}", heartbeat=True) for i in range(16)]
    http_url = proc.http_url

    complete: set[str] = set()

    def settled() -> bool:
        # Siblings' figures come from snapshots (about a second old, more on a
        # starved machine): wait until a scrape answered by *each* worker adds
        # up, i.e. both workers have written a snapshot since the last connect.
        worker, samples = scrape(proc.http)
        if sum(per_worker(samples, "agora_hub_connections").values()) == 16:
            complete.add(worker)
        return complete == {"0", "1"}

    deadline = time.monotonic() + 30
    while not await asyncio.to_thread(settled):
        assert time.monotonic() < deadline, "the workers' figures never added up"
        await asyncio.sleep(0.2)

    answered = set()
    for i in range(20):  # a new TCP connection each: the kernel picks the worker
        worker, samples = await asyncio.to_thread(scrape, proc.http if i % 2 else http_url)
        answered.add(worker)
        assert samples["agora_hub_metrics_worker"][()] == int(worker)
        connections = per_worker(samples, "agora_hub_connections")
        assert set(connections) == {"0", "1"}, samples
        assert sum(connections.values()) == 16
        assert all(n > 0 for n in connections.values()), "the kernel spreads connections"
        opened = per_worker(samples, "agora_hub_connections_opened_total")
        assert sum(opened.values()) == 16
        nodes = {dict(k)["node"] for k in samples["agora_hub_worker_info"]}
        assert nodes == {"multi-w0", "multi-w1"}
        ages = per_worker(samples, "agora_hub_worker_snapshot_age_seconds")
        assert ages[worker] == 0 and set(ages) == {"0", "1"}
    assert answered == {"0", "1"}, "twenty scrapes should reach both workers"
    for a in agents:
        await a.close()


async def test_fifty_scrapes_in_a_row_count_every_connection_at_once(redis_server, hub_process):
    """No settling: right after the agents connect (and after some leave),
    every scrape — whichever worker answers — counts them all, each worker's
    figures current (the answering worker asks the other for them)."""
    proc = hub_process(redis_url=redis_server.url, **WORKERS)
    await started(proc)
    # The kernel spreads connections over both workers by a hash of their
    # addresses: connect until each worker holds some (6 were all on one
    # worker about one run in thirty).
    agents: list[Any] = []
    tags: set[str] = set()
    while len(agents) < 6 or len(tags) < 2:
        assert len(agents) < 40, "the kernel never spread connections over both workers"
        agents.append(await WsClient.connect(proc.url, f"s-{len(agents)}", heartbeat=True))
        tags.add(agents[-1].registered["agent"]["connection_id"].split("-")[1])
    everyone, half = len(agents), len(agents) // 2

    async def fifty(expected: int) -> set[str]:
        answered = set()
        for i in range(50):
            worker, samples = await asyncio.to_thread(scrape, proc.http if i % 2 else proc.http_url)
            answered.add(worker)
            connections = per_worker(samples, "agora_hub_connections")
            assert set(connections) == {"0", "1"}, (i, samples)
            assert sum(connections.values()) == expected, (i, worker, connections)
            ages = per_worker(samples, "agora_hub_worker_snapshot_age_seconds")
            assert max(ages.values()) < SNAPSHOT_INTERVAL, (i, worker, ages)
        return answered

    answered = await fifty(everyone)
    for a in agents[:half]:
        await a.close()
    # A closed connection leaves its worker's count once its handler has ended
    # (the client may hear the close first): wait until one scrape says so.
    deadline = time.monotonic() + 20
    while sum(per_worker((await asyncio.to_thread(scrape, proc.http))[1],
                         "agora_hub_connections").values()) != everyone - half:  # fmt: skip
        assert time.monotonic() < deadline, "the closes were never counted"
    answered |= await fifty(everyone - half)
    assert answered == {"0", "1"}, "a hundred scrapes should reach both workers"
    for a in agents[half:]:
        await a.close()


async def test_sighup_to_the_parent_reloads_every_worker(tmp_path, redis_server, hub_process):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({f"old-{i}": "t" for i in range(8)}))
    proc = hub_process(
        redis_url=redis_server.url,
        auth_mode="tokens",
        auth_tokens_file=str(tokens),
        **WORKERS,
    )
    await started(proc)
    old = [
        await WsClient.connect(proc.url, f"old-{i}", token="t", heartbeat=True) for i in range(8)
    ]
    for c in old:
        await c.join("lobby")

    aside = tmp_path / "tokens.new"
    aside.write_bytes(
        orjson.dumps({**{f"old-{i}": "t" for i in range(4)}, **{f"new-{i}": "t" for i in range(6)}})
    )
    aside.replace(tokens)
    proc.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while True:
        reloaded = {e["node"] for e in proc.log_lines() if e.get("event") == "reloaded"}
        if reloaded == {"multi-w0", "multi-w1"}:
            break
        assert time.monotonic() < deadline, proc.log()
        await asyncio.sleep(0.1)  # polling the log file of another process
    assert proc.proc.poll() is None

    # Everyone stayed connected, the removed ids included (they authenticated before).
    for c in old:
        assert (await c.request({"type": "space.list"}))["type"] == "space.list"
    # New connections, on whichever worker, see the new file.
    for i in range(6):
        c = await WsClient.connect(proc.url, f"new-{i}", token="t")
        await c.close()
    for i in (4, 5, 6, 7):
        gone = await WsClient.connect(proc.url, f"old-{i}", token="t", registered=False)
        code, _ = await gone.closed()
        assert code == 4401
    for c in old:
        await c.close()
    assert proc.stop() == 0


async def test_a_sigterm_while_a_dead_worker_waits_to_restart_stops_everything(
    redis_server, hub_process
):
    """SIGTERM in the pause before a crashed worker is restarted: nothing is
    started any more, and every worker stops by itself (an outside audit: a
    new worker started after the SIGTERM, took clients, and was killed at the
    deadline with no close for them)."""
    proc = hub_process(redis_url=redis_server.url, **WORKERS)
    await started(proc)
    (pids,) = [e["pids"] for e in proc.log_lines() if e.get("event") == "workers started"]
    os.kill(pids[0], signal.SIGKILL)
    async with asyncio.timeout(30):
        while not any(e.get("event") == "worker died; restarting" for e in proc.log_lines()):  # noqa: ASYNC110 (another process's log)
            await asyncio.sleep(0.02)
    proc.proc.send_signal(signal.SIGTERM)  # within the pause (1 s) before the restart
    status = await asyncio.to_thread(proc.proc.wait, 60)
    events = [e.get("event") for e in proc.log_lines()]
    assert status == 0, proc.log()
    assert "worker did not stop in time; killed" not in events, proc.log()
