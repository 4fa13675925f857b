"""What the node's handlers need of a local agent, whatever carries it.

A :class:`Peer` is a :class:`~hub.core.registry.Member` with a session: a
WebSocket connection (:class:`~hub.net.connection.HubConnection`) or a virtual
member an adapter drives (:class:`~hub.node.virtual.VirtualMember`). Everything
that carries out an agent's requests is typed on this, so both go through the
same path.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import Protocol

from hub.core.agent_record import AgentRecord
from hub.core.frames import OutFrame
from hub.core.session import Session
from protocol.errors import CloseCode, ErrorCode


class PeerKind(Enum):
    """What carries a peer — the one way the node asks whether it has a socket."""

    #: A WebSocket connection: an agent that can reconnect and resume.
    SOCKET = "socket"
    #: An adapter's member inside the hub, its id claimed cluster-wide.
    VIRTUAL = "virtual"
    #: An adapter's member every node hosts under the same (reserved) id.
    SHARED = "shared"
    #: The server API acting for an operator: no socket, no membership.
    CALLER = "caller"


class CleanedUp:
    """``asyncio.Event``'s ``set``/``is_set``/``wait`` for a one-way flag, without
    its cost: an Event holds a deque of waiters (some 600 bytes) from birth, and
    every connection has one of these while hardly any is ever waited for (a
    newcomer replacing it). The waiter is made on the first ``wait``."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter = self._waiter
        if waiter is None or waiter.cancelled():
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        # Shielded: one waiter giving up (a timeout) must not cancel the others.
        await asyncio.shield(waiter)
        return True


class Peer(Protocol):
    agent_id: str
    connection_id: str
    kind: PeerKind
    session: Session | None
    record: AgentRecord | None
    #: Set once the node has cleaned up after the peer (departures announced).
    cleaned_up: CleanedUp

    @property
    def closing(self) -> bool: ...

    def push(self, frame: OutFrame) -> bool: ...

    @property
    def preframed(self) -> bool:
        """Frames for this peer carry their WebSocket wire bytes (no compression)."""
        ...

    def backlog(self) -> int:
        """Bytes queued for this peer's socket and not yet written (0: no socket)."""
        ...

    async def drain(self) -> None:
        """Wait until the socket takes more (returns at once without one)."""
        ...

    def send_frame(self, payload: bytes) -> bool:
        """Queue one message for this peer only."""
        ...

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        """Send an ``error`` event, then close with ``code``. Never blocks."""
        ...

    def abort(self) -> None:
        """Cut at once, no closing handshake (it failed a liveness probe)."""
        ...

    async def probe(self, timeout: float) -> bool:
        """Is the other end alive?"""
        ...
