"""What the A2A adapters keep in the key-value store — inbound tasks, outbound
contexts and waiting tasks — on the memory store with a clock under test
control: what a cancel does, who may continue what, and when things expire."""

from __future__ import annotations

import uuid

from adapters.a2a.contexts import BridgeMemory
from adapters.a2a.store import TaskStore
from hub.cluster.kvstore import MemoryKeyValueStore
from protocol.a2a.model import TaskState
from protocol.a2a.tasks import TaskRecord, new_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(state: TaskState = TaskState.WORKING) -> TaskRecord:
    return TaskRecord(id="t1", context_id="c1", space="lab", to=None, caller="alice",
                      state=state, updated_ms=1)  # fmt: skip


async def test_tasks_are_stored_cancelled_once_and_expire():
    clock = Clock()
    store = TaskStore(MemoryKeyValueStore(clock=clock), ttl=300)
    await store.save(record())
    assert (await store.load("t1")) == record()
    assert await store.load("nope") is None
    # A cancel wins over whatever the node serving the task writes afterwards.
    assert await store.cancel("t1")
    assert not await store.cancel("t1")
    await store.save(record(TaskState.COMPLETED))
    loaded = await store.load("t1")
    assert loaded is not None and loaded.state is TaskState.CANCELED
    # One node only serves a turn.
    assert await store.claim_turn("t1", 2)
    assert not await store.claim_turn("t1", 2)
    clock.now += 301  # history_ttl after the last change
    assert await store.load("t1") is None
    assert not await store.cancelled("t1")


async def test_an_unreadable_record_is_no_task():
    kv = MemoryKeyValueStore()
    await kv.set("a2a:task:t1", b'{"id": "t1"}', 10)
    assert await TaskStore(kv, 10).load("t1") is None


async def test_contexts_and_waiting_tasks_belong_to_their_sender_and_expire():
    clock = Clock()
    memory = BridgeMemory(MemoryKeyValueStore(clock=clock), "bridge", ttl=60)
    assert await memory.resolve("lab", "alice", None, "trip") == (None, "trip")
    await memory.settle("lab", "alice", "trip", kind="success", context_id="r-ctx",
                        task_id="r-1", continued=None)  # fmt: skip
    assert await memory.resolve("lab", "alice", None, "trip") == ("r-ctx", "trip")
    assert await memory.resolve("lab", "bob", None, "trip") == (None, "trip")  # bob's own
    # Unnamed: the remote's context id is remembered under itself.
    await memory.settle("lab", "alice", None, kind="success", context_id="r-2",
                        task_id="r-9", continued=None)  # fmt: skip
    assert await memory.resolve("lab", "alice", None, "r-2") == ("r-2", "r-2")
    # A task asking for input is continued by its sender only, then forgotten.
    await memory.settle("lab", "alice", "trip", kind="input-required", context_id="r-ctx",
                        task_id="r-3", continued=None)  # fmt: skip
    assert await memory.resolve("lab", "bob", "r-3", None) is None
    assert await memory.resolve("lab", "alice", "r-3", None) == ("r-ctx", "trip")
    await memory.settle("lab", "alice", "trip", kind="success", context_id="r-ctx",
                        task_id="r-3", continued="r-3")  # fmt: skip
    assert await memory.resolve("lab", "alice", "r-3", None) is None
    # A failure remembers nothing; everything expires after the TTL without use.
    await memory.settle("lab", "alice", "new", kind="failure", context_id="r-x",
                        task_id=None, continued=None)  # fmt: skip
    assert await memory.resolve("lab", "alice", None, "new") == (None, "new")
    clock.now += 61
    assert await memory.resolve("lab", "alice", None, "trip") == (None, "trip")


def test_task_ids_are_random_version_4_uuids():
    ids = {new_id() for _ in range(2000)}
    assert len(ids) == 2000
    for text in ids:
        value = uuid.UUID(text)
        assert str(value) == text and value.version == 4 and value.variant == uuid.RFC_4122
