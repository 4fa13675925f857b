"""Staying connected: heartbeats, a dead hub noticed, and the reconnect policy.

The hub advertises ``heartbeat_interval`` and ``heartbeat_timeout`` in
``agent.registered`` and closes a connection it hears nothing from for the
timeout. So the client sends ``agent.heartbeat`` when it has sent nothing else
for an interval — any frame will do, so a busy connection sends none — and
drops a connection it hears nothing from for the timeout: the hub answers
every heartbeat, so such a connection is dead even if TCP has not noticed.

A lost connection is reopened (with ``reconnect=True``) after the delays of
:class:`Backoff` — unless the hub closed it with one of
:data:`TERMINAL_CLOSE_CODES`, which no reconnect can help.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed as WsClosed

from agora_client.models import Registration
from agora_client.wire import CloseCode

log = logging.getLogger("agora_client")

HEARTBEAT = b'{"type":"agent.heartbeat"}'

# Close codes after which reconnecting cannot help (contract §2).
TERMINAL_CLOSE_CODES = frozenset(
    {
        CloseCode.UNAUTHORIZED,
        CloseCode.AGENT_EXISTS,
        CloseCode.RATE_LIMIT_ABUSE,
        # An operator disconnected the agent: coming straight back would undo it.
        CloseCode.DISCONNECTED,
    }
)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect delays: ``initial * factor**attempt`` capped at ``maximum``,
    each multiplied by a random factor in [0.5, 1] so that many clients
    dropped at once do not come back at once. ``max_attempts=None`` retries
    forever."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    max_attempts: int | None = None

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return base * random.uniform(0.5, 1.0)


class Traffic:
    """When the connection last heard from the hub and last sent it a frame
    (event-loop time): the reader and the sender mark them, the heartbeat
    task reads them."""

    __slots__ = ("last_rx", "last_tx")

    def __init__(self) -> None:
        self.last_rx = 0.0
        self.last_tx = 0.0


async def keep_alive(ws: ClientConnection, reg: Registration, traffic: Traffic) -> None:
    """Heartbeat when nothing else was sent for an interval; drop a silent hub.

    Runs until the connection is closed, or dropped here (its reader then
    reports the loss); cancelled when the connection is lost otherwise.
    """
    loop = asyncio.get_running_loop()
    interval = max(0.01, reg.heartbeat_interval)
    tick = interval / 2
    while True:
        await asyncio.sleep(tick)
        now = loop.time()
        if now - traffic.last_rx > reg.heartbeat_timeout:
            log.warning(
                "no frame from the hub for %.1f s: dropping the connection",
                now - traffic.last_rx,
            )
            ws.transport.abort()
            return
        if now - traffic.last_tx >= interval - tick / 2:
            try:
                await ws.send(HEARTBEAT, text=True)
            except WsClosed:
                return
            traffic.last_tx = loop.time()
