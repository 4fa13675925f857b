"""``make bench``: run the scenarios, print one table, write a JSON file.

    .venv/bin/python -m tests.benchmarks [--quick] [--only fanout,latency,...]
        [--compression both|none|deflate] [--json PATH] [--profile]

Scenarios: fanout, latency, idle, stream, signed, cluster, workers, massjoin,
gateways (also ``a2a`` or ``mcp``), tokenstream, redis, presence, capacity, storm,
scalejoin (cluster, workers, redis, presence and the two-node half of massjoin
need a redis-server and the hub's Redis backplane; they are skipped, with the
reason, when a Redis-mode hub does not come up). capacity, storm and scalejoin
are the connections-at-scale runs of tests/benchmarks/scale.py
(docs/performance.md, "Connections at scale").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tests.benchmarks import procs, profiling, report, scale
from tests.benchmarks.suite import QUIET_PCT, Bench, log, raise_fd_limit

ALL = (
    "fanout", "latency", "idle", "stream", "signed", "cluster", "workers", "massjoin",
    "gateways", "tokenstream", "redis", "presence", "capacity", "storm", "scalejoin",
)  # fmt: skip

#: Former scenario names: the A2A and MCP gateways are measured together now.
ALIASES = {"a2a": "gateways", "mcp": "gateways"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m tests.benchmarks",
        description="Agora Hub benchmarks, each figure beside a websockets.broadcast baseline.",
    )
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run under a minute")
    p.add_argument(
        "--only",
        default=",".join(ALL),
        help=f"comma-separated scenarios (default all: {','.join(ALL)})",
    )
    p.add_argument(
        "--compression",
        choices=("both", "none", "deflate"),
        default=None,
        help="permessage-deflate off, on, or both (default both; none with --quick)",
    )
    p.add_argument(
        "--json", type=Path, default=None, help="output file (default bench-results/latest.json)"
    )
    p.add_argument(
        "--window",
        type=int,
        default=None,
        help="publishes in flight in throughput runs (default 50): how bursty the publisher is",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=None,
        help=f"repeat a run disturbed by other processes (> {QUIET_PCT:g}%% CPU) up to N times"
        " (default 2; 0 with --quick)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="also profile a hub with py-spy in an extra run of each of fanout, latency,"
        " cluster (its fan-out) and storm that is in the run",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="also run the hub of the source tree DIR (e.g. `git archive COMMIT | tar -x -C DIR`)"
        " beside this checkout's in every hub run of storm, scalejoin, capacity…, alternating;"
        " its records are server `hub:LABEL` in the JSON and printed after the table",
    )
    args = p.parse_args(argv)
    args.variants = []
    for spec in args.variant:
        label, _, path = spec.partition("=")
        if not label or not path or not (Path(path) / "hub" / "__init__.py").exists():
            p.error(f"--variant {spec!r}: LABEL=DIR with DIR a source tree holding hub/")
        args.variants.append((label, Path(path).resolve()))
    only = [ALIASES.get(s.strip(), s.strip()) for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in ALL]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; choose from {', '.join(ALL)}")
    args.scenarios = [s for s in ALL if s in only]
    if args.compression is None:
        args.compression = "none" if args.quick else "both"
    if args.retries is None:
        args.retries = 0 if args.quick else 2
    args.compressions = ["none", "deflate"] if args.compression == "both" else [args.compression]
    return args


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=procs.ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except Exception:
        return ""


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def meta(bench: Bench) -> dict[str, Any]:
    import websockets

    try:
        import uvloop

        uv = uvloop.__version__
    except ImportError:
        uv = None
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "hub", "protocol")),
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "kernel": platform.release(),
        },
        "python": platform.python_version(),
        "websockets": websockets.__version__,
        "uvloop": uv,
        "pinning": bench.pinning.describe(),
        "quick": bench.args.quick,
        "compressions": bench.args.compressions,
        "scenarios": bench.args.scenarios,
        "sizes": asdict(bench.sizes),
        "loadgen": "one process, uvloop, raw RFC 6455 frame parser (tests/benchmarks/wsload.py)",
    }


async def amain(bench: Bench) -> None:
    # SIGTERM stops the run the way Ctrl-C does: the main task is cancelled,
    # every finally block on the way stops its servers.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, bench.terminate, task)
    bench.pinning.pin_self(bench.pinning.client_cores)
    for scenario in bench.args.scenarios:
        for comp in bench.args.compressions:
            await getattr(bench, scenario)(comp)
    if bench.args.profile:
        out = bench.args.json.parent if bench.args.json else procs.ROOT / "bench-results"
        out.mkdir(parents=True, exist_ok=True)
        for scenario in profiling.to_profile(bench.args.scenarios):
            await profiling.run_profile(bench, out, scenario)


#: The figure compared between hub variants, per scenario.
_VARIANT_KEYS = {
    "storm": "reconnects_per_cpu_s",
    "storm-capped": "reconnects_per_cpu_s",
    "scalejoin-2000": "server_cpu_s",
    "scalejoin-10000": "server_cpu_s",
    "capacity": "rss_per_conn_kib",
}


def variant_lines(records: list[dict[str, Any]]) -> list[str]:
    """This checkout's hub beside each ``--variant`` hub, by scenario: the
    figure of each (median of alternating runs where there were several)
    and its server CPU-s per run."""
    out: list[str] = []
    scenarios = sorted({r["scenario"] for r in records if r["server"].startswith("hub:")})
    for scenario in scenarios:
        key = _VARIANT_KEYS.get(scenario)
        mine = [r for r in records if r["scenario"] == scenario and r["server"].startswith("hub")]
        base = [r for r in records if r["scenario"] == scenario and r["server"] == "baseline"]
        out.append(f"\n{scenario}: hub variants (figure: {key or 'server_cpu_s'})")
        for r in base + mine:
            figures = r.get("figures", {})
            value = figures.get(key) if key else None
            runs = r.get("runs", [figures.get("server_cpu_s")])
            out.append(f"  {r['server']:<20} {value!s:>12}  server CPU-s per run: {runs}")
    return out


def write_json(bench: Bench, rows: list[report.Row], path: Path, interrupted: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "meta": meta(bench),
        "interrupted": interrupted,
        "targets": {
            "deliveries_per_cpu_s_vs_baseline": report.CPU_RATIO_TARGET,
            "deliveries_per_cpu_s_vs_baseline_stretch": report.CPU_RATIO_STRETCH,
            "p99_ms_at_50k_offered": report.P99_TARGET_MS,
            "rss_kib_per_idle_connection": report.RSS_TARGET_KIB,
            "cluster_p50_added_ms": report.CLUSTER_P50_EXTRA_MS,
            "workers_2_vs_1": report.WORKERS_TARGET,
            "massjoin_form_s": report.MASSJOIN_SECONDS,
            "massjoin_mb": report.MASSJOIN_MB,
            "massjoin_agents": report.MASSJOIN_AGENTS,
            "storm_reconnects_per_cpu_s_vs_baseline": scale.STORM_RATIO_TARGET,
            "scalejoin_2000_joins_per_cpu_s_vs_baseline": scale.JOIN_RATIO_TARGET,
            "scalejoin_10000_form_s": scale.JOIN_BIG_SECONDS,
            "capacity_rss_per_conn_vs_baseline": 1.0,
        },
        "results": bench.records,
        "table": [asdict(r) for r in rows],
        "summary": report.summary(rows),
        "profiles": bench.profiles,
    }
    text = json.dumps(doc, indent=2, default=str)
    path.write_text(text + "\n")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if path.name == "latest.json":
        (path.parent / f"run-{stamp}.json").write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    bench = Bench(args)
    path = args.json or procs.ROOT / "bench-results" / "latest.json"

    # Ctrl-C must stop the run even when started where SIGINT is ignored (a
    # background job): the servers are cleaned up on the way out.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise_fd_limit(bench.sizes.idle_connections + 1000)
    log(
        f"agora-hub bench: {', '.join(args.scenarios)} × compression {'/'.join(args.compressions)}"
        f"{' (quick)' if args.quick else ''}; pinning: {bench.pinning.method}, server cores"
        f" {bench.pinning.server_cores}, load generator cores {bench.pinning.client_cores}"
    )
    interrupted = False
    started = time.monotonic()
    try:
        loop_factory = None
        with contextlib.suppress(ImportError):
            import uvloop

            loop_factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(amain(bench))
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
        log("interrupted: stopping servers, writing what was measured")
    finally:
        procs.stop_all()
    rows = report.build_rows(bench.records, args.compressions)
    print()
    print(report.render(rows))
    for note in report.notes(bench.records, QUIET_PCT):
        print(note)
    for line in variant_lines(bench.records):
        print(line)
    for scenario, prof in bench.profiles.items():
        if "self_pct" not in prof:
            continue
        print(f"\npy-spy profile of the hub during {scenario} ({prof['samples']} samples):")
        for name, pct in prof["self_pct"][:15]:
            print(f"  {pct:5.1f}% self  {name}")
    write_json(bench, rows, path, interrupted)
    print(f"\n{len(bench.records)} runs in {time.monotonic() - started:.0f} s; results: {path}")
    return 130 if interrupted else 0
