"""What the official A2A TCK (a2aproject/a2a-tck at 410ba92, JSON-RPC) checks,
asked of the hub's gateway with the real a2a-sdk 1.3.0 client wherever the
library can say it (and exact JSON-RPC where the TCK checks the wire itself),
with a real agent answering on the space (contract §13, §20).

Mirrored, by the TCK's files:
* ``mandatory/protocol/test_agent_card*.py`` — the card at the port's root;
* ``mandatory/protocol/test_tasks_list_method.py`` — ``ListTasks``: the
  result's members, filters, newest first, paging, totals, history and
  artifacts, every invalid param → ``-32602``;
* ``mandatory/protocol/test_tasks_get_method.py``, ``test_state_transitions.py``
  — ``GetTask`` with ``historyLength`` (a task with history, cut to the length);
* ``mandatory/protocol/test_message_send_method.py`` + the TCK's task helper —
  a task the agent works on in the background is ``WORKING`` once the
  blocking ``SendMessage`` answers; ``returnImmediately`` answers at once;
* ``optional/capabilities/test_streaming_methods.py`` — ``SubscribeToTask``
  (the task first, then its updates; unknown → ``-32001``; over → ``-32004``);
* ``mandatory/protocol/test_tasks_cancel_method.py`` — cancel of a working
  task, and of one that is over (``-32002``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from tests.support import a2a_http as a2a
from tests.support.a2a_agents import Answerer

SPACE = "lab"
WORKING, COMPLETED = "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"


def gateway(**spaces: SpaceCard) -> A2aGateway:
    return A2aGateway(spaces or {SPACE: SpaceCard()}, InboundOptions(cancel_poll=0.1))


async def started(hub, clients, **settings: Any):
    gw = gateway()
    server = await hub(adapters=[gw], **settings)
    helper = await Answerer.start(clients, server)
    return server, gw, helper, f"{server.http_url}/a2a/{SPACE}"


def task_of(result: dict[str, Any]) -> dict[str, Any]:
    return dict(result["events"][-1]["task"])


async def error_of(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer = await a2a.call(url, method, params)
    assert "error" in answer, answer
    return dict(answer["error"])


# ── WORKING and blocking (the TCK's create_test_task) ───────────────────────


async def test_a_task_the_agent_works_on_is_working(hub, clients, a2a_peer):
    _server, gw, helper, base = await started(hub, clients)
    results = await a2a_peer.client(
        base,
        [
            {"op": "send", "text": "work on this"},
            {"op": "get", "task_id": {"from": 0}},
            {"op": "send", "text": "hello", "return_immediately": True},
            {"op": "send", "text": "hello"},
        ],
    )
    assert all("error" not in r for r in results), results
    working, got, immediate, blocking = (task_of(r) for r in results)
    # The blocking SendMessage answered once the agent said it works on it.
    assert working["status"]["state"] == WORKING
    assert working["status"]["message"]["parts"] == [{"text": "on it"}]
    assert got["status"]["state"] == WORKING and got["id"] == working["id"]
    # returnImmediately: at once, before any answer; blocking: the answer.
    assert immediate["status"]["state"] in ("TASK_STATE_SUBMITTED", WORKING)
    assert blocking["status"]["state"] == COMPLETED
    # The agent's answer, later, completes the working task.
    run = gw.tasks.runs[working["id"]]
    await helper.finish(working["id"], ("all", " done"))
    await asyncio.wait_for(run.finished.wait(), 10)
    task = (await a2a.call(base, "GetTask", {"id": working["id"]}))["result"]
    assert a2a.state(task) == COMPLETED
    assert task["artifacts"][-1]["parts"] == [{"text": "all done"}]
    await helper.aclose()


# ── ListTasks ───────────────────────────────────────────────────────────────


async def test_list_tasks_filters_sorts_and_pages(hub, clients, a2a_peer):
    _server, _gw, helper, base = await started(hub, clients)
    ctx, other = "ctx-list", "ctx-other"
    steps: list[dict[str, Any]] = [
        {"op": "send", "text": f"work {i}", "context_id": ctx} for i in range(3)
    ]
    steps += [
        {"op": "send", "text": "hello", "context_id": other},
        {"op": "list", "params": {"contextId": ctx}},
        {"op": "list", "params": {"contextId": ctx, "pageSize": 2}},
        {"op": "list", "params": {"contextId": ctx, "pageSize": 2, "pageToken": {"token": 5}}},
        {"op": "list", "params": {"status": "TASK_STATE_COMPLETED", "includeArtifacts": True}},
        {"op": "list", "params": {"contextId": ctx, "status": "TASK_STATE_COMPLETED"}},
        {"op": "list", "params": {"historyLength": 0}},
        {"op": "list", "params": {"historyLength": 1, "contextId": ctx}},
        {"op": "list", "params": {}},
    ]
    results = await a2a_peer.client(base, steps)
    assert all("error" not in r for r in results), results
    created = [task_of(r)["id"] for r in results[:3]]
    done = task_of(results[3])["id"]
    everything, first, second, completed, none, no_history, one, unfiltered = (
        r["list"] for r in results[4:]
    )
    # Filter by context; newest first; totalSize and pageSize as the TCK reads them.
    assert [t["id"] for t in everything["tasks"]] == created[::-1]
    assert (everything["totalSize"], everything["pageSize"]) == (3, 3)
    assert all(
        t["contextId"] == ctx and t["status"]["state"] == WORKING for t in everything["tasks"]
    )
    # Paging: two, then the last one with no next token, no task twice.
    assert [t["id"] for t in first["tasks"]] == created[:0:-1] and first["nextPageToken"]
    assert (first["pageSize"], first["totalSize"]) == (2, 3)
    assert [t["id"] for t in second["tasks"]] == created[:1]
    assert second.get("nextPageToken", "") == ""
    # Filter by state; artifacts only when asked for.
    assert [t["id"] for t in completed["tasks"]] == [done]
    assert completed["tasks"][0]["artifacts"][0]["parts"] == [{"text": "echo:hello"}]
    assert "artifacts" not in unfiltered["tasks"][0] and unfiltered["totalSize"] == 4
    assert none.get("tasks", []) == [] and none.get("totalSize", 0) == 0
    # History: none with historyLength 0; the last message with 1.
    assert all("history" not in t for t in no_history["tasks"])
    assert [len(t["history"]) for t in one["tasks"]] == [1, 1, 1]
    await helper.aclose()


async def test_list_tasks_on_the_wire(hub, clients):
    """The TCK reads ListTasks' JSON itself: every member present (an empty
    ``nextPageToken`` on the last page), the default page of 50, and every
    invalid param answered ``-32602``."""
    _server, _gw, helper, base = await started(hub, clients)
    empty = (await a2a.call(base, "ListTasks", {"contextId": "nothing-here"}))["result"]
    assert empty == {"tasks": [], "nextPageToken": "", "pageSize": 0, "totalSize": 0}
    before = "2020-01-01T00:00:00Z"
    ids = [
        (await a2a.call(base, "SendMessage", {
            "message": a2a.message(f"work {i}", contextId="sixty"),
            "configuration": {"returnImmediately": True},
        }))["result"]["task"]["id"]
        for i in range(60)
    ]  # fmt: skip
    page = (await a2a.call(base, "ListTasks", {"contextId": "sixty"}))["result"]
    assert (page["totalSize"], page["pageSize"], len(page["tasks"])) == (60, 50, 50)
    assert page["nextPageToken"] != ""
    rest = (
        await a2a.call(
            base, "ListTasks", {"contextId": "sixty", "pageToken": page["nextPageToken"]}
        )
    )["result"]
    assert (rest["pageSize"], rest["nextPageToken"]) == (10, "")
    assert sorted(t["id"] for t in page["tasks"] + rest["tasks"]) == sorted(ids)
    after = (
        await a2a.call(base, "ListTasks", {"contextId": "sixty", "statusTimestampAfter": before})
    )["result"]
    assert after["totalSize"] == 60
    future = (
        await a2a.call(
            base,
            "ListTasks",
            {"contextId": "sixty", "statusTimestampAfter": "2999-01-01T00:00:00Z"},
        )
    )["result"]
    assert future["totalSize"] == 0
    for params in (
        {"pageToken": "invalid-token-xyz"},
        {"status": "INVALID_STATUS"},
        {"pageSize": -1},
        {"pageSize": 0},
        {"pageSize": 101},
        {"historyLength": -1},
        {"statusTimestampAfter": "-1"},
    ):
        error = await error_of(base, "ListTasks", params)
        assert error["code"] == -32602, (params, error)
    assert (await error_of(base, "ListTasks", {"historyLength": -1}))["message"] == (
        "history length must be non-negative"
    )
    await helper.aclose()


async def test_list_tasks_shows_the_callers_own_tasks_only(hub, clients, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"helper": "h-token", "ann": "a-token", "bob": "b-token"}))
    gw = gateway()
    server = await hub(adapters=[gw], auth_mode="tokens", auth_tokens_file=str(tokens))
    helper = await Answerer.start(lambda s, a: clients(s, a, token="h-token"), server)
    base = f"{server.http_url}/a2a/{SPACE}"
    ann, bob = {"Authorization": "Bearer a-token"}, {"Authorization": "Bearer b-token"}
    mine = await a2a.call(base, "SendMessage", {"message": a2a.message("hello")}, headers=ann)
    listed = (await a2a.call(base, "ListTasks", {}, headers=ann))["result"]
    assert [t["id"] for t in listed["tasks"]] == [mine["result"]["task"]["id"]]
    others = (await a2a.call(base, "ListTasks", {}, headers=bob))["result"]
    assert others["tasks"] == [] and others["totalSize"] == 0
    await helper.aclose()


# ── history ─────────────────────────────────────────────────────────────────


async def test_history_and_history_length(hub, clients, a2a_peer):
    _server, _gw, helper, base = await started(hub, clients)
    steps: list[dict[str, Any]] = [{"op": "send", "text": "work from here"}]
    # Follow-ups to a task the agent works on in the background are its next turns.
    steps += [{"op": "send", "text": f"work more {i}", "task_id": {"from": 0}} for i in range(3)]
    steps += [
        {"op": "get", "task_id": {"from": 0}},
        {"op": "get", "task_id": {"from": 0}, "history_length": 2},
        {"op": "get", "task_id": {"from": 0}, "history_length": 1},
        {"op": "get", "task_id": {"from": 0}, "history_length": 0},
        {"op": "send", "text": "hello", "history_length": 1},
        {"op": "get", "task_id": {"from": 0}, "history_length": -1},
    ]
    results = await a2a_peer.client(base, steps)
    assert all("error" not in r for r in results[:-1]), results
    full, two, one, none, sent = (task_of(r) for r in results[4:9])
    texts = [m["parts"][0]["text"] for m in full["history"]]
    users = [m for m in full["history"] if m["role"] == "ROLE_USER"]
    assert [m["parts"][0]["text"] for m in users] == [
        "work from here", "work more 0", "work more 1", "work more 2",
    ]  # fmt: skip
    assert all(m["taskId"] == full["id"] for m in full["history"])
    assert "on it" in texts  # the agents' progress notes are in it too
    assert two["history"] == full["history"][-2:] and one["history"] == full["history"][-1:]
    assert "history" not in none
    assert [m["role"] for m in sent["history"]] == ["ROLE_USER"]
    assert results[-1]["error"]["type"] == "InvalidParamsError"
    error = await error_of(base, "GetTask", {"id": full["id"], "historyLength": -1})
    assert (error["code"], error["message"]) == (-32602, "history length must be non-negative")
    await helper.aclose()


# ── SubscribeToTask ─────────────────────────────────────────────────────────


async def subscribed(
    gw: A2aGateway, task_id: str, following: asyncio.Future[Any], count: int = 1
) -> None:
    """Until ``count`` subscribers follow the task on this node (or the
    client is done: it failed)."""
    async with asyncio.timeout(15):
        while not following.done():
            run = gw.tasks.runs.get(task_id)
            here = len(run._listeners) if run is not None else 0
            if here + sum(f.record.id == task_id for f in gw._follows) >= count:
                return
            await asyncio.sleep(0.02)


async def test_subscribe_to_a_working_task(hub, clients, a2a_peer):
    _server, gw, helper, base = await started(hub, clients)
    task = await a2a.send(base, "work on it")
    assert a2a.state(task) == WORKING
    following = asyncio.ensure_future(
        a2a_peer.client(base, [{"op": "subscribe", "streaming": True, "task_id": task["id"]}])
    )
    await subscribed(gw, task["id"], following)
    await helper.finish(task["id"], ("one ", "two"))
    (result,) = await following
    assert "error" not in result, result
    events = result["events"]
    # The task as it is first, then its updates, ending with its final state.
    assert events[0]["task"]["id"] == task["id"]
    assert events[0]["task"]["status"]["state"] == WORKING
    text = "".join(
        p.get("text", "") for e in events if "artifactUpdate" in e
        for p in e["artifactUpdate"]["artifact"]["parts"]
    )  # fmt: skip
    assert text == "one two"
    assert events[-1]["statusUpdate"]["status"]["state"] == COMPLETED
    # Over: -32004 as a2a-sdk; unknown: -32001.
    results = await a2a_peer.client(
        base,
        [
            {"op": "subscribe", "streaming": True, "task_id": task["id"]},
            {"op": "subscribe", "streaming": True, "task_id": "nope"},
        ],
    )
    assert results[0]["error"]["type"] == "UnsupportedOperationError"
    assert results[1]["error"]["type"] == "TaskNotFoundError"
    # On the wire, a streaming method's error is its stream's one event (what the TCK reads).
    (over,) = await a2a.stream(base, {"id": task["id"]}, "SubscribeToTask")
    assert over["error"]["code"] == -32004 and "terminal state" in over["error"]["message"]
    (unknown,) = await a2a.stream(base, {"id": "nope"}, "SubscribeToTask")
    assert unknown["error"]["code"] == -32001 and "not found" in unknown["error"]["message"]
    (bad,) = await a2a.stream(base, {"id": 5}, "SubscribeToTask")
    assert bad["error"]["code"] == -32602
    await helper.aclose()


# ── the hub's own card ──────────────────────────────────────────────────────


async def test_the_hub_card_at_the_root(hub, clients, a2a_peer):
    gw = gateway(lab=SpaceCard("Lab agents", "The lab"), ops=SpaceCard())
    server = await hub(adapters=[gw])
    (result,) = await a2a_peer.client(server.http_url, [{"op": "card"}])
    assert "error" not in result, result
    card = result["card"]
    assert card["name"] == "Agora Hub" and card["capabilities"]["streaming"] is True
    assert [s["id"] for s in card["skills"]] == ["lab", "ops"]
    assert card["skills"][0]["name"] == "Lab agents"
    urls = [i["url"] for i in card["supportedInterfaces"]]
    assert urls == [f"{server.http_url}/a2a/lab", f"{server.http_url}/a2a/ops"]
    assert all(i["protocolBinding"] == "JSONRPC" for i in card["supportedInterfaces"])


# ── CancelTask ──────────────────────────────────────────────────────────────


async def test_cancel_a_working_task(hub, clients, a2a_peer):
    _server, _gw, helper, base = await started(hub, clients)
    results = await a2a_peer.client(
        base,
        [
            {"op": "send", "text": "work for a while"},
            {"op": "cancel", "task_id": {"from": 0}},
            {"op": "cancel", "task_id": {"from": 0}},
            {"op": "get", "task_id": {"from": 0}},
            {"op": "cancel", "task_id": "nonexistent"},
        ],
    )
    working, cancelled, again, got, unknown = results
    task_id = task_of(working)["id"]
    assert (task_of(cancelled)["id"], task_of(cancelled)["status"]["state"]) == (
        task_id, "TASK_STATE_CANCELED",
    )  # fmt: skip
    assert again["error"]["type"] == "TaskNotCancelableError"
    assert task_of(got)["status"]["state"] == "TASK_STATE_CANCELED"
    assert unknown["error"]["type"] == "TaskNotFoundError"
    # The agent hears it: the cancel names its request (contract §19).
    told = await helper.wait_for(lambda d: d.get("cancel") is True)
    assert told["task_id"] == task_id and told["in_reply_to"] == helper.working[task_id]
    await helper.aclose()


async def test_after_a_progress_note_silence_still_times_out(hub, clients):
    _server, gw, helper, base = await started(hub, clients, bridge_timeout=1)
    task = await a2a.send(base, "work and then nothing")
    assert a2a.state(task) == WORKING
    await asyncio.wait_for(gw.tasks.runs[task["id"]].finished.wait(), 10)
    got = (await a2a.call(base, "GetTask", {"id": task["id"]}))["result"]
    assert a2a.state(got) == "TASK_STATE_FAILED"
    assert got["status"]["message"]["parts"] == [{"text": "Timeout"}]
    await helper.aclose()


async def test_cancel_task_reaches_the_answering_agent(hub, clients):
    """Contract §19: a CancelTask cancels the agent's handler (the SDK's
    ``serve``) — before its reply started (an event ``{cancel: true,
    in_reply_to}`` to it) and while its reply streams (a receiver cancel)."""
    gw = gateway()
    server = await hub(adapters=[gw])
    agent = await clients(server, "worker")
    await agent.join(SPACE)
    started_, cancelled = asyncio.Queue(), asyncio.Queue()

    async def streaming(event):  # a streamed reply whose rest never comes
        started_.put_nowait(event.data["task_id"])
        try:
            yield "first "
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.put_nowait(event.data["task_id"])
            raise

    async def thinking(event):  # no reply yet
        started_.put_nowait(event.data["task_id"])
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.put_nowait(event.data["task_id"])
            raise

    def route(event):
        return thinking(event) if event.data.get("text") == "think" else streaming(event)

    serving = asyncio.ensure_future(agent.serve(SPACE, route))
    base = f"{server.http_url}/a2a/{SPACE}"
    try:
        for text in ("think", "stream"):
            task = (
                await a2a.call(
                    base, "SendMessage",
                    {"message": a2a.message(text), "configuration": {"returnImmediately": True}},
                )
            )["result"]["task"]  # fmt: skip
            assert await asyncio.wait_for(started_.get(), 10) == task["id"]
            if text == "stream":  # the reply has begun streaming
                run = gw.tasks.runs[task["id"]]
                async with asyncio.timeout(10):
                    while run.record.stream_id is None:  # noqa: ASYNC110 (no event to wait on)
                        await asyncio.sleep(0.02)
            done = (await a2a.call(base, "CancelTask", {"id": task["id"]}))["result"]
            assert a2a.state(done) == "TASK_STATE_CANCELED"
            assert await asyncio.wait_for(cancelled.get(), 10) == task["id"], text
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def test_a_timed_out_task_stops_the_agent(hub, clients):
    server = await hub(adapters=[gateway()], bridge_timeout=1)
    agent = await clients(server, "worker")
    await agent.join(SPACE)
    cancelled: asyncio.Queue[str] = asyncio.Queue()

    async def thinking(event):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.put_nowait(event.data["task_id"])
            raise

    serving = asyncio.ensure_future(agent.serve(SPACE, thinking))
    try:
        task = await a2a.send(f"{server.http_url}/a2a/{SPACE}", "think")
        assert a2a.state(task) == "TASK_STATE_FAILED"
        assert await asyncio.wait_for(cancelled.get(), 10) == task["id"]
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
