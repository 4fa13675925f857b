"""The backplane interface: sequenced publish, unsequenced send, subscribe, history.

Every message for a space goes through the backplane, even on a single node,
so that all members everywhere see one order. A sequenced publish assigns the
space's next ``seq`` and completes the frame (``head + seq + tail``) in one
atomic step; the finished bytes are what every node hands to its members.

The same step records the message in the space's bounded *history* (at most
``history_size`` messages, dropped ``history_ttl`` seconds after the last
publish) under the space's *epoch*: a name that changes whenever the history
may have been lost, so that a (space, epoch) pair never gives one seq to two
different messages. A publish may carry an idempotency key (:class:`Once`): a
second publish with the key within ``history_ttl`` is not carried out and
returns the first one's ids (:class:`Duplicate`).
"""

from __future__ import annotations

import asyncio
from dataclasses import KW_ONLY, dataclass
from typing import Protocol

from hub.core.stream_audiences import StreamOp

__all__ = [
    "Backplane",
    "Delivery",
    "DeliveryHandler",
    "Draft",
    "Duplicate",
    "History",
    "Once",
    "Position",
    "SpaceHistory",
    "StreamOp",
    "complete_streams",
]


@dataclass(frozen=True, slots=True)
class Once:
    """An idempotent publish: ``key`` (already scoped to the publishing agent)
    and what a retry is answered with."""

    key: str
    event_id: str
    timestamp: int
    digest: str  # of what was published: a retry with other data is refused
    #: Record this message's seq as the receipt without checking the key: the
    #: done of a publish the hub streamed (its first delta claimed the key), so a
    #: retry is answered with the seq the original's acknowledgement carried.
    settle: bool = False


class Duplicate(int):
    """What a publish returns when its :class:`Once` key was used before: the
    original's seq (an int), with its ``event_id``, ``timestamp`` and ``digest``."""

    event_id: str
    timestamp: int
    digest: str

    def __new__(cls, seq: int, event_id: str, timestamp: int, digest: str) -> Duplicate:
        self = super().__new__(cls, seq)
        self.event_id = event_id
        self.timestamp = timestamp
        self.digest = digest
        return self

    @classmethod
    def parse(cls, record: bytes | str) -> Duplicate:
        """From ``"{seq} {timestamp} {digest} {event_id}"``."""
        text = record.decode() if isinstance(record, bytes) else record
        seq, ts, digest, event_id = text.split(" ", 3)
        return cls(int(seq), event_id, int(ts), digest)


@dataclass(frozen=True, slots=True)
class Draft:
    """A message waiting for its ``seq``."""

    head: bytes
    tail: bytes
    _: KW_ONLY
    exclude: str | None = None  # agent id that must not receive it (echo off)
    stream: str | None = None
    op: StreamOp = StreamOp.NONE
    to: tuple[str, ...] | None = None  # addressed publish: only these agents receive it
    once: Once | None = None  # idempotent publish


@dataclass(frozen=True, slots=True)
class Delivery:
    """A finished message as every node receives it: the frame's bytes (seq included) and
    who gets it (``exclude``, ``to``, a stream's id and op)."""

    space: str
    frame: bytes
    seq: int | None = None
    exclude: str | None = None
    stream: str | None = None
    op: StreamOp = StreamOp.NONE
    to: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Position:
    """Where a space is: its history epoch and its last seq (0: nothing yet)."""

    epoch: str
    seq: int


@dataclass(frozen=True, slots=True)
class History:
    """One read of a space's history, taken atomically with its position."""

    epoch: str
    seq: int  # the space's last seq when read
    events: list[Delivery]  # oldest first
    oldest: int | None  # oldest seq the history still holds; None when it is empty
    #: With ``streams=True``: the streams whose first frame and ``done`` both lie
    #: in ``(after, seq]`` (cancelled and unfinished ones are not complete).
    complete: frozenset[str] = frozenset()

    @property
    def position(self) -> Position:
        return Position(self.epoch, self.seq)


_DONE = b'{"type":"space.event.done"'
_CANCEL = b'{"type":"space.event.cancel"'


def is_done(message: Delivery) -> bool:
    """A stream's last frame that completes it (not a cancel)."""
    return message.op is StreamOp.END and message.frame.startswith(_DONE)


def is_cancel(message: Delivery) -> bool:
    """A stream's last frame that cancels it."""
    return message.op is StreamOp.END and message.frame.startswith(_CANCEL)


def complete_streams(events: list[Delivery]) -> frozenset[str]:
    """Streams that both open and complete (``done``) within ``events``."""
    opened: set[str] = set()
    done: set[str] = set()
    for env in events:
        if env.stream is None:
            continue
        if env.op is StreamOp.OPEN:
            opened.add(env.stream)
        elif env.stream in opened and is_done(env):
            done.add(env.stream)
    return frozenset(done)


class DeliveryHandler(Protocol):
    """What a node gives the backplane: where incoming messages are pushed."""

    def deliver(self, message: Delivery) -> None: ...

    def backplane_ready(self, ready: bool) -> None: ...

    def node_message(self, payload: bytes) -> None:
        """A message another node sent to this one (``send_to_node``)."""
        ...

    def missed(self, space: str, after: int, upto: int) -> None:
        """The space's messages with ``after < seq < upto`` never reached this
        node (its link was down); called before the message ``upto`` is
        delivered. They may still be in the history."""
        ...

    def lost(self, space: str) -> None:
        """The space's epoch changed under this node's members (Redis failed
        over, or came back behind): what they received may be gone from its
        history, so they cannot just carry on — they must resume."""
        ...


class Broker(Protocol):
    """Carries space messages to every subscribed node: sequenced publishes
    (one seq per space, cluster-wide), unsequenced sends, node messages."""

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

    async def send(self, message: Delivery) -> int:
        """Deliver an unsequenced message (membership changes, stream signals)
        to every node subscribed to its space; returns how many it reached."""
        ...

    async def send_to_node(self, node_id: str, payload: bytes) -> int:
        """Deliver ``payload`` to one node's ``node_message`` (at most once).

        Returns how many subscribers took it: 0 means that node is gone.
        """
        ...


class Channels(Protocol):
    """Which spaces' messages reach this node, and how far they have come."""

    async def subscribe(self, space: str) -> None:
        """Start receiving the space's messages; raises BackplaneUnavailable."""
        ...

    async def unsubscribe(self, space: str) -> None: ...

    def delivered(self, space: str) -> int:
        """The highest seq of ``space`` this node has handed to its delivery
        handler (0 when none yet)."""
        ...


class SpaceHistory(Protocol):
    """Each space's position (epoch, last seq) and bounded recorded history."""

    async def position(self, space: str) -> Position:
        """The space's epoch and last seq (an epoch is made if it has none)."""
        ...

    async def history(
        self,
        space: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int,
        streams: bool = False,
    ) -> History:
        """Recorded messages of ``space``, oldest first: the first ``limit``
        with a seq above ``after``, or else the newest ``limit`` below
        ``before`` (or the newest of all). ``streams`` (with ``after``) also
        finds the streams complete in ``(after, seq]``. Raises
        BackplaneUnavailable."""
        ...

    async def forget(self, space: str) -> None:
        """The space has no members left. Its seq, epoch and history stay (a
        client may resume); they expire as documented for each backplane."""
        ...


class Backplane(Broker, Channels, SpaceHistory, Protocol):
    """The three, as one backplane implements them (memory or Redis), with its
    link's state and lifecycle. Callers type on the part they use."""

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
