"""The table: every hub figure beside the baseline from the same run, and the targets."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Targets from issue 6 (ratios are to the baseline measured in the same run).
CPU_RATIO_TARGET = 0.85
CPU_RATIO_STRETCH = 1.5
P99_TARGET_MS = 5.0
P99_OFFERED = 50_000
RSS_TARGET_KIB = 20.0
CLUSTER_P50_EXTRA_MS = 1.0
WORKERS_TARGET = 1.6
# Issue 13: forming one space of 2,000 agents on default settings.
MASSJOIN_AGENTS = 2000
MASSJOIN_SECONDS = 10.0
MASSJOIN_MB = 200.0


@dataclass
class Row:
    scenario: str
    metric: str
    compression: str
    hub: str
    baseline: str
    ratio: str = ""
    target: str = ""
    result: str = ""


def find(records: list[dict], scenario: str, server: str, compression: str) -> dict | None:
    for r in records:
        if r["scenario"] == scenario and r["server"] == server and r["compression"] == compression:
            return r
    return None


def fig(record: dict | None, key: str) -> float | None:
    if record is None:
        return None
    value = record.get("figures", {}).get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def status(record: dict | None) -> str | None:
    """'skipped: …' / 'error: …' for a run that produced no figures."""
    if record is None:
        return None
    if "skipped" in record:
        return "skipped"
    if "error" in record:
        return "error"
    return None


def verdict(ok: bool | None, compression: str) -> str:
    """Targets bind the default configuration; with deflate they are informative."""
    if ok is None:
        return "n/a"
    word = "pass" if ok else "FAIL"
    return word if compression == "none" else f"({word.lower()})"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def build_rows(records: list[dict], compressions: list[str]) -> list[Row]:
    rows: list[Row] = []
    for comp in compressions:
        hub = find(records, "fanout", "hub", comp)
        base = find(records, "fanout", "baseline", comp)
        if hub or base:
            _throughput_rows(rows, "fanout", comp, hub, base)
        hub = find(records, "fanout-w1", "hub", comp)
        base = find(records, "fanout-w1", "baseline", comp)
        if hub or base:
            _throughput_rows(rows, "fanout-w1", comp, hub, base)
        hub = find(records, "latency", "hub", comp)
        base = find(records, "latency", "baseline", comp)
        if hub or base:
            _latency_rows(rows, "latency", comp, hub, base)
        hub = find(records, "idle", "hub", comp)
        base = find(records, "idle", "baseline", comp)
        if hub or base:
            _idle_rows(rows, comp, hub, base)
        hub = find(records, "stream", "hub", comp)
        base = find(records, "stream", "baseline", comp)
        if hub or base:
            _throughput_rows(rows, "stream", comp, hub, base)
        _signed_rows(rows, records, comp)
        _cluster_rows(rows, records, comp)
        _workers_rows(rows, records, comp)
        _massjoin_rows(rows, records, comp)
        from tests.benchmarks import gateways  # (it builds on this module)

        rows.extend(gateways.rows(records, comp))

        from tests.benchmarks import token_stream  # its own module (issue 28)

        rows.extend(token_stream.report_rows(records, comp))

        from tests.benchmarks import redis_modes  # it imports this module

        rows += redis_modes.rows(records, comp)

        from tests.benchmarks import scale  # it imports this module

        rows += scale.rows(records, comp)
    return rows


def _signed_rows(rows: list[Row], records: list[dict], comp: str) -> None:
    """Signed envelopes (hub column) beside the same bytes unsigned (baseline column)."""
    for scenario in ("signed", "signed-few"):
        signed = find(records, scenario, "hub-signed", comp)
        plain = find(records, scenario, "hub-plain", comp)
        if (signed is None and plain is None) or _notice(rows, scenario, comp, signed, plain):
            continue
        n = (signed or plain or {}).get("params", {}).get("subscribers")
        label = f"{scenario} ({n} members): signed | plain"
        for metric, key, digits in (
            ("deliveries/s", "deliveries_per_s", 0),
            ("publishes/s", "publishes_per_s", 0),
            ("server CPU s / 100k deliveries", "cpu_s_per_100k", 3),
        ):
            h, b = fig(signed, key), fig(plain, key)
            rows.append(
                Row(label, metric, comp, fmt(h, digits), fmt(b, digits), fmt(ratio(h, b), 2))
            )
        cs, cp = fig(signed, "server_cpu_s"), fig(plain, "server_cpu_s")
        events = (signed or {}).get("figures", {}).get("events")
        extra = None if cs is None or cp is None or not events else 1e6 * (cs - cp) / events
        rows.append(Row(label, "extra server CPU per signed publish, µs", comp, fmt(extra), ""))


def _notice(rows: list[Row], scenario: str, comp: str, *records: dict | None) -> bool:
    """A row saying why there are no figures; True when there are none."""
    for r in records:
        if r is not None and status(r):
            reason = r.get("skipped") or r.get("error") or ""
            first = str(reason).strip().splitlines()[0] if reason else ""
            rows.append(Row(scenario, f"{status(r)} ({r['server']}): {first[:90]}", comp, "", ""))
    return all(r is None or status(r) for r in records)


def _throughput_rows(
    rows: list[Row], scenario: str, comp: str, hub: dict | None, base: dict | None
) -> None:
    if _notice(rows, scenario, comp, hub, base):
        return
    if scenario == "stream":
        h, b = fig(hub, "deltas_delivered_per_s"), fig(base, "deltas_delivered_per_s")
        rows.append(Row(scenario, "deltas delivered/s", comp, fmt(h), fmt(b), fmt(ratio(h, b), 2)))
    else:
        h, b = fig(hub, "deliveries_per_s"), fig(base, "deliveries_per_s")
        rows.append(Row(scenario, "deliveries/s", comp, fmt(h), fmt(b), fmt(ratio(h, b), 2)))
    h, b = fig(hub, "cpu_s_per_100k"), fig(base, "cpu_s_per_100k")
    rows.append(
        Row(
            scenario,
            "server CPU s / 100k deliveries",
            comp,
            fmt(h, 3),
            fmt(b, 3),
            fmt(ratio(h, b), 2),
        )
    )
    h, b = fig(hub, "deliveries_per_cpu_s"), fig(base, "deliveries_per_cpu_s")
    r = ratio(h, b)
    if scenario in ("fanout", "fanout-w1"):
        ok = None if r is None else r >= CPU_RATIO_TARGET
        res = verdict(ok, comp)
        if r is not None and r >= CPU_RATIO_STRETCH:
            res += " +stretch"
        target = f">= {CPU_RATIO_TARGET}x (stretch {CPU_RATIO_STRETCH}x)"
    else:
        target, res = "", ""
    rows.append(
        Row(scenario, "deliveries per server CPU-s", comp, fmt(h), fmt(b), fmt(r, 2), target, res)
    )
    h, b = fig(hub, "loadgen_cpu_pct"), fig(base, "loadgen_cpu_pct")
    hs, bs = fig(hub, "server_cpu_pct"), fig(base, "server_cpu_pct")
    rows.append(
        Row(
            scenario,
            "server CPU % / loadgen CPU %",
            comp,
            f"{fmt(hs)} / {fmt(h)}",
            f"{fmt(bs)} / {fmt(b)}",
        )
    )
    h, b = fig(hub, "frames_per_read"), fig(base, "frames_per_read")
    rows.append(Row(scenario, "frames per client read (coalescing)", comp, fmt(h, 1), fmt(b, 1)))


def _latency_rows(
    rows: list[Row],
    scenario: str,
    comp: str,
    hub: dict | None,
    base: dict | None,
    label: str = "",
    cpu_row: bool = True,
) -> None:
    if _notice(rows, scenario, comp, hub, base):
        return
    offered = fig(hub, "offered_deliveries_per_s") or fig(base, "offered_deliveries_per_s") or 0
    tag = f" @{offered / 1000:.0f}k/s{label}"
    for key, name in (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms")):
        h, b = fig(hub, key), fig(base, key)
        target = res = ""
        if key == "p99_ms":
            target = f"< {P99_TARGET_MS:g} ms @{P99_OFFERED // 1000}k/s"
            if offered < 0.9 * P99_OFFERED:
                target += " (offered less)"
                res = "n/a"
            else:
                res = verdict(None if h is None else h < P99_TARGET_MS, comp)
        rows.append(
            Row(scenario, name + tag, comp, fmt(h, 2), fmt(b, 2), fmt(ratio(h, b), 2), target, res)
        )
    if not cpu_row:
        return
    h, b = fig(hub, "cpu_us_per_delivery"), fig(base, "cpu_us_per_delivery")
    rows.append(
        Row(
            scenario,
            "server CPU µs/delivery (paced)",
            comp,
            fmt(h, 2),
            fmt(b, 2),
            fmt(ratio(h, b), 2),
        )
    )
    h, b = fig(hub, "loadgen_cpu_pct"), fig(base, "loadgen_cpu_pct")
    hs, bs = fig(hub, "server_cpu_pct"), fig(base, "server_cpu_pct")
    rows.append(
        Row(
            scenario,
            "server CPU % / loadgen CPU %",
            comp,
            f"{fmt(hs)} / {fmt(h)}",
            f"{fmt(bs)} / {fmt(b)}",
        )
    )


def _idle_rows(rows: list[Row], comp: str, hub: dict | None, base: dict | None) -> None:
    if _notice(rows, "idle", comp, hub, base):
        return
    n = fig(hub, "connections") or fig(base, "connections") or 0
    h, b = fig(hub, "rss_per_conn_kib"), fig(base, "rss_per_conn_kib")
    rows.append(
        Row(
            "idle",
            f"RSS KiB per idle connection ({n:,.0f})",
            comp,
            fmt(h, 1),
            fmt(b, 1),
            fmt(ratio(h, b), 2),
            f"<= {RSS_TARGET_KIB:g} KiB",
            verdict(None if h is None else h <= RSS_TARGET_KIB, comp),
        )
    )
    h, b = fig(hub, "connects_per_s"), fig(base, "connects_per_s")
    rows.append(Row("idle", "connects/s", comp, fmt(h), fmt(b), fmt(ratio(h, b), 2)))
    h, b = fig(hub, "server_cpu_ms_per_connect"), fig(base, "server_cpu_ms_per_connect")
    rows.append(
        Row("idle", "server CPU ms per connect", comp, fmt(h, 2), fmt(b, 2), fmt(ratio(h, b), 2))
    )


def _cluster_rows(rows: list[Row], records: list[dict], comp: str) -> None:
    fan = find(records, "cluster-fanout", "cluster", comp)
    lat = find(records, "cluster-latency", "cluster", comp)
    if fan is None and lat is None:
        return
    base_fan = find(records, "fanout", "baseline", comp)
    single_fan = find(records, "fanout", "hub", comp)
    if not _notice(rows, "cluster", comp, fan):
        h, b = fig(fan, "deliveries_per_s"), fig(base_fan, "deliveries_per_s")
        rows.append(
            Row(
                "cluster",
                "fan-out deliveries/s (2 nodes)",
                comp,
                fmt(h),
                fmt(b),
                fmt(ratio(h, b), 2),
            )
        )
        h, b = fig(fan, "deliveries_per_cpu_s"), fig(base_fan, "deliveries_per_cpu_s")
        s = fig(single_fan, "deliveries_per_cpu_s")
        rows.append(
            Row(
                "cluster",
                "deliveries per hub CPU-s (2 nodes)",
                comp,
                fmt(h),
                fmt(b),
                fmt(ratio(h, b), 2),
                f"single node: {fmt(s)}",
            )
        )
        rows.append(
            Row(
                "cluster",
                "frames per client read (coalescing)",
                comp,
                fmt(fig(fan, "frames_per_read"), 1),
                fmt(fig(base_fan, "frames_per_read"), 1),
            )
        )
        rows.append(
            Row(
                "cluster",
                "redis CPU s during fan-out",
                comp,
                fmt(fig(fan, "redis_cpu_s"), 2),
                "",
            )
        )
    if lat is not None and not _notice(rows, "cluster", comp, lat):
        base_lat = find(records, "latency", "baseline", comp)
        single = find(records, "latency", "hub", comp)
        _latency_rows(rows, "cluster", comp, lat, base_lat, " 2 nodes")
        c, s = fig(lat, "p50_ms"), fig(single, "p50_ms")
        extra = None if c is None or s is None else c - s
        rows.append(
            Row(
                "cluster",
                "p50 added by cluster, ms",
                comp,
                fmt(extra, 2),
                f"single: {fmt(s, 2)}",
                "",
                f"<= {CLUSTER_P50_EXTRA_MS:g} ms",
                verdict(None if extra is None else extra <= CLUSTER_P50_EXTRA_MS, comp),
            )
        )


def _workers_rows(rows: list[Row], records: list[dict], comp: str) -> None:
    one = find(records, "workers", "workers-1", comp)
    two = find(records, "workers", "workers-2", comp)
    base = find(records, "workers", "baseline", comp)
    if one is None and two is None:
        return
    if _notice(rows, "workers", comp, one, two):
        return
    b = fig(base, "deliveries_per_s")
    for rec, name in ((one, "1 worker"), (two, "2 workers")):
        h = fig(rec, "deliveries_per_s")
        rows.append(
            Row(
                "workers",
                f"deliveries/s, {name} (unpinned)",
                comp,
                fmt(h),
                fmt(b),
                fmt(ratio(h, b), 2),
            )
        )
    r = ratio(fig(two, "deliveries_per_s"), fig(one, "deliveries_per_s"))
    rows.append(
        Row(
            "workers",
            "2 workers / 1 worker",
            comp,
            fmt(r, 2),
            "",
            "",
            f">= {WORKERS_TARGET}x",
            verdict(None if r is None else r >= WORKERS_TARGET, comp),
        )
    )
    e = ratio(fig(two, "deliveries_per_cpu_s"), fig(one, "deliveries_per_cpu_s"))
    rows.append(Row("workers", "per-CPU efficiency, 2 / 1 worker", comp, fmt(e, 2), ""))
    cpu = [fig(one, "server_cpu_pct"), fig(two, "server_cpu_pct")]
    lg = [fig(one, "loadgen_cpu_pct"), fig(two, "loadgen_cpu_pct")]
    rows.append(
        Row(
            "workers",
            "hub / loadgen CPU %, 1w ; 2w",
            comp,
            f"{fmt(cpu[0])}/{fmt(lg[0])} ; {fmt(cpu[1])}/{fmt(lg[1])}",
            "",
        )
    )
    base_lat = find(records, "workers-latency", "baseline", comp)
    for n in (1, 2):
        lat = find(records, "workers-latency", f"workers-{n}", comp)
        if lat is None or _notice(rows, "workers", comp, lat):
            continue
        label = f" {n} worker{'s' if n > 1 else ''}"
        _latency_rows(rows, "workers", comp, lat, base_lat, label, cpu_row=False)


def _massjoin_rows(rows: list[Row], records: list[dict], comp: str) -> None:
    """One block per (agents, nodes): seconds to form, frames, MB, hub CPU."""
    runs = [r for r in records if r["scenario"] == "massjoin" and r["compression"] == comp]
    for r in sorted(runs, key=lambda r: (r.get("params", {}).get("agents", 0), r["server"])):
        n = r.get("params", {}).get("agents", 0)
        nodes = "2 nodes" if r["server"] == "cluster" else "1 node"
        label = f"{n:,} agents, {nodes}"
        if _notice(rows, "massjoin", comp, r):
            continue
        form, mb = fig(r, "form_s"), fig(r, "mb_sent")
        binding = n == MASSJOIN_AGENTS
        rows.append(
            Row(
                "massjoin",
                f"{label}: seconds to form",
                comp,
                fmt(form, 2),
                "",
                "",
                f"< {MASSJOIN_SECONDS:g} s" if binding else "",
                verdict(None if form is None else form < MASSJOIN_SECONDS, comp) if binding else "",
            )
        )
        rows.append(
            Row(
                "massjoin",
                f"{label}: MB sent by the hub",
                comp,
                fmt(mb, 1),
                "",
                "",
                f"< {MASSJOIN_MB:g} MB" if binding else "",
                verdict(None if mb is None else mb < MASSJOIN_MB, comp) if binding else "",
            )
        )
        frames, expected = fig(r, "frames"), fig(r, "expected_frames")
        rows.append(
            Row(
                "massjoin",
                f"{label}: frames sent (cost model)",
                comp,
                fmt(frames),
                f"({fmt(expected)})",
            )
        )
        cpu, redis = fig(r, "server_cpu_s"), fig(r, "redis_cpu_s")
        rows.append(
            Row(
                "massjoin",
                f"{label}: hub CPU s" + (" (redis)" if redis is not None else ""),
                comp,
                fmt(cpu, 2),
                f"({fmt(redis, 2)})" if redis is not None else "",
            )
        )


HEADERS = ("scenario", "metric", "comp", "agora hub", "baseline", "hub/base", "target", "result")


def render(rows: list[Row]) -> str:
    table = [HEADERS] + [
        (r.scenario, r.metric, r.compression, r.hub, r.baseline, r.ratio, r.target, r.result)
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(HEADERS))]
    right = {3, 4, 5}

    def line(cells: tuple[str, ...]) -> str:
        out = []
        for i, cell in enumerate(cells):
            out.append(str(cell).rjust(widths[i]) if i in right else str(cell).ljust(widths[i]))
        return "| " + " | ".join(out) + " |"

    sep = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if i in right else "-" * (w + 2) for i, w in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([line(HEADERS), sep, *(line(tuple(map(str, t))) for t in table[1:])])


def summary(rows: list[Row]) -> dict[str, Any]:
    return {
        "passed": [
            f"{r.scenario} {r.metric} [{r.compression}]"
            for r in rows
            if r.result.startswith("pass")
        ],
        "failed": [
            f"{r.scenario} {r.metric} [{r.compression}]" for r in rows if r.result == "FAIL"
        ],
    }


def notes(records: list[dict], quiet_pct: float) -> list[str]:
    """Footnotes: runs that other processes on the machine disturbed."""
    out = []
    for r in records:
        other = fig(r, "other_cpu_pct")
        if other is not None and other > quiet_pct:
            out.append(
                f"note: {r['scenario']} {r['server']} [{r['compression']}] ran while other"
                f" processes used {other:.0f}% of a core (least disturbed of its attempts)"
            )
    return out
