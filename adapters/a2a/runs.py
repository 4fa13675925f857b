"""One turn of an inbound task, from the published request to the final state.

A :class:`TaskRun` lives on the node that published the turn's request event
(the node holding the client's HTTP request or SSE stream). It reads the
agents' answer piece by piece (:class:`~adapters.kit.replies.ReplyRelay`) and turns
it into task updates, contract §13:

* a progress note (``{in_reply_to, state: "working"}``, :meth:`TaskRun.working`)
  → ``WORKING`` with its ``text`` as the status message; the turn goes on (a
  blocking ``SendMessage`` answers now, :attr:`TaskRun.answered`), waiting
  ``timeout`` again for what comes next;
* a whole reply event → at most one artifact (its ``text`` / ``body`` /
  ``data``), then the state it asks for — ``COMPLETED``, ``FAILED`` with its
  ``error``, ``INPUT_REQUIRED`` with its ``text`` as the question;
* a streamed reply → one ``artifactUpdate`` per delta, all under one
  ``artifactId`` (``append`` after the first), an empty ``lastChunk`` one at
  ``done``, then the state its first delta asked for;
* a reply stream cancelled by its publisher or the hub → ``FAILED``;
* nothing for ``timeout`` seconds → ``FAILED`` ("Timeout");
* :meth:`TaskRun.cancel` (a ``CancelTask``) → ``CANCELED``;
  :meth:`TaskRun.stop` (shutdown) → ``FAILED``.

Whenever the run gives up on an answer still coming (cancel, timeout, a reply
too big, shutdown) the answering agent is told to stop through the turn's
:class:`~adapters.kit.asking.Asking` (contract §19): a receiver cancel of its
reply stream once that started — the hub tells the producer — else an event
``{cancel: true, in_reply_to}`` to it.

Updates go to the run's listeners (the SSE response, :meth:`TaskRun.listen`;
``SubscribeToTask`` on this node, :meth:`TaskRun.subscribe`) as A2A stream
results. While a reply streams, the task as this node shows it
(:meth:`TaskRun.wire`: ``GetTask``, ``SubscribeToTask``'s first event) holds
the text streamed so far as one artifact under the stream's ``artifactId``, so
a subscriber's later ``append`` updates extend it; the store has that text only
once the stream is done. A new task was stored by the gateway before its turn
was published (one the store cannot keep is refused there, never
acknowledged); a follow-up turn is stored as it starts; every turn is stored
at its end — so ``GetTask`` on any node sees the task's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from typing import Any

import structlog

from adapters.a2a.store import TaskStore
from adapters.kit.asking import Asking
from adapters.kit.replies import Piece, RelayStopped, ReplyRelay
from hub.adapter_host import BackplaneUnavailable
from protocol.a2a.mapping import interpret_reply, is_working, reply_state, working_note
from protocol.a2a.model import TaskState, artifact, artifact_update, status_update, text_part
from protocol.a2a.tasks import TaskRecord
from protocol.codec import now_ms

log = structlog.get_logger("adapters.a2a")

TIMEOUT = "Timeout"
#: A stream result, or None: the turn is over.
Update = dict[str, Any] | None


class TaskRun:
    def __init__(
        self,
        record: TaskRecord,
        asking: Asking,
        store: TaskStore,
        *,
        timeout: float,
        max_reply_bytes: int,
        key: str = "",
        stored: bool = False,
        rearm: Callable[[], ReplyRelay] | None = None,
    ):
        """``asking``: the turn's request (:mod:`adapters.kit.asking`), its
        answer relayed piece by piece; through it the agent is told to stop
        when the run no longer wants the answer. ``key``: whose share of the
        node's open tasks the run counts against.
        ``stored``: the record is in the store as it starts (a new task, stored
        by the gateway before it was published). ``rearm()``: a fresh relay
        for the same request, after a progress note the relay took for the
        answer (one that overtook the request's own publish)."""
        self.record = record
        self.key = key
        self._stored = stored
        self.asking = asking
        self.relay: ReplyRelay = asking.relay  # type: ignore[assignment]
        self.store = store
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self.finished = asyncio.Event()
        #: Set once a blocking ``SendMessage`` may answer: the turn ended, or
        #: the agents said they work on it in the background.
        self.answered = asyncio.Event()
        self._rearm = rearm
        #: Called once, at the first progress note (the gateway moves the run
        #: to its bound of tasks working in the background).
        self.on_background: Callable[[TaskRun], None] | None = None
        #: Which of the node's bounds the run counts against (the gateway's to set).
        self.slot = "open"
        self._listeners: list[asyncio.Queue[Update]] = []
        #: Armed while the run waits for the next piece of the answer (:meth:`_next`).
        self._timer: asyncio.TimerHandle | None = None
        self._timed_out = False
        self._saving: set[asyncio.Task[None]] = set()
        self._interrupt: tuple[TaskState, str | None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: The reply streaming now: its artifact's id and the texts of its
        #: deltas so far (within ``max_reply_bytes``); emptied at its end.
        self._streamed_id = ""
        self._streamed: list[str] = []

    @property
    def task_id(self) -> str:
        return self.record.id

    def listen(self) -> asyncio.Queue[Update]:
        """A queue of this turn's stream results, beginning with the task
        (``SUBMITTED``) and its ``WORKING`` status, ending with None. Call
        before :meth:`start`."""
        queue: asyncio.Queue[Update] = asyncio.Queue()
        submitted = self.record.wire()
        submitted["status"] = {"state": TaskState.SUBMITTED.value}
        queue.put_nowait({"task": submitted})
        queue.put_nowait(self._status())
        self._listeners.append(queue)
        return queue

    def wire(self, history_length: int | None = None, *, artifacts: bool = True) -> dict[str, Any]:
        """The A2A ``Task`` as it is now: the record's, with the reply streamed
        so far as one more artifact (the ``artifactId`` its next deltas
        ``append`` to); no artifacts at all unless ``artifacts``."""
        task = self.record.wire(history_length, artifacts=artifacts)
        if artifacts and self._streamed:
            streamed = artifact(self._streamed_id, [text_part("".join(self._streamed))])
            task["artifacts"] = [*task.get("artifacts", ()), streamed]
        return task

    def subscribe(self) -> asyncio.Queue[Update]:
        """A queue of this turn's stream results from now on, beginning with
        the task as it is (``SubscribeToTask``: :meth:`wire`, a reply streamed
        so far included); ending with None."""
        queue: asyncio.Queue[Update] = asyncio.Queue()
        queue.put_nowait({"task": self.wire()})
        if self.finished.is_set():
            queue.put_nowait(None)
        else:
            self._listeners.append(queue)
        return queue

    def detach(self, queue: asyncio.Queue[Update] | None = None) -> None:
        """A listener went away (the client dropped its stream; None: all of
        them): the turn goes on, its outcome stored for ``GetTask``."""
        self._listeners = [q for q in self._listeners if queue is not None and q is not queue]

    def working(self, data: dict[str, Any]) -> None:
        """The agents sent a progress note (``state: "working"``): the task is
        ``WORKING`` (its ``text`` the status message) and waits ``timeout``
        again for what comes next."""
        if self.finished.is_set() or self._interrupt is not None:
            return
        self.record.move(TaskState.WORKING, now_ms(), working_note(data))
        if not self.record.background and self.on_background is not None:
            self.on_background(self)
        self.record.background = True
        self._emit(self._status())
        self.answered.set()
        if self._timer is not None:  # waiting now: the wait starts again
            self._timer.cancel()
            self._arm()
        saving = asyncio.get_running_loop().create_task(self._save())
        self._saving.add(saving)  # held until done (the loop keeps only a weak reference)
        saving.add_done_callback(self._saving.discard)

    def start(self, on_done: Callable[[TaskRun], None]) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._task.add_done_callback(lambda _: on_done(self))

    def cancel(self) -> None:
        """The client cancelled the task (``CancelTask``, on any node)."""
        self._end(TaskState.CANCELED, None)

    def supersede(self) -> None:
        """A next turn of the task begins (on any node): this one ends quietly,
        its end not stored."""
        self._end(TaskState.WORKING, None)

    def stop(self, reason: str) -> None:
        """The hub is shutting down: the task fails with ``reason``."""
        self._end(TaskState.FAILED, reason)

    def _end(self, state: TaskState, message: str | None) -> None:
        if self._interrupt is None and not self.finished.is_set():
            self._interrupt = (state, message)
            self.relay.stop()

    async def wait_closed(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self._task)

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # ── the turn ────────────────────────────────────────────────────────

    async def _run(self) -> None:
        try:
            if not self._stored:
                await self._save()
            state, message = await self._follow()
        except Exception:
            log.exception("a2a task run failed", task_id=self.task_id)
            state, message = TaskState.FAILED, "Gateway error"
        finally:
            self.relay.stop()
            self._streamed = []  # kept in the record if the stream was done
        await self._finish(state, message)

    async def _follow(self) -> tuple[TaskState, str | None]:
        """Read the answer; returns the state the turn ends in."""
        stream_state: tuple[TaskState, str | None] | None = None
        artifact_id = ""  # a streamed reply's, from its first delta on
        texts: list[str] = []
        self._streamed = texts  # what GetTask / SubscribeToTask show meanwhile (wire)
        size = 0
        while True:
            try:
                piece = await self._next()
            except RelayStopped:
                assert self._interrupt is not None
                await self._tell_stop(self._interrupt[0].name.lower())
                return self._interrupt
            except TimeoutError:
                await self._tell_stop("timeout")
                return TaskState.FAILED, TIMEOUT
            if piece.kind == "event" and is_working(piece.data) and self._rearm is not None:
                self.working(piece.data)
                self.relay = self.asking.relay = self._rearm()
                continue
            if piece.kind == "event":
                return self._whole(piece)
            if piece.kind == "cancel":
                reason = str(piece.msg.get("reason") or "cancelled")[:128]
                return TaskState.FAILED, f"The agent's reply stream was cancelled ({reason})"
            if piece.kind == "done":
                self._emit(
                    artifact_update(
                        self.task_id, self.record.context_id,
                        artifact(artifact_id, [text_part("")]), append=True, last_chunk=True,
                    )
                )  # fmt: skip
                whole = "".join(texts)
                self.record.add_artifact(artifact_id, [text_part(whole)], size)
                self._streamed = []  # in the record now
                assert stream_state is not None
                state, message = stream_state
                return state, whole if state is TaskState.INPUT_REQUIRED else message
            text = _text(piece)
            if stream_state is None:
                stream_state = reply_state(piece.data)
                artifact_id = self._streamed_id = self._artifact_id()
                self.record.stream_id = self.relay.stream_id
                await self._save()  # another node's SubscribeToTask follows the stream
            size += len(text.encode("utf-8", "surrogatepass"))
            if self.record.size + size > self.max_reply_bytes:
                await self._tell_stop("too_big")
                return TaskState.FAILED, f"The reply exceeds {self.max_reply_bytes} bytes"
            texts.append(text)
            self._emit(
                artifact_update(
                    self.task_id, self.record.context_id,
                    artifact(artifact_id, [text_part(text)]), append=len(texts) > 1,
                )
            )  # fmt: skip

    async def _next(self) -> Piece:
        """The answer's next piece; :class:`TimeoutError` after ``timeout``
        seconds without one. A timer that stops the relay rather than
        ``asyncio.timeout()``, which costs several times more than the one
        timer it arms, on every turn."""
        self._arm()
        try:
            return await self.relay.next()
        except RelayStopped:
            if self._timed_out:
                raise TimeoutError from None
            raise
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.timeout, self._time_out)

    def _time_out(self) -> None:
        self._timer = None
        self._timed_out = True
        self.relay.stop()

    def _whole(self, piece: Piece) -> tuple[TaskState, str | None]:
        outcome = interpret_reply(piece.data)
        if outcome.parts:
            if self.record.size + outcome.size > self.max_reply_bytes:
                return TaskState.FAILED, f"The reply exceeds {self.max_reply_bytes} bytes"
            artifact_id = self._artifact_id()
            parts = list(outcome.parts)
            self.record.add_artifact(artifact_id, parts, outcome.size)
            if self._listeners:  # a blocking call's client reads the task instead
                self._emit(
                    artifact_update(
                        self.task_id, self.record.context_id, artifact(artifact_id, parts),
                        last_chunk=True,
                    )
                )  # fmt: skip
        return outcome.state, outcome.message

    def _artifact_id(self) -> str:
        return f"{self.task_id}-{self.record.turn}-{os.urandom(4).hex()}"

    async def _tell_stop(self, reason: str) -> None:
        """The run no longer wants the answer: the agent is told to stop
        (contract §19 — a receiver cancel of its reply stream, or an event
        ``{cancel: true, in_reply_to}``). Not for a ``CancelTask`` before any
        reply (the gateway's own cancel event tells it, with the task's ids),
        nor for a turn the next one superseded (the agent works on in the
        background)."""
        state = self._interrupt[0] if self._interrupt is not None else None
        if state is TaskState.WORKING or (
            state is TaskState.CANCELED and self.relay.stream_id is None
        ):
            self.asking.close()
            return
        await self.asking.cancel(reason)

    async def _finish(self, state: TaskState, message: str | None) -> None:
        try:
            if state is not TaskState.CANCELED and await self.store.cancelled(self.task_id):
                state, message = TaskState.CANCELED, None  # a cancel wins
        except BackplaneUnavailable:
            pass
        self.record.stream_id = None
        self.record.move(state, now_ms(), message)
        await self._save()
        if self._listeners:
            self._emit(self._status())
        self._emit(None)
        self.finished.set()
        self.answered.set()

    async def _superseded(self) -> bool:
        """Has a next turn begun meanwhile (a message to a task the agents
        said they work on)? Then this turn's end is not the task's."""
        try:
            return await self.store.turn_claimed(self.task_id, self.record.turn + 1)
        except BackplaneUnavailable:
            return False

    async def _save(self) -> None:
        try:
            if self.record.turn > 1 or self.record.background:
                if await self._superseded():
                    return
            await self.store.save(self.record)
        except BackplaneUnavailable as exc:
            log.warning("a2a task not stored", task_id=self.task_id, reason=str(exc))

    def _status(self) -> dict[str, Any]:
        return status_update(self.task_id, self.record.context_id, self.record.status())

    def _emit(self, update: Update) -> None:
        for listener in self._listeners:
            listener.put_nowait(update)


def _text(piece: Piece) -> str:
    text = piece.data.get("text")
    return text if isinstance(text, str) else ""
