"""What arrives from the hub, and where it goes.

The reader hands each frame to :meth:`Receiver._dispatch`, in the order they
arrive: an answer resolves the request waiting for it
(:mod:`agora_client.requests`); events and stream frames move the client's
position in their space (:mod:`agora_client.positions`) and go to the
subscriptions that want them (:mod:`agora_client.subscriptions`); the hub's
relay of a cancel ends a stream this client publishes; ``space.joined``
reports how a rejoin after a reconnect went (:class:`Resumed`, and the
``on_resume`` callback). An ``error`` without a request id is the hub's
notice about the connection itself: it becomes the reason of the close that
follows — unless it says the token expired, which the ``token_provider``'s
next token answers (:meth:`Receiver.refresh_token`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal, overload

from agora_client.assembly import AssembledEvents, StreamAssembler
from agora_client.connection import Connection
from agora_client.errors import rejected, token_expired
from agora_client.models import (
    AssembledEvent,
    Event,
    HistoryPage,
    MembersChanged,
    Message,
    Position,
    Resumed,
    StreamChunk,
    parse_chunk,
    parse_event,
    parse_members,
    parse_registration,
)
from agora_client.positions import NOT_RESUMED, JoinedSpaces
from agora_client.replies import ReplyWaiters
from agora_client.subscriptions import ALL_KINDS, EVENT_KINDS, STREAM_KINDS, Subscription
from agora_client.wire import MessageType

log = logging.getLogger("agora_client")
#: The warning about a rejoin that could not resume (``tail`` says it its own way).
NOT_RECOVERED = "rejoined %s: events after seq %d could not be recovered (history %s)"

# Text kept per incoming stream by default.
_MAX_CHARS = 64 * 1024 * 1024


class Receiver(Connection):
    """A connection that routes what arrives; the base of :class:`~agora_client.Client`."""

    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        on_resume: Callable[[Resumed], Any] | None,
        **connection: Any,
    ):
        super().__init__(url, agent_id, **connection)
        self._spaces = JoinedSpaces()
        self._replies = ReplyWaiters()
        self.on_resume = on_resume
        self._callbacks: set[asyncio.Task[Any]] = set()

    # ── where the client is ──────────────────────────────────────────────

    @property
    def joined_spaces(self) -> frozenset[str]:
        """Spaces this client has joined (and will rejoin after a reconnect)."""
        return frozenset(self._spaces.names())

    def known_members(self, space: str) -> list[str] | None:
        """The last member list the hub sent for a joined space (the join's
        answer, then ``space.members`` while the space is small): no round
        trip, partial in a big space — :meth:`~agora_client.Client.members`
        asks the hub."""
        return self._spaces.members(space)

    def last_seq(self, space: str) -> int | None:
        """The highest ``seq`` received in ``space``."""
        return self._spaces.last_seq(space)

    def position(self, space: str) -> Position | None:
        """Where this client is in ``space`` (``epoch`` and last ``seq``), for
        ``join(space, since=…)`` later — after a restart of this process, say."""
        return self._spaces.position(space)

    @property
    def _resuming(self) -> dict[str, Position]:
        """Rejoins in flight after a reconnect, by space."""
        return self._spaces.resuming

    # ── subscriptions ────────────────────────────────────────────────────

    @overload
    def events(
        self,
        space: str | None = None,
        *,
        members: Literal[False] = False,
        incomplete_timeout: float | None = 30.0,
        max_chars: int = _MAX_CHARS,
    ) -> AssembledEvents[Event | AssembledEvent]: ...

    @overload
    def events(
        self,
        space: str | None = None,
        *,
        members: Literal[True],
        incomplete_timeout: float | None = 30.0,
        max_chars: int = _MAX_CHARS,
    ) -> AssembledEvents[Event | AssembledEvent | MembersChanged]: ...

    def events(
        self,
        space: str | None = None,
        *,
        members: bool = False,
        incomplete_timeout: float | None = 30.0,
        max_chars: int = _MAX_CHARS,
    ) -> AssembledEvents[Any]:
        """Iterate whole events (of one space, or all): every ``space.event``
        as an :class:`Event`, and every stream — a publish the hub chunked,
        an agent's token stream — put back together as one
        :class:`AssembledEvent` (see :meth:`assembled_events` for its
        ``status``, ``incomplete_timeout`` and ``max_chars``).

        With ``members=True`` it also yields :class:`MembersChanged`. The
        subscription starts now, and first takes matching items that arrived
        while nobody was reading. Stream frames as they arrive:
        :meth:`stream_events`.
        """
        kinds = EVENT_KINDS | STREAM_KINDS
        return self._assembled(
            space, kinds | {"members"} if members else kinds, incomplete_timeout, max_chars
        )

    def stream_events(self, space: str | None = None) -> Subscription[StreamChunk]:
        """Iterate stream frames (deltas, dones, cancels) as they arrive."""
        return self._subscribe(space, STREAM_KINDS)

    def assembled_events(
        self,
        space: str | None = None,
        *,
        incomplete_timeout: float | None = 30.0,
        events: bool = False,
        max_chars: int = _MAX_CHARS,
    ) -> AssembledEvents[Any]:
        """Iterate whole streamed events, put back together from their deltas.

        Yields an :class:`AssembledEvent` per stream once it is done, was
        cancelled (``status="cancelled"``), or had no frame for
        ``incomplete_timeout`` seconds (``status="incomplete"``). With
        ``events=True`` plain events are yielded too, in arrival order, so one
        loop sees every message of a space whatever its size.
        """
        kinds = STREAM_KINDS | EVENT_KINDS if events else STREAM_KINDS
        return self._assembled(space, kinds, incomplete_timeout, max_chars)

    def _assembled(
        self,
        space: str | None,
        kinds: frozenset[str],
        incomplete_timeout: float | None,
        max_chars: int,
    ) -> AssembledEvents[Any]:
        sub: Subscription[Any] = Subscription(space, kinds, self.queue_size, wants_reset=True)
        self._router.subscribe(sub)
        loop = asyncio.get_running_loop()
        asm = StreamAssembler(
            incomplete_timeout=incomplete_timeout, max_chars=max_chars, clock=loop.time
        )
        return AssembledEvents(sub, asm)

    def subscribe(
        self, space: str | None = None, kinds: frozenset[str] = ALL_KINDS
    ) -> Subscription[Message]:
        """The general form of :meth:`events`: any of ``event``, ``members``,
        ``delta``, ``done``, ``cancel``, ``resumed`` (:class:`Resumed`, after
        a reconnect)."""
        unknown = set(kinds) - ALL_KINDS
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}")
        return self._subscribe(space, frozenset(kinds))

    def _subscribe(self, space: str | None, kinds: frozenset[str]) -> Subscription[Any]:
        sub: Subscription[Any] = Subscription(space, kinds, self.queue_size)
        self._router.subscribe(sub)
        return sub

    # ── what was and what is coming

    async def history(
        self, space: str, *, limit: int = 50, before_seq: int | None = None
    ) -> HistoryPage:
        """The newest recorded events of ``space`` (a member only), oldest first;
        ``before_seq`` pages back (``page.next_before_seq``). At most 100 a page;
        addressed events appear only to their recipients."""
        msg: dict[str, Any] = {"type": MessageType.SPACE_HISTORY, "space": space, "limit": limit}
        if before_seq is not None:
            msg["before_seq"] = before_seq
        reply = await self._request(msg)
        events: list[Event | StreamChunk] = []
        for f in reply.get("events") or ():
            if not isinstance(f, dict):
                continue
            item = parse_event(f) if f.get("type") == MessageType.SPACE_EVENT else parse_chunk(f)
            if item is not None:
                events.append(item)
        seq, nxt = reply.get("seq"), reply.get("next_before_seq")
        return HistoryPage(
            space,
            str(reply.get("epoch") or ""),
            seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
            events,
            nxt if isinstance(nxt, int) and not isinstance(nxt, bool) else None,
        )

    async def cancel_stream(self, space: str, event_id: str) -> None:
        """Stop receiving someone else's stream (``event_id`` as received,
        ``"<publisher>/<id>"``); the publisher and other receivers are not affected."""
        await self._request(
            {"type": MessageType.SPACE_EVENT_CANCEL, "space": space, "event_id": event_id}
        )

    # ── the frames ───────────────────────────────────────────────────────

    def _dispatch(self, f: dict[str, Any]) -> None:
        kind = f.get("type")
        rid = f.get("id")
        self._requests.answer(rid, f)
        if kind == MessageType.SPACE_EVENT:
            event = parse_event(f)
            if event is None:
                log.warning("ignoring a malformed space.event")
                return
            self._spaces.seen(event.space, event.seq)
            if event.sender == self.agent_id:
                self._requests.answer(event.request_id, f)
            if self._replies.active:
                self._replies.event(event)
            self._router.dispatch(event.space, "event", event)
        elif kind in (
            MessageType.SPACE_EVENT_DELTA,
            MessageType.SPACE_EVENT_DONE,
            MessageType.SPACE_EVENT_CANCEL,
        ):
            chunk = parse_chunk(f)
            if chunk is None:
                log.warning("ignoring a malformed %s", kind)
                return
            if chunk.kind == "cancel" and "/" not in chunk.event_id:
                # The hub telling this producer that every receiver of its stream
                # stopped (contract §19): named by the id this client gave it,
                # where every relayed frame has "<publisher>/<id>".
                hub_event_id = f"{self.agent_id}/{chunk.event_id}"
                self._streams.cancelled(hub_event_id, chunk.reason or "cancelled")
                return
            if chunk.seq is not None:
                self._spaces.seen(chunk.space, chunk.seq)
            if chunk.sender == self.agent_id:
                self._requests.answer(chunk.request_id, f)
                if chunk.kind == "cancel":
                    self._streams.cancelled(chunk.event_id, chunk.reason or "cancelled")
            if self._replies.active:
                self._replies.chunk(chunk)
            self._router.dispatch(chunk.space, chunk.kind, chunk)
        elif kind == MessageType.SPACE_MEMBERS and rid is None:  # (a reply has an id)
            change = parse_members(f)
            if change is None:
                return
            self._spaces.members_changed(change)
            self._router.dispatch(change.space, "members", change)
        elif kind == MessageType.SPACE_JOINED:
            note = self._spaces.on_joined(f)
            if note is not None:
                self._resumed(note)
        elif kind == MessageType.ERROR:
            self._on_error(f)
        elif kind == MessageType.AGENT_REGISTERED and rid is None:
            reg = parse_registration(f)
            if reg is not None:
                self.registration = reg

    def _on_error(self, f: dict[str, Any]) -> None:
        exc = rejected(f)
        rid = exc.request_id
        if isinstance(rid, str):
            if self._requests.refuse(rid, exc) or self._streams.refused(rid, exc):
                return
        if rid is None:
            # Sent before the hub closes the connection: it becomes the
            # ConnectionClosed error's code and message.
            self._last_error = f
            provider = self._token_provider
            if token_expired(f) and provider is not None and self._refresher is None:
                self._refresher = asyncio.get_running_loop().create_task(
                    self._refresh_from_provider(provider)
                )
            log.info("hub error: %s", exc)
            return
        log.warning("hub error for an unknown request: %s", exc)

    def _resumed(self, note: Resumed) -> None:
        """Tell the application how a rejoin after a reconnect went."""
        space, since = note.space, note.since
        if space in NOT_RESUMED:
            log.info("rejoined %s from now (presence is not replayed)", space)
        elif not note.recovered:
            log.warning(
                NOT_RECOVERED,
                space,
                since.seq,
                "lost: new epoch" if note.epoch != since.epoch else "no longer reaches back",
            )
        self._router.dispatch(space, "resumed", note)
        callback = self.on_resume
        if callback is None:
            return
        try:
            result = callback(note)
            if asyncio.iscoroutine(result):
                task = asyncio.get_running_loop().create_task(result)
                self._callbacks.add(task)
                task.add_done_callback(self._callbacks.discard)
        except Exception:
            log.exception("on_resume callback failed")

    # ── the token ────────────────────────────────────────────────────────

    async def refresh_token(self, token: str) -> int | None:
        """Give the hub a new token for this agent (``agent.refresh``).

        Its ``join`` / ``publish`` claims apply from now on, and it is the one
        sent on reconnects. Returns the token's expiry (Unix epoch ms) or None
        when it has none; raises :class:`Unauthorized` when the hub refuses it
        (the old token stays in force until it expires)."""
        reply = await self._request({"type": MessageType.AGENT_REFRESH, "token": token})
        self._token = token
        if self._last_error is not None and token_expired(self._last_error):
            self._last_error = None  # the notice is answered: not why a later close happens
        expires_at = reply.get("expires_at")
        return expires_at if isinstance(expires_at, int) else None

    async def _refresh_from_provider(self, provider: Callable[[], Awaitable[str]]) -> None:
        try:
            await self.refresh_token(await provider())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("refreshing the expired token failed: %s", exc)
        finally:
            self._refresher = None
