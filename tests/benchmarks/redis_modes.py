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
* ``presence`` (its own scenario, ``--only presence``): where membership
  lands on a Redis Cluster of three masters. Two hub nodes (defaults); 10,000
  agents connect, each joins one of 100 spaces, leaves it, disconnects. The
  write commands each master ran meanwhile (``INFO commandstats`` deltas of
  the commands Redis flags ``write``, those run inside scripts included) are
  compared with their mean: contract §21 wants every master within 2x of it
  (between half and twice the mean).
  The nodes' own background writes (liveness, node stats) are measured in an
  idle window before and reported as a rate: bounded by the node count and
  the beat interval, not by the agents.
"""

from __future__ import annotations

import asyncio
import functools
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import redis

from tests.benchmarks import procs
from tests.benchmarks.fleet import fresh_sources
from tests.benchmarks.procs import ServerProcess, StartFailed
from tests.benchmarks.report import Row, fig, find, fmt, ratio
from tests.benchmarks.scenarios import Target, close_all
from tests.benchmarks.wsload import LoadClient
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


# ── where presence lands on a Redis Cluster ────────────────────────────────

#: Within this factor of the mean, per master (contract §21).
SPREAD_TARGET = 2.0
#: Seconds of the idle window that measures the nodes' background writes.
IDLE_WINDOW = 10.0


def _commandstats(port: int) -> dict[str, int]:
    """Calls per command of the Redis on ``port`` (scripts' commands included)."""
    with redis.Redis(port=port) as client:
        stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _write_flagged(port: int, names: set[str]) -> set[str]:
    """Those of ``names`` that Redis flags ``write`` (``COMMAND INFO``)."""
    base = {n: n.split("|")[0] for n in names}
    with redis.Redis(port=port) as client:
        infos = client.execute_command("COMMAND", "INFO", *sorted(set(base.values())))
    flagged = {
        str(cmd): {f.decode() if isinstance(f, bytes) else f for f in info["flags"]}
        for cmd, info in infos.items()
        if info
    }
    return {n for n, b in base.items() if "write" in flagged.get(b, ())}


def _deltas(
    before: dict[int, dict[str, int]], after: dict[int, dict[str, int]]
) -> dict[int, dict[str, int]]:
    return {
        port: {k: v - before[port].get(k, 0) for k, v in calls.items() if v != before[port].get(k)}
        for port, calls in after.items()
    }


def _per_master(deltas: dict[int, dict[str, int]], writes: set[str]) -> dict[str, Any]:
    counted = {p: sum(n for c, n in d.items() if c in writes) for p, d in deltas.items()}
    mean = sum(counted.values()) / max(1, len(counted))
    return {
        "writes": [counted[p] for p in sorted(counted)],
        "scripts": [deltas[p].get("evalsha", 0) + deltas[p].get("eval", 0) for p in sorted(deltas)],
        "publishes": [
            deltas[p].get("spublish", 0) + deltas[p].get("publish", 0) for p in sorted(deltas)
        ],
        "max_over_mean": round(max(counted.values()) / mean, 2) if mean else None,
        "min_over_mean": round(min(counted.values()) / mean, 2) if mean else None,
        "by_command": {str(p): dict(sorted(d.items())) for p, d in sorted(deltas.items())},
    }


async def _agents(ports: list[int], agents: int, spaces: int) -> dict[str, float]:
    """``agents`` connect (alternating nodes), each joins one of ``spaces``,
    then each leaves it, then all disconnect; seconds per phase."""
    sources = fresh_sources(max(2, -(-agents // 5000)))
    # Agents in flight at once: a steady crowd, not a storm (the layout is measured).
    sem = asyncio.Semaphore(64)
    clients: list[LoadClient | None] = [None] * agents
    t0 = time.monotonic()

    async def join(i: int) -> None:
        async with sem:
            client = clients[i] = await LoadClient.connect(
                "127.0.0.1", ports[i % len(ports)], f"/ws?agent_id=pr{i}",
                source=sources[i % len(sources)], skip=(b'"space.members"',),
            )  # fmt: skip
            registered = await client.expect("agent.registered")
            client.keep_alive(registered["heartbeat_interval"] / 2000)
            client.send_json({"type": "space.join", "id": "j", "space": f"pr-{i % spaces}"})
            await client.expect("space.joined", timeout=120)

    async def leave(i: int) -> None:
        client = clients[i]
        assert client is not None
        async with sem:
            client.send_json({"type": "space.leave", "id": "l", "space": f"pr-{i % spaces}"})
            await client.expect("space.left", timeout=120)

    try:
        async with asyncio.timeout(900):
            await asyncio.gather(*(join(i) for i in range(agents)))
            t1 = time.monotonic()
            await asyncio.gather(*(leave(i) for i in range(agents)))
        t2 = time.monotonic()
    finally:
        close_all([c for c in clients if c is not None])
    return {"join_s": round(t1 - t0, 1), "leave_s": round(t2 - t1, 1)}


def _connections(port: int) -> int:
    """Agent connections a node holds (its ``/metrics`` on the WebSocket port)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5.0) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("agora_hub_connections "):
                return int(float(line.split()[1]))
    raise RuntimeError("no agora_hub_connections in /metrics")


async def _disconnected(ports: list[int], timeout: float = 120.0) -> None:
    """Until the nodes hold no agent connection (they saw every disconnect)."""
    deadline = time.monotonic() + timeout
    while sum(await asyncio.gather(*(asyncio.to_thread(_connections, p) for p in ports))):
        if time.monotonic() > deadline:
            raise TimeoutError("the nodes still hold agent connections")
        await asyncio.sleep(0.2)


async def presence_spread(bench: Any, agents: int, spaces: int) -> dict[str, Any]:
    setup = await asyncio.to_thread(_start_setup, "redis-cluster")
    nodes: list[ServerProcess] = []
    try:
        nodes, ports = await asyncio.to_thread(_nodes, bench, "none", setup.url)
        masters = sorted(setup.masters())
        stats = functools.partial(asyncio.to_thread, lambda: {p: _commandstats(p) for p in masters})
        idle0 = await stats()
        await asyncio.sleep(IDLE_WINDOW)
        idle1 = await stats()
        cpu0 = sum(n.cpu() for n in nodes)
        phases = await _agents(ports, agents, spaces)
        await _disconnected(ports)
        phases["hub_cpu_ms_per_agent"] = round(
            1000 * (sum(n.cpu() for n in nodes) - cpu0) / agents, 2
        )
        # The last departures' announcements and releases, the coalescing windows.
        await asyncio.sleep(3.0)
        run1 = await stats()
        idle = _deltas(idle0, idle1)
        run = _deltas(idle1, run1)
        names = {c for d in (*idle.values(), *run.values()) for c in d}
        writes = await asyncio.to_thread(_write_flagged, masters[0], names)
        background = _per_master(idle, writes)
        figures = _per_master(run, writes)
        figures.update(phases)
        figures["masters"] = masters
        figures["background_writes_per_s"] = [
            round(w / IDLE_WINDOW, 1) for w in background["writes"]
        ]
        figures["background_by_command"] = background["by_command"]
        return figures
    finally:
        for proc in nodes:
            proc.stop(timeout=5.0)
        await asyncio.to_thread(_stop_setup, setup)


async def run_presence(bench: Any, comp: str) -> None:
    if comp != "none":
        return  # membership does not depend on compression
    agents, spaces = bench.sizes.presence_agents, bench.sizes.presence_spaces
    record: dict[str, Any] = {
        "scenario": "presence",
        "server": "redis-cluster",
        "compression": comp,
        "params": {"masters": 3, "nodes": 2, "agents": agents, "spaces": spaces,
                   "settings": "defaults"},
    }  # fmt: skip
    bench.records.append(record)
    try:
        record["figures"] = await presence_spread(bench, agents, spaces)
    except (StartFailed, RuntimeError, TimeoutError, OSError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc or 'no detail'}"
        return
    f = record["figures"]
    print(
        f"presence         writes per master {f['writes']} (min/mean {f['min_over_mean']}, "
        f"max/mean {f['max_over_mean']}), "
        f"background writes/s {f['background_writes_per_s']}",
        flush=True,
    )


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
    rec = find(records, "presence", "redis-cluster", comp)
    if rec is not None and "figures" in rec:
        f = rec["figures"]
        high, low = f["max_over_mean"], f.get("min_over_mean")
        within = high is not None and low is not None
        within = within and high <= SPREAD_TARGET and low >= 1 / SPREAD_TARGET
        out.append(
            Row("presence", "3 masters: write commands per master (agents join, leave)",
                comp, " / ".join(fmt(w) for w in f["writes"]), "",
                f"{fmt(low, 2)}-{fmt(high, 2)}", f"each within {SPREAD_TARGET:g}x of the mean",
                "ok" if within else "uneven")
        )  # fmt: skip
        out.append(
            Row("presence", "3 masters: background writes/s per master (liveness, node stats)",
                comp, " / ".join(fmt(w, 1) for w in f["background_writes_per_s"]), "")
        )  # fmt: skip
    elif rec is not None:
        out.append(Row("presence", "3 masters: write commands per master", comp,
                       rec.get("error", "?"), ""))  # fmt: skip
    for mode in FAILOVER_MODES:
        rec = find(records, "failover", mode, comp)
        if rec is not None:
            value = fig(rec, "readyz_s")
            out.append(
                Row("redis", f"{mode}: master killed → /readyz 200 on every node, s", comp,
                    fmt(value, 2) if value is not None else rec.get("error", "?"), "")
            )  # fmt: skip
    return out
