"""Feed a running hub's HTTP port seeded hostile requests.

``python -m tests.fuzz_http --requests 20000`` (``make fuzz-http``) starts a
hub process — server API, status page, an HTTP Agora space answered by an
agent, a space for envelopes, sub-second read deadlines — sends it requests
from :mod:`tests.support.badhttp` over raw sockets on several connections at
once, and prints what happened. It fails (exit 1) when any answer is a 5xx,
an answer repeats a secret (the API key, the admin token), a valid request
is refused, a connection is neither answered nor closed in time (a hang),
the hub stops serving a plain request, dies, or logs a traceback or an
error. The short version runs in ``make test``
(``tests/integration/test_http_hostile.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import fuzzing
from tests.support.agora_bridge import Responder
from tests.support.badhttp import VALID_FROM, Case, Target, cases, request
from tests.support.fuzzing import log_problems, print_summary, run_drivers
from tests.support.rawhttp import Reply, read_reply

#: A case must be answered or closed within this (deadlines are sub-second).
TIMEOUT = 20.0
KEY = "fuzz-apikey-SECRET-51d3e0a9"
TOKEN = "fuzz-admintoken-SECRET-77c2b4f1"
#: The hub believes 127.0.0.1's X-Forwarded-For: the valid requests come
#: "from" an address of their own (badhttp.VALID_FROM), so the hostile mix's
#: wrong secrets (throttled per address, hub/ops/api/throttle.py) do not lock
#: them out.
CONFIG = """
trusted_proxies = ["127.0.0.1"]

[[spaces]]
id = "agora"
agora_http = true

[[spaces]]
id = "plain"
"""
#: The hub the fuzzer starts: short deadlines so slow cases end quickly.
HUB_SETTINGS: dict[str, Any] = {
    "api_key": KEY,
    "admin_token": TOKEN,
    "http_header_timeout": 0.5,
    "http_body_timeout": 0.5,
    "bridge_timeout": 1.0,
    "rate_limit": 1_000_000,
    "rate_burst": 1_000_000,
    "log_level": "info",
}


@dataclass
class Report(fuzzing.Report):
    requests: int = 0
    statuses: Counter[str] = field(default_factory=Counter)


async def _write(writer: asyncio.StreamWriter, case: Case) -> None:
    head = case.data[: len(case.data) - case.slow_tail]
    with contextlib.suppress(ConnectionError):
        writer.write(head)
        await writer.drain()
        for byte in case.data[len(head) :]:
            await asyncio.sleep(case.trickle)
            if writer.is_closing():
                return
            writer.write(bytes([byte]))


async def exchange(port: int, case: Case) -> list[Reply]:
    """Write ``case`` and read its answers until all came or the hub closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sender = asyncio.create_task(_write(writer, case))
    replies: list[Reply] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while len(replies) < case.requests:
                reply = await read_reply(reader, no_body=case.data.startswith(b"HEAD "))
                if reply.status is None:
                    break
                replies.append(reply)
    finally:
        sender.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return replies


def check(case: Case, replies: list[Reply], target: Target, report: Report) -> None:
    shown = case.data[:100]
    for reply in replies:
        report.statuses[str(reply.status)] += 1
        if reply.status is not None and reply.status >= 500:
            report.problem(f"{case.kind}: {reply.status} for {shown!r}: {reply.body[:200]!r}")
        for secret in target.secrets:
            if secret.encode() in reply.raw:
                report.problem(f"{case.kind}: a secret echoed for {shown!r}")
    if not replies:
        report.statuses["closed"] += 1
    if case.valid and not (replies and 200 <= (replies[0].status or 0) < 400):
        got = replies[0].raw[:300] if replies else "closed"
        report.problem(f"valid request refused: {shown!r} → {got!r}")


async def drive(target: Target, rng: random.Random, n: int) -> Report:
    report = Report()
    for case in itertools.islice(cases(rng, target), n):
        report.requests += case.requests
        report.by_kind[case.kind] += 1
        try:
            replies = await exchange(target.http_port, case)
        except TimeoutError:
            report.problem(
                f"{case.kind}: no answer and no close in {TIMEOUT} s: {case.data[:100]!r}"
            )
            continue
        except ConnectionError as exc:
            report.problem(f"{case.kind}: cannot connect: {exc!r}")
            continue
        except ValueError as exc:
            report.problem(f"{case.kind}: {exc} after {case.data[:300]!r}")
            continue
        check(case, replies, target, report)
    return report


async def still_serving(target: Target) -> list[str]:
    """A plain request of each kind is answered as usual."""
    problems = []
    for data in (
        request("GET", "/healthz"),
        request("POST", f"/agora/{target.agora_space}", b'{"body": "still there?"}'),
        request("GET", "/api/spaces", headers={"X-API-Key": target.api_key, **VALID_FROM}),
        request(
            "GET",
            "/admin/state",
            headers={"Authorization": f"Bearer {target.admin_token}", **VALID_FROM},
        ),
    ):
        replies = await exchange(target.http_port, Case("fresh", data))
        if not replies or replies[0].status != 200:
            problems.append(f"fresh request failed: {data[:60]!r} → {replies}")
    return problems


async def run(target: Target, *, seed: int, requests: int, connections: int) -> Report:
    per = max(1, requests // connections)
    total = await run_drivers(
        lambda _i, rng: drive(target, rng, per), Report(), seed=seed, connections=connections
    )
    for p in await still_serving(target):
        total.problem(p)
    return total


def answer(data: dict[str, Any]) -> dict[str, Any] | None:
    return None if data.get("end_conversation") else {"body": "ok"}


async def run_against(proc: Any, *, seed: int, requests: int, connections: int) -> Report:
    """Fuzz a started hub process (HUB_SETTINGS, CONFIG), answered by an agent."""
    target = Target(int(proc.http_url.rsplit(":", 1)[1]), KEY, TOKEN)
    responder = Responder(proc.url, "fuzz-answerer", target.agora_space, answer)
    await responder.start()
    try:
        report = await run(target, seed=seed, requests=requests, connections=connections)
    finally:
        await responder.aclose()
    if proc.proc.poll() is not None:
        report.problem(f"the hub exited ({proc.proc.returncode})")
    return report


def start_hub(directory: Path) -> Any:
    from tests.support.servers import HubProcess

    config = directory / "hub.toml"
    config.write_text(CONFIG)
    return HubProcess(config=str(config), **HUB_SETTINGS).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="agora-fuzz-http-") as directory:
        proc = start_hub(Path(directory))
        started = time.monotonic()
        try:
            report = asyncio.run(
                run_against(
                    proc, seed=args.seed, requests=args.requests, connections=args.connections
                )
            )
        finally:
            proc.stop()
        report.problems += log_problems(proc.log_lines(), proc.log())
        proc.close()
    return print_summary(
        report, seed=args.seed, sent="requests", count=report.requests,
        connections=args.connections, elapsed=time.monotonic() - started,
        counts={"statuses": dict(report.statuses.most_common())},
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
