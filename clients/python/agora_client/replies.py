"""Request and reply: the first answer to an event, matched by ``data.in_reply_to``.

A reply is any event of the space whose ``data.in_reply_to`` is the request's
``event_id`` — a plain event, or a stream whose first delta carries it, put
back together before it is handed over. :meth:`Client.request` publishes the
request and waits here for its first reply; :meth:`Client.reply` and
:meth:`Client.stream_reply` answer.

The request's ``event_id`` is known only once the hub acknowledged the
publish, and a fast answer may reach the reader before the requesting task
runs again; so while a request is on its way every reply that arrives is kept
(bounded), and the request looks there first. Everything else passes by
untouched: the application's own subscriptions see replies as usual.

Pure bookkeeping on the reader's side (no I/O): fed by the client's reader,
read by the tasks that wait.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable

from agora_client.assembly import StreamAssembler
from agora_client.models import AssembledEvent, Event, StreamChunk

Reply = Event | AssembledEvent

# Replies kept while requests are on their way, before their ids are known.
_EARLY_KEPT = 1000


class ReplyWaiters:
    """The requests waiting for their first reply, by the request's ``event_id``."""

    def __init__(self) -> None:
        self._sending = 0  # requests published whose event_id is not known yet
        self._waiting: dict[str, asyncio.Future[Reply]] = {}
        self._early: OrderedDict[str, Reply] = OrderedDict()
        # Reply streams being put together: stream id → (answered event id, assembler).
        self._streams: dict[str, tuple[str, StreamAssembler]] = {}

    @property
    def active(self) -> bool:
        """Whether anything waits (the reader skips all of this otherwise)."""
        return bool(self._sending or self._waiting or self._streams)

    # ── the requesting task ─────────────────────────────────────────────

    def sending(self) -> None:
        """A request is being published: keep replies until its id is known."""
        self._sending += 1

    def sent(self, event_id: str | None) -> asyncio.Future[Reply] | None:
        """The request was published as ``event_id`` (None: it failed); the
        future its first reply resolves."""
        self._sending -= 1
        fut: asyncio.Future[Reply] | None = None
        if event_id is not None:
            fut = asyncio.get_running_loop().create_future()
            early = self._early.pop(event_id, None)
            if early is not None:
                fut.set_result(early)
            else:
                self._waiting[event_id] = fut
        if not self._sending:
            self._early.clear()
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
        if answered is not None and self._wanted(answered):
            self._answer(answered, event)

    def chunk(self, chunk: StreamChunk) -> None:
        entry = self._streams.get(chunk.event_id)
        if chunk.kind == "delta" and "from" in chunk.data:
            # A first delta: a reply stream starts — or starts again, replayed
            # whole after a reconnect, so what came before is dropped.
            answered = chunk.data.get("in_reply_to")
            if not isinstance(answered, str) or not self._wanted(answered):
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

    def _wanted(self, answered: str) -> bool:
        return answered in self._waiting or self._sending > 0

    def _answer(self, answered: str, reply: Reply) -> None:
        fut = self._waiting.pop(answered, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(reply)
        elif self._sending and answered not in self._early:  # the first reply wins
            self._early[answered] = reply
            while len(self._early) > _EARLY_KEPT:
                self._early.popitem(last=False)

    def _drop_streams(self, unwanted: Callable[[str], bool]) -> None:
        for stream_id, (answered, _) in list(self._streams.items()):
            if unwanted(answered):
                del self._streams[stream_id]
