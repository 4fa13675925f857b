"""ListTasks and task history without a hub: the params as a2a-sdk checks them,
the page (filters, order, cursor), the index in the key-value store, and what
a task's history keeps and answers."""

from __future__ import annotations

import pytest

from adapters.a2a import listing
from adapters.a2a.store import TaskStore
from hub.cluster.kvstore import MemoryKeyValueStore
from protocol.a2a.jsonrpc import INVALID_PARAMS, RpcError
from protocol.a2a.model import ListQuery, TaskState, list_query, task_query
from protocol.a2a.tasks import MAX_HISTORY, TaskRecord


def task(n: int, *, ctx: str = "c", state: TaskState = TaskState.WORKING) -> TaskRecord:
    return TaskRecord(id=f"t{n:02}", context_id=ctx, space="lab", to=None, caller="ann",
                      state=state, updated_ms=1000 + n)  # fmt: skip


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pageSize": 0}, "minimum page size is 1"),
        ({"pageSize": 101}, "maximum page size is 100"),
        ({"pageSize": -1}, "minimum page size is 1"),
        ({"historyLength": -1}, "history length must be non-negative"),
        ({"status": "INVALID_STATUS"}, "status"),
        ({"status": 3}, "status"),
        ({"statusTimestampAfter": "-1"}, "statusTimestampAfter"),
        ({"pageSize": "2"}, "pageSize"),
        ({"includeArtifacts": "yes"}, "includeArtifacts"),
    ],
)
def test_bad_list_params_are_invalid_params(params, message):
    with pytest.raises(RpcError) as caught:
        list_query(params, 7)
    assert caught.value.rpc_code == INVALID_PARAMS and message in caught.value.message
    assert caught.value.rpc_id == 7


def test_negative_history_length_everywhere():
    for check in (lambda: task_query({"id": "x", "historyLength": -1}, 1),):
        with pytest.raises(RpcError, match="history length must be non-negative"):
            check()
    assert task_query({"id": "x", "historyLength": 0}, 1).historyLength == 0


def test_a_page_filters_sorts_and_continues():
    records = [task(n, ctx="a" if n % 2 else "b") for n in range(7)]
    records.append(task(9, state=TaskState.COMPLETED, ctx="a"))
    first = listing.page(records, list_query({"contextId": "a", "pageSize": 2}, 1), 1)
    assert [t["id"] for t in first["tasks"]] == ["t09", "t05"]
    assert (first["pageSize"], first["totalSize"]) == (2, 4) and first["nextPageToken"]
    second = listing.page(
        records, list_query({"contextId": "a", "pageToken": first["nextPageToken"]}, 1), 1
    )
    assert [t["id"] for t in second["tasks"]] == ["t03", "t01"]
    assert second["nextPageToken"] == ""
    done = listing.page(records, list_query({"status": "TASK_STATE_COMPLETED"}, 1), 1)
    assert [t["id"] for t in done["tasks"]] == ["t09"]
    later = listing.page(records, ListQuery(statusTimestampAfter="1970-01-01T00:00:01.005Z"), 1)
    assert [t["id"] for t in later["tasks"]] == ["t09", "t06", "t05"]
    with pytest.raises(RpcError) as caught:
        listing.page(records, list_query({"pageToken": "invalid-token-xyz"}, 1), 1)
    assert caught.value.rpc_code == INVALID_PARAMS


def test_a_task_updated_after_the_cursor_does_not_repeat():
    records = [task(n) for n in range(4)]
    first = listing.page(records, list_query({"pageSize": 2}, 1), 1)
    records[3].updated_ms = 5000  # updated meanwhile: above the cursor now
    second = listing.page(records, list_query({"pageToken": first["nextPageToken"]}, 1), 1)
    assert [t["id"] for t in first["tasks"]] == ["t03", "t02"]
    assert [t["id"] for t in second["tasks"]] == ["t01", "t00"]


def test_history_is_kept_cut_and_stored():
    record = task(1)
    record.user_message({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
    record.move(TaskState.WORKING, 2000, "on it")
    record.move(TaskState.INPUT_REQUIRED, 2001, "which city?")
    texts = [m["parts"][0]["text"] for m in record.history]
    assert texts == ["hi", "on it", "which city?"]
    assert [m["role"] for m in record.history] == ["ROLE_USER", "ROLE_AGENT", "ROLE_AGENT"]
    assert all(m["taskId"] == "t01" and m["contextId"] == "c" for m in record.history)
    assert record.wire()["history"] == record.history
    assert record.wire(2)["history"] == record.history[-2:]
    assert "history" not in record.wire(0)
    assert TaskRecord.from_bytes(record.to_bytes()) == record
    for n in range(MAX_HISTORY + 5):
        record.user_message({"messageId": f"x{n}", "role": "ROLE_USER", "parts": [{"text": "x"}]})
    assert len(record.history) == MAX_HISTORY and record.history[-1]["messageId"] == "x68"


async def test_the_index_lists_each_owners_tasks():
    store = TaskStore(MemoryKeyValueStore(), ttl=300)
    for n in range(5):
        record = task(n)
        await store.save(record)
        await store.index(record, "ann" if n < 3 else "bob")
    everyone = task(9)
    await store.save(everyone)
    await store.index(everyone, None)
    assert sorted(r.id for r in await store.listed("lab", "ann")) == ["t00", "t01", "t02"]
    assert sorted(r.id for r in await store.listed("lab", "bob")) == ["t03", "t04"]
    assert [r.id for r in await store.listed("lab", None)] == ["t09"]
    assert await store.listed("other", "ann") == []
    # A lagging hint (another node's update still on its way) costs probes, loses nothing.
    name = store._list("lab", "ann")
    await store.kv.set(f"a2a:seq:{name}", b"0", 300)
    late = task(7)
    await store.save(late)
    await store.index(late, "ann")
    assert sorted(r.id for r in await store.listed("lab", "ann")) == ["t00", "t01", "t02", "t07"]


async def test_nodes_sharing_an_index_take_every_slot_once():
    """Each node tries the slot after its own last first; another node having
    taken it sends it back to the shared hint. No task is lost, none twice."""
    now = [0.0]
    kv = MemoryKeyValueStore()
    one, two = (TaskStore(kv, ttl=300, clock=lambda: now[0]) for _ in range(2))
    order = [one, one, two, one, two, two, one]
    for n, store in enumerate(order):
        await store.index(task(n), "ann")
    name = one._list("lab", "ann")
    slots = [await kv.get(f"a2a:slot:{name}:{n}") for n in range(len(order) + 1)]
    assert slots == [task(n).id.encode() for n in range(len(order))] + [None]
    # A node's own next slot is trusted for ttl only: then the shared hint again.
    now[0] = 299.0
    await one.index(task(20), "ann")
    assert await kv.get(f"a2a:slot:{name}:{len(order)}") == b"t20"
    await kv.set(f"a2a:seq:{name}", b"40", 300)
    now[0] = 700.0
    await one.index(task(21), "ann")
    assert await kv.get(f"a2a:slot:{name}:40") == b"t21"
