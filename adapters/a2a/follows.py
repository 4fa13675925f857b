"""``SubscribeToTask`` on a node that does not serve the task's turn.

The node serving a turn (:class:`~adapters.a2a.runs.TaskRun`) writes the task
to the store at each change of state, and the agents' answer reaches every
node's ``a2a`` member (it is addressed to it). So a :class:`Follow` on any
other node re-attaches to the task from both: it answers the task as stored
first, then passes on, as they arrive through the space, the answer's pieces —
a progress note (``WORKING``), a streamed reply's deltas (found by the
``stream_id`` the serving node stored at the stream's first delta, or by
``in_reply_to``), a whole reply's artifact — and it takes the task's end
from the store, where the serving node decides it (a cancel wins there). It
looks at the store every ``poll`` seconds, and at once after a final piece.

A follow ends when the stored task is no longer working on that turn
(terminal, waiting for input, or in its next turn), or after ``timeout``
seconds in which nothing changed (a node that died serving it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from adapters.a2a.store import TaskStore
from hub.adapter_host import BackplaneUnavailable
from protocol.a2a.mapping import VIA, interpret_reply, is_working, working_note
from protocol.a2a.model import (
    TaskState,
    agent_message,
    artifact,
    artifact_update,
    status,
    status_update,
)
from protocol.a2a.tasks import TaskRecord
from protocol.codec import now_ms

Update = dict[str, Any] | None
#: After a final piece, how often the store is read until the serving node stored the end.
SOON = 0.1


class Follow:
    def __init__(self, record: TaskRecord, store: TaskStore, *, poll: float, timeout: float):
        self.record = record
        self.store = store
        self.poll = poll
        self.timeout = timeout
        self.queue: asyncio.Queue[Update] = asyncio.Queue()
        self.queue.put_nowait({"task": record.wire()})
        self.stream_id = record.stream_id
        self._appended = False
        self._artifact_id = f"{record.id}-{record.turn}-follow"
        self._final = asyncio.Event()
        self._changed = asyncio.Event()
        self._ended = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    def close(self) -> None:
        self._ended = True
        if self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # ── what arrives through the space ───────────────────────────────────

    def _admits(self, msg: dict[str, Any]) -> bool:
        """May ``msg`` answer the task's request (contract §18)? A stream's
        later frames carry no sender: its id (the publisher's, namespaced by
        the hub) names it."""
        if msg.get("space") != self.record.space:
            return False
        if self.stream_id is not None and msg.get("event_id") == self.stream_id:
            return True
        sender = msg.get("from")
        return sender != VIA and (self.record.to is None or sender == self.record.to)

    def feed(self, msg: dict[str, Any]) -> None:
        """Every message the ``a2a`` member receives on this node."""
        if self._ended or not self._admits(msg):
            return
        kind = msg.get("type")
        data = msg.get("data")
        data = data if isinstance(data, dict) else {}
        answering = data.get("in_reply_to") == self.record.event_id and msg.get("from") != VIA
        if kind == "space.event" and answering and self.stream_id is None:
            self._whole(data)
        elif kind == "space.event.delta":
            if self.stream_id is None and answering:
                self.stream_id = msg.get("event_id")
            if msg.get("event_id") == self.stream_id:
                text = data.get("text")
                self._artifact([{"text": text if isinstance(text, str) else ""}], last=False)
        elif kind in ("space.event.done", "space.event.cancel"):
            if self.stream_id is not None and msg.get("event_id") == self.stream_id:
                if kind == "space.event.done":
                    self._artifact([{"text": ""}], last=True)
                self._final.set()

    def _whole(self, data: dict[str, Any]) -> None:
        if is_working(data):
            note = working_note(data)
            r = self.record
            message = None
            if note is not None:
                message = agent_message(
                    note, message_id=f"{r.id}-status-{r.turn}", task_id=r.id,
                    context_id=r.context_id,
                )  # fmt: skip
            value = status(TaskState.WORKING, now_ms(), message)
            self._put(status_update(r.id, r.context_id, value))
            self._changed.set()
            return
        outcome = interpret_reply(data)
        if outcome.parts:
            self._put(
                artifact_update(
                    self.record.id, self.record.context_id,
                    artifact(self._artifact_id, list(outcome.parts)), last_chunk=True,
                )
            )  # fmt: skip
        self._final.set()

    def _artifact(self, parts: list[dict[str, Any]], *, last: bool) -> None:
        self._put(
            artifact_update(
                self.record.id, self.record.context_id, artifact(self._artifact_id, parts),
                append=self._appended, last_chunk=last,
            )
        )  # fmt: skip
        self._appended = True
        self._changed.set()

    def _put(self, update: Update) -> None:
        if not self._ended:
            self.queue.put_nowait(update)

    # ── the task's end, from the store ───────────────────────────────────

    async def _watch(self) -> None:
        quiet_since = asyncio.get_running_loop().time()
        try:
            while True:
                wait = SOON if self._final.is_set() else self.poll
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._changed.wait()
                if self._changed.is_set():
                    self._changed.clear()
                    quiet_since = asyncio.get_running_loop().time()
                try:
                    stored = await self.store.load(self.record.id)
                except BackplaneUnavailable:
                    continue
                if stored is None or self._over(stored):
                    if stored is not None:
                        self._put(status_update(stored.id, stored.context_id, stored.status()))
                    break
                if asyncio.get_running_loop().time() - quiet_since > self.timeout:
                    break
        finally:
            self._put(None)
            self._ended = True

    def _over(self, stored: TaskRecord) -> bool:
        return (
            stored.terminal
            or stored.turn != self.record.turn
            or (stored.state is not TaskState.WORKING)
        )
