"""The soak run: a cluster under steady traffic, churn and failures, then the verdict.

Three ``agora-hub serve`` processes share a redis-server (no persistence);
the agents reach them through a TCP load balancer that hands each new
connection to the next live node. During the run:

* publishers (one agent per space) publish at a steady total rate;
* connections are cut at random (``churn`` per second): the SDK reconnects,
  possibly to another node, and resumes;
* at 30 % of the run one node is killed with SIGKILL, at 45 % it is started
  again; at 65 % Redis is killed and started again, empty — or, with
  ``--redis sentinel`` / ``--redis cluster`` (a primary, a replica and three
  sentinels; three masters with a replica each), a master is killed with
  SIGKILL (on a cluster, the one holding ``space-0``) and a replica takes over.

At the end publishing stops, every agent gets time to catch up, and the
ledger says, for every acknowledged event and every agent that should have
it, whether it arrived exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from tests.soak import ledger
from tests.soak.agents import SoakAgent, publish_steadily
from tests.support.redis_ha import ClusterSetup, SentinelSetup
from tests.support.servers import HubProcess, RedisServer, redis_server_binary
from tests.support.tcpproxy import TcpProxy

HUB = {
    "heartbeat_interval": 5.0,
    "heartbeat_timeout": 15.0,
    "liveness_probe_timeout": 2.0,
    "log_level": "info",  # "hub started" is how a start is noticed
    "close_timeout": 2.0,
}
CATCH_UP = 120.0  # seconds every agent gets at the end to receive the last events


@dataclass
class Options:
    duration: float = 300.0
    agents: int = 1000
    spaces: int = 50
    rate: float = 50.0  # publishes per second, all spaces together
    churn: float = 2.0  # connections cut per second
    nodes: int = 3
    seed: int = 1
    markdown: str | None = None
    redis: str = "single"  # single | sentinel | cluster


@dataclass
class Run:
    opts: Options
    started: float = field(default_factory=time.monotonic)
    timeline: list[str] = field(default_factory=list)
    peak_rss: dict[str, int] = field(default_factory=dict)  # node incarnation -> bytes
    load: list[float] = field(default_factory=list)
    cuts: int = 0

    def note(self, what: str) -> None:
        line = f"{time.monotonic() - self.started:7.1f} s  {what}"
        self.timeline.append(line)
        print(line, flush=True)


def peak_rss(pid: int) -> int:
    """VmHWM: the most resident memory the process ever had."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


async def soak(opts: Options) -> int:
    binary = redis_server_binary()
    if binary is None:
        print("redis-server is not installed")
        return 2
    run = Run(opts)
    rng = random.Random(opts.seed)
    redis: Any = {"single": RedisServer, "sentinel": SentinelSetup, "cluster": ClusterSetup}[
        opts.redis
    ](binary).start()
    nodes = [
        HubProcess(redis_url=redis.url, node_id=f"soak-{i}", **HUB).start()
        for i in range(opts.nodes)
    ]
    proxy = await TcpProxy([n.settings["port"] for n in nodes], round_robin=True).start()
    agents: list[SoakAgent] = []
    try:
        run.note(f"{opts.nodes} nodes and redis up; connecting {opts.agents} agents")
        agents = [
            SoakAgent(proxy.url, f"agent-{i}", f"space-{i % opts.spaces}")
            for i in range(opts.agents)
        ]
        gate = asyncio.Semaphore(50)

        async def start(agent: SoakAgent) -> None:
            async with gate:
                await agent.start()

        await asyncio.gather(*(start(a) for a in agents))
        run.note("all agents joined; publishing")
        publishes = ledger.PublishLog()
        stop = asyncio.Event()
        interval = opts.spaces / opts.rate
        publishers = [
            asyncio.create_task(publish_steadily(agents[i], interval, stop, publishes, rng))
            for i in range(min(opts.spaces, len(agents)))
        ]
        chaos = asyncio.create_task(_chaos(run, nodes, redis, proxy, rng))
        await asyncio.sleep(opts.duration)
        chaos.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await chaos
        stop.set()
        await asyncio.gather(*publishers)
        run.note(f"publishing stopped ({publishes.acknowledged} acknowledged); catching up")
        await _catch_up(agents, publishes)
        for node in nodes:
            if node.proc is not None and node.proc.poll() is None:
                run.peak_rss[node.settings["node_id"]] = peak_rss(node.proc.pid)
        return _report(run, agents, publishes)
    finally:
        await asyncio.gather(*(a.aclose() for a in agents), return_exceptions=True)
        await proxy.aclose()
        for node in nodes:
            node.close()
        if isinstance(redis, RedisServer):
            redis.kill()
        else:
            redis.stop()


async def _chaos(
    run: Run, nodes: list[HubProcess], redis: Any, proxy: TcpProxy, rng: random.Random
) -> None:
    d = run.opts.duration
    loop = asyncio.get_running_loop()
    start = loop.time()
    events = [
        (0.30 * d, "kill node"),
        (0.45 * d, "restart node"),
        (0.65 * d, "restart redis" if run.opts.redis == "single" else "kill master"),
    ]
    victim = nodes[1] if len(nodes) > 1 else nodes[0]
    next_cut = start
    next_load = start
    while True:
        now = loop.time()
        if now >= next_load:
            run.load.append(os.getloadavg()[0])
            next_load = now + 10
        if run.opts.churn > 0 and now >= next_cut:
            if proxy.drop_one(rng):
                run.cuts += 1
            next_cut = now + rng.expovariate(run.opts.churn)
        if events and now - start >= events[0][0]:
            _, what = events.pop(0)
            if what == "kill node":
                assert victim.proc is not None
                run.peak_rss[f"{victim.settings['node_id']} (killed)"] = peak_rss(victim.proc.pid)
                os.kill(victim.proc.pid, signal.SIGKILL)
                victim.proc.wait()
                run.note(f"SIGKILL {victim.settings['node_id']}")
            elif what == "restart node":
                fresh = HubProcess(**victim.settings)
                await asyncio.to_thread(fresh.start)
                nodes[nodes.index(victim)] = fresh
                victim.close()
                victim = fresh
                run.note(f"{fresh.settings['node_id']} started again")
            elif what == "kill master":
                key = ("agora:seq:{space-0}",) if run.opts.redis == "cluster" else ()
                old = await asyncio.to_thread(redis.kill_master, *key)
                run.note(f"redis master :{old} killed (SIGKILL)")
                new = await asyncio.to_thread(redis.wait_failover, old, *key)
                run.note(f"redis replica :{new} promoted")
            else:
                redis.kill()
                run.note("redis killed")
                await asyncio.sleep(2.0)
                await asyncio.to_thread(redis.start)
                run.note("redis started again (empty)")
        await asyncio.sleep(0.05)


async def _catch_up(agents: list[SoakAgent], publishes: ledger.PublishLog) -> None:
    """Wait until every agent still running has seen its space's last acknowledged event."""
    last = {space: events[-1][0] for space, events in publishes.events.items() if events}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CATCH_UP
    behind: list[SoakAgent] = []
    while loop.time() < deadline:
        behind = [
            a for a in agents if a.log.gone is None and a.caught_up_to < last.get(a.log.space, 0)
        ]
        if not behind:
            return
        await asyncio.sleep(0.5)
    print(f"{len(behind)} agents did not catch up within {CATCH_UP:g} s")


def _report(run: Run, agents: list[SoakAgent], publishes: ledger.PublishLog) -> int:
    logs = [a.log for a in agents]
    rows = ledger.tally(logs, publishes)
    o = run.opts
    extra = ledger.summary(logs)
    lines = [
        f"soak: {o.duration:g} s, {o.nodes} nodes on {o.redis} Redis, "
        f"{o.agents} agents in {o.spaces} spaces, "
        f"{o.rate:g} publishes/s, {run.cuts} connections cut "
        f"(~{o.churn:g}/s), {extra['rejoins']} rejoins ({extra['not recovered']} not recovered)",
        "",
        ledger.table(rows, publishes),
        "",
        "hub nodes' peak RSS: "
        + ", ".join(f"{name} {rss / 2**20:.0f} MiB" for name, rss in sorted(run.peak_rss.items())),
        f"load average (1 min) during the run: max {max(run.load, default=0):.2f}, "
        f"mean {sum(run.load) / max(1, len(run.load)):.2f} on {os.cpu_count()} cores",
    ]
    if extra["agents gone"]:
        lines.append(f"agents whose client stopped for good: {dict(extra['agents gone'])}")
    if publishes.failures:
        lines.append(f"publishes not acknowledged: {dict(publishes.failures)}")
    lines += ledger.losers(logs, publishes)
    bad_order = ledger.seqs_increase(publishes)
    if bad_order:
        lines.append(f"spaces whose acknowledged seqs did not increase: {bad_order}")
    lines += ["", "timeline:", *run.timeline]
    report = "\n".join(lines)
    print("\n" + report)
    if o.markdown:
        with open(o.markdown, "w") as f:
            f.write(report + "\n")
    failed = ledger.failed(rows) or bool(bad_order)
    print("\nFAILED: events were lost or duplicated" if failed else "\nOK: nothing lost")
    return 1 if failed else 0


def main(opts: Options) -> int:
    return asyncio.run(soak(opts))
