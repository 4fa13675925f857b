"""Where the backplane hands what it carries: the node's side of the fan-out.

The backplane pushes every finished message of a space this node subscribes
to into :meth:`NodeDelivery.deliver`. A message of a space whose missed
messages are being filled from history waits behind them
(:mod:`hub.handlers.gaps`); everything else goes straight to
:class:`FanOut`, which wraps the finished bytes in one
:class:`~hub.core.frames.OutFrame` (the WebSocket frame is built once too)
and calls the registry's one loop. Every 16th sequenced message has its
publish-to-delivery latency measured — two clock reads, nothing per delivery.

While the status page is on, :class:`CountingDelivery` also counts events
per space (the page shows event rates); a node whose page is off does not
pay for that.

On a node with a link to lose (Redis), :class:`FanOut` also shows every
``space.members`` event to the node's member views
(:mod:`hub.handlers.member_views`) — a prefix test of unsequenced frames.

A publisher's leave may wait for its own last publish to come back from the
backplane (so its echo goes out before ``space.left``): :meth:`FanOut.reached`.
Nothing is checked per message while nobody waits.

A stream *signal* (:attr:`StreamOp.SIGNAL`: who still receives a stream,
hub/handlers/stream_stops.py) is handed to its handler instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from hub.cluster.backplane import Delivery, StreamOp
from hub.core.counters import Counters
from hub.core.frames import OutFrame
from hub.core.registry import Registry
from hub.handlers.gaps import GapFiller
from hub.handlers.member_views import is_members_event

#: Sequenced messages whose seq is a multiple of this have their
#: publish-to-delivery latency measured.
DELIVERY_SAMPLE = 16

_SIGNAL = StreamOp.SIGNAL


class FanOut:
    """A finished message to this node's members of its space."""

    __slots__ = (
        "_awaited",
        "_counters",
        "_delivered",
        "_lag",
        "_preframe",
        "_registry",
        "on_members",
    )

    def __init__(
        self,
        registry: Registry[Any],
        counters: Counters,
        *,
        preframe: bool,
        lag: Callable[[], float],
        delivered: Callable[[str], int] | None = None,
    ):
        self._registry = registry
        self._counters = counters
        self._preframe = preframe
        self._lag = lag
        #: The backplane's highest seq handed over per space (``Channels.delivered``).
        self._delivered = delivered
        #: Leaves waiting for a seq of a space to be fanned out here.
        self._awaited: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}
        #: Shown every ``space.members`` event before its members get it.
        self.on_members: Callable[[Delivery], None] | None = None

    def __call__(self, message: Delivery) -> None:
        seq = message.seq
        if seq is None and self.on_members is not None and is_members_event(message):
            self.on_members(message)
        sampled = seq is not None and not seq % DELIVERY_SAMPLE
        if sampled:
            started = time.perf_counter()
        now = asyncio.get_running_loop().time() if message.stream is not None else 0.0
        counters = self._counters
        counters.deliveries += self._registry.deliver(
            message.space,
            OutFrame(message.frame, self._preframe),
            exclude=message.exclude,
            to=message.to,
            stream=message.stream,
            op=message.op,
            now=now,
        )
        if sampled:
            # The backplane's lag is this message's publish-to-receipt time.
            counters.delivery_latency.observe(self._lag() + time.perf_counter() - started)
        if self._awaited and seq is not None:
            self._wake(message.space, seq)

    async def reached(self, space: str, seq: int, timeout: float) -> None:
        """Return once this node has fanned out ``space``'s message ``seq``
        (or a later one), or after ``timeout`` seconds (a message lost on its
        way is filled from history later; nobody waits for that)."""
        if self._delivered is None or self._delivered(space) >= seq:
            return
        waiter = asyncio.get_running_loop().create_future()
        waiting = self._awaited.setdefault(space, [])
        waiting.append((seq, waiter))
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            if (seq, waiter) in waiting:
                waiting.remove((seq, waiter))
            if not waiting and self._awaited.get(space) is waiting:
                del self._awaited[space]

    def _wake(self, space: str, seq: int) -> None:
        for wanted, waiter in self._awaited.get(space, ()):
            if wanted <= seq and not waiter.done():
                waiter.set_result(None)


class NodeDelivery:
    """The node as the backplane's :class:`~hub.cluster.backplane.DeliveryHandler`."""

    def __init__(
        self,
        registry: Registry[Any],
        fan_out: FanOut,
        gaps: GapFiller,
        *,
        on_ready: Callable[[bool], None],
        on_node_message: Callable[[bytes], None],
        on_signal: Callable[[Delivery], None],
    ):
        self._registry = registry
        self._fan_out = fan_out
        self._gaps = gaps
        self._on_ready = on_ready
        self._on_node_message = on_node_message
        self._on_signal = on_signal

    def deliver(self, message: Delivery) -> None:
        if message.op is _SIGNAL:
            # A note between nodes about a stream's receivers, never a frame
            # for members; answered even while the node is leaving the space.
            self._on_signal(message)
            return
        if not self._registry.has_space(message.space):
            return
        gaps = self._gaps
        if gaps.filling and gaps.defer(message):
            return  # after the missed messages being filled in
        self._fan_out(message)

    def backplane_ready(self, ready: bool) -> None:
        self._on_ready(ready)

    def node_message(self, payload: bytes) -> None:
        self._on_node_message(payload)

    def missed(self, space: str, after: int, upto: int) -> None:
        self._gaps.missed(space, after, upto)

    def lost(self, space: str) -> None:
        self._gaps.lost(space)

    def take_space_events(self) -> dict[str, int] | None:
        """Events per space since the last call; ``None``: not counted."""
        return None


class CountingDelivery(NodeDelivery):
    """:class:`NodeDelivery` that also counts events per local space."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._events: dict[str, int] = {}

    def deliver(self, message: Delivery) -> None:
        space = message.space
        if self._registry.has_space(space):
            events = self._events
            events[space] = events.get(space, 0) + 1
        super().deliver(message)

    def take_space_events(self) -> dict[str, int] | None:
        events, self._events = self._events, {}
        return events
