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
  cannot both continue it; a turn whose next one was claimed stores nothing
  more (:meth:`TaskStore.turn_claimed`).

``ListTasks`` reads an index per (space, owner) — the owner is the caller with
auth on, everyone without — kept with nothing but set-if-absent, so nodes
need no lock: a task takes the first free slot ``a2a:slot:{list}:{n}`` (its id
as the value) from the hint ``a2a:seq:{list}`` on, and moves the hint past
it. A lagging hint only costs a few probes. Slots live twice ``history_ttl``;
a listing reads back from the newest slot, at most :data:`MAX_LISTED` tasks,
and skips those expired meanwhile. A node remembers the slot after the last
one it took in an index (for ``ttl``, while that slot surely lives) and tries
that one first: a new task costs no read of the shared hint unless another
node indexed there meanwhile.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable

from hub.adapter_host import KeyValueStore
from protocol.a2a.model import TaskState
from protocol.a2a.tasks import TaskRecord, TaskRecordError

PREFIX = "a2a:"
#: The most tasks one listing reads (the caller's newest).
MAX_LISTED = 1000
#: Slots read at once when listing.
BATCH = 100
#: Slots probed for a free one before giving up on indexing a task.
MAX_PROBES = 256
#: Indexes whose next slot a node remembers (the most recently used).
MAX_REMEMBERED = 1024


class TaskStore:
    def __init__(
        self, kv: KeyValueStore, ttl: float, *, clock: Callable[[], float] = time.monotonic
    ):
        self.kv = kv
        self.ttl = ttl
        self._clock = clock
        #: (space, owner) → the index's name, the slot after the last one this
        #: node took there, and when it took it.
        self._next: OrderedDict[tuple[str, str | None], tuple[str, int, float]] = OrderedDict()

    async def save(self, record: TaskRecord) -> None:
        await self.kv.set(f"{PREFIX}task:{record.id}", record.to_bytes(), self.ttl)

    async def delete(self, task_id: str) -> None:
        """Remove a task that was never acknowledged (its message refused)."""
        await self.kv.delete(f"{PREFIX}task:{task_id}")

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

    async def turn_claimed(self, task_id: str, turn: int) -> bool:
        return await self.kv.get(f"{PREFIX}turn:{task_id}:{turn}") is not None

    async def release_turn(self, task_id: str, turn: int) -> None:
        await self.kv.delete(f"{PREFIX}turn:{task_id}:{turn}")

    # ── the index ListTasks reads ───────────────────────────────────────

    @staticmethod
    def _list(space: str, owner: str | None) -> str:
        """The index's name: one per (space, owner) (None: everyone's tasks)."""
        raw = f"{space}\0{owner if owner is not None else ''}\0{owner is None}"
        return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    async def index(self, record: TaskRecord, owner: str | None) -> None:
        """Enter a new task in its owner's index (``ListTasks``)."""
        lists = (record.space, owner)
        now = self._clock()
        known = self._next.get(lists)
        if known is not None and now - known[2] < self.ttl:
            name, n, _ = known
            # The slot after this node's last: free unless another node indexed since.
            if await self._take(name, n, record.id):
                self._remember(lists, name, n + 1, now)
                return
            n = max(n + 1, await self._hint(name))
        else:
            name = known[0] if known is not None else self._list(*lists)
            n = await self._hint(name)
        for slot in range(n, n + MAX_PROBES):
            if await self._take(name, slot, record.id):
                self._remember(lists, name, slot + 1, now)
                return

    async def _take(self, name: str, slot: int, task_id: str) -> bool:
        """Claim ``slot`` of the index ``name`` for the task (and move the hint past it)."""
        key = f"{PREFIX}slot:{name}:{slot}"
        if not await self.kv.set(key, task_id.encode(), 2 * self.ttl, if_absent=True):
            return False
        await self.kv.set(f"{PREFIX}seq:{name}", str(slot + 1).encode(), 2 * self.ttl)
        return True

    def _remember(self, lists: tuple[str, str | None], name: str, n: int, now: float) -> None:
        self._next[lists] = (name, n, now)
        self._next.move_to_end(lists)
        if len(self._next) > MAX_REMEMBERED:
            self._next.popitem(last=False)

    async def _hint(self, name: str) -> int:
        raw = await self.kv.get(f"{PREFIX}seq:{name}")
        try:
            return max(0, int(raw or b"0"))
        except ValueError:
            return 0

    async def listed(self, space: str, owner: str | None) -> list[TaskRecord]:
        """The owner's tasks in ``space`` (at most :data:`MAX_LISTED`, the newest)."""
        name = self._list(space, owner)
        top = await self._hint(name)
        while await self.kv.get(f"{PREFIX}slot:{name}:{top}") is not None:
            top += 1  # claimed by a node whose hint update is still on its way
        ids: list[str] = []
        end = top
        while end > 0 and len(ids) < MAX_LISTED:
            start = max(0, end - BATCH)
            keys = [f"{PREFIX}slot:{name}:{n}" for n in range(end - 1, start - 1, -1)]
            found = [v for v in await asyncio.gather(*(self.kv.get(k) for k in keys)) if v]
            if not found:
                break  # a whole batch expired: older ones are gone too
            ids += [v.decode("utf-8", "replace") for v in found]
            end = start
        records = await asyncio.gather(*(self.load(i) for i in dict.fromkeys(ids[:MAX_LISTED])))
        return [r for r in records if r is not None and r.space == space]
