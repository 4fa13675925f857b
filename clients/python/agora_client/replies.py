"""Request and reply: the first answer to an event, matched by ``data.in_reply_to``.

A reply is an event whose ``data.in_reply_to`` is the request's ``event_id`` —
a plain event, or a stream whose first delta carries it, put back together
before it is handed over. It answers the request only when it is published in
the space the request was published in, by an agent the request was addressed
to (an unaddressed request: by any member of that space; contract §18): a
reply from another space, or from an agent the request did not ask, passes by
and the request goes on waiting. The sender is the one the hub stamped (the
wire's ``from``; a stream's producer on its frames), never what ``data`` says.
:meth:`Client.request` publishes the request and waits here for its first
reply; :meth:`Client.reply` and :meth:`Client.stream_reply` answer.

The request's ``event_id`` is known only once the hub acknowledged the
publish, and a fast answer may reach the reader before the requesting task
runs again; so while a request is on its way the replies that may answer it
(in its space, from an agent it asked) are kept, bounded, and the request
looks there first. They are kept per answered id as a short list — the first
reply of each sender — so that a forged early reply cannot shadow the genuine
one. Everything else passes by untouched: the application's own
subscriptions see replies as usual.

Pure bookkeeping on the reader's side (no I/O): fed by the client's reader,
read by the tasks that wait.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from agora_client.assembly import StreamAssembler
from agora_client.models import AssembledEvent, Event, StreamChunk

Reply = Event | AssembledEvent

# Replies kept while requests are on their way, before their ids are known.
_EARLY_KEPT = 1000


@dataclass(frozen=True, slots=True)
class Asked:
    """Where a request was published and whom it asked: who may answer it."""

    space: str
    #: The agents the request was addressed to; None: unaddressed.
    to: frozenset[str] | None = None

    @classmethod
    def of(cls, space: str, to: str | list[str] | None) -> Asked:
        if to is None:
            return cls(space)
        return cls(space, frozenset([to] if isinstance(to, str) else to))

    def answered_by(self, space: str, sender: str | None) -> bool:
        """Whether a reply published in ``space`` by ``sender`` may answer it."""
        return space == self.space and bool(sender) and (self.to is None or sender in self.to)


class ReplyWaiters:
    """The requests waiting for their first reply, by the request's ``event_id``."""

    def __init__(self) -> None:
        # Requests published whose event_id is not known yet.
        self._sending: list[Asked] = []
        self._waiting: dict[str, tuple[Asked, asyncio.Future[Reply]]] = {}
        # Early replies by the id they answer: the first of each sender, oldest first.
        self._early: OrderedDict[str, list[Reply]] = OrderedDict()
        self._early_count = 0
        # Reply streams being put together: stream id → (answered event id, assembler).
        self._streams: dict[str, tuple[str, StreamAssembler]] = {}

    @property
    def active(self) -> bool:
        """Whether anything waits (the reader skips all of this otherwise)."""
        return bool(self._sending or self._waiting or self._streams)

    # ── the requesting task ─────────────────────────────────────────────

    def sending(self, space: str, to: str | list[str] | None = None) -> Asked:
        """A request to ``space`` (addressed to ``to``) is being published:
        keep the replies that may answer it until its id is known. Pass what
        this returns to :meth:`sent`."""
        asked = Asked.of(space, to)
        self._sending.append(asked)
        return asked

    def sent(self, asked: Asked, event_id: str | None) -> asyncio.Future[Reply] | None:
        """The request was published as ``event_id`` (None: it failed); the
        future its first reply resolves."""
        self._sending.remove(asked)
        fut: asyncio.Future[Reply] | None = None
        if event_id is not None:
            fut = asyncio.get_running_loop().create_future()
            early = self._early.pop(event_id, [])
            self._early_count -= len(early)
            reply = next((r for r in early if asked.answered_by(r.space, r.sender)), None)
            if reply is not None:
                fut.set_result(reply)
            else:
                self._waiting[event_id] = (asked, fut)
        if not self._sending:
            self._early.clear()
            self._early_count = 0
            self._drop_streams(lambda answered: answered not in self._waiting)
        return fut

    def forget(self, event_id: str) -> None:
        """The request got its reply, or stopped waiting for one."""
        self._waiting.pop(event_id, None)
        if not self._sending:
            self._drop_streams(lambda answered: answered == event_id)

    # ── the reader ──────────────────────────────────────────────────────

    def event(self, event: Event) -> None:
        answered = event.in_reply_to
        if answered is not None and self._wanted(answered, event.space, event.sender):
            self._answer(answered, event)

    def chunk(self, chunk: StreamChunk) -> None:
        entry = self._streams.get(chunk.event_id)
        if chunk.kind == "delta" and "from" in chunk.data:
            # A first delta: a reply stream starts — or starts again, replayed
            # whole after a reconnect, so what came before is dropped. Its
            # producer is the frame's sender (``data.from`` is the publisher's
            # to write).
            answered = chunk.data.get("in_reply_to")
            if not isinstance(answered, str) or not self._wanted(
                answered, chunk.space, chunk.sender
            ):
                if entry is not None:
                    del self._streams[chunk.event_id]
                return
            entry = self._streams[chunk.event_id] = (
                answered,
                StreamAssembler(incomplete_timeout=None),
            )
        if entry is None:
            return
        answered, assembler = entry
        done = assembler.feed(chunk)
        if done is not None:
            del self._streams[chunk.event_id]
            self._answer(answered, done)

    def _wanted(self, answered: str, space: str, sender: str | None) -> bool:
        """Whether a reply to ``answered`` from ``sender`` in ``space`` may
        answer a request: the one waiting under that id, or one on its way."""
        waiting = self._waiting.get(answered)
        if waiting is not None:
            return waiting[0].answered_by(space, sender)
        return any(asked.answered_by(space, sender) for asked in self._sending)

    def _answer(self, answered: str, reply: Reply) -> None:
        if not self._wanted(answered, reply.space, reply.sender):
            return
        waiting = self._waiting.pop(answered, None)
        if waiting is not None:
            fut = waiting[1]
            if not fut.done():
                fut.set_result(reply)
            return
        kept = self._early.setdefault(answered, [])
        if any(r.space == reply.space and r.sender == reply.sender for r in kept):
            return  # the first reply of each sender wins
        kept.append(reply)
        self._early_count += 1
        while self._early_count > _EARLY_KEPT:
            _, dropped = self._early.popitem(last=False)
            self._early_count -= len(dropped)

    def _drop_streams(self, unwanted: Callable[[str], bool]) -> None:
        for stream_id, (answered, _) in list(self._streams.items()):
            if unwanted(answered):
                del self._streams[stream_id]
