"""Idle connections held by load-generator worker processes (``capacity``).

A process may hold at most 20,000 open files here (a hard limit that cannot
be raised), so the connections of one capacity run are split across worker
processes, each with its own loopback source address (127.0.0.2, .3, …: one
address has ~28k ephemeral ports; each run takes addresses the runs before it
did not use, :func:`fresh_sources`). The parent drives them all the same way
through a pipe — open, probe, count, close — and each answers with counts.

Every connection behaves as an idle agent would: a hub agent registers
(``agent_id``), joins one space of ``space_size`` and sends
``agent.heartbeat`` every ``heartbeat_s`` seconds; a baseline connection gets
its ``ready`` and sends a WebSocket ping at the same rate. Beats are spread
evenly over the interval, so the server sees a steady trickle, not bursts.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from websockets.frames import Frame, Opcode

from tests.benchmarks.wsload import LoadClient, masked_text_frame

MEMBERS = b'"space.members"'
HEARTBEAT = masked_text_frame(b'{"type":"agent.heartbeat"}')
PING = Frame(Opcode.PING, b"hb").serialize(mask=True)


@dataclass(frozen=True)
class FleetSpec:
    """One worker's share of the connections."""

    kind: str  # "hub" | "baseline"
    port: int
    first: int  # index of its first connection (agent ids and spaces follow it)
    count: int
    source: str  # local address its connections bind
    space_size: int
    heartbeat_s: float
    concurrency: int = 200
    prefix: str = "cap"


class Worker:
    """The worker process's side: the connections and their heartbeats."""

    def __init__(self, spec: FleetSpec):
        self.spec = spec
        self.clients: list[LoadClient] = []
        self.failed = 0
        self.errors: list[str] = []
        self.beats = 0

    async def open_one(self, i: int) -> None:
        s = self.spec
        idx = s.first + i
        hub = s.kind == "hub"
        path = f"/ws?agent_id={s.prefix}{idx}" if hub else "/"
        for _attempt in range(3):
            client: LoadClient | None = None
            try:
                client = await LoadClient.connect(
                    "127.0.0.1", s.port, path, source=s.source, skip=(MEMBERS,)
                )
                if hub:
                    await client.expect("agent.registered")
                    space = f"{s.prefix}-{idx // s.space_size}"
                    client.send_json({"type": "space.join", "id": "j", "space": space})
                    await client.expect("space.joined")
                else:
                    await client.expect("ready")
            except Exception as exc:
                self.failed += 1
                if len(self.errors) < 5:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                if client is not None:
                    client.abort()
                await asyncio.sleep(0.2)
                continue
            self.clients.append(client)
            self._schedule(client, s.heartbeat_s * (i + 0.5) / s.count)
            return

    def _schedule(self, client: LoadClient, delay: float) -> None:
        frame = HEARTBEAT if self.spec.kind == "hub" else PING
        loop = client.loop
        interval = self.spec.heartbeat_s

        def beat() -> None:
            if client.closed:
                return
            client.send_raw(frame)
            self.beats += 1
            loop.call_later(interval, beat)

        loop.call_later(delay, beat)

    async def open_all(self) -> dict[str, Any]:
        t0 = time.monotonic()
        sem = asyncio.Semaphore(self.spec.concurrency)

        async def one(i: int) -> None:
            async with sem:
                await self.open_one(i)

        await asyncio.gather(*(one(i) for i in range(self.spec.count)))
        return {
            "opened": len(self.clients),
            "failed": self.failed,
            "errors": self.errors,
            "seconds": time.monotonic() - t0,
        }

    async def probe(self) -> dict[str, Any]:
        """Every connection must answer: a heartbeat reply (hub) or a pong."""
        sem = asyncio.Semaphore(1000)
        ok = 0

        async def one(c: LoadClient) -> None:
            nonlocal ok
            async with sem:
                try:
                    if self.spec.kind == "hub":
                        c.send_json({"type": "agent.heartbeat", "id": "probe"})
                        await c.expect("agent.heartbeat", timeout=60)
                    else:
                        await c.ping(timeout=60)
                except Exception:
                    return
                ok += 1
                c.start_counting()  # from now on frames are only counted

        await asyncio.gather(*(one(c) for c in self.clients))
        return {"verified": ok, "closed": sum(c.closed for c in self.clients)}

    def stats(self) -> dict[str, Any]:
        return {
            "beats": self.beats,
            "frames": sum(c.total_frames for c in self.clients),
            "closed": sum(c.closed for c in self.clients),
        }

    def close(self) -> None:
        for c in self.clients:
            c.abort()


async def _serve(spec: FleetSpec, conn: Connection) -> None:
    worker = Worker(spec)
    loop = asyncio.get_running_loop()
    try:
        while True:
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "open":
                conn.send(await worker.open_all())
            elif cmd == "probe":
                conn.send(await worker.probe())
            elif cmd == "stats":
                conn.send(worker.stats())
            elif cmd == "close":
                worker.close()
                await asyncio.sleep(0.2)  # let the aborts reach the sockets
                conn.send({"closed": True})
                return
    except (EOFError, OSError):
        worker.close()  # the parent is gone


def run_worker(
    serve: Callable[[Any, Connection], Awaitable[None]], spec: Any, conn: Connection
) -> None:
    """A worker process's body: ``serve(spec, conn)`` on uvloop when it is installed."""
    factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(spec, conn))


def worker_main(spec: FleetSpec, conn: Connection) -> None:
    run_worker(_serve, spec, conn)


class Workers:
    """The parent's handle on load-generator processes, one per spec, each
    running ``target(spec, pipe)`` and answering what it is sent on its pipe."""

    #: Names the workers in errors.
    kind = "a load-generator worker"

    def __init__(self, specs: list[Any], target: Callable[[Any, Connection], None]):
        ctx = multiprocessing.get_context("spawn")
        self.specs = specs
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for spec in specs:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=target, args=(spec, child), daemon=True)
            proc.start()
            child.close()
            self.pipes.append(parent)
            self.procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    async def ask_all(self, message: Any, what: str, timeout: float) -> list[Any]:
        """Send ``message`` to every worker; their answers, in order."""

        def ask(pipe: Connection) -> Any:
            pipe.send(message)
            if not pipe.poll(timeout):
                raise TimeoutError(f"{self.kind} did not answer {what!r}")
            return pipe.recv()

        return list(await asyncio.gather(*(asyncio.to_thread(ask, p) for p in self.pipes)))

    async def call(self, cmd: str, timeout: float = 900.0) -> list[Any]:
        return await self.ask_all(cmd, cmd, timeout)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.call("close", timeout=30)
        for proc in self.procs:
            await asyncio.to_thread(proc.join, 5)
            if proc.is_alive():
                proc.kill()
                await asyncio.to_thread(proc.join, 5)


class Fleet(Workers):
    """The parent's handle on the worker processes."""

    def __init__(self, specs: list[FleetSpec]):
        super().__init__(specs, worker_main)


#: Loopback source addresses runs take in turn: 127.0.0.2 to 127.0.0.241.
SOURCE_ADDRESSES = 240
_sources_taken = 0


def fresh_sources(n: int) -> list[str]:
    """``n`` loopback source addresses no socket uses (in turn from the
    range, skipping any that ``/proc/net/tcp`` shows in use). A run's closed
    connections stay in TIME_WAIT for 60 s on their source address's ports,
    also after the process that made them exited; a fill binding the same
    addresses meanwhile has the kernel search a crowded port range for every
    connect, and the load generator, not the server, sets the fill's pace
    (measured: 417 connects/s right after the baseline's 19,000 against
    1,849 a run later, same hub code — and the longer fill counted more
    heartbeats in the server's CPU: 2,510 against 3,100 connects per CPU-s)."""
    global _sources_taken
    busy = _busy_loopback()
    candidates = [(_sources_taken + i) % SOURCE_ADDRESSES for i in range(SOURCE_ADDRESSES)]
    idle = [i for i in candidates if f"127.0.0.{2 + i}" not in busy]
    chosen = (idle if len(idle) >= n else candidates)[:n]
    _sources_taken = chosen[-1] + 1 if chosen else _sources_taken
    return [f"127.0.0.{2 + i}" for i in chosen]


def _busy_loopback() -> set[str]:
    """The 127.0.0.x addresses some TCP socket of this machine is bound to."""
    busy: set[str] = set()
    try:
        with open("/proc/net/tcp") as table:
            next(table)  # the heading
            for line in table:
                local = line.split(None, 2)[1].split(":", 1)[0]
                busy.add(socket.inet_ntoa(bytes.fromhex(local)[::-1]))
    except OSError:
        pass  # not Linux: the rotation alone
    return busy


def split(kind: str, port: int, n: int, *, space_size: int, heartbeat_s: float,
          per_worker: int = 7000) -> list[FleetSpec]:  # fmt: skip
    """``n`` connections in shares of at most ``per_worker``, one source
    address each (:func:`fresh_sources`)."""
    workers = max(2, -(-n // per_worker))
    base, extra = divmod(n, workers)
    specs, first = [], 0
    for w, source in enumerate(fresh_sources(workers)):
        count = base + (1 if w < extra else 0)
        specs.append(FleetSpec(kind, port, first, count, source, space_size, heartbeat_s))
        first += count
    return specs
