"""Token streams on the hub's default settings (issue 28): ``--only tokenstream``.

One publisher streams a model's output one delta per token — 300 deltas a second
for 60 s (5 s with ``--quick``), no coalescing — into a space of subscribers. The
hub runs on its **default** rate limits (the other scenarios lift them), the
websockets.broadcast baseline carries the same frames. Reported: deltas refused
(``RATE_LIMITED``: must be 0), deltas every subscriber received, one-way delivery
latency (the send stamp in each delta to its arrival) and server CPU.

A control run on the hub sends the same rate as *separate publishes* for 8 s:
they are refused past the message bucket and the connection is closed 4429 —
the message limit still holds for floods.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

import orjson

from hub.config.settings import Settings
from tests.benchmarks.report import Row, fig, find, fmt, ratio
from tests.benchmarks.scenarios import (
    SPACE,
    Target,
    Window,
    close_all,
    monotonic_ns,
    open_members,
    percentile,
    text_of,
)
from tests.benchmarks.wsload import LoadClient, masked_text_frame

if TYPE_CHECKING:
    from tests.benchmarks.suite import Bench

SCENARIO = "tokenstream"
FLOOD = "tokenstream-flood"
RATE = 300.0  # deltas per second: the floor for a model's token stream
TOKEN_BYTES = 6  # a token or two of text
WARMUP = 0.5  # seconds of latency samples left out


def default_rate_flags() -> list[str]:
    """The hub's own defaults for every rate limit, overriding what the other
    scenarios lift (``procs.hub_argv``): this scenario measures the defaults."""
    flags: list[str] = []
    for name in ("rate_limit", "rate_burst", "stream_rate_limit", "stream_rate_burst"):
        default = Settings.model_fields[name].default
        flags += ["--" + name.replace("_", "-"), repr(default)]
    return flags


def _errors(publisher: LoadClient) -> Counter[str]:
    """Error codes the publisher was sent (it decodes everything it receives)."""
    codes: Counter[str] = Counter()
    for raw in publisher.inbox:
        msg = orjson.loads(raw)
        if msg.get("type") == "error":
            codes[msg.get("code", "?")] += 1
            if "abuse" in msg.get("message", ""):
                codes["closed_4429"] += 1
    return codes


async def token_stream(
    target: Target, *, subscribers: int, rate: float, duration: float
) -> dict[str, Any]:
    publisher, subs = await open_members(target, subscribers)
    try:
        for c in subs:
            c.start_counting(latencies=True)
        publisher.inbox.clear()  # it keeps decoding: refusals are counted from here
        n = max(1, round(rate * duration))
        text = text_of(TOKEN_BYTES)
        head = {"type": "space.event.delta", "space": SPACE, "event_id": "answer", "echo": False}
        loop = asyncio.get_running_loop()
        win = Window(target)
        start = loop.time() + 0.01
        for i in range(n):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            data = {"sent_ns": monotonic_ns(), "text": text}
            publisher.send_raw(masked_text_frame(orjson.dumps({**head, "data": data})))
        sent_s = loop.time() - start
        done = {"type": "space.event.done", "space": SPACE, "event_id": "answer"}
        publisher.send_raw(masked_text_frame(orjson.dumps(done)))
        try:  # every delta and the done, unless some were refused
            async with asyncio.timeout(10.0):
                await asyncio.gather(*(c.wait_frames(n + 1) for c in subs))
        except TimeoutError:
            pass
        end = max((c.last_rx_ns for c in subs), default=monotonic_ns())
        out: dict[str, Any] = win.close(end)
        errors = _errors(publisher) if target.is_hub else Counter()
        skip = round(rate * WARMUP)
        samples = sorted(s for c in subs for s in (c.latencies or [])[skip:])
        received = [c.frames - 1 for c in subs]  # less the done
        deliveries = sum(c.frames for c in subs)
        out.update(
            deltas=n,
            rate=rate,
            duration_s=duration,
            achieved_rate=n / sent_s if sent_s > 0 else None,
            subscribers=len(subs),
            refused=errors.get("RATE_LIMITED", 0),
            errors=dict(errors),
            closed=publisher.closed,
            min_received=min(received),
            all_received=all(r == n for r in received),
            samples=len(samples),
            p50_ms=percentile(samples, 50),
            p99_ms=percentile(samples, 99),
            max_ms=samples[-1] / 1e6 if samples else float("nan"),
            cpu_us_per_delivery=1e6 * out["server_cpu_s"] / max(1, deliveries),
        )
        return out
    finally:
        close_all([publisher, *subs])


async def publish_flood(target: Target, *, rate: float, duration: float) -> dict[str, Any]:
    """The same rate as separate publishes: the message bucket refuses, then closes."""
    publisher, subs = await open_members(target, 1)
    try:
        publisher.inbox.clear()
        loop = asyncio.get_running_loop()
        n = round(rate * duration)
        start = loop.time() + 0.01
        sent = 0
        for i in range(n):
            if publisher.closed:
                break
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            frame = {"type": "space.publish", "id": f"p{i}", "space": SPACE, "echo": False,
                     "data": {"text": "x"}}  # fmt: skip
            publisher.send_raw(masked_text_frame(orjson.dumps(frame)))
            sent += 1
        await asyncio.sleep(0.5)  # the last answers (or the close) arrive
        errors = _errors(publisher)
        return {
            "publishes": sent,
            "rate": rate,
            "refused": errors.get("RATE_LIMITED", 0),
            "closed": publisher.closed,
            "closed_4429": errors.get("closed_4429", 0) > 0,
            "closed_after_s": round(sent / rate, 1) if publisher.closed else None,
        }
    finally:
        close_all([publisher, *subs])


async def run(bench: Bench, comp: str) -> None:
    """The scenario: baseline and hub (defaults), then the flood control on the hub."""
    quick = bench.args.quick
    subscribers, duration = (10, 5.0) if quick else (20, 60.0)
    params = {
        "subscribers": subscribers,
        "deltas_per_s": RATE,
        "duration_s": duration,
        "settings": "hub defaults (rate limits included)",
        "coalescing": "none: one delta per token",
    }

    def body(t: Target) -> Any:
        return token_stream(t, subscribers=subscribers, rate=RATE, duration=duration)

    flags = default_rate_flags()
    await bench.measure(SCENARIO, "baseline", comp, bench._baseline(comp), body, params)
    await bench.measure(SCENARIO, "hub", comp, bench._hub(comp, extra=flags), body, params)

    def flood(t: Target) -> Any:
        return publish_flood(t, rate=RATE, duration=8.0)

    flood_params = {"publishes_per_s": RATE, "duration_s": 8.0, "settings": "hub defaults"}
    await bench.measure(FLOOD, "hub", comp, bench._hub(comp, extra=flags), flood, flood_params)


def report_rows(records: list[dict], comp: str) -> list[Row]:
    hub, base = find(records, SCENARIO, "hub", comp), find(records, SCENARIO, "baseline", comp)
    rows: list[Row] = []
    if hub is None and base is None:
        return rows
    label = f"{SCENARIO} ({RATE:g}/s)"
    for who in (hub, base):
        if who is not None and ("error" in who or "skipped" in who):
            reason = str(who.get("error") or who.get("skipped")).splitlines()[0][:90]
            rows.append(Row(SCENARIO, f"error ({who['server']}): {reason}", comp, "", ""))
    refused = fig(hub, "refused")
    rows.append(
        Row(label, "deltas refused (RATE_LIMITED), defaults", comp, fmt(refused), "", "",
            "0", "n/a" if refused is None else ("pass" if refused == 0 else "FAIL"))
    )  # fmt: skip
    got, sent = fig(hub, "min_received"), fig(hub, "deltas")
    rows.append(Row(label, "deltas received by every subscriber", comp,
                    f"{fmt(got)} / {fmt(sent)}", fmt(fig(base, "min_received"))))  # fmt: skip
    for key, name in (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("max_ms", "max ms")):
        h, b = fig(hub, key), fig(base, key)
        rows.append(Row(label, f"delivery latency {name}", comp, fmt(h, 2), fmt(b, 2),
                        fmt(ratio(h, b), 2)))  # fmt: skip
    h, b = fig(hub, "cpu_us_per_delivery"), fig(base, "cpu_us_per_delivery")
    rows.append(Row(label, "server CPU µs/delivery", comp, fmt(h, 2), fmt(b, 2),
                    fmt(ratio(h, b), 2)))  # fmt: skip
    flood = find(records, FLOOD, "hub", comp)
    if flood is not None and "figures" in flood:
        f = flood["figures"]
        rows.append(Row(FLOOD, f"{RATE:g} separate publishes/s: refused / sent", comp,
                        f"{f['refused']:,} / {f['publishes']:,}", ""))  # fmt: skip
        closed = f"4429 after {f['closed_after_s']} s" if f["closed_4429"] else "not closed"
        rows.append(Row(FLOOD, "connection", comp, closed, ""))
    return rows
