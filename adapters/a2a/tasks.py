"""The inbound gateway's tasks: those with a turn in progress on this node, and the rest.

:class:`NodeTasks` answers for a task wherever it is: from the
:class:`~adapters.a2a.runs.TaskRun` serving its turn on this node (the freshest
view) or else from the cluster's store (:mod:`adapters.a2a.store`). It decides
what ``GetTask``, ``CancelTask`` and a follow-up message may do with a task
(the JSON-RPC errors when they may not), and brings a cancel made on another
node to the run serving the task here (:meth:`NodeTasks.watch_cancels`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import structlog

from adapters.a2a.runs import TaskRun
from adapters.a2a.store import TaskStore
from hub.adapter_host import BackplaneUnavailable
from protocol import codec
from protocol.a2a import jsonrpc
from protocol.a2a.jsonrpc import RpcError
from protocol.a2a.model import INTERRUPTED, TaskState
from protocol.a2a.tasks import TaskRecord

log = structlog.get_logger("adapters.a2a")


class NodeTasks:
    def __init__(self, store: TaskStore):
        self.store = store
        #: Tasks with a turn in progress on this node.
        self.runs: dict[str, TaskRun] = {}
        #: The same runs, by the ``event_id`` of their turn's request.
        self.by_event: dict[str, TaskRun] = {}

    def __len__(self) -> int:
        return len(self.runs)

    def add(self, run: TaskRun) -> None:
        self.runs[run.task_id] = run
        if run.record.event_id is not None:
            self.by_event[run.record.event_id] = run

    def discard(self, run: TaskRun) -> None:
        if self.runs.get(run.task_id) is run:
            del self.runs[run.task_id]
        if run.record.event_id is not None and self.by_event.get(run.record.event_id) is run:
            del self.by_event[run.record.event_id]

    async def listed(self, space: str, owner: str | None) -> list[TaskRecord]:
        """The tasks ``ListTasks`` shows (the freshest view of those served here)."""
        records = await self.store.listed(space, owner)
        return [self.runs[r.id].record if r.id in self.runs else r for r in records]

    async def visible(self, task_id: str, space: str, owner: str | None) -> TaskRecord:
        """The task, if it belongs to ``space`` and (when ``owner`` is given)
        to that caller; ``-32001`` otherwise, so ids of others' tasks say nothing."""
        run = self.runs.get(task_id)
        record = run.record if run is not None else await self.store.load(task_id)
        if record is None or record.space != space or owner not in (None, record.caller):
            raise RpcError(jsonrpc.TASK_NOT_FOUND, "Task not found")
        return record

    def wire(
        self, record: TaskRecord, history_length: int | None = None, *, artifacts: bool = True
    ) -> dict[str, Any]:
        """The A2A ``Task`` for ``record`` (:meth:`visible`'s, :meth:`listed`'s):
        with the reply streamed so far when its turn is served here
        (:meth:`TaskRun.wire`), else as stored — another node's partial reply is
        not in the store."""
        run = self.runs.get(record.id)
        if run is not None and run.record is record:
            return run.wire(history_length, artifacts=artifacts)
        return record.wire(history_length, artifacts=artifacts)

    async def next_turn(
        self, task_id: str, context_id: str | None, space: str, owner: str | None, max_turns: int
    ) -> tuple[TaskRecord, TaskRun | None]:
        """The task a follow-up message continues, ready for its next turn
        (claimed: a racing follow-up on another node gets ``-32004``), and the
        run serving its current turn on this node, if any (the agents work on
        it in the background): :meth:`continued` once the next turn's message
        is published, :meth:`release_turn` if it is not."""
        previous = self.runs.get(task_id)
        record = await self.visible(task_id, space, owner)
        if context_id is not None and context_id != record.context_id:
            raise RpcError(jsonrpc.INVALID_PARAMS, "contextId does not match the task's")
        if record.terminal:
            why = f"Task {task_id} is in terminal state: {record.state}"
        elif record.state not in INTERRUPTED and not record.background:
            why = f"Task {task_id} is still working: wait for its answer"
        elif record.turn >= max_turns:
            why = f"Task {task_id} has had {record.turn} turns: start a new task"
        elif not await self.store.claim_turn(task_id, record.turn + 1):
            why = f"Task {task_id} is already being continued"
        else:
            turn = dataclasses.replace(
                record, turn=record.turn + 1, message=None, background=False, stream_id=None,
                history=list(record.history), artifacts=list(record.artifacts),
            )  # fmt: skip
            return turn, previous if previous is not None and previous.record is record else None
        raise RpcError(jsonrpc.UNSUPPORTED_OPERATION, why)

    @staticmethod
    def continued(previous: TaskRun | None) -> None:
        """The next turn's message is published: the turn served here until
        now ends quietly (its end is no longer the task's)."""
        if previous is not None:
            previous.supersede()

    async def release_turn(self, record: TaskRecord, previous: TaskRun | None = None) -> None:
        """A claimed turn that did not start (its message could not be
        published): the task stays as it was. The turn served here until now
        (``previous``) goes on; one that ended meanwhile did not store its end
        (the next turn was claimed): it is stored now."""
        with contextlib.suppress(BackplaneUnavailable):
            await self.store.release_turn(record.id, record.turn)
            if previous is not None and previous.finished.is_set():
                await self.store.save(previous.record)

    async def index(self, record: TaskRecord, owner: str | None) -> None:
        """Enter a new task, its message published, in its owner's index
        (``ListTasks``). The task is stored already (``GetTask`` knows it):
        an index the store cannot take now is logged, not an error."""
        try:
            await self.store.index(record, owner)
        except BackplaneUnavailable as exc:
            log.warning("a2a task not listed", task_id=record.id, reason=str(exc))

    async def forget(self, record: TaskRecord) -> None:
        """A new task whose message was refused: nothing of it is kept."""
        try:
            await self.store.delete(record.id)
        except BackplaneUnavailable as exc:
            log.warning("a2a refused task not removed", task_id=record.id, reason=str(exc))

    async def cancel(self, task_id: str, space: str, owner: str | None) -> TaskRecord:
        """Cancel the task (``-32002`` when it is over); the task as cancelled.
        The run serving it, here or on another node, stops relaying."""
        record = await self.visible(task_id, space, owner)
        if record.terminal or not await self.store.cancel(task_id):
            raise RpcError(jsonrpc.TASK_NOT_CANCELABLE, "Task cannot be canceled")
        run = self.runs.get(task_id)
        if run is not None:
            run.cancel()
        cancelled = dataclasses.replace(record, artifacts=list(record.artifacts))
        cancelled.move(TaskState.CANCELED, codec.now_ms())
        return cancelled

    async def watch_cancels(self, interval: float) -> None:
        """Cancels made on other nodes reach the runs of this one."""
        while True:
            await asyncio.sleep(interval)
            for run in list(self.runs.values()):
                try:
                    if await self.store.cancelled(run.task_id):
                        run.cancel()
                except BackplaneUnavailable:
                    break

    def stop_all(self, reason: str) -> list[TaskRun]:
        runs = list(self.runs.values())
        for run in runs:
            run.stop(reason)
        return runs
