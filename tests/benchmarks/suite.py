"""The scenarios as runs: which servers to start, what to measure, how often.

:class:`Bench` starts the servers of each run (hub, baseline, Redis, cluster
nodes, workers), hands them to a scenario body from
:mod:`tests.benchmarks.scenarios`, repeats runs that other processes disturbed,
and collects one record per run for the table and the JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.benchmarks import gateways, procs, redis_modes, report, scale, scenarios
from tests.benchmarks.procs import Pinning, ServerProcess, StartFailed
from tests.benchmarks.scenarios import Target

# A run during which other processes used more CPU than this (% of one core)
# is repeated, up to --retries times; the least disturbed attempt is kept.
QUIET_PCT = 15.0


@dataclass(frozen=True)
class Sizes:
    fanout_subscribers: int = 500
    fanout_events: int = 2000
    event_text: int = 150  # publish frame ≈ 200 bytes; the hub's event ≈ 330
    window: int = 50  # publishes in flight (acknowledged by the publisher's own copy)
    latency_subscribers: int = 500
    latency_rate: float = 100.0  # events/s → 50,000 offered deliveries/s
    latency_duration: float = 5.0
    idle_connections: int = 5000
    stream_subscribers: int = 100
    stream_deltas: int = 10_000
    delta_text: int = 40
    massjoin_agents: tuple[int, ...] = (500, 2000, 5000)
    # Issue 26 (tests/benchmarks/scale.py): a process holds at most 20,000 files here.
    capacity_connections: int = 19_000
    capacity_window: float = 60.0  # seconds of idle CPU measured
    storm_agents: int = 10_000
    storm_space: int = 100
    storm_concurrency: int = 1000
    scalejoin_agents: tuple[int, ...] = (2000, 10_000)
    # Contract §21: where membership lands on a 3-master Redis Cluster.
    presence_agents: int = 10_000
    presence_spaces: int = 100
    # The 2,000 join's figure: the median of this many alternating runs per server.
    join_runs: int = 7


FULL = Sizes()
QUICK = Sizes(
    fanout_subscribers=100,
    fanout_events=300,
    latency_subscribers=100,
    latency_rate=100.0,
    latency_duration=1.5,
    idle_connections=500,
    stream_subscribers=20,
    stream_deltas=1000,
    massjoin_agents=(200, 500),
    capacity_connections=1000,
    capacity_window=10.0,
    storm_agents=500,
    storm_space=50,
    scalejoin_agents=(500, 2000),
    join_runs=1,
    presence_agents=1000,
    presence_spaces=20,
)


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        sizes = QUICK if args.quick else FULL
        if args.window is not None:
            sizes = dataclasses.replace(sizes, window=max(1, args.window))
        self.sizes = sizes
        self.pinning = Pinning()
        self.records: list[dict[str, Any]] = []
        self.profiles: dict[str, dict[str, Any]] = {}
        self._prefix = 0
        #: Hubs from other source trees measured beside this one (A/B runs):
        #: (label, path); their records' server is ``hub:label``.
        self.variants: list[tuple[str, Path]] = list(getattr(args, "variants", None) or [])

    def terminate(self, task: asyncio.Task[Any]) -> None:
        log("SIGTERM: stopping")
        task.cancel()

    # ── plumbing ─────────────────────────────────────────────────────────

    async def measure(
        self,
        scenario: str,
        server: str,
        compression: str,
        start: Callable[[], tuple[Target, list[ServerProcess]]],
        body: Callable[[Target], Awaitable[dict[str, Any]]],
        params: dict[str, Any],
        skip_on_start_failure: bool = False,
    ) -> dict[str, Any]:
        record: dict[str, Any] = {
            "scenario": scenario,
            "server": server,
            "compression": compression,
            "params": params,
        }
        self.records.append(record)
        label = f"{scenario:<16} {server:<10} {compression:<8}"
        attempts: list[dict[str, Any]] = []
        for attempt in range(1 + self.args.retries):
            try:
                outcome = await self._attempt(label, start, body, skip_on_start_failure)
            except asyncio.CancelledError:
                record["error"] = "interrupted"
                raise
            if "figures" not in outcome:
                record.update(outcome)
                break
            attempts.append(outcome)
            other = outcome["figures"].get("other_cpu_pct", 0.0)
            if other <= QUIET_PCT:
                break
            if attempt < self.args.retries:
                log(f"{label} disturbed: other processes used {other:.0f}% CPU; again")
        if attempts:
            # The least disturbed attempt stands; all are kept in the JSON.
            best = min(attempts, key=lambda a: a["figures"].get("other_cpu_pct", 0.0))
            record.pop("error", None)
            record.update(best)
            if len(attempts) > 1:
                record["attempts"] = attempts
        return record

    async def _attempt(
        self,
        label: str,
        start: Callable[[], tuple[Target, list[ServerProcess]]],
        body: Callable[[Target], Awaitable[dict[str, Any]]],
        skip_on_start_failure: bool,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        began = time.monotonic()
        try:
            target, owned = start()
        except StartFailed as exc:
            key = "skipped" if skip_on_start_failure else "error"
            out[key] = f"server did not start: {exc}"
            log(f"{label} {key.upper()}: {str(exc).splitlines()[0]}")
            return out
        started = time.monotonic()
        try:
            out["figures"] = await body(target)
            out["seconds"] = round(time.monotonic() - began, 1)
            out["start_s"] = round(started - began, 1)
            log(f"{label} {_headline(out['figures'])}  ({out['seconds']} s)")
        except Exception as exc:  # a failed run is reported, the others go on
            out["error"] = f"{type(exc).__name__}: {exc or 'no detail'}"
            log(f"{label} ERROR: {out['error']}")
            for proc in owned:
                if proc.log_tail():
                    out.setdefault("server_log", {})[proc.name] = proc.log_tail(30)
        finally:
            # Let the clients' aborts reach the sockets before the servers
            # are told to stop (a blocked loop would keep them open).
            await asyncio.sleep(0.2)
            stopping = time.monotonic()
            for proc in owned:
                await asyncio.to_thread(proc.stop)
            out["stop_s"] = round(time.monotonic() - stopping, 1)
        return out

    def _hub(
        self,
        compression: str,
        extra: list[str] | None = None,
        cores: list[int] | None = None,
        source: Path | None = None,
    ) -> Callable[[], tuple[Target, list[ServerProcess]]]:
        def start() -> tuple[Target, list[ServerProcess]]:
            proc, port = procs.start_hub(
                self.pinning,
                compression,
                cores=cores or self.pinning.server_cores,
                extra=extra,
                source=source,
            )
            return Target("hub", [port], [proc], compression == "deflate"), [proc]

        return start

    def _baseline(
        self, compression: str, cores: list[int] | None = None
    ) -> Callable[[], tuple[Target, list[ServerProcess]]]:
        def start() -> tuple[Target, list[ServerProcess]]:
            proc, port = procs.start_baseline(
                self.pinning, compression, cores=cores or self.pinning.server_cores
            )
            return Target("baseline", [port], [proc], compression == "deflate"), [proc]

        return start

    async def both(
        self,
        scenario: str,
        compression: str,
        body: Callable[[Target], Awaitable[dict[str, Any]]],
        params: dict[str, Any],
    ) -> None:
        await self.measure(
            scenario, "baseline", compression, self._baseline(compression), body, params
        )
        await self.measure(scenario, "hub", compression, self._hub(compression), body, params)
        for label, source in self.variants:
            start = self._hub(compression, source=source)
            await self.measure(scenario, f"hub:{label}", compression, start, body, params)

    async def alternating(
        self,
        scenario: str,
        compression: str,
        body: Callable[[Target], Awaitable[dict[str, Any]]],
        params: dict[str, Any],
        runs: int,
        key: str = "server_cpu_s",
    ) -> None:
        """``runs`` alternating baseline and hub runs of one short scenario.

        Each server's record is its median run by ``key``; every run's
        ``key`` is kept under ``runs``. For a figure whose single runs scatter
        more than the difference measured (a sub-second run on a loaded
        2-core machine: the same server's CPU for the same work varies by a
        third from run to run), the median of alternating runs is the figure.
        """
        first = len(self.records)
        for _ in range(runs):
            await self.both(scenario, compression, body, {**params, "runs": runs})
        mine = self.records[first:]
        del self.records[first:]
        for server in ("baseline", "hub", *(f"hub:{label}" for label, _ in self.variants)):
            theirs = [r for r in mine if r["server"] == server]
            measured = [r for r in theirs if key in r.get("figures", {})]
            if not measured:
                self.records.append(theirs[-1])
                continue
            ranked = sorted(measured, key=lambda r: r["figures"][key])
            median = dict(ranked[len(ranked) // 2])
            median["runs"] = [r["figures"][key] for r in measured]  # in the order run
            self.records.append(median)

    # ── scenarios ────────────────────────────────────────────────────────

    def _fanout_body(
        self, window: int | None = None
    ) -> tuple[Callable[[Target], Awaitable[dict]], dict[str, Any]]:
        s = self.sizes
        w = window or s.window
        params = {
            "subscribers": s.fanout_subscribers,
            "events": s.fanout_events,
            "text_bytes": s.event_text,
            "window": w,
        }

        def body(t: Target) -> Awaitable[dict]:
            return scenarios.fanout(
                t,
                subscribers=s.fanout_subscribers,
                events=s.fanout_events,
                size=s.event_text,
                window=w,
            )

        return body, params

    def _latency_body(self) -> tuple[Callable[[Target], Awaitable[dict]], dict[str, Any]]:
        s = self.sizes
        params = {
            "subscribers": s.latency_subscribers,
            "rate": s.latency_rate,
            "duration_s": s.latency_duration,
            "text_bytes": s.event_text,
        }

        def body(t: Target) -> Awaitable[dict]:
            return scenarios.latency(
                t,
                subscribers=s.latency_subscribers,
                rate=s.latency_rate,
                duration=s.latency_duration,
                size=s.event_text,
            )

        return body, params

    async def fanout(self, comp: str) -> None:
        body, params = self._fanout_body()
        await self.both("fanout", comp, body, params)
        if self.sizes.window > 1:
            # One event at a time (each waits for the publisher's own copy):
            # nothing to coalesce, the hub's worst case for CPU per delivery.
            body, params = self._fanout_body(window=1)
            await self.both("fanout-w1", comp, body, params)

    async def latency(self, comp: str) -> None:
        body, params = self._latency_body()
        await self.both("latency", comp, body, params)

    async def idle(self, comp: str) -> None:
        n = self.sizes.idle_connections
        limit = raise_fd_limit(n + 1000)
        if limit < n + 300:
            n = max(100, limit - 300)
            log(f"idle: file descriptor limit {limit}: measuring {n} connections")

        def body(t: Target) -> Awaitable[dict]:
            return scenarios.idle(t, connections=n)

        await self.both("idle", comp, body, {"connections": n})

    async def stream(self, comp: str) -> None:
        s = self.sizes
        params = {
            "subscribers": s.stream_subscribers,
            "deltas": s.stream_deltas,
            "delta_text_bytes": s.delta_text,
            "window": s.window,
        }

        def body(t: Target) -> Awaitable[dict]:
            return scenarios.streaming(
                t,
                subscribers=s.stream_subscribers,
                deltas=s.stream_deltas,
                size=s.delta_text,
                window=s.window,
            )

        await self.both("stream", comp, body, params)

    async def tokenstream(self, comp: str) -> None:
        from tests.benchmarks import token_stream  # its own module (issue 28)

        await token_stream.run(self, comp)

    async def signed(self, comp: str) -> None:
        """Signed envelopes beside the same bytes unsigned, on default
        settings (rate limit aside): with many members, where fan-out
        dominates, and with few, where the publish path (verify) does."""
        s = self.sizes
        for scenario, subscribers in (("signed", s.fanout_subscribers), ("signed-few", 10)):
            params = {
                "subscribers": subscribers,
                "events": s.fanout_events,
                "text_bytes": s.event_text,
                "window": s.window,
            }
            for server, signed in (("hub-plain", False), ("hub-signed", True)):

                def body(t: Target, signed: bool = signed, n: int = subscribers) -> Awaitable[dict]:
                    return scenarios.signed_fanout(
                        t,
                        subscribers=n,
                        events=s.fanout_events,
                        size=s.event_text,
                        window=s.window,
                        signed=signed,
                    )

                await self.measure(
                    scenario, server, comp, self._hub(comp), body, {**params, "signed": signed}
                )

    async def gateways(self, comp: str) -> None:
        """A2A, MCP space_ask and an MCP agent tool beside a WebSocket
        request/reply, one hub (gateways.py)."""
        await gateways.run(self, comp)

    def _redis(self, cores: list[int]) -> ServerProcess | str:
        try:
            proc, url = procs.start_redis(self.pinning, cores)
        except StartFailed as exc:
            return str(exc)
        self._redis_url = url
        return proc

    def _cluster_start(self, comp: str) -> Callable[[], tuple[Target, list[ServerProcess]]]:
        def start() -> tuple[Target, list[ServerProcess]]:
            self._prefix += 1
            prefix = f"bench{os.getpid()}x{self._prefix}"
            nodes: list[ServerProcess] = []
            ports: list[int] = []
            try:
                for name in ("a", "b"):
                    proc, port = procs.start_hub(
                        self.pinning,
                        comp,
                        cores=self.pinning.server_cores,
                        extra=[
                            "--redis-url",
                            self._redis_url,
                            "--redis-prefix",
                            prefix,
                            "--node-id",
                            f"bench-{name}",
                        ],
                        name=f"hub-{name}",
                    )
                    nodes.append(proc)
                    ports.append(port)
            except BaseException:
                for proc in nodes:
                    proc.stop(timeout=1.0)
                raise
            return Target("hub", ports, nodes, comp == "deflate", side=[self._redis_proc]), nodes

        return start

    async def cluster(self, comp: str) -> None:
        # Redis sits with the load generator: on the hubs' core every publish
        # round trip would wait for a hub to yield the CPU. Its CPU is reported.
        redis = self._redis(self.pinning.client_cores)
        fan_body, fan_params = self._fanout_body()
        lat_body, lat_params = self._latency_body()
        if isinstance(redis, str):
            for scen in ("cluster-fanout", "cluster-latency"):
                self.records.append(
                    {"scenario": scen, "server": "cluster", "compression": comp, "skipped": redis}
                )
            log(f"cluster {comp}: SKIPPED: {redis}")
            return
        self._redis_proc = redis
        try:
            if report.find(self.records, "latency", "hub", comp) is None:
                # The cluster's p50 is judged against a single node from this run.
                await self.measure("latency", "hub", comp, self._hub(comp), lat_body, lat_params)
            split = {"nodes": 2, "split": "subscribers alternate between nodes; publisher on a"}
            rec = await self.measure(
                "cluster-fanout",
                "cluster",
                comp,
                self._cluster_start(comp),
                fan_body,
                {**fan_params, **split},
                skip_on_start_failure=True,
            )
            if "skipped" in rec:
                self.records.append(
                    {
                        "scenario": "cluster-latency",
                        "server": "cluster",
                        "compression": comp,
                        "skipped": rec["skipped"],
                    }
                )
                return
            await self.measure(
                "cluster-latency",
                "cluster",
                comp,
                self._cluster_start(comp),
                lat_body,
                {**lat_params, **split},
                skip_on_start_failure=True,
            )
        finally:
            await asyncio.to_thread(redis.stop)

    async def redis(self, comp: str) -> None:
        """A 3-master Redis Cluster beside one Redis; failover to ready."""
        await redis_modes.run(self, comp)

    async def presence(self, comp: str) -> None:
        """Write commands per master of a Redis Cluster while agents join and leave."""
        await redis_modes.run_presence(self, comp)

    async def massjoin(self, comp: str) -> None:
        """N agents form one space on default settings: one node, then two."""
        if comp != "none":
            return  # the defaults: compression off
        for n in self.sizes.massjoin_agents:
            raise_fd_limit(n + 1000)

            def body(t: Target, n: int = n) -> Awaitable[dict]:
                return scenarios.mass_join(t, agents=n)

            params = {"agents": n, "concurrency": 64, "settings": "defaults"}
            await self.measure("massjoin", "hub", comp, self._hub(comp), body, params)
        redis = self._redis(self.pinning.client_cores)
        if isinstance(redis, str):
            for n in self.sizes.massjoin_agents:
                self.records.append(
                    {
                        "scenario": "massjoin",
                        "server": "cluster",
                        "compression": comp,
                        "params": {"agents": n},
                        "skipped": redis,
                    }
                )
            log(f"massjoin cluster: SKIPPED: {redis}")
            return
        self._redis_proc = redis
        try:
            for n in self.sizes.massjoin_agents:

                def body(t: Target, n: int = n) -> Awaitable[dict]:
                    return scenarios.mass_join(t, agents=n)

                params = {
                    "agents": n,
                    "concurrency": 64,
                    "settings": "defaults",
                    "nodes": 2,
                    "split": "agents alternate between nodes",
                }
                await self.measure(
                    "massjoin",
                    "cluster",
                    comp,
                    self._cluster_start(comp),
                    body,
                    params,
                    skip_on_start_failure=True,
                )
        finally:
            await asyncio.to_thread(redis.stop)

    def _workers_start(
        self, comp: str, n: int, redis: ServerProcess
    ) -> Callable[[], tuple[Target, list[ServerProcess]]]:
        def start() -> tuple[Target, list[ServerProcess]]:
            self._prefix += 1
            extra = ["--workers", str(n), "--redis-url", self._redis_url]
            extra += ["--redis-prefix", f"bench{os.getpid()}w{self._prefix}"]
            cores = self.pinning.all_cores
            proc, port = procs.start_hub(self.pinning, comp, cores=cores, extra=extra)
            try:
                # Every worker listens (SO_REUSEPORT) and answers ready.
                procs.wait_listeners(port, n, proc)
                procs.wait_ready(port, proc, streak=4 * n)
            except BaseException:
                proc.stop(timeout=1.0)
                raise
            return Target("hub", [port], [proc], comp == "deflate", side=[redis]), [proc]

        return start

    async def workers(self, comp: str) -> None:
        # Two workers need both cores: nothing is pinned here, the load
        # generator included (its CPU % is in the table).
        all_cores = self.pinning.all_cores
        fan_body, fan_params = self._fanout_body()
        lat_body, lat_params = self._latency_body()
        unpinned = {"pinning": "none: servers, redis and load generator share all cores"}
        redis = self._redis(all_cores)
        if isinstance(redis, str):
            for scen in ("workers", "workers-latency"):
                for server in ("workers-1", "workers-2"):
                    self.records.append(
                        {"scenario": scen, "server": server, "compression": comp, "skipped": redis}
                    )
            log(f"workers {comp}: SKIPPED: {redis}")
            return
        self.pinning.pin_self(all_cores)
        try:
            baseline = self._baseline(comp, all_cores)
            await self.measure(
                "workers", "baseline", comp, baseline, fan_body, {**fan_params, **unpinned}
            )
            await self.measure(
                "workers-latency", "baseline", comp, baseline, lat_body, {**lat_params, **unpinned}
            )
            for n in (1, 2):
                start = self._workers_start(comp, n, redis)
                rec = await self.measure(
                    "workers",
                    f"workers-{n}",
                    comp,
                    start,
                    fan_body,
                    {**fan_params, **unpinned, "workers": n},
                    skip_on_start_failure=True,
                )
                if "skipped" in rec:
                    self.records.append(
                        {
                            "scenario": "workers-latency",
                            "server": f"workers-{n}",
                            "compression": comp,
                            "skipped": rec["skipped"],
                        }
                    )
                    continue
                await self.measure(
                    "workers-latency",
                    f"workers-{n}",
                    comp,
                    start,
                    lat_body,
                    {**lat_params, **unpinned, "workers": n},
                    skip_on_start_failure=True,
                )
        finally:
            self.pinning.pin_self(self.pinning.client_cores)
            await asyncio.to_thread(redis.stop)

    async def capacity(self, comp: str) -> None:
        """The most idle, heartbeating connections a process holds here (scale.py)."""
        await scale.run_capacity(self, comp)

    async def storm(self, comp: str) -> None:
        """Every agent dropped at once, then reconnecting with since (scale.py)."""
        await scale.run_storm(self, comp)

    async def scalejoin(self, comp: str) -> None:
        """2,000 and 10,000 agents joining one space at once (scale.py)."""
        await scale.run_scalejoin(self, comp)


def _headline(f: dict[str, Any]) -> str:
    other = f.get("other_cpu_pct")
    tail = f"; other load {other:.0f}%" if other is not None else ""
    return _figures(f) + tail


def _figures(f: dict[str, Any]) -> str:
    line = scale.headline(f) or gateways.headline(f)
    if line is not None:
        return line
    if "form_s" in f:
        return (
            f"{f['agents']} agents formed in {f['form_s']:.2f} s, {f['frames']:,} frames,"
            f" {f['mb_sent']:.1f} MB, hub CPU {f['server_cpu_s']:.2f} s"
        )
    if "deltas_delivered_per_s" in f:
        return f"{f['deltas_delivered_per_s']:,.0f} deltas/s, {f['cpu_s_per_100k']:.3f} CPU-s/100k"
    if "deliveries_per_s" in f:
        return (
            f"{f['deliveries_per_s']:,.0f} deliveries/s, {f['cpu_s_per_100k']:.3f} CPU-s/100k,"
            f" loadgen {f['loadgen_cpu_pct']:.0f}%"
        )
    if "p99_ms" in f:
        return (
            f"p50 {f['p50_ms']:.2f} ms, p99 {f['p99_ms']:.2f} ms,"
            f" loadgen {f['loadgen_cpu_pct']:.0f}%"
        )
    if "rss_per_conn_kib" in f:
        return f"{f['rss_per_conn_kib']:.1f} KiB/conn, {f['connects_per_s']:,.0f} connects/s"
    return ""
