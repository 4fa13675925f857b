"""The gateways beside a direct WebSocket request/reply (issue 43, contract §17).

One hub process on default settings (the rate limits lifted, as for every
benchmark publisher: the agents' and the gateway members' — ``a2a`` and
``mcp`` publish every request) serves one space declared ``a2a = true`` and
``mcp = true``. A responder — a WebSocket agent of the load generator that
offers the MCP tool ``{id}.echo`` (``metadata.mcp_tools``) — answers every
request addressed to it with ``{in_reply_to, text}``, addressed back to the
asker. The same request/reply is then asked four ways:

* ``ws`` (the direct figure): a WebSocket agent publishes the request
  addressed to the responder (``id``, ``echo: false``) and waits for its
  ``space.published`` and the reply — what an agent on the hub pays to ask;
* ``a2a``: A2A ``SendMessage`` (JSON-RPC over HTTP, blocking) to
  ``/a2a/{space}/{responder}``; the answer is the completed task;
* ``mcp_ask``: MCP ``tools/call space_ask`` (one initialized session, JSON
  answers) with ``to`` = the responder;
* ``mcp_tool``: MCP ``tools/call {responder}.echo``, the agent tool;
* ``http`` (context, no target): ``GET /healthz``, what any request costs the
  HTTP port before a gateway does anything;
* ``mcp_ping`` (context, no target): MCP ``ping`` in the same session, what
  the MCP envelope costs (the POST, its body, JSON-RPC, the session, the
  answer) with no space, no member and no publish in it.

Figures per way: p50/p99 of round trips one at a time (latency, nothing
queued) and the hub's CPU per round trip meanwhile, and, with
``concurrency`` callers in parallel, round trips per second and hub CPU per
round trip (the target's figure, as the issue measured it). The ways take turns in ``rounds``
rounds (each round does a share of every way's calls), so a burst of load
from elsewhere on the machine lands on all of them rather than on one.

The HTTP callers use a lean keep-alive HTTP/1.1 client (:class:`HttpConn`),
as the WebSocket callers use :class:`~tests.benchmarks.wsload.LoadClient`:
the load generator must stay cheaper than the hub it measures, and a full
client library per request costs more CPU than the hub's whole round trip.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.benchmarks import procs, report
from tests.benchmarks.procs import ServerProcess
from tests.benchmarks.scenarios import SPACE, Target, Window, percentile
from tests.benchmarks.wsload import LoadClient

SCENARIO = "gateways"
#: The direct figure first, then each gateway; the table follows this order.
WAYS = ("ws", "a2a", "mcp_ask", "mcp_tool", "http", "mcp_ping")
LABELS = {
    "ws": "WebSocket request/reply",
    "a2a": "A2A SendMessage",
    "mcp_ask": "MCP space_ask",
    "mcp_tool": "MCP agent tool call",
    "http": "HTTP floor: GET /healthz",
    "mcp_ping": "MCP floor: ping",
}
#: The ways the target applies to (``http`` and ``mcp_ping`` are context: the
#: HTTP port's and the MCP envelope's own costs).
GATEWAYS = ("a2a", "mcp_ask", "mcp_tool")
#: Issue 43: each gateway within 2× the direct figure, hub CPU and p50.
RATIO_TARGET = 2.0
TOOL = "echo"
TEXT = "what is the weather like tomorrow?"
MCP_VERSION = "2025-11-25"

RoundTrip = Callable[[int], Awaitable[None]]

#: The gateways' members publish every request: their rate limit is lifted as
#: every benchmark publisher's is (the default, 1,000/s per node, would refuse
#: callers of a run faster than that rather than measure it).
BRIDGE_LIFTED = ("--bridge-rate-limit", "1000000", "--bridge-rate-burst", "1000000")


@dataclass(frozen=True)
class GatewaySizes:
    sequential: int  # round trips one at a time, per way
    calls: int  # round trips under load, per way
    concurrency: int  # callers in parallel under load
    rounds: int  # the ways take turns this many times


FULL = GatewaySizes(sequential=600, calls=4000, concurrency=16, rounds=4)
QUICK = GatewaySizes(sequential=150, calls=600, concurrency=8, rounds=2)


# ── a lean HTTP/1.1 client ───────────────────────────────────────────────


class HttpConn(asyncio.Protocol):
    """One kept-alive HTTP/1.1 connection, one request at a time. Enough of
    HTTP for a benchmark against the hub on 127.0.0.1: answers with a
    ``Content-Length`` (what aiohttp sends for a whole body)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None

    @classmethod
    async def open(cls, port: int) -> HttpConn:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(cls, "127.0.0.1", port)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"HTTP connection lost: {exc}"))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0 or self._waiter is None:
            return
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            self._waiter.set_exception(RuntimeError(f"no Content-Length: {lines[0]} {headers}"))
            return
        size = int(headers["content-length"])
        if len(self._buf) < end + 4 + size:
            return
        body = bytes(self._buf[end + 4 : end + 4 + size])
        del self._buf[: end + 4 + size]
        waiter, self._waiter = self._waiter, None
        waiter.set_result((int(lines[0].split(" ", 2)[1]), headers, body))

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return await self.send(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
            f"{head}\r\n".encode()
            + body
        )

    async def send(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """One whole request; its answer's status, headers and body."""
        assert self.transport is not None and self._waiter is None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self._waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class HttpPool:
    """``size`` connections; a caller takes a free one for each request."""

    def __init__(self, conns: list[HttpConn]):
        self._free = asyncio.Queue[HttpConn]()
        self.conns = conns
        for conn in conns:
            self._free.put_nowait(conn)

    @classmethod
    async def open(cls, port: int, size: int) -> HttpPool:
        return cls([await HttpConn.open(port) for _ in range(size)])

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        conn = await self._free.get()
        try:
            return await conn.post(path, body, headers)
        finally:
            self._free.put_nowait(conn)

    async def send(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        conn = await self._free.get()
        try:
            return await conn.send(request)
        finally:
            self._free.put_nowait(conn)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


# ── the callers ──────────────────────────────────────────────────────────


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


def http_floor(pool: HttpPool) -> RoundTrip:
    """``GET /healthz``: what any request costs the HTTP port (aiohttp and the
    port's own layer), with nothing of a gateway in it."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    async def ask(n: int) -> None:
        status, _, body = await pool.send(request)
        if status != 200:
            raise RuntimeError(f"/healthz: {status} {body[:200]!r}")

    return ask


def a2a_asker(pool: HttpPool, responder: str) -> RoundTrip:
    path = f"/a2a/{SPACE}/{responder}"
    headers = {"A2A-Version": "1.0", "Content-Type": "application/json"}

    async def ask(n: int) -> None:
        body = orjson.dumps({
            "jsonrpc": "2.0", "id": n, "method": "SendMessage",
            "params": {"message": {"messageId": f"m{n}", "role": "ROLE_USER",
                                   "parts": [{"text": TEXT}]}},
        })  # fmt: skip
        status, _, raw = await pool.post(path, body, headers)
        answer = orjson.loads(raw)
        state = answer.get("result", {}).get("task", {}).get("status", {}).get("state")
        if status != 200 or state != "TASK_STATE_COMPLETED":
            raise RuntimeError(f"SendMessage not answered: {status} {answer}")

    return ask


class McpCaller:
    """``tools/call`` over one initialized MCP session (JSON answers)."""

    def __init__(self, pool: HttpPool):
        self.pool = pool
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}

    async def initialize(self) -> None:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": MCP_VERSION, "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "0"}}}  # fmt: skip
        status, headers, raw = await self.pool.post("/mcp", orjson.dumps(body), self.headers)
        if status != 200:
            raise RuntimeError(f"initialize: {status} {raw[:200]!r}")
        self.headers["Mcp-Session-Id"] = headers["mcp-session-id"]
        self.headers["MCP-Protocol-Version"] = MCP_VERSION
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.pool.post("/mcp", orjson.dumps(note), self.headers)

    async def call(self, n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}  # fmt: skip
        status, _, raw = await self.pool.post("/mcp", orjson.dumps(body), self.headers)
        answer = orjson.loads(raw)
        if status != 200 or answer.get("result", {}).get("isError") is not False:
            raise RuntimeError(f"{name} failed: {status} {answer}")
        return answer

    async def tool_names(self) -> set[str]:
        body = {"jsonrpc": "2.0", "id": "l", "method": "tools/list"}
        _, _, raw = await self.pool.post("/mcp", orjson.dumps(body), self.headers)
        return {t["name"] for t in orjson.loads(raw).get("result", {}).get("tools", [])}

    def ask(self, responder: str) -> RoundTrip:
        arguments = {"space": SPACE, "text": TEXT, "to": responder}

        async def ask(n: int) -> None:
            await self.call(n, "space_ask", arguments)

        return ask

    def ping(self) -> RoundTrip:
        """``ping``: the envelope alone (nothing of a space or an agent in it)."""

        async def ask(n: int) -> None:
            body = orjson.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"})
            status, _, raw = await self.pool.post("/mcp", body, self.headers)
            if status != 200 or "result" not in orjson.loads(raw):
                raise RuntimeError(f"ping failed: {status} {raw[:200]!r}")

        return ask

    def tool(self, responder: str) -> RoundTrip:
        name, arguments = f"{responder}.{TOOL}", {"text": TEXT}

        async def ask(n: int) -> None:
            await self.call(n, name, arguments)

        return ask


async def _respond(client: LoadClient) -> None:
    """Answer every request addressed to ``client``, back to its asker."""
    me = client.path.split("agent_id=", 1)[1]
    while True:
        msg = await client.recv(timeout=3600)
        data = msg.get("data")
        if msg.get("type") != "space.event" or msg.get("from") == me or not isinstance(data, dict):
            continue
        if "in_reply_to" in data:
            continue
        text = data.get("text") or data.get("arguments", {}).get("text", "")
        client.send_json({
            "type": "space.publish", "space": SPACE, "to": msg["from"], "echo": False,
            "data": {"in_reply_to": msg["event_id"], "text": f"sunny ({str(text)[:20]})"},
        })  # fmt: skip


# ── the measurement ──────────────────────────────────────────────────────


async def _sequential(ask: RoundTrip, n: int, offset: int) -> list[int]:
    samples = []
    for i in range(n):
        started = time.monotonic_ns()
        await ask(offset + i)
        samples.append(time.monotonic_ns() - started)
    return samples


async def _responder(target: Target) -> LoadClient:
    responder = await target.open(prefix="responder")
    agent_id = responder.path.split("agent_id=", 1)[1]
    responder.send_json({
        "type": "agent.register", "id": "r1",
        "agent": {"id": agent_id, "metadata": {"mcp_tools": [
            {"name": TOOL, "description": "echo the text",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        ]}},
    })  # fmt: skip
    await responder.expect("agent.registered")
    await target.join(responder)
    return responder


async def compare(target: Target, http_port: int, sizes: GatewaySizes) -> dict[str, Any]:
    """Every way's figures, all of them taking turns in ``sizes.rounds`` rounds."""
    responder = await _responder(target)
    agent_id = responder.path.split("agent_id=", 1)[1]
    answering = asyncio.get_running_loop().create_task(_respond(responder))
    clients: list[LoadClient] = [responder]
    ws_askers: list[WsAsker] = []
    pools: list[HttpPool] = []
    try:
        for _ in range(sizes.concurrency):
            client = await target.open(prefix="asker")
            clients.append(client)
            await target.join(client)
            ws_askers.append(WsAsker(client, agent_id))
        a2a_pool = await HttpPool.open(http_port, sizes.concurrency)
        mcp_pool = await HttpPool.open(http_port, sizes.concurrency)
        pools += [a2a_pool, mcp_pool]
        mcp = McpCaller(mcp_pool)
        await mcp.initialize()
        for _ in range(300):  # until the catalog lists the responder's tool
            if f"{agent_id}.{TOOL}" in await mcp.tool_names():
                break
            await asyncio.sleep(0.1)
        else:
            raise RuntimeError(f"the tool {agent_id}.{TOOL} was never listed")
        asks: dict[str, list[RoundTrip]] = {
            "ws": [w.ask for w in ws_askers],
            "a2a": [a2a_asker(a2a_pool, agent_id)] * sizes.concurrency,
            "mcp_ask": [mcp.ask(agent_id)] * sizes.concurrency,
            "mcp_tool": [mcp.tool(agent_id)] * sizes.concurrency,
            "http": [http_floor(a2a_pool)] * sizes.concurrency,
            "mcp_ping": [mcp.ping()] * sizes.concurrency,
        }
        figures = await _rounds(target, asks, sizes)
    finally:
        answering.cancel()
        for asker in ws_askers:
            asker.close()
        for pool in pools:
            pool.close()
        for client in clients:
            client.abort()
    return figures


async def _rounds(
    target: Target, asks: dict[str, list[RoundTrip]], sizes: GatewaySizes
) -> dict[str, Any]:
    seq: dict[str, list[int]] = {way: [] for way in WAYS}
    loaded: dict[str, list[int]] = {way: [] for way in WAYS}
    cpu = dict.fromkeys(WAYS, 0.0)
    wall = dict.fromkeys(WAYS, 0.0)
    loadgen = dict.fromkeys(WAYS, 0.0)
    seq_cpu = dict.fromkeys(WAYS, 0.0)
    other = 0.0
    ids = itertools.count(1)
    for way in WAYS:  # warm-up: connections, joins, code paths
        await _sequential(asks[way][0], 30, next(ids) * 1_000_000)
    for _ in range(sizes.rounds):
        for way in WAYS:
            window = Window(target)
            seq[way] += await _sequential(
                asks[way][0], sizes.sequential // sizes.rounds, next(ids) * 1_000_000
            )
            seq_cpu[way] += window.close()["server_cpu_s"]
        for way in WAYS:
            callers = asks[way]
            offset = next(ids) * 1_000_000
            win, rtts = await _loaded_by_slot(
                target, callers, sizes.calls // sizes.rounds, sizes.concurrency, offset
            )
            loaded[way] += rtts
            cpu[way] += win["server_cpu_s"]
            wall[way] += win["wall_s"]
            loadgen[way] += win["loadgen_cpu_pct"] * win["wall_s"] / 100
            other = max(other, win["other_cpu_pct"])
    figures: dict[str, Any] = {
        "sequential": sizes.sequential, "calls": sizes.calls,
        "concurrency": sizes.concurrency, "rounds": sizes.rounds,
        "other_cpu_pct": other,
    }  # fmt: skip
    for way in WAYS:
        s, n = sorted(seq[way]), len(loaded[way])
        figures[f"{way}_p50_ms"] = percentile(s, 50)
        figures[f"{way}_p99_ms"] = percentile(s, 99)
        figures[f"{way}_loaded_p50_ms"] = statistics.median(loaded[way]) / 1e6
        figures[f"{way}_per_s"] = n / wall[way]
        figures[f"{way}_cpu_us"] = 1e6 * cpu[way] / n
        figures[f"{way}_seq_cpu_us"] = 1e6 * seq_cpu[way] / len(s)
        figures[f"{way}_server_cpu_pct"] = 100 * cpu[way] / wall[way]
        figures[f"{way}_loadgen_cpu_pct"] = 100 * loadgen[way] / wall[way]
    return figures


async def _loaded_by_slot(
    target: Target, callers: list[RoundTrip], calls: int, concurrency: int, offset: int
) -> tuple[dict[str, float], list[int]]:
    """``calls`` round trips, ``concurrency`` at a time, caller ``k`` using
    ``callers[k]`` (a WebSocket asker has one request in flight)."""
    counter = itertools.count()
    rtts: list[int] = []

    async def worker(slot: int) -> None:
        ask = callers[slot]
        while (i := next(counter)) < calls:
            started = time.monotonic_ns()
            await ask(offset + i)
            rtts.append(time.monotonic_ns() - started)

    window = Window(target)
    async with asyncio.timeout(300):
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
    return window.close(), rtts


# ── make bench ───────────────────────────────────────────────────────────


def hub_config() -> Path:
    config = Path(tempfile.mkdtemp(prefix="agora-bench-gateways-")) / "hub.toml"
    config.write_text(f'[[spaces]]\nid = "{SPACE}"\na2a = true\nmcp = true\n')
    return config


async def run(bench: Any, comp: str) -> None:
    """``make bench`` entry (``--only gateways``): one hub serving every way."""
    if comp != "none":
        return  # HTTP has no permessage-deflate; the WebSocket way runs on the defaults
    sizes = QUICK if bench.args.quick else FULL
    config = hub_config()
    params = {
        "sequential": sizes.sequential, "calls": sizes.calls,
        "concurrency": sizes.concurrency, "rounds": sizes.rounds,
        "settings": "defaults, rate limits lifted (agents', bridge members')",
        "mcp": f"{MCP_VERSION}, JSON answers",
    }  # fmt: skip
    # This checkout's hub, then each --variant's (another commit's code).
    hubs: list[tuple[str, Path | None]] = [("hub", None)]
    hubs += [(f"hub:{label}", source) for label, source in bench.variants]
    for server, source in hubs:
        http_port = procs.free_port()

        def start(
            http_port: int = http_port, source: Path | None = source
        ) -> tuple[Target, list[ServerProcess]]:
            extra = ["--http-port", str(http_port), "--config", str(config), *BRIDGE_LIFTED]
            proc, port = procs.start_hub(
                bench.pinning, comp, cores=bench.pinning.server_cores, extra=extra, source=source
            )
            return Target("hub", [port], [proc], False), [proc]

        def body(target: Target, http_port: int = http_port) -> Awaitable[dict[str, Any]]:
            return compare(target, http_port, sizes)

        await bench.measure(SCENARIO, server, comp, start, body, params)


def headline(f: dict[str, Any]) -> str | None:
    """The progress line of a gateways run."""
    if "mcp_tool_cpu_us" not in f:
        return None
    parts = [f"{w} {f[f'{w}_cpu_us']:.0f} µs / p50 {f[f'{w}_p50_ms']:.2f} ms" for w in WAYS]
    return "; ".join(parts)


def rows(records: list[dict], comp: str) -> list[report.Row]:
    """Each gateway (hub column) beside the direct WebSocket request/reply
    (baseline column), both from the same hub in the same run."""
    out: list[report.Row] = []
    for record in records:
        if record["scenario"] == SCENARIO and record["compression"] == comp:
            out += _hub_rows(record, comp)
    return out


def _hub_rows(record: dict, comp: str) -> list[report.Row]:
    out: list[report.Row] = []
    server = record["server"]
    tag = "" if server == "hub" else f" [{server}]"  # a --variant's hub
    if report.status(record):
        reason = str(record.get("skipped") or record.get("error") or "").splitlines()[0][:90]
        out.append(report.Row(f"gateways{tag}", f"{report.status(record)}: {reason}", comp, "", ""))
        return out
    c = record["figures"].get("concurrency")
    for way in WAYS[1:]:
        label = f"{LABELS[way]} | {LABELS['ws']}{tag}"
        gateway = way in GATEWAYS
        for metric, key, digits, target in (
            (f"hub CPU µs per round trip ({c} in parallel)", "cpu_us", 0, True),
            ("p50 ms (one at a time)", "p50_ms", 2, True),
            ("p99 ms (one at a time)", "p99_ms", 2, False),
            ("hub CPU µs per round trip (one at a time)", "seq_cpu_us", 0, False),
            (f"round trips/s ({c} in parallel)", "per_s", 0, False),
            (f"p50 ms ({c} in parallel)", "loaded_p50_ms", 2, False),
            ("load generator CPU %", "loadgen_cpu_pct", 0, False),
        ):
            if not gateway and not target:
                continue  # the floors: their CPU and p50 say enough
            target = target and gateway
            g, d = report.fig(record, f"{way}_{key}"), report.fig(record, f"ws_{key}")
            r = report.ratio(g, d)
            verdict = report.verdict(None if r is None else r <= RATIO_TARGET, comp)
            out.append(report.Row(
                label, metric, comp, report.fmt(g, digits), report.fmt(d, digits),
                report.fmt(r, 2), f"≤ {RATIO_TARGET:g}×" if target else "",
                verdict if target else "",
            ))  # fmt: skip
    return out
