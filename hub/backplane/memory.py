"""Single-node backplane: sequencing and delivery are a function call."""

from __future__ import annotations

import asyncio

from hub.backplane.base import DeliveryHandler, Draft, Envelope
from protocol.codec import complete


class MemoryBackplane:
    """The default backplane of a single node; always ready."""

    def __init__(self) -> None:
        self._handler: DeliveryHandler | None = None
        self._seq: dict[str, int] = {}
        self._subscribed: set[str] = set()

    @property
    def ready(self) -> bool:
        return self._handler is not None

    @property
    def lag(self) -> float:
        return 0.0

    async def start(self, handler: DeliveryHandler) -> None:
        self._handler = handler
        handler.backplane_ready(True)

    async def aclose(self) -> None:
        self._handler = None

    async def subscribe(self, space: str) -> None:
        self._subscribed.add(space)

    async def unsubscribe(self, space: str) -> None:
        self._subscribed.discard(space)

    @property
    def backlog(self) -> int:
        return 0

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(self._publish(space, draft))
        return future

    async def publish(self, space: str, draft: Draft) -> int:
        return self._publish(space, draft)

    def _publish(self, space: str, draft: Draft) -> int:
        seq = self._seq.get(space, 0) + 1
        self._seq[space] = seq
        if self._handler is not None and space in self._subscribed:
            self._handler.deliver(
                Envelope(
                    space,
                    complete(draft.head, seq, draft.tail),
                    seq,
                    draft.exclude,
                    draft.stream,
                    draft.op,
                    draft.to,
                )
            )
        return seq

    async def send(self, envelope: Envelope) -> None:
        if self._handler is not None and envelope.space in self._subscribed:
            self._handler.deliver(envelope)

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        # One node: a message to "another node" has nowhere to go.
        return 0

    async def forget(self, space: str) -> None:
        self._seq.pop(space, None)
