"""The soak's agents: SDK clients that record every delivery, and publishers.

Every agent is a :class:`agora_client.Client` with ``reconnect=True`` — the
SDK resumes by itself — behind the soak's load balancer. Its deliveries and
rejoins go to its :class:`~tests.soak.ledger.AgentLog`. A publisher is one
of a space's agents publishing at a steady rate; each publish carries an
idempotency key and is retried with it (same key) until acknowledged, so a
retry can never publish twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

from agora_client import (
    Backoff,
    Client,
    ConnectionClosed,
    Event,
    HubClientError,
    RequestTimeout,
    Resumed,
    Unavailable,
)
from tests.soak.ledger import AgentLog, PublishLog

BACKOFF = Backoff(initial=0.2, maximum=3.0)
# How long a publisher keeps retrying one message (Redis restarts take seconds).
PUBLISH_DEADLINE = 60.0


class SoakAgent:
    def __init__(self, url: str, agent_id: str, space: str):
        self.log = AgentLog(agent_id, space)
        self.client = Client(
            url,
            agent_id,
            reconnect=True,
            backoff=BACKOFF,
            request_timeout=20.0,
            queue_size=10_000,
            on_resume=self._resumed,
        )
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.client.connect()
        sub = self.client.events(self.log.space)
        joined = await self.client.join(self.log.space)
        self.log.join_seq = joined.seq
        self._reader = asyncio.get_running_loop().create_task(self._read(sub))

    def _resumed(self, note: Resumed) -> None:
        self.log.rejoins += 1
        if not note.recovered:
            self.log.excused.append((note.since.seq, note.seq))

    async def _read(self, sub: object) -> None:
        try:
            async for event in sub:  # type: ignore[attr-defined]
                if isinstance(event, Event):
                    self.log.received[event.event_id] += 1
        except HubClientError as exc:
            self.log.gone = f"{type(exc).__name__}: {exc.code}"
            self.log.gone_after = self.client.last_seq(self.log.space) or 0

    @property
    def caught_up_to(self) -> int:
        return self.client.last_seq(self.log.space) or 0

    async def aclose(self) -> None:
        await self.client.aclose()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def publish_steadily(
    agent: SoakAgent,
    interval: float,
    stop: asyncio.Event,
    log: PublishLog,
    rng: random.Random,
) -> None:
    """Publish to the agent's space every ``interval`` seconds until ``stop``."""
    space = agent.log.space
    loop = asyncio.get_running_loop()
    await asyncio.sleep(rng.random() * interval)
    n = 0
    next_at = loop.time()
    while not stop.is_set():
        n += 1
        log.sent += 1
        key = f"{agent.log.agent_id}-{n}"
        deadline = loop.time() + PUBLISH_DEADLINE
        while True:
            try:
                event = await agent.client.publish(space, {"n": n}, idempotency_key=key)
            except (Unavailable, RequestTimeout, ConnectionClosed) as exc:
                if loop.time() > deadline or (
                    isinstance(exc, ConnectionClosed) and agent.client.closed_error is not None
                ):
                    log.failed += 1
                    log.failures[f"{type(exc).__name__} {exc.code} (gave up)"] += 1
                    break
                log.retries += 1
                await asyncio.sleep(0.5)
                continue
            except HubClientError as exc:
                log.failed += 1
                log.failures[f"{type(exc).__name__} {exc.code}"] += 1
                break
            if event.duplicate:
                log.duplicate_answers += 1
            log.acked(space, event.seq, event.event_id)
            break
        next_at += interval
        delay = next_at - loop.time()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
        else:
            next_at = loop.time()  # fell behind (an outage): no burst to catch up
