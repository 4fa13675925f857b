"""Publishing and streaming: what a publish, a delta, a done or a cancel does.

A publish reads top to bottom in :meth:`Publishing.publish`: *validate* (a
signed envelope verified, ``data.from`` filled in, an addressed publish's
recipients checked), *sequence* (its event id and timestamp, an envelope's id
recorded against replays, an idempotency key), *fan out* (the event encoded
once, as a head and a tail around the ``seq`` to come —
:func:`protocol.codec.sequenced` — and queued on the backplane, which numbers
it and delivers the finished bytes to every node, whose registry hands them to
each member of the audience unchanged) and *acknowledge* (the echo, or
``space.published`` once the seq is known). Text too big for one event takes
the same steps as a stream of deltas and a done. :mod:`protocol.codec` only
encodes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from hub.cluster.backplane import Broker, Draft, Duplicate, Once, StreamOp, idempotency
from hub.cluster.presence import Memberships
from hub.config.settings import Settings
from hub.core.actions import Publish, ReceiverCancel, StreamCancel, StreamDelta, StreamDone
from hub.core.counters import Counters
from hub.core.ids import Ids
from hub.core.peer import Peer
from hub.core.registry import Registry
from hub.errors import BackplaneUnavailable
from hub.handlers.dispatch import ErrorSender
from hub.handlers.envelope_check import EnvelopeCheck
from protocol import codec
from protocol.envelope import is_envelope
from protocol.errors import ErrorCode, ProtocolError

# Publishes a connection may leave queued on the backplane without waiting
# for their seq; beyond it the connection waits (backpressure).
MAX_UNAWAITED = 1024
#: How long a leave waits for the leaver's last publish there to come back
#: from the backplane (its echo before ``space.left``); seconds.
ECHO_WAIT = 5.0


class Publishing:
    def __init__(
        self,
        settings: Settings,
        backplane: Broker,
        presence: Memberships,
        registry: Registry[Any],
        ids: Ids,
        counters: Counters,
        send_error: ErrorSender,
        envelopes: EnvelopeCheck | None = None,
        reached: Callable[[str, int, float], Awaitable[None]] | None = None,
    ):
        self.settings = settings
        #: Returns once this node fanned out a space's seq (a backplane that
        #: delivers later than it answers: Redis); None: delivered at once.
        self._reached = reached
        self.backplane = backplane
        self.presence = presence
        self.registry = registry
        self.ids = ids
        self.counters = counters
        self.send_error = send_error
        #: Signed envelopes (see :mod:`hub.handlers.envelope_check`); None: relayed as any data.
        self.envelopes = envelopes
        self._signed_spaces = envelopes.signed_spaces if envelopes else frozenset()
        self._forgetting: set[asyncio.Task[None]] = set()

    async def publish(self, conn: Peer, a: Publish) -> None:
        agent = conn.agent_id
        data = a.data
        # Validate. A signed envelope is all or nothing: verified here,
        # recorded against replays once addressed; never streamed, never
        # modified (``data`` goes out exactly as signed).
        check = self.envelopes
        if check is not None and not (a.space in self._signed_spaces or is_envelope(data)):
            check = None
        stamp: dict[str, Any] | None = None
        verified: Any = None
        if check is not None:
            stamp, verified = check.check(a.space, data, a.request_id)
        elif "from" not in data:
            data["from"] = agent
        audience = await self._audience(a, agent)
        if check is None:
            text = data.get("text")
            threshold = self.settings.stream_threshold
            if type(text) is str and len(text) * 4 > threshold and len(text.encode()) > threshold:
                await self._publish_streamed(conn, a, text, audience)
                return

        # Sequence: the event's id and time; an envelope's id recorded (a
        # replay fails here), a retry's key claimed with the event.
        if check is not None and verified is not None:
            await check.record(verified, a.request_id)
        event_id = self.ids.event_id()
        ts = codec.now_ms()
        once = None
        if a.idempotency_key is not None and check is None:
            once = idempotency.once(agent, a.idempotency_key, event_id, ts, [data, a.to_field])

        # Fan out: encoded once, its seq to come; the backplane numbers it
        # and delivers the same bytes to every node.
        rest: dict[str, Any] = {"from": agent, "timestamp": ts, "data": data}
        if stamp:
            rest.update(stamp)
        if audience is not None:
            rest["to"] = a.to_field
        head, tail = codec.sequenced(
            "space.event", a.space, event_id, rest, request_id=a.request_id
        )
        draft = Draft(head, tail, exclude=None if a.echo else agent, to=audience, once=once)
        pending = self.backplane.publish_nowait(a.space, draft)
        self.counters.published += 1  # taken back below if it was not published
        if a.echo and self._reached is not None:
            self._echo_on_its_way(conn, a.space, pending)
        if check is not None and verified is not None:
            # Refused by the backplane: its id is forgotten, it may come again.
            pending.add_done_callback(functools.partial(self._unrecord, check, verified))

        # Acknowledge: a retry with the original's ids; else the echo (the
        # publisher's next message needn't wait for Redis, a failure is still
        # reported), or ``space.published`` once the seq is known.
        try:
            if once is not None and self._duplicate(conn, a, await pending, once):
                self.counters.published -= 1  # a retry: nothing was published
                return
            if a.echo:
                await self._unless_queued(conn, pending, a.request_id, counted=True)
                return
            seq = await pending
        except BackplaneUnavailable:
            self.counters.published -= 1  # refused: nothing was published
            raise
        conn.send_frame(codec.published(a.request_id, a.space, event_id, seq, ts))

    def _echo_on_its_way(self, conn: Peer, space: str, pending: asyncio.Future[int] | int) -> None:
        """``conn``'s publish in ``space`` (its seq, or to come) comes back to
        it through the backplane: a leave waits for it (:meth:`settled`)."""
        session = conn.session
        if session is None:
            return
        echoes = session.echoes
        if echoes is None:
            echoes = session.echoes = {}
        echoes[space] = pending

    async def settled(self, conn: Peer, space: str) -> None:
        """Before ``conn`` leaves ``space``: its last publish there has come
        back from the backplane and was fanned out here, its echo included —
        the echo is the publisher's acknowledgement, and once the agent has
        left nothing of the space reaches it (contract §4; its messages are
        handled in order). At most :data:`ECHO_WAIT` seconds."""
        session = conn.session
        echoes = None if session is None else session.echoes
        if not echoes or self._reached is None:
            return
        pending = echoes.pop(space, None)
        if pending is None:
            return
        try:
            seq = pending if isinstance(pending, int) else await asyncio.shield(pending)
        except Exception:
            return  # refused: the publisher was told (UNAVAILABLE)
        if not isinstance(seq, Duplicate):  # a retry: nothing new comes back
            await self._reached(space, seq, ECHO_WAIT)

    def _unrecord(self, check: EnvelopeCheck, verified: Any, pending: asyncio.Future[int]) -> None:
        """The backplane refused a verified envelope: forget its id, so the
        sender may send it again (it was never delivered)."""
        if not pending.cancelled() and pending.exception() is None:
            return
        task = asyncio.get_running_loop().create_task(check.forget(verified))
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    async def _unless_queued(
        self,
        conn: Peer,
        pending: asyncio.Future[int],
        request_id: str | int | None,
        *,
        counted: bool = False,
    ) -> None:
        """Await a publish only if it is already settled or the backlog is long.
        ``counted``: it is in ``published``, taken back if it fails later."""
        if pending.done() or self.backplane.backlog > MAX_UNAWAITED:
            await pending  # BackplaneUnavailable becomes an UNAVAILABLE answer
        else:
            pending.add_done_callback(functools.partial(self._report, conn, request_id, counted))

    async def _audience(self, a: Publish, agent: str) -> tuple[str, ...] | None:
        """Who receives an addressed publish: the recipients, all members of
        the space (checked cluster-wide), plus the sender's echo."""
        if a.to is None:
            return None
        missing = await self.presence.missing_members(a.space, a.to)
        if missing:
            raise _not_members(a.space, missing, a.request_id)
        if a.echo and agent not in a.to:
            return (*a.to, agent)
        return a.to

    def _duplicate(self, conn: Peer, a: Publish, seq: int, once: Once) -> bool:
        """Answer a retry (the backplane found its key) with the original's ids."""
        if not isinstance(seq, Duplicate):
            return False
        if seq.digest != once.digest:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"idempotency_key {a.idempotency_key!r} was used for a different publish "
                f"(event {seq.event_id})",
                a.request_id,
            )
        conn.send_frame(
            codec.published(a.request_id, a.space, seq.event_id, seq, seq.timestamp, True)
        )
        return True

    def _report(
        self,
        conn: Peer,
        request_id: str | int | None,
        counted: bool,
        pending: asyncio.Future[int],
    ) -> None:
        if pending.cancelled() or pending.exception() is None:
            return
        self.counters.backplane_errors += 1
        if counted:
            self.counters.published -= 1  # refused: nothing was published
        if not conn.closing:
            self.send_error(
                conn,
                ErrorCode.UNAVAILABLE,
                f"{pending.exception()}: request not carried out",
                request_id,
            )

    async def _publish_streamed(
        self, conn: Peer, a: Publish, text: str, audience: tuple[str, ...] | None
    ) -> None:
        """A publish too big for one event goes out as deltas and a done."""
        agent = conn.agent_id
        stream_id = f"{agent}/{self.ids.event_id()}"
        exclude = None if a.echo or audience is not None else agent
        ts = codec.now_ms()
        once = None  # claimed by the first delta
        if a.idempotency_key is not None:
            once = idempotency.once(agent, a.idempotency_key, stream_id, ts, [a.data, a.to_field])
        first = {k: v for k, v in a.data.items() if k != "text"}
        for i, chunk in enumerate(split_utf8(text, self.settings.stream_chunk)):
            data = {**first, "text": chunk} if i == 0 else {"text": chunk}
            rest = {"from": agent, "timestamp": ts, "data": data}
            if i == 0 and audience is not None:
                rest["to"] = a.to_field
            head, tail = codec.sequenced("space.event.delta", a.space, stream_id, rest)
            draft = Draft(
                head, tail, exclude=exclude, stream=stream_id, to=audience,
                op=StreamOp.OPEN if i == 0 else StreamOp.DELTA, once=once if i == 0 else None,
            )  # fmt: skip
            seq = await self.backplane.publish(a.space, draft)
            if i == 0 and once is not None and self._duplicate(conn, a, seq, once):
                return
        head, tail = codec.sequenced(
            "space.event.done", a.space, stream_id, {"from": agent, "timestamp": ts},
            request_id=a.request_id,
        )  # fmt: skip
        # ``to`` on the done too: history readers get the routing of every frame.
        # The done's seq is the acknowledgement's: a retry is answered with it too.
        settle = None if once is None else dataclasses.replace(once, settle=True)
        draft = Draft(
            head, tail, exclude=exclude, stream=stream_id, op=StreamOp.END, to=audience,
            once=settle,
        )  # fmt: skip
        seq = await self.backplane.publish(a.space, draft)
        self.counters.published += 1
        if not a.echo:
            conn.send_frame(codec.published(a.request_id, a.space, stream_id, seq, ts))
        elif self._reached is not None:
            self._echo_on_its_way(conn, a.space, seq)

    async def stream_delta(self, conn: Peer, a: StreamDelta) -> None:
        """A client stream's delta. An addressed stream (``to`` on its first
        delta) has every frame routed to, and recorded for, its audience only."""
        agent = conn.agent_id
        data = a.data
        rest = {"from": agent, "timestamp": codec.now_ms(), "data": data}
        if a.first:
            if "from" not in data:
                data["from"] = agent
            if a.to is not None:
                await self._stream_recipients(conn, a, a.to)
                rest["to"] = a.to_field
        head, tail = codec.sequenced("space.event.delta", a.space, a.stream_id, rest)
        op = StreamOp.OPEN if a.first else StreamOp.DELTA
        exclude = None if a.echo else agent
        pending = self.backplane.publish_nowait(
            a.space, Draft(head, tail, exclude=exclude, stream=a.stream_id, op=op, to=a.to)
        )
        if not a.first:
            await self._unless_queued(conn, pending, a.request_id)
            return
        # A stream opens only once its first delta is carried out: refused
        # (UNAVAILABLE), it is not open, and the same delta may open it again —
        # the next frames of the connection must not see it half-open.
        try:
            await pending
        except BackplaneUnavailable:
            if conn.session is not None:
                conn.session.stream_not_opened(a.stream_id)
            raise

    async def _stream_recipients(self, conn: Peer, a: StreamDelta, to: tuple[str, ...]) -> None:
        """The recipients an addressed stream's first delta names must all be
        members of the space (checked cluster-wide), as for an addressed
        publish; otherwise the stream is refused and stays closed."""
        named = tuple(r for r in to if r != conn.agent_id)
        missing = await self.presence.missing_members(a.space, named) if named else []
        if missing:
            if conn.session is not None:
                conn.session.stream_refused(a.stream_id)
            raise _not_members(a.space, missing, a.request_id)

    async def stream_done(self, conn: Peer, a: StreamDone) -> None:
        head, tail = codec.sequenced(
            "space.event.done", a.space, a.stream_id,
            {"from": conn.agent_id, "timestamp": codec.now_ms()}, request_id=a.request_id,
        )  # fmt: skip
        draft = Draft(head, tail, stream=a.stream_id, op=StreamOp.END, to=a.to)
        seq = await self.backplane.publish(a.space, draft)
        self.counters.published += 1
        if self._reached is not None:  # the done is the producer's acknowledgement too
            self._echo_on_its_way(conn, a.space, seq)

    async def stream_cancel(self, conn: Peer, a: StreamCancel) -> None:
        """End a publisher's stream early; the publisher always hears of it."""
        agent = conn.agent_id
        rest = {"from": agent, "timestamp": codec.now_ms(), "reason": a.reason}
        head, tail = codec.sequenced(
            "space.event.cancel", a.space, a.stream_id, rest, request_id=a.request_id
        )
        draft = Draft(head, tail, exclude=agent, stream=a.stream_id, op=StreamOp.END, to=a.to)
        seq = await self.backplane.publish(a.space, draft)
        if not conn.closing:
            conn.send_frame(codec.complete(head, seq, tail))

    async def end_unheard(self, conn: Peer, a: StreamCancel) -> None:
        """End a stream nobody receives any more (hub/handlers/stream_stops.py):
        its cancel goes to whoever still holds a copy — the publisher's own
        echo — and into history, like a hub cancel. The publisher itself was
        told with its own id."""
        rest = {"from": conn.agent_id, "timestamp": codec.now_ms(), "reason": a.reason}
        head, tail = codec.sequenced("space.event.cancel", a.space, a.stream_id, rest)
        draft = Draft(head, tail, stream=a.stream_id, op=StreamOp.END, to=a.to)
        await self.backplane.publish(a.space, draft)

    def receiver_cancel(self, conn: Peer, a: ReceiverCancel) -> None:
        if not self.registry.stop_receiving(conn, a.stream_id, a.space):
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"not receiving a stream {a.stream_id[:260]!r} in space {a.space!r}",
                a.request_id,
            )
        conn.send_frame(codec.receiver_cancelled(a.request_id, a.space, a.stream_id))


def _not_members(space: str, missing: list[str], request_id: str | int | None) -> ProtocolError:
    shown = ", ".join(repr(m) for m in missing[:5])
    return ProtocolError(
        ErrorCode.INVALID_REQUEST,
        f"to names agents that are not members of space {space!r}: {shown}",
        request_id,
    )


def split_utf8(text: str, size: int) -> list[str]:
    """Split ``text`` into pieces of at most ``size`` UTF-8 bytes: the deltas
    of a publish too big for one event.

    Never splits inside a character (``size`` must be at least 4, the longest
    UTF-8 sequence); joining the pieces gives ``text`` back exactly.
    """
    if size < 4:
        raise ValueError("size must be at least 4 bytes")
    raw = text.encode()
    pieces = []
    start, end_all = 0, len(raw)
    while start < end_all:
        end = min(start + size, end_all)
        # Back off continuation bytes (10xxxxxx) to a character boundary.
        while end < end_all and (raw[end] & 0xC0) == 0x80:
            end -= 1
        pieces.append(raw[start:end].decode())
        start = end
    return pieces
