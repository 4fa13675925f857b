"""What the node's handlers need of a local agent, whatever carries it.

A :class:`Peer` is a :class:`~hub.core.registry.Member` with a session: a
WebSocket connection (:class:`~hub.net.connection.HubConnection`) or a virtual
member an adapter drives (:class:`~hub.node.virtual.VirtualMember`). Everything
that carries out an agent's requests is typed on this, so both go through the
same path.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from hub.core.agent_record import AgentRecord
from hub.core.frames import OutFrame
from hub.core.session import Session
from protocol.errors import CloseCode, ErrorCode


class Peer(Protocol):
    agent_id: str
    connection_id: str
    session: Session | None
    record: AgentRecord | None
    #: Set once the node has cleaned up after the peer (departures announced).
    cleaned_up: asyncio.Event

    @property
    def closing(self) -> bool: ...

    def push(self, frame: OutFrame) -> bool: ...

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
