"""Connections at scale (issue 26, contract §17): capacity, reconnect storm, big joins.

- ``capacity``: as many idle, heartbeating connections as one process may
  hold here (20,000 open files, hard limit), opened by worker processes
  (:mod:`tests.benchmarks.fleet`) from several loopback source addresses,
  every one probe-verified; RSS per connection, the server's CPU while idle
  at that size, and both projected to 50,000.
- ``storm``: N agents in spaces of ``space_size`` (held by load-generator
  processes, :mod:`tests.benchmarks.storm_fleet`) plus an observer in every
  space; all N dropped at once, events published while they are away, then
  all reconnect at the same instant — no cap (``storm-capped``: at most
  ``storm_concurrency`` in flight), each attempt given up after 10 s and
  retried with a jittered backoff — and re-join with ``since``. Each must get
  every missed event exactly once and ``recovered: true``; the observer must
  stay connected. The baseline: the same N dropped and reconnecting bare.
- ``scalejoin``: 2,000 and 10,000 agents join one space at once, beside the
  baseline connecting as many bare connections. The 2,000 join is short (half
  a CPU-second) and its single runs scatter by a third: its figure is the
  median of ``Sizes.join_runs`` alternating baseline and hub runs.

All on the hub's default settings (procs.py lifts only the publish rate limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from tests.benchmarks import procs, scenarios, storm_fleet
from tests.benchmarks.fleet import Fleet, fresh_sources, split
from tests.benchmarks.procs import machine_cpu
from tests.benchmarks.report import Row, fig, fmt, ratio, verdict
from tests.benchmarks.scenarios import Target, Window, self_cpu
from tests.benchmarks.wsload import LoadClient

if TYPE_CHECKING:
    from tests.benchmarks.suite import Bench

HEARTBEAT_S = 30.0  # the hub's default heartbeat_interval
PROJECT_TO = 50_000
MEMBERS = b'"space.members"'
STORM_RATIO_TARGET = 1.0  # hub reconnects-with-resume per CPU-s / baseline bare reconnects
STORM_TIME_SLACK = 1.2  # all back no later than the baseline's time + 20 %
STORM_EVENTS = 5  # published in every space while its agents are away
CONNECT_RATIO_TARGET = 1.0  # capacity: hub connects per CPU-s / baseline's
JOIN_RATIO_TARGET = 1.0  # hub joins per CPU-s / baseline connects per CPU-s, at 2,000
JOIN_BINDING = 2000
JOIN_BIG = 10_000
JOIN_BIG_SECONDS = 10.0


def sources(n: int, per: int = 5000) -> list[str]:
    """Loopback source addresses for ``n`` connections, at least two, not used
    by the runs just before (:func:`~tests.benchmarks.fleet.fresh_sources`)."""
    return fresh_sources(max(2, -(-n // per)))


# ── capacity ────────────────────────────────────────────────────────────────


async def capacity(target: Target, *, connections: int, window: float, space_size: int = 100):
    """Open ``connections`` idle, heartbeating agents; RSS and idle CPU at that size."""
    server = target.servers[0]
    rss0 = target.rss()
    specs = split(
        target.kind, target.ports[0], connections, space_size=space_size, heartbeat_s=HEARTBEAT_S
    )
    fleet = Fleet(specs)
    try:
        t0 = time.monotonic()
        cpu0 = target.cpu()
        fleet_open0 = sum(_cpu(p) for p in fleet.pids)
        opened = await fleet.call("open")
        open_s = time.monotonic() - t0
        open_cpu = target.cpu() - cpu0
        # What bounds the fill rate: the server's core, or the load generator's.
        fleet_open_cpu = sum(_cpu(p) for p in fleet.pids) - fleet_open0
        probed = await fleet.call("probe")
        verified = sum(p["verified"] for p in probed)
        await asyncio.sleep(2.0)  # what each connect set off is done
        rss1 = target.rss()
        # The idle window: heartbeats only, spread over the interval.
        before = await fleet.call("stats")
        fleet_cpu0 = sum(_cpu(p) for p in fleet.pids)
        busy0, _ = machine_cpu()
        own0 = self_cpu()
        w0, c0 = time.monotonic(), target.cpu()
        await asyncio.sleep(window)
        wall, cpu = time.monotonic() - w0, target.cpu() - c0
        busy1, _ = machine_cpu()
        fleet_cpu = sum(_cpu(p) for p in fleet.pids) - fleet_cpu0
        after = await fleet.call("stats")
        other = (busy1 - busy0) - cpu - fleet_cpu - (self_cpu() - own0)
        held = verified - sum(a["closed"] for a in after)
        per_conn = (rss1 - rss0) / max(1, verified) / 1024
        idle_pct = 100 * cpu / wall
        beats = sum(a["beats"] for a in after) - sum(b["beats"] for b in before)
        return {
            "connections": connections,
            "opened": sum(o["opened"] for o in opened),
            "failed_attempts": sum(o["failed"] for o in opened),
            "errors": [e for o in opened for e in o["errors"]][:5],
            "verified": verified,
            "held": held,
            "workers": len(specs),
            "sources": [s.source for s in specs],
            "open_s": open_s,
            "connects_per_s": verified / open_s,
            "server_cpu_ms_per_connect": 1000 * open_cpu / max(1, verified),
            "server_cpu_pct_while_filling": 100 * open_cpu / open_s,
            "loadgen_cpu_pct_while_filling": 100 * fleet_open_cpu / open_s,
            "rss_before_mib": rss0 / 2**20,
            "rss_after_mib": rss1 / 2**20,
            "rss_per_conn_kib": per_conn,
            "idle_window_s": wall,
            "idle_cpu_s": cpu,
            "idle_cpu_pct": idle_pct,
            "heartbeats_in_window": beats,
            "heartbeats_per_s": beats / wall,
            "loadgen_cpu_pct": 100 * fleet_cpu / wall,
            "other_cpu_pct": max(0.0, 100 * other / wall),
            "open_files_limit": _nofile(server.pid),
            "projected_50k_rss_mib": per_conn * PROJECT_TO / 1024,
            "projected_50k_idle_cpu_pct": idle_pct * PROJECT_TO / max(1, verified),
        }
    finally:
        await fleet.aclose()


def _cpu(pid: int) -> float:
    try:
        return procs.cpu_seconds(pid)
    except OSError:
        return 0.0


def _nofile(pid: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in open(f"/proc/{pid}/limits"):
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


# ── reconnect storm ─────────────────────────────────────────────────────────


#: Each reconnect attempt is given up after this long (a client library's
#: open timeout), then retried after a jittered backoff, at most RETRIES times.
ATTEMPT_TIMEOUT_S = 10.0
RETRIES = 8
#: Load-generator processes holding the storm's agents.
STORM_WORKERS = 8


def listen_drops() -> tuple[int, int]:
    """(ListenOverflows, ListenDrops) of this network namespace so far: the
    connections the kernel dropped because an accept queue was full."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        lines = open("/proc/net/netstat").read().splitlines()
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            if names.startswith("TcpExt:"):
                row = dict(zip(names.split()[1:], map(int, values.split()[1:]), strict=False))
                return row.get("ListenOverflows", 0), row.get("ListenDrops", 0)
    return 0, 0


async def _connect(target: Target, agent_id: str, source: str) -> tuple[LoadClient, dict[str, Any]]:
    path = f"/ws?agent_id={agent_id}" if target.is_hub else "/"
    client = await LoadClient.connect(
        "127.0.0.1", target.ports[0], path, source=source, skip=(MEMBERS,)
    )
    try:
        first = await client.expect("agent.registered" if target.is_hub else "ready")
    except BaseException:
        client.abort()
        raise
    if target.is_hub:
        client.keep_alive(first["heartbeat_interval"] / 2000)
    return client, first


async def _join_all(client: LoadClient, spaces: list[str]) -> None:
    for k, space in enumerate(spaces):
        client.send_json({"type": "space.join", "id": f"j{k}", "space": space})
    for _ in spaces:
        await client.expect("space.joined", timeout=120)


def _server_sockets(target: Target) -> int:
    return sum(sum(s.sockets().values()) for s in target.servers)


async def _wait_sockets(target: Target, at_most: int, timeout: float = 30.0) -> float:
    """Seconds until the server holds at most ``at_most`` sockets (it saw the drop)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if _server_sockets(target) <= at_most:
            break
        await asyncio.sleep(0.2)
    return time.monotonic() - t0


async def storm(
    target: Target,
    *,
    agents: int,
    space_size: int,
    concurrency: int | None = None,
    events_per_space: int = STORM_EVENTS,
    attempt_timeout: float = ATTEMPT_TIMEOUT_S,
    retries: int = RETRIES,
    workers: int = STORM_WORKERS,
    timeout: float = 600.0,
    before_measure: scenarios.Hook = None,
) -> dict[str, Any]:
    """Drop ``agents`` at once, publish while they are away, reconnect them all.

    The agents are held by ``workers`` load-generator processes
    (:mod:`tests.benchmarks.storm_fleet`). Every agent reconnects at the same
    instant (``concurrency`` None: no cap; else at most that many attempts in
    flight), each attempt given up after ``attempt_timeout`` and retried after
    a jittered backoff, at most ``retries`` times; a hub agent then re-joins
    its space with ``since``. Server CPU counts from the drop until the node
    settles (every agent back, no frame for 0.5 s, the server holding only the
    live connections: handshakes of attempts given up are over).
    """
    hub = target.is_hub
    nspaces = -(-agents // space_size)
    names = [f"storm-{k}" for k in range(nspaces)]
    sockets0 = _server_sockets(target)
    extra: list[LoadClient] = []
    specs = storm_fleet.split(target.kind, target.ports[0], agents, space_size, workers)
    fleet = storm_fleet.StormFleet(specs)
    try:
        observer = publisher = None
        if hub:
            source = "127.0.1.1"
            observer, _ = await _connect(target, "storm-observer", source)
            # The publisher joins the spaces only while the agents are away:
            # it is not a second member of every space during the drop and the
            # storm, where membership traffic would cut it off as it may the
            # observer (which is what the run watches for).
            publisher, _ = await _connect(target, "storm-publisher", source)
            extra += [observer, publisher]
            await _join_all(observer, names)
        await fleet.call("setup", timeout=timeout)
        await _fleet_settle(fleet, extra, timeout=timeout)
        if before_measure is not None:
            await before_measure()

        # ── the drop ──
        closed_before_drop = observer is not None and observer.closed
        if observer is not None:
            observer.start_counting()
        win = Window(target)
        fleet_cpu0 = sum(_cpu(p) for p in fleet.pids)
        await fleet.call("drop")
        departed_s = await _wait_sockets(target, sockets0 + len(extra))
        expected: dict[str, list[int]] = {name: [] for name in names}
        if publisher is not None:
            await _join_all(publisher, names)
            for name in names:
                for e in range(events_per_space):
                    publisher.send_json(
                        {"type": "space.publish", "space": name, "data": {"text": f"missed {e}"}}
                    )
            for _ in range(nspaces * events_per_space):
                ev = await publisher.expect("space.event", timeout=120)
                expected[ev["space"]].append(ev["seq"])
            for k, name in enumerate(names):
                publisher.send_json({"type": "space.leave", "id": f"l{k}", "space": name})
            for _ in names:
                await publisher.expect("space.left", timeout=120)
        drop_cpu = target.cpu() - win.user0 - win.sys0

        # ── the storm: every worker starts at the same instant ──
        overflows0, drops0 = listen_drops()
        start_at = time.monotonic() + 0.5
        cap = -(-concurrency // len(specs)) if concurrency else 0
        answers = await fleet.call(
            "storm",
            timeout=timeout,
            expected=expected,
            start_at=start_at,
            concurrency=cap,
            attempt_timeout=attempt_timeout,
            retries=retries,
        )
        all_back_s = max(a["done_ns"] for a in answers) / 1e9 - start_at
        overflows1, drops1 = listen_drops()
        # The node settles: no frame for 0.5 s, and only the live connections
        # left (handshakes of attempts given up have ended).
        await _fleet_settle(fleet, extra, timeout=60)
        await _wait_sockets(target, sockets0 + len(extra) + agents, timeout=60)
        out: dict[str, Any] = win.close()
        fleet_cpu = sum(_cpu(p) for p in fleet.pids) - fleet_cpu0
        # The workers' CPU is the load generator's too (Window counts only this process).
        out["loadgen_cpu_pct"] += 100 * fleet_cpu / out["wall_s"]
        out["other_cpu_pct"] = max(0.0, out["other_cpu_pct"] - 100 * fleet_cpu / out["wall_s"])
        cpu = out["server_cpu_s"]
        retried = sum(a["retried"] for a in answers)
        out.update(
            agents=agents,
            concurrency=concurrency,
            workers=len(specs),
            sources=[s.source for s in specs],
            all_back_s=all_back_s,
            departed_s=departed_s,
            drop_cpu_s=drop_cpu,
            storm_cpu_s=cpu - drop_cpu,
            reconnects_per_s=agents / all_back_s,
            reconnects_per_cpu_s=agents / cpu if cpu > 0 else None,
            retried_attempts=retried,
            timed_out_attempts=sum(a["timed_out"] for a in answers),
            failed_connections=retried,
            agent_exists=sum(a["exists"] for a in answers),
            listen_overflows=overflows1 - overflows0,
            listen_drops=drops1 - drops0,
            errors=[e for a in answers for e in a["errors"]][:5],
        )
        if hub:
            assert observer is not None
            tallies = await fleet.call("tally")
            out.update(
                spaces=nspaces,
                space_size=space_size,
                events_published=nspaces * events_per_space,
                missed_events=sum(len(expected[names[i // space_size]]) for i in range(agents)),
                lost_events=sum(t["lost"] for t in tallies),
                duplicate_events=sum(t["dup"] for t in tallies),
                unexpected_events=sum(t["unexpected"] for t in tallies),
                not_recovered=sum(t["not_recovered"] for t in tallies),
                observer_closed=observer.closed,
                observer_close_code=observer.close_code,
                observer_closed_before_drop=closed_before_drop,
                observer_frames=observer.frames,
            )
        return out
    finally:
        scenarios.close_all(extra)
        await fleet.aclose()


async def _fleet_settle(
    fleet: storm_fleet.StormFleet, extra: list[LoadClient], *, timeout: float, quiet: float = 0.5
) -> None:
    """Wait until no frame has reached the fleet or ``extra`` for ``quiet`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = -1
    quiet_since = loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.1)
        counts = await fleet.call("frames", timeout=60)
        total = sum(c["frames"] for c in counts) + sum(c.total_frames for c in extra)
        now = loop.time()
        if total != last:
            last, quiet_since = total, now
        elif now - quiet_since >= quiet:
            return


# ── the runs ────────────────────────────────────────────────────────────────


async def run_capacity(bench: Bench, comp: str) -> None:
    if comp != "none":
        return  # the defaults: compression off
    s = bench.sizes
    params = {
        "connections": s.capacity_connections,
        "idle_window_s": s.capacity_window,
        "heartbeat_s": HEARTBEAT_S,
        "space_size": 100,
        "settings": "defaults",
    }

    def body(t: Target) -> Awaitable[dict]:
        return capacity(t, connections=s.capacity_connections, window=s.capacity_window)

    await bench.both("capacity", comp, body, params)


async def run_storm(bench: Bench, comp: str) -> None:
    """The storm uncapped (every agent at once), then capped (at most
    ``storm_concurrency`` attempts in flight), each beside the baseline."""
    if comp != "none":
        return
    s = bench.sizes
    for scenario, cap in (("storm", None), ("storm-capped", s.storm_concurrency)):
        params = {
            "agents": s.storm_agents,
            "space_size": s.storm_space,
            "concurrency": cap or "all at once",
            "events_per_space": STORM_EVENTS,
            "attempt_timeout_s": ATTEMPT_TIMEOUT_S,
            "retries": RETRIES,
            "settings": "defaults",
        }

        def body(t: Target, cap: int | None = cap) -> Awaitable[dict]:
            return storm(t, agents=s.storm_agents, space_size=s.storm_space, concurrency=cap)

        await bench.both(scenario, comp, body, params)


async def run_scalejoin(bench: Bench, comp: str) -> None:
    """N agents join one space at once, beside N bare connects to the baseline."""
    if comp != "none":
        return
    for n in bench.sizes.scalejoin_agents:
        concurrency = min(500, n)

        def body(t: Target, n: int = n, c: int = concurrency) -> Awaitable[dict]:
            return scenarios.mass_join(t, agents=n, concurrency=c, retries=5)

        params = {"agents": n, "concurrency": concurrency, "retries": 5, "settings": "defaults"}
        if n == JOIN_BINDING and bench.sizes.join_runs > 1:
            await bench.alternating(f"scalejoin-{n}", comp, body, params, bench.sizes.join_runs)
        else:
            await bench.both(f"scalejoin-{n}", comp, body, params)


# ── the table ───────────────────────────────────────────────────────────────


def rows(records: list[dict], comp: str) -> list[Row]:
    from tests.benchmarks.report import _notice, find

    out: list[Row] = []
    hub, base = find(records, "capacity", "hub", comp), find(records, "capacity", "baseline", comp)
    if (hub or base) and not _notice(out, "capacity", comp, hub, base):
        n = fig(hub, "connections") or fig(base, "connections") or 0
        sc = f"capacity ({n:,.0f})"
        out.append(
            _pair(sc, "connections held, probe-verified", comp, hub, base, "held", with_ratio=False)
        )
        h, b = fig(hub, "rss_per_conn_kib"), fig(base, "rss_per_conn_kib")
        r = ratio(h, b)
        out.append(
            Row(
                sc,
                "RSS KiB per connection",
                comp,
                fmt(h, 1),
                fmt(b, 1),
                fmt(r, 2),
                "<= baseline",
                verdict(None if r is None else r <= 1.0, comp),
            )
        )
        idle = f"CPU % of a core, idle (beat/{HEARTBEAT_S:g} s)"
        out += [
            _pair(sc, idle, comp, hub, base, "idle_cpu_pct", 2),
            _pair(sc, "projected RSS MiB at 50,000", comp, hub, base, "projected_50k_rss_mib"),
            _pair(sc, "projected idle CPU % at 50,000", comp, hub, base,
                  "projected_50k_idle_cpu_pct", 1),
            _pair(sc, "connects/s while filling", comp, hub, base, "connects_per_s"),
            _connects_row(sc, comp, hub, base),
            # Which side bounds the fill rate: the server's core or the load generator's.
            _pair(sc, "server CPU % while filling", comp, hub, base,
                  "server_cpu_pct_while_filling"),
            _pair(sc, "load generator CPU % while filling", comp, hub, base,
                  "loadgen_cpu_pct_while_filling", with_ratio=False),
            _pair(
                sc, "failed connection attempts (retried)", comp, hub, base, "failed_attempts",
                with_ratio=False,
            ),
        ]  # fmt: skip
    for scenario in ("storm", "storm-capped"):
        out += _storm_rows(records, scenario, comp)
    for r in sorted(
        (r for r in records if r["scenario"].startswith("scalejoin-") and r["compression"] == comp),
        key=lambda r: r.get("params", {}).get("agents", 0),
    ):
        if r["server"] != "hub":
            continue
        n = r.get("params", {}).get("agents", 0)
        hub, base = r, find(records, r["scenario"], "baseline", comp)
        sc = f"join ({n:,} → 1 space)"
        if _notice(out, sc, comp, hub, base):
            continue
        h, b = fig(hub, "form_s"), fig(base, "form_s")
        big = n >= JOIN_BIG
        out.append(
            Row(
                sc,
                "seconds to form | connect all",
                comp,
                fmt(h, 2),
                fmt(b, 2),
                fmt(ratio(h, b), 2),
                f"< {JOIN_BIG_SECONDS:g} s" if big else "",
                verdict(None if h is None else h < JOIN_BIG_SECONDS, comp) if big else "",
            )
        )
        h = _per_cpu(hub, n)
        b = _per_cpu(base, n)
        rr = ratio(h, b)
        binding = n == JOIN_BINDING
        out.append(
            Row(
                sc,
                "joins | bare connects per server CPU-s",
                comp,
                fmt(h),
                fmt(b),
                fmt(rr, 2),
                f">= {JOIN_RATIO_TARGET:g}x" if binding else "",
                verdict(None if rr is None else rr >= JOIN_RATIO_TARGET, comp) if binding else "",
            )
        )
        if hub.get("runs") and base is not None and base.get("runs"):
            out.append(
                Row(
                    sc,
                    "server CPU-s of each alternating run (median above)",
                    comp,
                    " ".join(f"{c:.2f}" for c in hub["runs"]),
                    " ".join(f"{c:.2f}" for c in base["runs"]),
                )
            )
        out.append(_failed_row(sc, "failed connection attempts (retried)", comp, hub, base))
        out.append(
            _pair(sc, "MB sent by the server", comp, hub, base, "mb_sent", 1, with_ratio=False)
        )
    return out


def _connects_row(sc: str, comp: str, hub: dict | None, base: dict | None) -> Row:
    """Connections opened per server CPU-second while filling (hub: registered
    and joined), against the baseline's bare connects."""
    h, b = fig(hub, "server_cpu_ms_per_connect"), fig(base, "server_cpu_ms_per_connect")
    h, b = (1000 / h if h else None), (1000 / b if b else None)
    r = ratio(h, b)
    return Row(
        sc,
        "connects (hub: registered, joined) per server CPU-s",
        comp,
        fmt(h),
        fmt(b),
        fmt(r, 2),
        f">= {CONNECT_RATIO_TARGET:g}x",
        verdict(None if r is None else r >= CONNECT_RATIO_TARGET, comp),
    )


def _storm_rows(records: list[dict], scenario: str, comp: str) -> list[Row]:
    from tests.benchmarks.report import _notice, find

    out: list[Row] = []
    hub, base = find(records, scenario, "hub", comp), find(records, scenario, "baseline", comp)
    if not (hub or base) or _notice(out, scenario, comp, hub, base):
        return out
    p = (hub or base or {}).get("params", {})
    cap = p.get("concurrency")
    how = "all at once" if not isinstance(cap, int) else f"<= {cap:,} in flight"
    sc = f"{scenario} ({p.get('agents', 0):,}/{p.get('space_size', 0)}, {how})"
    uncapped = scenario == "storm"
    h, b = fig(hub, "reconnects_per_cpu_s"), fig(base, "reconnects_per_cpu_s")
    r = ratio(h, b)
    out.append(
        Row(
            sc,
            "reconnects (hub: with resume) per server CPU-s",
            comp,
            fmt(h),
            fmt(b),
            fmt(r, 2),
            f">= {STORM_RATIO_TARGET:g}x",
            verdict(None if r is None else r >= STORM_RATIO_TARGET, comp),
        )
    )
    out.append(
        Row(
            sc,
            "server CPU-s: the drop + the storm",
            comp,
            f"{fmt(fig(hub, 'drop_cpu_s'), 2)} + {fmt(fig(hub, 'storm_cpu_s'), 2)}",
            f"{fmt(fig(base, 'drop_cpu_s'), 2)} + {fmt(fig(base, 'storm_cpu_s'), 2)}",
        )
    )
    h, b = fig(hub, "all_back_s"), fig(base, "all_back_s")
    ok = None if h is None or b is None else h <= STORM_TIME_SLACK * b
    out.append(
        Row(
            sc,
            "seconds until all back (hub: resumed)",
            comp,
            fmt(h, 1),
            fmt(b, 1),
            fmt(ratio(h, b), 2),
            f"<= {STORM_TIME_SLACK:g}x" if uncapped else "",
            verdict(ok, comp) if uncapped else "",
        )
    )
    h, b = fig(hub, "retried_attempts"), fig(base, "retried_attempts")
    ok = None if h is None or b is None else h <= b
    out.append(
        Row(
            sc,
            "retried attempts (of which timed out)",
            comp,
            f"{fmt(h)} ({fmt(fig(hub, 'timed_out_attempts'))})",
            f"{fmt(b)} ({fmt(fig(base, 'timed_out_attempts'))})",
            "",
            "<= baseline" if uncapped else "",
            verdict(ok, comp) if uncapped else "",
        )
    )
    out.append(_pair(sc, "listen-queue overflows (whole machine)", comp, hub, base,
                     "listen_overflows", with_ratio=False))  # fmt: skip
    lost, dup = fig(hub, "lost_events"), fig(hub, "duplicate_events")
    missed = fig(hub, "missed_events")
    ok = None if lost is None or dup is None else lost == 0 and dup == 0
    out.append(
        Row(
            sc,
            f"events lost / duplicated (of {fmt(missed)} missed)",
            comp,
            f"{fmt(lost)} / {fmt(dup)}",
            "",
            "",
            "0 / 0",
            verdict(ok, comp),
        )
    )
    nr = fig(hub, "not_recovered")
    out.append(
        Row(sc, "joins not recovered", comp, fmt(nr), "", "", "0",
            verdict(None if nr is None else nr == 0, comp))
    )  # fmt: skip
    if hub is not None and "figures" in hub:
        f = hub["figures"]
        closed = f.get("observer_closed")
        code = f.get("observer_close_code")
        text = ("yes" + (f" ({code})" if code else "")) if closed else "no"
        out.append(
            Row(sc, "observer (in every space) closed", comp, text, "", "", "no",
                verdict(not closed, comp))
        )  # fmt: skip
        out.append(Row(sc, "frames to the observer", comp, fmt(f.get("observer_frames")), ""))
    return out


def _pair(
    sc: str,
    label: str,
    comp: str,
    hub: dict | None,
    base: dict | None,
    key: str,
    digits: int = 0,
    *,
    with_ratio: bool = True,
) -> Row:
    """A figure of the hub beside the baseline's (and their ratio), no target."""
    h, b = fig(hub, key), fig(base, key)
    r = fmt(ratio(h, b), 2) if with_ratio else ""
    return Row(sc, label, comp, fmt(h, digits), fmt(b, digits), r)


def _failed_row(sc: str, label: str, comp: str, hub: dict | None, base: dict | None) -> Row:
    """Failed connection attempts: the hub's must be 0."""
    h, b = fig(hub, "failed_connections"), fig(base, "failed_connections")
    ok = None if h is None else h == 0
    return Row(sc, label, comp, fmt(h), fmt(b), "", "0", verdict(ok, comp))


def _per_cpu(record: dict | None, n: int) -> float | None:
    cpu = fig(record, "server_cpu_s")
    return None if not cpu else n / cpu


def headline(f: dict[str, Any]) -> str | None:
    """The one-line log of a run of these scenarios (None: not one of them)."""
    if "idle_cpu_pct" in f:
        return (
            f"{f['held']:,} held of {f['connections']:,}, {f['rss_per_conn_kib']:.1f} KiB/conn,"
            f" idle CPU {f['idle_cpu_pct']:.2f}%, {f['connects_per_s']:,.0f} connects/s"
        )
    if "all_back_s" in f:
        tail = ""
        if "lost_events" in f:
            tail = (
                f", lost {f['lost_events']}, dup {f['duplicate_events']},"
                f" observer {'CLOSED' if f['observer_closed'] else 'ok'}"
                f" ({f['observer_frames']:,} frames)"
            )
        per = f["reconnects_per_cpu_s"] or 0
        return (
            f"{f['agents']:,} back in {f['all_back_s']:.1f} s, {per:,.0f} reconnects/CPU-s,"
            f" retried {f['failed_connections']}, listen overflows {f.get('listen_overflows')}"
            f"{tail}"
        )
    return None
