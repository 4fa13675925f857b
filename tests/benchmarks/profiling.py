"""Profiling a hub with py-spy during a benchmark run (``--profile``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.benchmarks import procs, scenarios
from tests.benchmarks.procs import ServerProcess
from tests.benchmarks.scenarios import Target
from tests.benchmarks.suite import Bench, log

#: The profiled runs, each done when its scenario is in the run.
PROFILED = {"fanout": "fanout", "latency": "latency", "cluster-fanout": "cluster", "storm": "storm"}


def to_profile(scenarios_run: list[str]) -> list[str]:
    """The scenarios ``--profile`` profiles in a run of ``scenarios_run``."""
    return [name for name, scenario in PROFILED.items() if scenario in scenarios_run]


async def run_profile(bench: Bench, out_dir: Path, scenario: str) -> None:
    """An extra run of ``scenario`` with py-spy on a hub process (not in the table).

    py-spy attaches once setup is done, so only the measured part is
    sampled; it runs on the load generator's core. A fan-out profile uses
    five times the events, for enough samples.
    """
    spy = _py_spy()
    if spy is None:
        log("profile: py-spy not found (.venv/bin/pip install py-spy): skipped")
        bench.profiles[scenario] = {"skipped": "py-spy not installed"}
        return
    raw = out_dir / f"profile-{scenario}.txt"
    raw.unlink(missing_ok=True)
    s = bench.sizes
    spy_proc: subprocess.Popen[bytes] | None = None
    cores = bench.pinning.client_cores

    def attach(pid: int) -> scenarios.Hook:
        async def hook() -> None:
            nonlocal spy_proc
            spy_proc = _start_py_spy(spy, pid, raw, bench.pinning.wrap, cores)
            await asyncio.sleep(1.0)  # py-spy attaches

        return hook

    async def profiled(t: Target) -> dict[str, Any]:
        hook = attach(t.servers[0].pid)
        try:
            if scenario == "storm":
                # py-spy attaches once the agents are connected and joined:
                # the drop and the storm (all at once) are sampled.
                from tests.benchmarks import scale

                return await scale.storm(
                    t, agents=s.storm_agents, space_size=s.storm_space, before_measure=hook
                )
            if scenario == "latency":
                return await scenarios.latency(
                    t,
                    subscribers=s.latency_subscribers,
                    rate=s.latency_rate,
                    duration=s.latency_duration,
                    size=s.event_text,
                    before_measure=hook,
                )
            return await scenarios.fanout(
                t,
                subscribers=s.fanout_subscribers,
                events=5 * s.fanout_events,
                size=s.event_text,
                window=s.window,
                before_measure=hook,
            )
        finally:
            if spy_proc is not None:
                await asyncio.to_thread(_stop_py_spy, spy_proc)

    redis: ServerProcess | str | None = None
    if scenario == "cluster-fanout":
        redis = bench._redis(bench.pinning.client_cores)
        if isinstance(redis, str):
            bench.profiles[scenario] = {"skipped": redis}
            return
        bench._redis_proc = redis
        start = bench._cluster_start("none")
    else:
        start = bench._hub("none")
    try:
        rec = await bench.measure(
            f"profile-{scenario}",
            "hub",
            "none",
            start,
            profiled,
            {},
            skip_on_start_failure=True,
        )
    finally:
        if isinstance(redis, ServerProcess):
            await asyncio.to_thread(redis.stop)
    bench.records.remove(rec)
    if not raw.exists():
        err = rec.get("skipped") or rec.get("error") or ""
        if spy_proc is not None and spy_proc.stderr is not None:
            err += spy_proc.stderr.read().decode(errors="replace")
        bench.profiles[scenario] = {"error": f"no profile written: {err.strip()[:400]}"}
        log(f"profile {scenario}: {bench.profiles[scenario]['error']}")
        return
    prof = summarize_profile(raw)
    prof["file"] = str(raw)
    prof["run"] = rec.get("figures")
    bench.profiles[scenario] = prof


def _py_spy() -> str | None:
    spy = shutil.which("py-spy") or str(procs.ROOT / ".venv" / "bin" / "py-spy")
    return spy if os.path.exists(spy) else None


def _start_py_spy(
    spy: str, pid: int, out: Path, wrap: Callable[..., Any], cores: list[int]
) -> subprocess.Popen[bytes]:
    argv = [spy, "record", "--pid", str(pid), "--rate", "500", "--nonblocking"]
    argv += ["--format", "raw", "--output", str(out)]
    argv, _ = wrap(argv, cores)
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop_py_spy(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def summarize_profile(path: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_function(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in c.most_common(top)]

    return {"samples": total, "self_pct": share(own), "inclusive_pct": share(incl)}


def _function(frame: str) -> str:
    # "deliver (hub/node/node.py:190)" → "deliver (hub/node/node.py)"
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    path, _, _line = where.rpartition(":")
    path = path or where
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{name} ({path})" if path else name
