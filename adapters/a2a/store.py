"""Inbound tasks in the cluster's key-value store, so any node answers for them.

A ``GetTask``, a ``CancelTask`` or the next message of a multi-turn task may
reach any node behind the load balancer, so a task lives in the key-value
store (Redis in a cluster) for ``history_ttl`` after its last change. Three
kinds of keys, each expiring with the task:

* ``a2a:task:{id}`` — the :class:`~protocol.a2a.tasks.TaskRecord`, written by
  the node serving the task's current turn at each change of state;
* ``a2a:cancel:{id}`` — set once, by whichever node a ``CancelTask`` reached.
  A cancel wins: a record read back with this marker is ``CANCELED``, however
  the node serving the turn wrote it meanwhile (the store has no
  compare-and-set; the marker makes the race harmless);
* ``a2a:turn:{id}:{n}`` — claimed (set-if-absent) by the node that starts the
  task's turn ``n``, so two follow-ups racing for one ``INPUT_REQUIRED`` task
  cannot both continue it.
"""

from __future__ import annotations

from hub.adapter_host import KeyValueStore
from protocol.a2a.model import TaskState
from protocol.a2a.tasks import TaskRecord, TaskRecordError

PREFIX = "a2a:"


class TaskStore:
    def __init__(self, kv: KeyValueStore, ttl: float):
        self.kv = kv
        self.ttl = ttl

    async def save(self, record: TaskRecord) -> None:
        await self.kv.set(f"{PREFIX}task:{record.id}", record.to_bytes(), self.ttl)

    async def load(self, task_id: str) -> TaskRecord | None:
        """The task, cancel applied; None when unknown, expired or unreadable."""
        raw = await self.kv.get(f"{PREFIX}task:{task_id}")
        if raw is None:
            return None
        try:
            record = TaskRecord.from_bytes(raw)
        except TaskRecordError:
            return None
        if record.state is not TaskState.CANCELED and await self.cancelled(task_id):
            record.state = TaskState.CANCELED
            record.message = None
        return record

    async def cancel(self, task_id: str) -> bool:
        """Mark the task cancelled; False when it already was."""
        return await self.kv.set(f"{PREFIX}cancel:{task_id}", b"1", self.ttl, if_absent=True)

    async def cancelled(self, task_id: str) -> bool:
        return await self.kv.get(f"{PREFIX}cancel:{task_id}") is not None

    async def claim_turn(self, task_id: str, turn: int) -> bool:
        """Whether this node may serve the task's turn ``turn`` (first come)."""
        return await self.kv.set(f"{PREFIX}turn:{task_id}:{turn}", b"1", self.ttl, if_absent=True)

    async def release_turn(self, task_id: str, turn: int) -> None:
        await self.kv.delete(f"{PREFIX}turn:{task_id}:{turn}")
