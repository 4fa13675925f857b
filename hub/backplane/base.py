"""The backplane interface: sequenced publish, unsequenced send, subscribe.

Every message for a space goes through the backplane, even on a single node,
so that all members everywhere see one order. A sequenced publish assigns the
space's next ``seq`` and completes the frame (``head + seq + tail``) in one
atomic step; the finished bytes are what every node hands to its members.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

from hub.streams import StreamOp

__all__ = ["Backplane", "DeliveryHandler", "Draft", "Envelope", "StreamOp"]


@dataclass(frozen=True, slots=True)
class Draft:
    """A message waiting for its ``seq``."""

    head: bytes
    tail: bytes
    exclude: str | None = None  # agent id that must not receive it (echo off)
    stream: str | None = None
    op: StreamOp = StreamOp.NONE
    to: tuple[str, ...] | None = None  # addressed publish: only these agents receive it


@dataclass(frozen=True, slots=True)
class Envelope:
    """A finished message as every node receives it."""

    space: str
    frame: bytes
    seq: int | None = None
    exclude: str | None = None
    stream: str | None = None
    op: StreamOp = StreamOp.NONE
    to: tuple[str, ...] | None = None


class DeliveryHandler(Protocol):
    """What a node gives the backplane: where incoming messages are pushed."""

    def deliver(self, envelope: Envelope) -> None: ...

    def backplane_ready(self, ready: bool) -> None: ...

    def node_message(self, payload: bytes) -> None:
        """A message another node sent to this one (``send_to_node``)."""
        ...


class Backplane(Protocol):
    """Carries space messages between the nodes of a cluster."""

    @property
    def ready(self) -> bool:
        """Connected and subscribed to every channel asked for."""
        ...

    @property
    def lag(self) -> float:
        """Seconds between publish and receipt of the latest message (0 in memory)."""
        ...

    async def start(self, handler: DeliveryHandler) -> None: ...

    async def aclose(self) -> None: ...

    async def subscribe(self, space: str) -> None:
        """Start receiving the space's messages; raises BackplaneUnavailable."""
        ...

    async def unsubscribe(self, space: str) -> None: ...

    async def publish(self, space: str, draft: Draft) -> int:
        """Assign the next seq, deliver everywhere, return the seq."""
        ...

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        """Queue a publish behind those already queued; the future gives its
        seq, or fails with BackplaneUnavailable. Lets one connection's burst
        travel together (one round trip, one write per member)."""
        ...

    @property
    def backlog(self) -> int:
        """Publishes queued or in flight; the node waits when it grows."""
        ...

    async def send(self, envelope: Envelope) -> None:
        """Deliver an unsequenced message (membership changes) everywhere."""
        ...

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        """Deliver ``payload`` to one node's ``node_message`` (at most once).

        Returns how many subscribers took it: 0 means that node is gone.
        """
        ...

    async def forget(self, space: str) -> None:
        """The space is gone cluster-wide: drop its sequence and history."""
        ...
