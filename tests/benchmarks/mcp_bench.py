"""The MCP scenario: ``space_ask`` through ``/mcp`` beside a WebSocket request/reply.

One hub on default settings (the rate limit lifted, as in every run here: a
benchmark client legitimately exceeds 100 messages/s) serves both halves of
the same run:

* **WebSocket request/reply** (the baseline column): an agent publishes a
  request addressed to a responder agent and waits for its reply
  (``data.in_reply_to``) — what an agent on the hub pays for asking.
* **MCP** (the hub column): an MCP client (aiohttp, one ``initialize``d
  session, JSON answers) calls ``tools/call space_ask`` with ``to`` = the
  responder; the hub's agent ``mcp`` publishes, the same responder replies,
  and the tool result comes back over HTTP.

Each half is measured one at a time (p50/p99 of ``sequential`` round trips)
and under load (``concurrency`` callers in parallel: round trips per second,
server CPU per round trip). The responder is a raw WebSocket client of the
load generator that answers every request addressed to it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from tests.benchmarks import procs
from tests.benchmarks.procs import ServerProcess
from tests.benchmarks.scenarios import SPACE, Target, Window, percentile
from tests.benchmarks.wsload import LoadClient

SEQUENTIAL = 300
CONCURRENCY = 16
CALLS = 3000
QUICK = {"sequential": 100, "concurrency": 8, "calls": 500}
TEXT = "what is the weather like tomorrow?"

RoundTrip = Callable[[int], Awaitable[None]]


async def _responder(client: LoadClient) -> None:
    """Answer every event addressed to ``client``, addressed back to its sender."""
    me = client.path.split("agent_id=", 1)[1]
    while True:
        msg = await client.recv(timeout=3600)
        if msg.get("type") != "space.event" or msg.get("from") == me:
            continue
        data = msg.get("data", {})
        reply = {"in_reply_to": msg["event_id"], "text": f"sunny ({data.get('text', '')[:20]})"}
        client.send_json(
            {"type": "space.publish", "space": SPACE, "to": msg["from"], "echo": False,
             "data": reply}
        )  # fmt: skip


class WsAsker:
    """Request/reply over a WebSocket: one request in flight per ``ask``."""

    def __init__(self, client: LoadClient, responder: str):
        self.client = client
        self.responder = responder
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self._early: set[str] = set()  # replies that overtook their request's ack
        self._published: dict[str, asyncio.Future[str]] = {}
        self._ids = itertools.count(1)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            msg = await self.client.recv(timeout=3600)
            kind = msg.get("type")
            if kind == "space.published":
                fut = self._published.pop(str(msg.get("id")), None)
                if fut is not None and not fut.done():
                    fut.set_result(msg["event_id"])
            elif kind == "space.event":
                answered = msg.get("data", {}).get("in_reply_to")
                waiter = self._waiting.pop(answered, None)
                if waiter is None:
                    self._early.add(answered)
                elif not waiter.done():
                    waiter.set_result(None)
            elif kind == "error":
                raise RuntimeError(f"hub error: {msg}")

    async def ask(self, n: int) -> None:
        loop = asyncio.get_running_loop()
        rid = f"q{next(self._ids)}"
        published: asyncio.Future[str] = loop.create_future()
        self._published[rid] = published
        answered: asyncio.Future[None] = loop.create_future()
        self.client.send_json({
            "type": "space.publish", "id": rid, "space": SPACE, "to": self.responder,
            "echo": False, "data": {"text": TEXT},
        })  # fmt: skip
        event_id = await published
        if event_id in self._early:
            self._early.discard(event_id)
            return
        self._waiting[event_id] = answered
        await answered

    def close(self) -> None:
        self._reader.cancel()


class McpAsker:
    """``tools/call space_ask`` over one MCP session."""

    def __init__(self, http: aiohttp.ClientSession, url: str, responder: str):
        self.http = http
        self.url = url
        self.responder = responder
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}

    async def initialize(self) -> None:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "0"}}}  # fmt: skip
        async with self.http.post(self.url, data=orjson.dumps(body), headers=self.headers) as r:
            await r.read()
            self.headers["Mcp-Session-Id"] = r.headers["Mcp-Session-Id"]
        self.headers["MCP-Protocol-Version"] = "2025-11-25"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.url, data=orjson.dumps(note), headers=self.headers) as r:
            await r.read()

    async def ask(self, n: int) -> None:
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
            "name": "space_ask",
            "arguments": {"space": SPACE, "text": TEXT, "to": self.responder},
        }}  # fmt: skip
        async with self.http.post(self.url, data=orjson.dumps(body), headers=self.headers) as r:
            answer = orjson.loads(await r.read())
        if r.status != 200 or answer.get("result", {}).get("isError") is not False:
            raise RuntimeError(f"space_ask failed: {r.status} {answer}")


async def _sequential(ask: RoundTrip, n: int) -> list[int]:
    samples = []
    for i in range(n):
        started = time.monotonic_ns()
        await ask(i)
        samples.append(time.monotonic_ns() - started)
    samples.sort()
    return samples


async def _concurrent(target: Target, ask: RoundTrip, calls: int, concurrency: int) -> dict:
    counter = itertools.count()

    async def worker() -> None:
        while (i := next(counter)) < calls:
            await ask(i)

    window = Window(target)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    out = window.close()
    out["per_s"] = calls / out["wall_s"]
    out["cpu_us_per_call"] = 1e6 * out["server_cpu_s"] / calls
    return out


async def ask_both(
    target: Target, http_port: int, *, sequential: int, concurrency: int, calls: int
) -> dict:
    responder = await target.open(prefix="responder")
    asker_ws = await target.open(prefix="asker")
    clients = [responder, asker_ws]
    for client in clients:
        await target.join(client)
    responder_id = responder.path.split("agent_id=", 1)[1]
    answering = asyncio.get_running_loop().create_task(_responder(responder))
    ws = WsAsker(asker_ws, responder_id)
    connector = aiohttp.TCPConnector(limit=concurrency)
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            mcp = McpAsker(http, f"http://127.0.0.1:{http_port}/mcp", responder_id)
            await mcp.initialize()
            for ask in (ws.ask, mcp.ask):  # warm-up: joins, connections, code paths
                await _sequential(ask, 20)
            ws_seq = await _sequential(ws.ask, sequential)
            mcp_seq = await _sequential(mcp.ask, sequential)
            ws_load = await _concurrent(target, ws.ask, calls, concurrency)
            mcp_load = await _concurrent(target, mcp.ask, calls, concurrency)
    finally:
        ws.close()
        answering.cancel()
        for client in clients:
            client.abort()
    figures: dict[str, Any] = {"sequential": sequential, "concurrency": concurrency, "calls": calls}
    for name, seq, load in (("ws", ws_seq, ws_load), ("mcp", mcp_seq, mcp_load)):
        figures[f"{name}_p50_ms"] = percentile(seq, 50)
        figures[f"{name}_p99_ms"] = percentile(seq, 99)
        figures[f"{name}_per_s"] = load["per_s"]
        figures[f"{name}_cpu_us_per_call"] = load["cpu_us_per_call"]
        figures[f"{name}_loadgen_cpu_pct"] = load["loadgen_cpu_pct"]
        figures[f"{name}_server_cpu_pct"] = load["server_cpu_pct"]
    # The run's headline disturbance: the worse of the two loaded windows.
    figures["other_cpu_pct"] = max(ws_load["other_cpu_pct"], mcp_load["other_cpu_pct"])
    return figures


async def run(bench: Any, comp: str) -> None:
    """``make bench`` entry (``--only mcp``): one hub serving both halves."""
    if comp != "none":
        return  # HTTP has no permessage-deflate; the WebSocket half runs on the defaults
    sizes = QUICK if bench.args.quick else {
        "sequential": SEQUENTIAL, "concurrency": CONCURRENCY, "calls": CALLS,
    }  # fmt: skip
    http_port = procs.free_port()

    def start() -> tuple[Target, list[ServerProcess]]:
        proc, port = procs.start_hub(
            bench.pinning, comp, cores=bench.pinning.server_cores,
            extra=["--http-port", str(http_port)],
        )  # fmt: skip
        return Target("hub", [port], [proc], False), [proc]

    def body(target: Target) -> Awaitable[dict]:
        return ask_both(target, http_port, **sizes)

    params = {**sizes, "tool": "space_ask", "session": "2025-11-25, JSON answers"}
    await bench.measure("mcp", "hub", comp, start, body, params)


def add_rows(rows: list[Any], records: list[dict], comp: str) -> None:
    """``space_ask`` through /mcp (hub column) beside WebSocket request/reply (baseline)."""
    from tests.benchmarks.report import Row, fig, find, fmt, ratio, status

    record = find(records, "mcp", "hub", comp)
    if record is None:
        return
    label = "mcp: space_ask | WebSocket request/reply"
    if status(record):
        reason = str(record.get("skipped") or record.get("error") or "").splitlines()[0][:90]
        rows.append(Row(label, f"{status(record)}: {reason}", comp, "", ""))
        return
    concurrency = record["figures"].get("concurrency")
    for metric, key, digits in (
        ("p50 ms (one at a time)", "p50_ms", 2),
        ("p99 ms (one at a time)", "p99_ms", 2),
        (f"round trips/s ({concurrency} in parallel)", "per_s", 0),
        ("server CPU µs per round trip", "cpu_us_per_call", 0),
        ("load generator CPU %", "loadgen_cpu_pct", 0),
    ):
        m, w = fig(record, f"mcp_{key}"), fig(record, f"ws_{key}")
        rows.append(Row(label, metric, comp, fmt(m, digits), fmt(w, digits), fmt(ratio(m, w), 2)))
