"""Scenario ``redis``: the hub on a 3-master Redis Cluster beside the same on one
Redis, and how long a master failover keeps the nodes not ready.

* ``redis-fanout`` / ``redis-latency``: two hub nodes (subscribers alternate
  between them, the publisher on the first), once on one redis-server and
  once on a Redis Cluster of three masters with a replica each (sharded
  pub/sub), in the same run: deliveries per hub CPU-second and p99. Redis
  runs unpinned in both (the cluster's six servers cannot all sit on the
  load generator's core); its CPU is not counted as the hub's.
* ``failover``: two idle hub nodes on a Sentinel setup (a primary, a replica,
  three sentinels; a master is down after 1 s) and on a Redis Cluster (node
  timeout 1 s); the master (for the cluster, the one holding a space's
  slot) is killed with SIGKILL, and the time until ``/readyz`` answers 200
  on every node again is measured. It is mostly the detection time Redis is
  configured with; the hub's own part is reconnecting and resubscribing.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from tests.benchmarks import procs
from tests.benchmarks.procs import ServerProcess, StartFailed
from tests.benchmarks.report import Row, fig, find, fmt, ratio
from tests.benchmarks.scenarios import Target
from tests.support.redis_ha import ClusterSetup, SentinelSetup
from tests.support.servers import RedisServer

MODES = ("one-redis", "redis-cluster")
FAILOVER_MODES = ("sentinel", "redis-cluster")


def _start_setup(mode: str) -> Any:
    binary = procs.redis_binary()
    if binary is None:
        raise StartFailed("redis-server not found (apt-get install redis-server)")
    kind = {"one-redis": RedisServer, "sentinel": SentinelSetup, "redis-cluster": ClusterSetup}
    return kind[mode](binary).start()


def _stop_setup(setup: Any) -> None:
    if isinstance(setup, RedisServer):
        setup.kill()
    else:
        setup.stop()


def _nodes(bench: Any, comp: str, url: str) -> tuple[list[ServerProcess], list[int]]:
    bench._prefix += 1
    prefix = f"benchha{bench._prefix}"
    nodes: list[ServerProcess] = []
    ports: list[int] = []
    try:
        for name in ("a", "b"):
            proc, port = procs.start_hub(
                bench.pinning,
                comp,
                cores=bench.pinning.server_cores,
                extra=[
                    "--redis-url", url, "--redis-prefix", prefix, "--node-id", f"{prefix}-{name}",
                ],
                name=f"hub-{name}",
            )  # fmt: skip
            nodes.append(proc)
            ports.append(port)
    except BaseException:
        for proc in nodes:
            proc.stop(timeout=1.0)
        raise
    return nodes, ports


def _start(bench: Any, comp: str, url: str) -> Callable[[], tuple[Target, list[ServerProcess]]]:
    def start() -> tuple[Target, list[ServerProcess]]:
        nodes, ports = _nodes(bench, comp, url)
        return Target("hub", ports, nodes, comp == "deflate"), nodes

    return start


async def run(bench: Any, comp: str) -> None:
    fan_body, fan_params = bench._fanout_body()
    lat_body, lat_params = bench._latency_body()
    split = {"nodes": 2, "split": "subscribers alternate between nodes; publisher on a"}
    for mode in MODES:
        try:
            setup = await asyncio.to_thread(_start_setup, mode)
        except (StartFailed, RuntimeError, TimeoutError, OSError) as exc:
            for scen in ("redis-fanout", "redis-latency"):
                bench.records.append(
                    {"scenario": scen, "server": mode, "compression": comp, "skipped": str(exc)}
                )
            continue
        try:
            start = _start(bench, comp, setup.url)
            params = {**split, "redis": mode}
            await bench.measure(
                "redis-fanout", mode, comp, start, fan_body, {**fan_params, **params}, True
            )
            await bench.measure(
                "redis-latency", mode, comp, start, lat_body, {**lat_params, **params}, True
            )
        finally:
            await asyncio.to_thread(_stop_setup, setup)
    if comp != "none":
        return  # failover time does not depend on compression
    for mode in FAILOVER_MODES:
        record: dict[str, Any] = {
            "scenario": "failover",
            "server": mode,
            "compression": comp,
            "params": {"nodes": 2, "detection": "down-after / node-timeout 1 s"},
        }
        bench.records.append(record)
        try:
            record["figures"] = await asyncio.to_thread(_failover, bench, comp, mode)
            print(f"failover         {mode:<13} {record['figures']}", flush=True)
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc or 'no detail'}"


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1.0) as r:
            return r.status == 200
    except (urllib.error.HTTPError, OSError):
        return False


def _failover(bench: Any, comp: str, mode: str) -> dict[str, float]:
    setup = _start_setup(mode)
    nodes: list[ServerProcess] = []
    try:
        nodes, ports = _nodes(bench, comp, setup.url)
        key = ("benchha:seq:{room}",) if mode == "redis-cluster" else ()
        killed = time.monotonic()
        old = setup.kill_master(*key)
        seen_down: set[int] = set()
        deadline = killed + 60
        while time.monotonic() < deadline:  # polling an HTTP endpoint
            states = {p: _ready(p) for p in ports}
            seen_down |= {p for p, ok in states.items() if not ok}
            if seen_down == set(ports) and all(states.values()):
                break
            time.sleep(0.02)
        else:
            raise TimeoutError("the nodes were not ready again within 60 s")
        ready_s = time.monotonic() - killed
        setup.wait_failover(old, *key)
        promoted_s = time.monotonic() - killed
        return {"readyz_s": round(ready_s, 2), "promoted_seen_s": round(promoted_s, 2)}
    finally:
        for proc in nodes:
            proc.stop(timeout=5.0)
        _stop_setup(setup)


def rows(records: list[dict], comp: str) -> list[Row]:
    """The table's rows of this scenario (one Redis is the baseline column)."""
    out: list[Row] = []
    one_fan = find(records, "redis-fanout", "one-redis", comp)
    cl_fan = find(records, "redis-fanout", "redis-cluster", comp)
    if one_fan or cl_fan:
        c, o = fig(cl_fan, "deliveries_per_cpu_s"), fig(one_fan, "deliveries_per_cpu_s")
        out.append(
            Row("redis", "cluster vs one Redis: deliveries per hub CPU-s", comp,
                fmt(c), fmt(o), fmt(ratio(c, o), 2), "one Redis in the baseline column")
        )  # fmt: skip
    one_lat = find(records, "redis-latency", "one-redis", comp)
    cl_lat = find(records, "redis-latency", "redis-cluster", comp)
    if one_lat or cl_lat:
        c, o = fig(cl_lat, "p99_ms"), fig(one_lat, "p99_ms")
        out.append(
            Row("redis", "cluster vs one Redis: p99 ms", comp, fmt(c, 2), fmt(o, 2),
                fmt(ratio(c, o), 2))
        )  # fmt: skip
    for mode in FAILOVER_MODES:
        rec = find(records, "failover", mode, comp)
        if rec is not None:
            value = fig(rec, "readyz_s")
            out.append(
                Row("redis", f"{mode}: master killed → /readyz 200 on every node, s", comp,
                    fmt(value, 2) if value is not None else rec.get("error", "?"), "")
            )  # fmt: skip
    return out
