"""The load side of each scenario, run against the hub or the baseline.

A :class:`Target` hides the difference between the two servers (URL path,
first frame, joining) so each scenario body is written once and measures
both the same way. Every run returns a flat dict of figures; the runner
builds the table from them.

Timing: the window of a throughput run opens just before the first publish
and closes when the last client has counted its last frame (the arrival time
stamped in ``data_received``). Server CPU is utime+stime of the server
processes from ``/proc/<pid>/stat`` read at both ends of that window; the
load generator's own CPU (``resource.getrusage``) over the same window shows
whether it, not the server, was the limit.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.benchmarks.procs import ServerProcess, machine_cpu
from tests.benchmarks.wsload import HandshakeError, LoadClient, masked_text_frame

SPACE = "bench"
monotonic_ns = time.monotonic_ns
# Called once setup is done, right before measuring (the profiler attaches here).
Hook = Callable[[], Awaitable[None]] | None


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


#: Loopback source addresses the load generator's own connections come from.
SOURCES = 8


@dataclass
class Target:
    """A server under test: the hub (one or more nodes) or the baseline."""

    kind: str  # "hub" | "baseline"
    ports: list[int]
    servers: list[ServerProcess]  # whose CPU counts as "server CPU"
    deflate: bool
    side: list[ServerProcess] = field(default_factory=list)  # e.g. redis: reported apart
    _ids: int = 0

    @property
    def is_hub(self) -> bool:
        return self.kind == "hub"

    def cpu(self) -> float:
        return sum(s.cpu() for s in self.servers)

    def cpu_split(self) -> tuple[float, float]:
        splits = [s.cpu_split() for s in self.servers]
        return sum(u for u, _ in splits), sum(s for _, s in splits)

    def side_cpu(self) -> float:
        return sum(s.cpu() for s in self.side)

    def rss(self) -> int:
        return sum(s.rss() for s in self.servers)

    async def open(self, node: int = 0, prefix: str = "c") -> LoadClient:
        port = self.ports[node % len(self.ports)]
        self._ids += 1
        path = f"/ws?agent_id={prefix}{self._ids}" if self.is_hub else "/"
        # Round robin over loopback source addresses, each with its own ~28k
        # ephemeral ports: a run after a storm or a capacity run (tens of
        # thousands of ports in TIME_WAIT) must not run out of them.
        source = f"127.0.1.{1 + self._ids % SOURCES}"
        client = await LoadClient.connect(
            "127.0.0.1", port, path, deflate=self.deflate, source=source
        )
        first = await client.expect("agent.registered" if self.is_hub else "ready")
        if self.is_hub:
            # Half the hub's heartbeat interval, as a client library would.
            client.keep_alive(first["heartbeat_interval"] / 2000)
        if self.deflate and client.inflater is None:
            raise RuntimeError("permessage-deflate was offered but not negotiated")
        return client

    async def join(self, client: LoadClient) -> None:
        if self.is_hub:
            client.send_json({"type": "space.join", "id": "j1", "space": SPACE})
            await client.expect("space.joined")

    @staticmethod
    def publish_frame(data: dict[str, Any]) -> bytes:
        # The baseline broadcasts this very message verbatim.
        return masked_text_frame(
            orjson.dumps({"type": "space.publish", "space": SPACE, "data": data})
        )


async def gather_limited(n: int, make: Any, concurrency: int = 50) -> list[Any]:
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Any:
        async with sem:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def open_members(target: Target, subscribers: int) -> tuple[LoadClient, list[LoadClient]]:
    """A publisher (node 0) and ``subscribers`` spread over the target's nodes, all joined."""

    async def make(i: int) -> LoadClient:
        client = await target.open(node=i, prefix="sub")
        await target.join(client)
        return client

    subs = await gather_limited(subscribers, make)
    publisher = await target.open(node=0, prefix="pub")
    await target.join(publisher)
    await settle([publisher, *subs])
    return publisher, subs


async def settle(clients: Sequence[LoadClient], quiet: float = 0.25, timeout: float = 20.0) -> None:
    """Wait until setup traffic (membership events) has stopped arriving."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = -1
    quiet_since = loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.05)
        now = loop.time()
        total = sum(c.total_frames for c in clients)
        if total != last:
            last, quiet_since = total, now
        elif now - quiet_since >= quiet:
            return


def close_all(clients: Sequence[LoadClient]) -> None:
    for c in clients:
        c.abort()


def text_of(size: int) -> str:
    base = "the quick brown fox jumps over the lazy dog; "
    return (base * (size // len(base) + 1))[:size]


class Window:
    """The measurement window: wall time, server CPU, load generator CPU."""

    def __init__(self, target: Target):
        self.target = target
        self.user0, self.sys0 = target.cpu_split()
        self.side0 = target.side_cpu()
        self.self0 = self_cpu()
        self.busy0, self.softirq0 = machine_cpu()
        self.t0 = monotonic_ns()

    def close(self, end_ns: int | None = None) -> dict[str, float]:
        end = end_ns or monotonic_ns()
        wall = max(1e-9, (end - self.t0) / 1e9)
        # CPU is read now, a moment after the last frame arrived: the server
        # is idle by then, so the difference is small and errs against it.
        user, system = self.target.cpu_split()
        user -= self.user0
        system -= self.sys0
        cpu = user + system
        own = self_cpu() - self.self0
        busy, softirq = machine_cpu()
        side = self.target.side_cpu() - self.side0
        # CPU used by anything else on the machine meanwhile (other jobs): a
        # disturbed run shows here. Without IRQ time accounting the loopback
        # softirq work is charged to the task it interrupts, ours included.
        other = (busy - self.busy0) - cpu - own - side
        out = {
            "wall_s": wall,
            "server_cpu_s": cpu,
            "server_user_s": user,
            "server_sys_s": system,
            "server_cpu_pct": 100 * cpu / wall,
            "loadgen_cpu_pct": 100 * own / wall,
            "softirq_cpu_s": softirq - self.softirq0,
            "other_cpu_pct": max(0.0, 100 * other / wall),
        }
        if self.target.side:
            out["redis_cpu_s"] = side
        return out


async def pump(publisher: LoadClient, frames: list[bytes], window: int, timeout: float) -> None:
    """Send ``frames`` keeping at most ``window`` unacknowledged.

    The publisher is a member too, so its own copy of each event (the hub's
    echo, the baseline's broadcast) is the acknowledgement: the server is
    kept busy without letting its input pile up.
    """
    total = len(frames)
    sent = 0
    async with asyncio.timeout(timeout):
        while sent < total:
            room = window - (sent - publisher.frames)
            if room > 0:
                k = min(room, total - sent)
                publisher.send_raw(b"".join(frames[sent : sent + k]))
                sent += k
            else:
                await publisher.wait_frames(sent - window + 1)


async def run_throughput(
    target: Target,
    *,
    subscribers: int,
    frames: list[bytes],
    window: int,
    timeout: float = 300.0,
    before_measure: Hook = None,
) -> dict[str, Any]:
    """Fan-out and streaming: every member must receive every frame."""
    publisher, subs = await open_members(target, subscribers)
    members = [publisher, *subs]
    try:
        sockets = [s.sockets() for s in target.servers]
        if before_measure is not None:
            await before_measure()
        for c in members:
            c.start_counting()
        n = len(frames)
        waits = [c.wait_frames(n) for c in subs]
        win = Window(target)
        await pump(publisher, frames, window, timeout)
        waits.append(publisher.wait_frames(n))
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            got = sum(c.frames for c in members)
            raise RuntimeError(
                f"timed out: {got} of {n * len(members)} deliveries arrived"
            ) from None
        end = max(c.last_ns for c in members)
        out: dict[str, Any] = win.close(end)
        deliveries = sum(c.frames for c in members)
        out.update(
            deliveries=deliveries,
            frames_per_read=deliveries / max(1, sum(c.reads for c in members)),
            events=n,
            members=len(members),
            deliveries_per_s=deliveries / out["wall_s"],
            deliveries_per_cpu_s=deliveries / out["server_cpu_s"]
            if out["server_cpu_s"] > 0
            else None,
            cpu_s_per_100k=100_000 * out["server_cpu_s"] / deliveries,
            window=window,
        )
        if len(sockets) > 1 or len(sockets[0]) > 1:
            # Open sockets per server process: how connections were spread.
            out["sockets_per_process"] = [n for per in sockets for n in per.values()]
        return out
    finally:
        close_all(members)


async def fanout(
    target: Target,
    *,
    subscribers: int,
    events: int,
    size: int,
    window: int,
    before_measure: Hook = None,
) -> dict:
    text = text_of(size)
    frames = [Target.publish_frame({"sent_ns": i, "text": text}) for i in range(events)]
    out = await run_throughput(
        target,
        subscribers=subscribers,
        frames=frames,
        window=window,
        before_measure=before_measure,
    )
    out["publish_bytes"] = len(frames[0])
    return out


def signed_envelopes(events: int, size: int, *, signed: bool) -> list[bytes]:
    """Publish frames whose data is an agora/1.0 STATUS envelope of ``size``
    text bytes, each with its own id, signed now — or, for the plain side
    of the comparison, the same bytes with a ``protocol`` that is no
    envelope's, so the hub relays them as ordinary data."""
    from nacl.signing import SigningKey

    from protocol.envelope import agora

    key = SigningKey(b"\x42" * 32)
    now = time.time()
    text = text_of(size)
    frames = []
    for i in range(events):
        env = agora.build(
            "STATUS", {"status": "ok", "n": i, "text": text}, signing_key=key, now=now
        )
        if not signed:
            env["protocol"] = "plain/1.0"
        frames.append(Target.publish_frame(env))
    return frames


async def signed_fanout(
    target: Target, *, subscribers: int, events: int, size: int, window: int, signed: bool
) -> dict:
    """Fan-out of signed envelopes (verified, replay-checked) or of the same
    bytes unsigned. The envelopes are signed once the members are set up,
    so none is stale by the time it is sent (the window is 60 s)."""
    frames: list[bytes] = []

    async def sign_now() -> None:
        frames.extend(signed_envelopes(events, size, signed=signed))

    out = await run_throughput(
        target, subscribers=subscribers, frames=frames, window=window, before_measure=sign_now
    )
    out["publish_bytes"] = len(frames[0])
    out["publishes_per_s"] = events / out["wall_s"]
    return out


async def streaming(
    target: Target, *, subscribers: int, deltas: int, size: int, window: int
) -> dict:
    """One client stream: ``deltas`` deltas with its own event_id, then a done."""
    event_id = "bench-stream-1"
    text = text_of(size)
    frames = [
        masked_text_frame(
            orjson.dumps(
                {
                    "type": "space.event.delta",
                    "space": SPACE,
                    "event_id": event_id,
                    "data": {"text": text},
                }
            )
        )
        for _ in range(deltas)
    ]
    frames.append(
        masked_text_frame(
            orjson.dumps({"type": "space.event.done", "space": SPACE, "event_id": event_id})
        )
    )
    out = await run_throughput(target, subscribers=subscribers, frames=frames, window=window)
    out["deltas"] = deltas
    out["deltas_delivered_per_s"] = deltas * out["members"] / out["wall_s"]
    return out


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[i] / 1e6  # ns → ms


async def latency(
    target: Target,
    *,
    subscribers: int,
    rate: float,
    duration: float,
    size: int,
    warmup: float = 0.5,
    timeout: float = 60.0,
    before_measure: Hook = None,
) -> dict:
    """Paced publishing; one-way latency = arrival stamp − send stamp in the data."""
    publisher, subs = await open_members(target, subscribers)
    members = [publisher, *subs]
    try:
        if before_measure is not None:
            await before_measure()
        for c in members:
            c.start_counting(latencies=True)
        loop = asyncio.get_running_loop()
        n = max(1, round(rate * duration))
        text = text_of(size)
        skip = round(rate * warmup)
        waits = [c.wait_frames(n) for c in subs]
        win = Window(target)
        start = loop.time() + 0.01
        for i in range(n):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            publisher.send_raw(Target.publish_frame({"sent_ns": monotonic_ns(), "text": text}))
        waits.append(publisher.wait_frames(n))
        try:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            got = sum(c.frames for c in members)
            raise RuntimeError(
                f"timed out: {got} of {n * len(members)} deliveries arrived"
            ) from None
        end = max(c.last_ns for c in members)
        out: dict[str, Any] = win.close(end)
        samples: list[int] = []
        for c in members:
            assert c.latencies is not None
            samples.extend(c.latencies[skip:])
        samples.sort()
        deliveries = sum(c.frames for c in members)
        out.update(
            frames_per_read=deliveries / max(1, sum(c.reads for c in members)),
            rate=rate,
            duration_s=duration,
            members=len(members),
            offered_deliveries_per_s=rate * len(members),
            deliveries=deliveries,
            samples=len(samples),
            p50_ms=percentile(samples, 50),
            p90_ms=percentile(samples, 90),
            p99_ms=percentile(samples, 99),
            p999_ms=percentile(samples, 99.9),
            max_ms=samples[-1] / 1e6 if samples else float("nan"),
            cpu_us_per_delivery=1e6 * out["server_cpu_s"] / deliveries,
        )
        return out
    finally:
        close_all(members)


async def idle(target: Target, *, connections: int, concurrency: int = 64) -> dict:
    """Open ``connections`` and leave them idle: RSS per connection, connects/s."""
    warm = await gather_limited(min(100, max(1, connections // 10)), lambda i: target.open())
    clients: list[LoadClient] = list(warm)
    try:
        await asyncio.sleep(0.5)
        rss0 = target.rss()
        win = Window(target)
        opened = await gather_limited(connections, lambda i: target.open(), concurrency)
        clients.extend(opened)
        out: dict[str, Any] = win.close()
        connect_wall = out["wall_s"]
        await asyncio.sleep(1.0)  # let the server finish what each connect set off
        rss1 = target.rss()
        out.update(
            connections=connections,
            warmup_connections=len(warm),
            concurrency=concurrency,
            rss_before_mib=rss0 / 2**20,
            rss_after_mib=rss1 / 2**20,
            rss_per_conn_kib=(rss1 - rss0) / connections / 1024,
            connects_per_s=connections / connect_wall,
            server_cpu_ms_per_connect=1000 * out["server_cpu_s"] / connections,
        )
        return out
    finally:
        close_all(clients)


def mass_join_cost(agents: int, list_limit: int = 100, events_limit: int = 1000) -> dict[str, int]:
    """Frames the hub sends to form a space of ``agents`` (the cost model of
    docs/performance.md): one ``agent.registered`` and one ``space.joined``
    per agent, and a ``space.members`` to the k-1 others for the k-th join
    while k <= ``events_limit`` (with the member list while k <= ``list_limit``)."""
    broadcast = min(agents, events_limit)
    listed = min(agents, list_limit)
    return {
        "registered": agents,
        "joined": agents,
        "members_with_list": listed * (listed - 1) // 2,
        "members_without_list": broadcast * (broadcast - 1) // 2 - listed * (listed - 1) // 2,
    }


async def mass_join(
    target: Target,
    *,
    agents: int,
    concurrency: int = 64,
    timeout: float = 600.0,
    retries: int = 0,
) -> dict[str, Any]:
    """``agents`` connect and join one space, ``concurrency`` handshakes at a time.

    Formed = every agent has its ``space.joined`` and the hub has sent the last
    membership frame (no frame for 0.5 s afterwards). Frames and bytes are what
    the clients received from the hub, WebSocket framing included. A handshake
    that fails is tried again, up to ``retries`` times (as a new agent), and
    counted in ``failed_connections``; with none allowed the run fails.
    """
    clients: list[LoadClient] = []
    win = Window(target)
    start = win.t0
    failed: list[str] = []

    async def one(i: int) -> LoadClient:
        for attempt in range(retries + 1):
            try:
                client = await target.open(node=i, prefix="mj")
                break
            except (OSError, TimeoutError, HandshakeError, RuntimeError) as exc:
                if attempt == retries:
                    raise
                failed.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)
        clients.append(client)
        await target.join(client)
        client.start_counting()  # stop keeping frames: only count them
        return client

    try:
        async with asyncio.timeout(timeout):
            await gather_limited(agents, one, concurrency)
        joined_ns = monotonic_ns()
        await settle(clients, quiet=0.5, timeout=timeout)
        end = max(c.last_rx_ns for c in clients)
        out: dict[str, Any] = win.close(end)
        frames = sum(c.total_frames for c in clients)
        sent = sum(c.total_bytes for c in clients)
        expected = mass_join_cost(agents)
        out.update(
            agents=agents,
            concurrency=concurrency,
            joined_s=(joined_ns - start) / 1e9,
            form_s=out["wall_s"],
            frames=frames,
            expected_frames=sum(expected.values()),
            cost_model=expected,
            mb_sent=sent / 1e6,
            bytes_per_agent=sent / agents,
            failed_connections=len(failed),
            errors=failed[:5],
        )
        return out
    finally:
        close_all(clients)
