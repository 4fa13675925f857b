"""The A2A scenario: request/reply through the gateway beside the same over WebSocket.

One hub process on default settings (the rate limit lifted, as for every
benchmark publisher: the gateway's ``a2a`` member publishes every request and
the answering agent every reply) serves a space declared ``a2a = true``. A
WebSocket agent in the load generator answers each request it is addressed
(``{"in_reply_to", "text"}``, addressed back to the asker). Two runs, each
closed-loop with ``concurrency`` requests in flight:

* ``hub-a2a`` — ``concurrency`` HTTP clients send A2A ``SendMessage`` (blocking)
  to ``/a2a/bench``; a request's round trip ends with the completed task;
* ``hub-ws`` — ``concurrency`` WebSocket agents publish the same request
  addressed to the answering agent and wait for its reply: the hub's own
  request/reply, the baseline of the gateway's cost.

Figures: requests answered per second, p50/p99 round trip, server CPU per
request. The table puts the gateway in the hub column and WebSocket in the
baseline column.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from tests.benchmarks import procs, report
from tests.benchmarks.procs import ServerProcess
from tests.benchmarks.scenarios import SPACE, Target, Window, close_all

if TYPE_CHECKING:
    from tests.benchmarks.suite import Bench

SCENARIO = "a2a"


@dataclass(frozen=True)
class A2aSizes:
    requests: int
    concurrency: int
    warmup: int


FULL = A2aSizes(requests=4000, concurrency=16, warmup=200)
QUICK = A2aSizes(requests=400, concurrency=8, warmup=40)


async def run(bench: Bench, comp: str) -> None:
    if comp != "none":
        return  # HTTP requests: WebSocket compression does not apply
    sizes = QUICK if bench.args.quick else FULL
    params = {"requests": sizes.requests, "concurrency": sizes.concurrency,
              "settings": "defaults, rate limit lifted"}  # fmt: skip
    config = Path(tempfile.mkdtemp(prefix="agora-bench-a2a-")) / "hub.toml"
    config.write_text(f'[[spaces]]\nid = "{SPACE}"\na2a = true\n')
    for server, via in (("hub-ws", "ws"), ("hub-a2a", "a2a")):
        http_port = procs.free_port()

        def start(http_port: int = http_port) -> tuple[Target, list[ServerProcess]]:
            extra = ["--http-port", str(http_port), "--config", str(config)]
            proc, port = procs.start_hub(
                bench.pinning, comp, cores=bench.pinning.server_cores, extra=extra
            )
            return Target("hub", [port], [proc], False), [proc]

        async def body(target: Target, via: str = via, http_port: int = http_port) -> dict:
            return await roundtrips(target, via=via, http_port=http_port, sizes=sizes)

        await bench.measure(SCENARIO, server, comp, start, body, {**params, "via": via})


async def roundtrips(target: Target, *, via: str, http_port: int, sizes: A2aSizes) -> dict:
    answerer = await target.open(prefix="answerer")
    await target.join(answerer)
    answering = asyncio.get_running_loop().create_task(_answer(answerer))
    answerer_id = answerer.path.rpartition("agent_id=")[2]
    clients: list[Any] = [answerer]
    try:
        if via == "ws":
            askers = [await target.open(prefix="asker") for _ in range(sizes.concurrency)]
            clients += askers
            for asker in askers:
                await target.join(asker)
            one = _ws_asker(askers, answerer_id)
        else:
            http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=sizes.concurrency))
            one = _a2a_asker(http, f"http://127.0.0.1:{http_port}/a2a/{SPACE}")
        try:
            await _closed_loop(one, sizes.warmup, sizes.concurrency)
            window = Window(target)
            started = time.perf_counter()
            rtts = await _closed_loop(one, sizes.requests, sizes.concurrency)
            wall = time.perf_counter() - started
            out: dict[str, Any] = window.close()
        finally:
            if via != "ws":
                await http.close()
    finally:
        answering.cancel()
        close_all(clients)
    rtts.sort()
    out.update(
        requests=len(rtts),
        requests_per_s=len(rtts) / wall,
        p50_ms=statistics.median(rtts) * 1000,
        p99_ms=rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))] * 1000,
        cpu_ms_per_request=1000 * out["server_cpu_s"] / len(rtts),
        concurrency=sizes.concurrency,
    )
    return out


async def _closed_loop(one: Any, total: int, concurrency: int) -> list[float]:
    """``total`` round trips, ``concurrency`` at a time; each one's seconds."""
    rtts: list[float] = []
    counter = itertools.count()

    async def worker(slot: int) -> None:
        while next(counter) < total:
            rtts.append(await one(slot))

    async with asyncio.timeout(300):
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
    return rtts


async def _answer(answerer: Any) -> None:
    """Answer every request addressed to the answering agent, back to its asker."""
    while True:
        msg = await answerer.recv(timeout=3600)
        data = msg.get("data")
        if msg.get("type") != "space.event" or not isinstance(data, dict):
            continue
        answerer.send_json({
            "type": "space.publish", "space": SPACE, "to": msg["from"], "echo": False,
            "data": {"in_reply_to": msg["event_id"], "text": f"re: {data.get('text')}"},
        })  # fmt: skip


def _ws_asker(askers: list[Any], answerer: str) -> Any:
    async def one(slot: int) -> float:
        asker = askers[slot]
        started = time.perf_counter()
        asker.send_json({"type": "space.publish", "space": SPACE, "to": answerer,
                         "echo": False, "data": {"text": "ping"}})  # fmt: skip
        while True:
            msg = await asker.recv()
            if msg.get("type") == "space.event" and "in_reply_to" in msg.get("data", {}):
                return time.perf_counter() - started

    return one


def _a2a_asker(http: aiohttp.ClientSession, url: str) -> Any:
    ids = itertools.count()
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}

    async def one(slot: int) -> float:
        n = next(ids)
        body = orjson.dumps({
            "jsonrpc": "2.0", "id": n, "method": "SendMessage",
            "params": {"message": {"messageId": f"m{n}", "role": "ROLE_USER",
                                   "parts": [{"text": "ping"}]}},
        })  # fmt: skip
        started = time.perf_counter()
        async with http.post(url, data=body, headers=headers) as resp:
            answer = orjson.loads(await resp.read())
        rtt = time.perf_counter() - started
        state = answer.get("result", {}).get("task", {}).get("status", {}).get("state")
        if state != "TASK_STATE_COMPLETED":
            raise RuntimeError(f"request not answered: {answer}")
        return rtt

    return one


def rows(records: list[dict], comp: str) -> list[report.Row]:
    """The table's rows: the gateway (hub column) beside WebSocket (baseline column)."""
    gateway = report.find(records, SCENARIO, "hub-a2a", comp)
    direct = report.find(records, SCENARIO, "hub-ws", comp)
    out: list[report.Row] = []
    if (gateway is None and direct is None) or report._notice(out, SCENARIO, comp, gateway,
                                                               direct):  # fmt: skip
        return out
    c = (gateway or direct or {}).get("params", {}).get("concurrency")
    label = f"a2a vs ws ({c} in flight)"
    for metric, key, digits in (
        ("requests answered/s", "requests_per_s", 0),
        ("round trip p50 ms", "p50_ms", 2),
        ("round trip p99 ms", "p99_ms", 2),
        ("server CPU ms / request", "cpu_ms_per_request", 3),
    ):
        g, d = report.fig(gateway, key), report.fig(direct, key)
        shown = report.fmt(g, digits), report.fmt(d, digits), report.fmt(report.ratio(g, d), 2)
        out.append(report.Row(label, metric, comp, *shown))
    g, d = report.fig(gateway, "loadgen_cpu_pct"), report.fig(direct, "loadgen_cpu_pct")
    gs, ds = report.fig(gateway, "server_cpu_pct"), report.fig(direct, "server_cpu_pct")
    out.append(report.Row(label, "server CPU % / loadgen CPU %", comp,
                          f"{report.fmt(gs)} / {report.fmt(g)}",
                          f"{report.fmt(ds)} / {report.fmt(d)}"))  # fmt: skip
    return out
