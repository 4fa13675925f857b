"""The requests an outbound bridge takes: events addressed to it, served by bounded tasks.

An A2A or HTTP Agora bridge's member hears everything in its space. A
request is a ``space.event`` addressed to the bridge (``to``), from someone
else, in the bridge's space, that is not itself an answer (``in_reply_to``:
no bridge loops); one streamed as deltas is assembled first, bounded in
bytes and in open streams. Each request is served by a task of its own: at
most ``max_concurrency + max_queued`` at once (the bridge bounds its calls
within them), one more is refused "Bridge busy". A request that cannot be
taken is answered with a failure — never dropped in silence — and so are
those still being served when the bridge closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from adapters.kit.replies import StreamAssembler, in_reply_to

#: Why a request is refused (what ``refuse`` is called with, besides
#: ``"Request lost: …"`` for a streamed request that could not be assembled).
BUSY = "Bridge busy: try again"
CLOSING = "Bridge shutting down"
LOST = "Request lost: "

#: Serve one request (publishing its answer).
Serve = Callable[[dict[str, Any]], Awaitable[None]]
#: Answer a request with a failure saying why.
Refuse = Callable[[dict[str, Any], str], Awaitable[None]]


class RequestIntake:
    def __init__(
        self,
        agent_id: str,
        space: str,
        *,
        serve: Serve,
        refuse: Refuse,
        max_request_bytes: int,
        max_concurrency: int,
        max_queued: int,
    ):
        self.agent_id = agent_id
        self.space = space
        self._serve = serve
        self._refuse = refuse
        self._max_tasks = max_concurrency + max_queued
        self._streams = StreamAssembler(max_request_bytes, max_streams=max(1, max_queued))
        self._tasks: dict[asyncio.Task[None], dict[str, Any]] = {}

    def addressed(self, msg: dict[str, Any]) -> bool:
        """Whether ``msg`` is a request to the bridge (see the module's docstring)."""
        # An answer is not a request (no bridge loops).
        return self.to_me(msg) and in_reply_to(msg) is None

    def to_me(self, msg: dict[str, Any]) -> bool:
        """Whether ``msg`` is addressed to the bridge, in its space, by another."""
        to = msg.get("to")
        recipients = [to] if isinstance(to, str) else to if isinstance(to, list) else ()
        return (
            self.agent_id in recipients
            and msg.get("space") == self.space
            and msg.get("from") != self.agent_id
        )

    async def feed(self, msg: dict[str, Any]) -> None:
        """A message the bridge's member received: a request is taken once whole."""
        kind = msg.get("type")
        if kind == "space.event":
            if self.addressed(msg):
                await self._take(msg)
            return
        if kind == "space.event.delta" and msg.get("event_id") not in self._streams:
            if self.addressed(msg):
                lost = self._streams.start(msg)
                if lost is not None:
                    await self._refuse(lost.event, f"{LOST}{lost.failure}")
            return
        whole = self._streams.feed(msg)
        if whole is None:
            return
        if whole.failure is not None:
            await self._refuse(whole.event, f"{LOST}{whole.failure}")
        else:
            await self._take(whole.event)

    def cancel(self, sender: object, event_id: object) -> bool:
        """The request ``event_id`` of ``sender``, if being served, stops: its
        task is cancelled (the asker no longer waits: no answer). Whether one was."""
        for task, event in self._tasks.items():
            if event.get("event_id") == event_id and event.get("from") == sender:
                if task.done():
                    return False
                task.cancel()
                return True
        return False

    def __len__(self) -> int:
        """Requests being served now."""
        return sum(not task.done() for task in self._tasks)

    async def aclose(self) -> None:
        """Stop serving; the requests being served get a failure, not silence."""
        # A task done but not yet out of the table (its callback runs next) answered.
        pending = [event for task, event in self._tasks.items() if not task.done()]
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await asyncio.gather(*(self._refuse(e, CLOSING) for e in pending))

    async def _take(self, event: dict[str, Any]) -> None:
        if len(self._tasks) >= self._max_tasks:
            await self._refuse(event, BUSY)
            return
        task = asyncio.get_running_loop().create_task(self._serve(event))
        self._tasks[task] = event
        task.add_done_callback(lambda done: self._tasks.pop(done, None))
