"""The reconnect storm's agents, held by load-generator worker processes.

One process cannot reconnect 10,000 agents "at once": its own event loop
would take longer than an attempt's 10 s to get through their handshakes, and
the storm would time the load generator. So the agents are split across
worker processes (:func:`split`), each binding its own loopback source
address, driven by the parent (:class:`StormFleet`) step by step through a
pipe: connect and join, drop, reconnect at an agreed instant with ``since``,
settle, close. The parent keeps the observer and the publisher and the
measurement window (:func:`tests.benchmarks.scale.storm`).

A worker's reconnect is what a client library does: each attempt (connected
and ``agent.registered``, or the baseline's ``ready``) given up after
``attempt_timeout``, then retried after a jittered exponential backoff, at
most ``retries`` times; a hub agent then re-joins its space with ``since``
and has resumed once it holds its ``space.joined`` and every event it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson

from tests.benchmarks.fleet import Workers, run_worker
from tests.benchmarks.wsload import LoadClient

MEMBERS = b'"space.members"'
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0


def backoff(attempt: int, rng: random.Random) -> float:
    """Seconds before retry ``attempt`` (0-based): exponential, capped, "equal
    jitter" (half fixed, half random), as client libraries back off."""
    step = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)
    return step / 2 + rng.uniform(0, step / 2)


@dataclass(frozen=True)
class StormSpec:
    """One worker's agents: ``first`` … ``first + count - 1``."""

    kind: str  # "hub" | "baseline"
    port: int
    first: int
    count: int
    source: str
    space_size: int


class StormWorker:
    """The worker process's side: its agents, dropped and brought back."""

    def __init__(self, spec: StormSpec):
        self.spec = spec
        self.hub = spec.kind == "hub"
        self.clients: dict[int, LoadClient] = {}
        self.position: dict[int, tuple[int, str]] = {}

    def space(self, i: int) -> str:
        return f"storm-{i // self.spec.space_size}"

    async def _connect(self, i: int) -> LoadClient:
        s = self.spec
        path = f"/ws?agent_id=st{i}" if self.hub else "/"
        client = await LoadClient.connect(
            "127.0.0.1", s.port, path, source=s.source, skip=(MEMBERS,)
        )
        try:
            first = await client.expect("agent.registered" if self.hub else "ready")
        except BaseException:
            client.abort()
            raise
        if self.hub:
            # Half the hub's heartbeat interval, as a client library would.
            client.keep_alive(first["heartbeat_interval"] / 2000)
        return client

    async def setup(self) -> dict[str, Any]:
        sem = asyncio.Semaphore(100)  # not measured

        async def one(i: int) -> None:
            async with sem:
                client = await self._connect(i)
                self.clients[i] = client
                if self.hub:
                    client.send_json({"type": "space.join", "id": "j", "space": self.space(i)})
                    joined = await client.expect("space.joined", timeout=120)
                    self.position[i] = (joined["seq"], joined["epoch"])
                client.start_counting()

        s = self.spec
        await asyncio.gather(*(one(i) for i in range(s.first, s.first + s.count)))
        return {"connected": len(self.clients)}

    def frames(self) -> int:
        return sum(c.total_frames for c in self.clients.values())

    def drop(self) -> dict[str, Any]:
        for c in self.clients.values():
            c.abort()
        self.clients.clear()
        return {"dropped": True}

    async def storm(self, expected: dict[str, list[int]], start_at: float, *, concurrency: int,
                    attempt_timeout: float, retries: int) -> dict[str, Any]:  # fmt: skip
        s = self.spec
        retried = timed_out = exists = 0
        errors: list[str] = []
        done_ns: list[int] = []
        # The cap is the whole fleet's: this worker's share of it.
        gate: Any = asyncio.Semaphore(concurrency) if concurrency else contextlib.nullcontext()

        async def attempt(i: int) -> LoadClient:
            async with gate, asyncio.timeout(attempt_timeout):
                return await self._connect(i)

        async def back(i: int) -> None:
            nonlocal retried, timed_out, exists
            rng = random.Random(i)
            for k in range(retries + 1):
                try:
                    client = await attempt(i)
                    break
                except Exception as exc:
                    if k == retries:
                        raise RuntimeError(f"st{i} could not reconnect: {exc!r}") from None
                    retried += 1
                    if isinstance(exc, TimeoutError):
                        timed_out += 1
                    elif "AGENT_EXISTS" in str(exc):
                        exists += 1
                    if len(errors) < 5:
                        errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(backoff(k, rng))
            self.clients[i] = client
            if self.hub:
                space = self.space(i)
                seq, epoch = self.position[i]
                since = {"seq": seq, "epoch": epoch}
                client.send_json({"type": "space.join", "id": "r", "space": space, "since": since})
                want = set(expected[space])
                got: list[int] = []
                joined: dict[str, Any] | None = None
                while joined is None or not want <= set(got):
                    msg = await client.recv(timeout=300)
                    kind = msg.get("type")
                    if kind == "space.joined" and msg.get("space") == space:
                        joined = msg
                    elif kind == "space.event" and msg.get("space") == space:
                        got.append(msg["seq"])
                    elif kind == "error":
                        raise RuntimeError(f"st{i}: {msg}")
                done_ns.append(time.monotonic_ns())
                # Whatever arrives after the resume completed stays in the
                # client's inbox and counts too (tally()).
                results.append((i, joined, got))
            else:
                done_ns.append(time.monotonic_ns())

        results: list[tuple[int, dict[str, Any], list[int]]] = []
        await asyncio.sleep(max(0.0, start_at - time.monotonic()))
        await asyncio.gather(*(back(i) for i in range(s.first, s.first + s.count)))
        self._results = results
        self._expected = expected
        return {
            "done_ns": max(done_ns) if done_ns else 0,
            "retried": retried,
            "timed_out": timed_out,
            "exists": exists,
            "errors": errors,
        }

    def tally(self) -> dict[str, int]:
        """Per agent, the events of its space after its ``since`` against those published."""
        lost = dup = unexpected = not_recovered = 0
        for i, joined, got in getattr(self, "_results", []):
            space = self.space(i)
            late = [orjson.loads(m) for m in self.clients[i].inbox]
            got = got + [
                m["seq"] for m in late if m.get("type") == "space.event" and m.get("space") == space
            ]
            want = set(self._expected[space])
            lost += len(want - set(got))
            dup += len(got) - len(set(got))
            unexpected += len(set(got) - want)
            if not joined.get("recovered"):
                not_recovered += 1
        return {"lost": lost, "dup": dup, "unexpected": unexpected, "not_recovered": not_recovered}


async def _serve(spec: StormSpec, conn: Connection) -> None:
    worker = StormWorker(spec)
    loop = asyncio.get_running_loop()
    try:
        while True:
            cmd, args = await loop.run_in_executor(None, conn.recv)
            try:
                if cmd == "setup":
                    out: Any = await worker.setup()
                elif cmd == "positions":
                    out = worker.position
                elif cmd == "frames":
                    out = {"frames": worker.frames()}
                elif cmd == "drop":
                    out = worker.drop()
                elif cmd == "storm":
                    out = await worker.storm(**args)
                elif cmd == "tally":
                    out = worker.tally()
                elif cmd == "close":
                    worker.drop()
                    await asyncio.sleep(0.2)  # let the aborts reach the sockets
                    conn.send({"closed": True})
                    return
                else:
                    out = {"error": f"unknown command {cmd!r}"}
            except Exception as exc:
                out = {"error": f"{type(exc).__name__}: {exc}"}
            conn.send(out)
    except (EOFError, OSError):
        worker.drop()  # the parent is gone


def worker_main(spec: StormSpec, conn: Connection) -> None:
    run_worker(_serve, spec, conn)


class StormFleet(Workers):
    """The parent's handle on the storm's worker processes."""

    kind = "a storm worker"

    def __init__(self, specs: list[StormSpec]):
        super().__init__(specs, worker_main)

    async def call(self, cmd: str, timeout: float = 900.0, **args: Any) -> list[Any]:
        """Send ``cmd`` to every worker; their answers, in order (an error raises)."""
        answers = await self.ask_all((cmd, args), cmd, timeout)
        for a in answers:
            if isinstance(a, dict) and "error" in a:
                raise RuntimeError(f"storm worker, {cmd}: {a['error']}")
        return answers


def split(kind: str, port: int, agents: int, space_size: int, workers: int) -> list[StormSpec]:
    """``agents`` in ``workers`` shares of whole spaces, one source address each."""
    spaces = -(-agents // space_size)
    workers = max(1, min(workers, spaces))
    per, extra = divmod(spaces, workers)
    specs, first = [], 0
    for w in range(workers):
        count = min(agents - first, (per + (1 if w < extra else 0)) * space_size)
        specs.append(StormSpec(kind, port, first, count, f"127.0.0.{2 + w}", space_size))
        first += count
    return specs
