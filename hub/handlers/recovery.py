"""Joining a space where one left off, and reading a space's history.

**Resume.** ``space.join`` with ``since: {seq, epoch}`` replays every event
published after ``seq`` that the member would have received, in order, then
goes live — with no gap and no duplicate at the boundary even while publishes
race the join:

1. The member joins the node's fan-out at once, but its live frames (of every
   space: a connection's frames never overtake each other) go to a
   :class:`ReplayBuffer` instead of its outbox.
2. The history after ``seq`` is read, atomically with the space's epoch and
   last seq ``L``. It is recoverable when the epoch is the same and the
   history still holds ``seq + 1`` (or nothing was published since).
3. ``space.joined`` goes out with ``epoch``, ``seq = L`` and ``recovered``,
   then the recorded events ``seq+1 … L`` — paged, and paced by the
   connection's transport instead of overflowing its outbox.
4. The buffered frames are released: those of the space up to ``L`` were just
   replayed and are dropped, the rest follow in arrival order.

What the member receives in the replay obeys the live rules: addressed
events only to their recipients, no echo to a publisher that asked for none,
and a stream only when it is *complete* inside the window (opened after
``seq``, ended with a done by ``L``) — unfinished and cancelled streams are
skipped, live continuations of them too. A replay that cannot finish (the
history was trimmed or lost meanwhile, Redis failed) closes the connection
with an error: the client resumes again and learns ``recovered: false``.
A member whose connection closed meanwhile is sent nothing and no further
page of history is read for it.

**History.** ``space.history`` answers a member with the newest recorded
frames of the space (before ``before_seq``), filtered by the same rules,
bounded in count (``limit`` ≤ 100) and bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from hub.cluster.backplane import Backplane, Delivery, History
from hub.cluster.backplane.base import is_cancel
from hub.cluster.subscriptions import Subscriptions
from hub.config.settings import Settings
from hub.core.actions import ReadHistory
from hub.core.frames import OutFrame
from hub.core.peer import Peer
from hub.core.registry import Registry
from hub.core.stream_audiences import StreamOp
from protocol import codec
from protocol.errors import CloseCode, ErrorCode
from protocol.messages import Since

# Recorded messages read per round trip while replaying.
PAGE = 100
# Bytes a replay lets pile up for one connection before waiting for it to drain.
PACE_BYTES = 256 * 1024

#: Builds ``space.joined`` from the position (``epoch``, ``seq``, ``recovered``);
#: awaited once the joiner is in the fan-out, so what it reads (the members)
#: is no older than anything the joiner receives after it.
Reply = Callable[..., Awaitable[bytes]]


class ReplayFailed(Exception):
    """The replay could not be completed; the connection is closed with this."""

    def __init__(self, code: CloseCode, error: ErrorCode, reason: str):
        super().__init__(reason)
        self.code, self.error, self.reason = code, error, reason


class ReplayBuffer:
    """A member's live frames, buffered while its replay is read and sent.

    The registry routes the member's frames here (:meth:`Registry.route`), so
    nothing else pays for it. :meth:`release` delivers what ``keep`` accepts
    and goes on filtering new frames through ``keep`` until ``settled()`` —
    until this node has delivered everything up to the member's position
    (Redis may still be bringing older messages) — then routes the member's
    frames back where they went before.
    """

    def __init__(self, registry: Registry[Any], member: Peer, limit: int, space: str = ""):
        self.registry = registry
        self.member = member
        self.limit = limit
        #: The space joined (a later join of it retires this buffer's filter).
        self.space = space
        self.frames: list[OutFrame] = []
        self.size = 0
        self.overflowed = False
        if space:
            _retire(registry, member, space)
        #: Where the member's frames went before (its own ``push``, or an
        #: earlier buffer still filtering), and where buffered ones go out.
        self.direct: Callable[[OutFrame], bool] = registry.route_of(member)
        self._keep: Callable[[OutFrame], bool] | None = None
        self._settled: Callable[[], bool] | None = None
        registry.route(member, self.push)

    def push(self, frame: OutFrame) -> bool:
        if self.overflowed:
            return False
        self.frames.append(frame)
        self.size += len(frame.payload)
        if self.size > self.limit:
            self.overflowed = True
        return True

    def release(
        self,
        keep: Callable[[OutFrame], bool] | None = None,
        settled: Callable[[], bool] | None = None,
    ) -> None:
        """Deliver the buffered frames ``keep`` accepts, in order; go live."""
        frames, self.frames = self.frames, []
        direct = self.direct
        for frame in frames:
            if keep is None or keep(frame):
                direct(frame)
        if keep is None or settled is None or settled():
            self._restore()
            return
        self._keep, self._settled = keep, settled
        self.registry.route(self.member, self._filter)

    def _filter(self, frame: OutFrame) -> bool:
        assert self._keep is not None and self._settled is not None
        delivered = self.direct(frame) if self._keep(frame) else True
        if self._settled():
            self._restore()
        return delivered

    def _restore(self) -> None:
        if self.registry.route_of(self.member) not in (self.push, self._filter):
            return  # a later buffer wraps this one: it routes back to this one
        self.registry.route(self.member, self.direct)


def _retire(registry: Registry[Any], member: Peer, space: str) -> None:
    """Take out of ``member``'s route the filter an earlier join of ``space``
    left (it filters until this node has delivered up to that join's position,
    which in a quiet space may never happen): the member left and joins again,
    and that old boundary must not hold back what the new join sends — its
    ``space.joined`` (seq ≤ the old boundary) or a replay from before it."""
    parent: ReplayBuffer | None = None
    route = registry.route_of(member)
    while isinstance(owner := getattr(route, "__self__", None), ReplayBuffer):
        if route != owner._filter:
            return  # still buffering (a join under way holds the member's lock)
        if owner.space == space:
            if parent is None:
                registry.route(member, owner.direct)
            else:
                parent.direct = owner.direct
            return
        parent, route = owner, owner.direct


class Recovery:
    """Resume on join, and ``space.history`` (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry[Any],
        backplane: Backplane,
        subscriptions: Subscriptions,
        *,
        filling: Callable[[str], bool],
    ):
        self.settings = settings
        self.registry = registry
        self.backplane = backplane
        self.subscriptions = subscriptions
        #: Whether the node is filling a gap in a space (:mod:`hub.handlers.gaps`).
        self.filling = filling
        # One lock per member while a join of it runs or waits, then dropped: a
        # weak dictionary kept a weakref and a lock per connection for its life.
        self._locks: dict[Any, _MemberLock] = {}

    async def position(self, space: str) -> dict[str, Any]:
        """``epoch`` and ``seq`` for ``space.joined``."""
        pos = await self.backplane.position(space)
        return {"epoch": pos.epoch, "seq": pos.seq}

    async def join(
        self,
        conn: Peer,
        space: str,
        since: Since | None,
        reply: Reply,
        listed: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Make ``conn`` a local member of ``space``: send ``await
        reply(**position)`` (``space.joined``), replay after ``since``, go live.

        The member receives exactly the events after the ``seq`` in its
        ``space.joined``: the position is read after it joined the fan-out,
        and what arrived meanwhile up to that seq is not passed on.
        ``listed`` (the members read) runs in between: once the member is in
        the fan-out, before the position — so whoever publishes after the
        position was a member when they were read, or joined after it (and
        its join is told to the member after the reply; contract §21).

        Raises (with nothing changed here) only before ``space.joined`` is
        sent; a replay that fails afterwards closes the connection instead.
        """
        entry = self._locks.get(conn)
        if entry is None:
            entry = self._locks[conn] = _MemberLock()
        entry.users += 1
        try:
            async with entry.lock:  # one replay buffer per member at a time
                await self._join(conn, space, since, reply, listed)
        finally:
            entry.users -= 1
            if not entry.users:
                del self._locks[conn]

    async def _join(
        self,
        conn: Peer,
        space: str,
        since: Since | None,
        reply: Reply,
        listed: Callable[[], Awaitable[None]] | None,
    ) -> None:
        session = conn.session
        assert session is not None
        buffer = ReplayBuffer(self.registry, conn, self.settings.outbox_max_bytes, space)
        self.registry.join(space, conn)
        session.on_joined(space)
        try:
            if listed is not None:
                await listed()
            if since is None:
                position = await self.backplane.position(space)
                joined = await reply(epoch=position.epoch, seq=position.seq)
            else:
                first = await self.backplane.history(
                    space, after=since.seq, limit=PAGE, streams=True
                )
                position = first.position
                recovered = _recoverable(first, since)
                joined = await reply(epoch=first.epoch, seq=first.seq, recovered=recovered)
        except BaseException:
            buffer.release()
            session.on_left(space)
            if self.registry.leave(space, conn):
                self.subscriptions.release(space)
            raise
        if conn.closing:
            # Gone while its position was read (its client gave up): no reply
            # to send, no replay to read. Its clean-up leaves the space.
            buffer.release()
            return
        boundary = Boundary(self.registry, conn, space, position.seq)

        def settled() -> bool:
            # Everything up to the position has reached this node's members.
            seq = position.seq
            return self.backplane.delivered(space) >= seq and not self.filling(space)

        _send(buffer, joined)
        if since is None:
            buffer.release(boundary.keep, settled)
            return
        if not recovered or since.seq == first.seq:
            # Not recoverable, or nothing missed: there is nothing to replay.
            buffer.release(boundary.keep, settled)
            return
        replay = Replay(self, conn, buffer, space, since, first, boundary)
        try:
            await replay.run()
        except _Gone:
            buffer.release()
            return
        except ReplayFailed as exc:
            # Not silent: the client resumes again and is told what it lost.
            conn.close_for(exc.code, exc.error, exc.reason)
            buffer.release()
            return
        except BaseException:
            buffer.release()
            raise
        buffer.release(boundary.keep, settled)

    async def history(self, conn: Peer, a: ReadHistory) -> None:
        """Answer ``space.history``: the newest frames ``conn`` would have received."""
        found = await self.backplane.history(a.space, before=a.before_seq, limit=a.limit)
        budget = self.settings.max_frame_bytes  # about one largest frame (at least one event)
        agent = conn.agent_id
        frames: list[bytes] = []
        size = 0
        oldest = None  # oldest entry looked at
        for env in reversed(found.events):
            if frames and size + len(env.frame) > budget:
                break
            oldest = env.seq
            if visible(env, agent):
                frames.append(env.frame)
                size += len(env.frame) + 1
        frames.reverse()
        more = oldest is not None and found.oldest is not None and oldest > found.oldest
        next_before = oldest if more else None
        conn.send_frame(
            codec.history(a.request_id, a.space, found.epoch, found.seq, frames, next_before)
        )


class _MemberLock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


def visible(env: Delivery, agent: str) -> bool:
    """Would ``agent`` have received this recorded frame (ignoring stream audiences)?"""
    if env.to is not None and agent not in env.to:
        return False
    if env.exclude != agent:
        return True
    # A publisher's own stream's cancel is sent to it apart from the fan-out
    # (its acknowledgement, even with echo off): it did receive it.
    return is_cancel(env)


def _recoverable(first: History, since: Since) -> bool:
    if first.epoch != since.epoch or since.seq > first.seq:
        return False
    if since.seq == first.seq:
        return True
    return bool(first.events) and first.events[0].seq == since.seq + 1


def _send(buffer: ReplayBuffer, payload: bytes) -> None:
    """A frame for the member only, ahead of what is buffered."""
    buffer.direct(OutFrame(payload, preframe=buffer.member.preframed))


def _lost(space: str, how: str) -> ReplayFailed:
    return ReplayFailed(
        CloseCode.TRY_AGAIN_LATER,
        ErrorCode.UNAVAILABLE,
        f"history of {space!r} was {how} during the replay: resume again",
    )


class _Gone(Exception):
    """The connection closed during the replay."""


class Replay:
    """One member's replay of ``(since, first.seq]``."""

    def __init__(
        self,
        recovery: Recovery,
        conn: Peer,
        buffer: ReplayBuffer,
        space: str,
        since: Since,
        first: History,
        boundary: Boundary,
    ):
        self.recovery = recovery
        self.conn = conn
        self.buffer = buffer
        self.space = space
        self.epoch = since.epoch
        self.end = first.seq
        self.first = first
        self.next = since.seq + 1
        self.complete = first.complete
        # Streams of the window this member gets, and those it does not.
        self.receiving: set[str] = set()
        self.skipped = boundary.skipped
        limit = recovery.settings.outbox_max_bytes
        self.pace = min(PACE_BYTES, limit // 4)
        self.drain_timeout = recovery.settings.heartbeat_timeout
        self.preframe = conn.preframed

    async def run(self) -> None:
        page = self.first
        while True:
            for env in page.events:
                if env.seq is not None and env.seq > self.end:
                    return  # published after the join: it arrives live
                if env.seq != self.next:
                    raise _lost(self.space, "trimmed")
                self.next += 1
                if self._wanted(env):
                    await self._paced()
                    self.buffer.direct(OutFrame(env.frame, self.preframe))
            if self.next > self.end:
                return
            if self.conn.closing:
                raise _Gone  # no page is read for a connection that is gone
            try:
                page = await self.recovery.backplane.history(
                    self.space, after=self.next - 1, limit=PAGE
                )
            except Exception as exc:
                raise ReplayFailed(
                    CloseCode.TRY_AGAIN_LATER, ErrorCode.UNAVAILABLE, f"replay failed: {exc}"
                ) from exc
            if page.epoch != self.epoch or not page.events:
                raise _lost(self.space, "lost")

    def _wanted(self, env: Delivery) -> bool:
        stream = env.stream
        if stream is None:
            return visible(env, self.conn.agent_id)
        if stream not in self.complete:
            self.skipped.add(stream)
            return False
        if env.op is StreamOp.OPEN:
            if visible(env, self.conn.agent_id):
                self.receiving.add(stream)
                return True
            return False
        return stream in self.receiving and env.exclude != self.conn.agent_id

    async def _paced(self) -> None:
        """Wait while the connection has more than ``pace`` bytes to send."""
        if self.buffer.overflowed:
            raise ReplayFailed(
                CloseCode.SLOW_CONSUMER,
                ErrorCode.SLOW_CONSUMER,
                "live events piled up over the outbound limit during the replay",
            )
        conn = self.conn
        if conn.backlog() <= self.pace:
            return  # a virtual member's backlog is 0: its own queue is bounded
        try:
            async with asyncio.timeout(self.drain_timeout):
                while True:
                    if conn.closing:
                        raise _Gone
                    await asyncio.sleep(0)  # the flusher writes what is pending
                    if conn.backlog() <= self.pace:
                        return
                    try:
                        await conn.drain()
                    except Exception:
                        raise _Gone from None
        except TimeoutError:
            raise ReplayFailed(
                CloseCode.SLOW_CONSUMER,
                ErrorCode.SLOW_CONSUMER,
                f"replay not read for {self.drain_timeout:g} s",
            ) from None


class Boundary:
    """Which buffered frames a member gets once it goes live after ``seq``.

    Frames of the space up to ``seq`` are dropped (replayed, or before the
    member's position), and so is the rest of every stream that had a frame
    dropped or skipped: a member gets a stream whole or not at all.
    """

    def __init__(self, registry: Registry[Any], conn: Peer, space: str, seq: int):
        self.registry = registry
        self.conn = conn
        self.space = space
        self.seq = seq
        self.skipped: set[str] = set()
        self._marker = b'"space":' + orjson.dumps(space)

    def keep(self, frame: OutFrame) -> bool:
        payload = frame.payload
        if payload.find(self._marker, 0, 64 + len(self._marker)) < 0:
            return True  # another space's
        try:
            msg = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return True
        if msg.get("space") != self.space:
            return True
        event_id = msg.get("event_id")
        streamed = msg.get("type") != "space.event" and isinstance(event_id, str)
        seq = msg.get("seq")
        if isinstance(seq, int) and seq <= self.seq:
            if streamed:
                self._skip(event_id)
            return False
        if streamed and event_id in self.skipped:
            self._skip(event_id)
            return False
        return True

    def _skip(self, stream: str) -> None:
        self.skipped.add(stream)
        # Not a receiver cancel: the member joined past the stream's start.
        self.registry.stop_receiving(self.conn, stream, self.space, report=False)
