"""Feed a running hub seeded bad input over several connections.

``python -m tests.fuzz --frames 300000`` (``make fuzz``) starts a hub process,
drives it with :mod:`tests.support.badinput` and prints what happened. It
fails (exit 1) when the hub answered anything with ``INTERNAL_ERROR``, left a
bad frame unanswered, closed without an ``error`` event first, stopped serving
a fresh client afterwards, or logged a traceback. The short version runs in
``make test`` (``tests/integration/test_bad_input.py``).

Each frame is followed by a heartbeat with an id: the hub handles a
connection's frames in order, so the heartbeat's reply marks the end of the
answers to the frame before it.

A third of the frames (``--split``) are written in pieces, cut right after
their header, their extended length or their mask or anywhere, each piece
read by the hub before the next is written (the hub's socket has nothing
unread: :class:`tests.support.wsframes.Unread`): a read that ends inside a
frame must change nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from tests.support import fuzzing
from tests.support.badinput import REFUSALS, SPACE, Case, cases
from tests.support.fuzzing import log_problems, print_summary, run_drivers
from tests.support.wsframes import Unread, frame_cuts

TIMEOUT = 20.0


@dataclass
class Report(fuzzing.Report):
    frames: int = 0
    #: Frames written in pieces, each a read of the hub's.
    split: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    closes: Counter[int] = field(default_factory=Counter)


async def _open(url: str, agent_id: str) -> ClientConnection:
    ws = await connect(
        f"{url}?agent_id={agent_id}",
        max_size=None,
        ping_interval=None,
        compression=None,
        open_timeout=TIMEOUT,
        close_timeout=5,
    )
    first = orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
    if first.get("type") != "agent.registered":
        raise RuntimeError(f"expected agent.registered, got {first}")
    await ws.send(orjson.dumps({"type": "space.join", "id": "join", "space": SPACE}).decode())
    return ws


async def _send(
    ws: ClientConnection, case: Case, agent_id: str, split: Split | None = None
) -> None:
    if split is not None:
        # The frame as websockets would write it, written in pieces.
        if isinstance(case.frame, bytes) and not case.invalid_utf8:
            ws.protocol.send_binary(case.frame)
        elif isinstance(case.frame, bytes):
            ws.protocol.send_text(case.frame)
        else:
            ws.protocol.send_text(case.frame.replace("{agent}", agent_id).encode())
        await split.write(ws, b"".join(ws.protocol.data_to_send()))
    elif case.invalid_utf8:
        assert isinstance(case.frame, bytes)
        ws.protocol.send_text(case.frame)
        ws.send_data()
    elif isinstance(case.frame, bytes):
        await ws.send(case.frame)
    else:
        await ws.send(case.frame.replace("{agent}", agent_id))


@dataclass
class Split:
    """Writes a frame in pieces, each read by the hub before the next."""

    unread: Unread
    rng: random.Random
    share: float

    def wanted(self) -> bool:
        return self.rng.random() < self.share

    async def write(self, ws: ClientConnection, frame: bytes) -> None:
        cuts = frame_cuts(frame)
        chosen = {self.rng.choice(cuts)} if cuts else set()
        if len(frame) > 2 and self.rng.random() < 0.5:
            chosen.add(self.rng.randrange(1, len(frame)))
        bounds = [0, *sorted(chosen), len(frame)]
        port = ws.transport.get_extra_info("sockname")[1]
        for a, b in itertools.pairwise(bounds):
            if ws.protocol.state is not State.OPEN or ws.transport.is_closing():
                return  # the hub refused the frame from its first bytes (a close case)
            ws.transport.write(frame[a:b])
            await self.unread.settled(port)


async def _answers(ws: ClientConnection, sync_id: str) -> list[dict[str, Any]]:
    """Frames up to the reply to heartbeat ``sync_id`` (events of others skipped)."""
    out = []
    async with asyncio.timeout(TIMEOUT):
        while True:
            msg = orjson.loads(await ws.recv())
            if msg.get("type") == "agent.heartbeat" and msg.get("id") == sync_id:
                return out
            if msg.get("type") not in ("space.event", "space.members"):
                out.append(msg)


async def _until_closed(ws: ClientConnection) -> list[dict[str, Any]]:
    frames = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while True:
                frames.append(orjson.loads(await ws.recv()))
    except ConnectionClosed:
        pass
    return frames


async def drive(
    url: str, name: str, rng: random.Random, n: int, max_frame: int, split_share: float
) -> Report:
    report = Report()
    split = Split(Unread(int(url.rsplit(":", 1)[1].split("/")[0])), rng, split_share)
    generations = itertools.count()
    agent_id = f"{name}-{next(generations)}"
    ws = await _open(url, agent_id)
    sync = itertools.count()
    for case in itertools.islice(cases(rng, max_frame), n):
        report.frames += 1
        report.by_kind[case.kind] += 1
        if split.wanted():
            report.split += 1
            await _send(ws, case, agent_id, split)
        else:
            await _send(ws, case, agent_id)
        if case.expect == "close":
            frames = await _until_closed(ws)
            rcvd = ws.protocol.close_rcvd
            code = rcvd.code if rcvd is not None else None
            report.closes[code or 0] += 1
            if code != case.close_code:
                report.problem(f"{case.kind}: closed with {code}, expected {case.close_code}")
            errors = [f for f in frames if f.get("type") == "error"]
            if not errors:
                report.problem(f"{case.kind}: close {code} without an error event first")
            await ws.close()
            agent_id = f"{name}-{next(generations)}"
            ws = await _open(url, agent_id)
            continue
        sync_id = f"sync-{next(sync)}"
        await ws.send(orjson.dumps({"type": "agent.heartbeat", "id": sync_id}).decode())
        try:
            answers = await _answers(ws, sync_id)
        except ConnectionClosed:
            rcvd = ws.protocol.close_rcvd
            report.problem(f"{case.kind}: connection closed ({rcvd}) by a frame that must not")
            agent_id = f"{name}-{next(generations)}"
            ws = await _open(url, agent_id)
            continue
        errors = [a for a in answers if a.get("type") == "error"]
        for e in errors:
            report.errors[e.get("code", "?")] += 1
            if e.get("code") == "INTERNAL_ERROR":
                report.problem(f"{case.kind}: INTERNAL_ERROR {e.get('message')!r}")
        if case.expect == "refuse":
            if not errors:
                report.problem(f"{case.kind}: not refused: {str(case.frame)[:120]!r} → {answers}")
            elif any(e.get("code") not in REFUSALS for e in errors):
                report.problem(f"{case.kind}: unexpected error codes {errors}")
    await ws.close()
    return report


async def check_still_serving(url: str) -> str | None:
    """A fresh client connects, joins, publishes and receives its event."""
    try:
        ws = await _open(url, f"fresh-{random.randrange(1 << 30)}")
        await ws.send(
            orjson.dumps(
                {"type": "space.publish", "id": "fresh", "space": SPACE, "data": {"ok": 1}}
            ).decode()
        )
        async with asyncio.timeout(TIMEOUT):
            while True:
                msg = orjson.loads(await ws.recv())
                if msg.get("type") == "space.event" and msg.get("request_id") == "fresh":
                    break
        await ws.close()
    except Exception as exc:
        return f"fresh client failed: {exc!r}"
    return None


async def run(
    url: str, *, seed: int, frames: int, connections: int, max_frame: int, split: float = 1 / 3
) -> Report:
    per = max(1, frames // connections)
    total = await run_drivers(
        lambda i, rng: drive(url, f"fuzz{i}", rng, per, max_frame, split),
        Report(),
        seed=seed,
        connections=connections,
    )
    failure = await check_still_serving(url)
    if failure:
        total.problem(failure)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300_000)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--max-frame", type=int, default=65536)
    parser.add_argument(
        "--split", type=float, default=1 / 3, help="share of frames written in pieces"
    )
    args = parser.parse_args(argv)

    from tests.support.servers import HubProcess

    proc = HubProcess(
        max_frame_bytes=args.max_frame,
        rate_limit=1_000_000,
        rate_burst=1_000_000,
        heartbeat_interval=30,
        heartbeat_timeout=60,
        log_level="info",
    ).start()
    started = time.monotonic()
    try:
        report = asyncio.run(
            run(
                proc.url,
                seed=args.seed,
                frames=args.frames,
                connections=args.connections,
                max_frame=args.max_frame,
                split=args.split,
            )
        )
    finally:
        proc.stop()
    report.problems += log_problems(proc.log_lines(), proc.log())
    return print_summary(
        report, seed=args.seed, sent="frames", count=report.frames,
        connections=args.connections, elapsed=time.monotonic() - started,
        counts={
            "errors": dict(report.errors.most_common()),
            "closes": dict(report.closes),
            "written in pieces": {"frames": report.split},
        },
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
