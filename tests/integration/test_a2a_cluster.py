"""The A2A gateway across nodes sharing a real Redis: a task is answered to the
node holding its stream, read and cancelled and continued on another node; an
outbound bridge moves to a standby when its node is killed, and the standby
answers what the dead holder left unanswered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from tests.support import a2a_http as a2a
from tests.support.a2a_agents import Answerer
from tests.support.a2a_remote import RemoteA2a
from tests.support.agora_bridge import write_config
from tests.support.wsclient import WsClient

SPACE = "lab"
BRIDGE = "translator"
pytestmark = pytest.mark.redis


def gateway() -> A2aGateway:
    return A2aGateway({SPACE: SpaceCard()}, InboundOptions(cancel_poll=0.1))


async def test_tasks_live_in_the_cluster(hub, clients, redis_server):
    one = await hub(adapters=[gateway()], redis_url=redis_server.url)
    two = await hub(adapters=[gateway()], redis_url=redis_server.url)
    helper = await Answerer.start(clients, two)  # the agent is on the second node
    url_one, url_two = f"{one.http_url}/a2a/{SPACE}", f"{two.http_url}/a2a/{SPACE}"
    # The answer reaches the node holding the SSE stream.
    results = await a2a.stream(url_one, {"message": a2a.message("stream it")})
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert "".join(p["text"] for u in updates for p in u["artifact"]["parts"]) == "one two three"
    assert a2a.state(results[-1]["statusUpdate"]) == "TASK_STATE_COMPLETED"
    # Any node answers GetTask.
    task_id = results[0]["task"]["id"]
    got = (await a2a.call(url_two, "GetTask", {"id": task_id}))["result"]
    assert a2a.state(got) == "TASK_STATE_COMPLETED"
    assert got["artifacts"][0]["parts"] == [{"text": "one two three"}]
    # A task asks on one node and is continued on the other.
    asked = await a2a.send(url_one, "ask")
    done = await a2a.send(url_two, "Oslo", message=a2a.message("Oslo", taskId=asked["id"]))
    assert (done["id"], a2a.state(done)) == (asked["id"], "TASK_STATE_COMPLETED")
    await helper.aclose()


async def test_a_cancel_on_another_node_ends_the_stream(hub, clients, redis_server):
    one = await hub(adapters=[gateway()], redis_url=redis_server.url)
    two = await hub(adapters=[gateway()], redis_url=redis_server.url)
    helper = await Answerer.start(clients, one)
    url_one, url_two = f"{one.http_url}/a2a/{SPACE}", f"{two.http_url}/a2a/{SPACE}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": a2a.message("slow")}}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(url_one, json=body, headers=a2a.HEADERS) as resp,
    ):
        task_id = json.loads((await resp.content.readline())[6:])["result"]["task"]["id"]
        await helper.wait_for(lambda d: d.get("task_id") == task_id)
        cancelled = await a2a.call(url_two, "CancelTask", {"id": task_id})
        assert a2a.state(cancelled["result"]) == "TASK_STATE_CANCELED"
        rest = [json.loads(line[6:])["result"] async for line in resp.content
                if line.startswith(b"data: ")]  # fmt: skip
    assert a2a.state(rest[-1]["statusUpdate"]) == "TASK_STATE_CANCELED"
    got = (await a2a.call(url_one, "GetTask", {"id": task_id}))["result"]
    assert a2a.state(got) == "TASK_STATE_CANCELED"
    await helper.aclose()


async def test_subscribe_to_a_task_on_another_node(hub, clients, redis_server, a2a_peer):
    """SubscribeToTask re-attaches from a node that does not serve the task,
    even mid-stream: what is left of the stream arrives through the space,
    the end from the store."""
    serving, other = gateway(), gateway()
    one = await hub(adapters=[serving], redis_url=redis_server.url)
    two = await hub(adapters=[other], redis_url=redis_server.url)
    helper = await Answerer.start(clients, one)
    url_one, url_two = f"{one.http_url}/a2a/{SPACE}", f"{two.http_url}/a2a/{SPACE}"
    # (A stream reaches who was in the space when it began: the second node's
    # member is, once the node has served anything there.)
    assert a2a.state(await a2a.send(url_two, "hello")) == "TASK_STATE_COMPLETED"
    task = await a2a.send(url_one, "work on it")
    assert a2a.state(task) == "TASK_STATE_WORKING"
    run = serving.tasks.runs[task["id"]]
    asked = helper.working.pop(task["id"])
    stream = helper.client.stream(SPACE, data={"in_reply_to": asked}, coalesce=0)
    await stream.send("one ")
    await _until(lambda: run.record.stream_id is not None)  # stored: others can find the stream
    # Mid-stream, the serving node shows the text so far; another shows what the
    # store has (the partial text is kept on the serving node only).
    await _until(lambda: "artifacts" in run.wire())  # "one " past the store's write
    here = (await a2a.call(url_one, "GetTask", {"id": task["id"]}))["result"]
    assert [a["parts"] for a in here["artifacts"]] == [[{"text": "one "}]]
    there = (await a2a.call(url_two, "GetTask", {"id": task["id"]}))["result"]
    assert a2a.state(there) == "TASK_STATE_WORKING" and "artifacts" not in there
    step = {"op": "subscribe", "streaming": True, "task_id": task["id"]}
    following = asyncio.ensure_future(a2a_peer.client(url_two, [step]))
    await _until(lambda: following.done() or len(other._follows) == 1)
    await stream.send("two")
    await stream.close()
    (result,) = await following
    assert "error" not in result, result
    events = result["events"]
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_WORKING"
    texts = [p.get("text", "") for e in events if "artifactUpdate" in e
             for p in e["artifactUpdate"]["artifact"]["parts"]]  # fmt: skip
    assert "".join(texts) == "two", events  # what was left of the stream
    first = next(e["artifactUpdate"] for e in events if "artifactUpdate" in e)
    assert not first.get("append"), first  # an artifact of its own, not one it never had
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    got = (await a2a.call(url_two, "GetTask", {"id": task["id"]}))["result"]
    assert got["artifacts"][-1]["parts"] == [{"text": "one two"}]
    await helper.aclose()


async def _until(predicate: Any, timeout: float = 15) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110 (objects in this process: no event to wait on)
            await asyncio.sleep(0.02)


# ── an outbound bridge held by one node of two, in real processes ──────────


async def test_a_killed_holder_is_replaced_and_its_requests_answered(
    hub_process, redis_server, tmp_path
):
    remote = await RemoteA2a().start()
    config = write_config(
        tmp_path / "hub.toml",
        f'[[bridges.a2a]]\nspace = "{SPACE}"\nagent_id = "{BRIDGE}"\nurl = "{remote.url}"\n',
    )
    settings = {"redis_url": redis_server.url, "config": str(config)}
    try:
        nodes = [await asyncio.to_thread(hub_process, **settings) for _ in range(2)]
        holder = await _holder(nodes)
        standby = nodes[1 - nodes.index(holder)]
        alice = await WsClient.connect(standby.url, "alice", heartbeat=True)
        await alice.join(SPACE)
        in_flight = await _send(alice, {"text": "hang"})
        await asyncio.wait_for(remote.called.wait(), 15)
        await asyncio.to_thread(holder.kill)
        await _holder([standby])
        lost = await _answer(alice, in_flight, kind="space.event")
        assert lost["data"]["status"] == "failure"
        assert lost["data"]["error"].startswith("Bridge moved to another hub node")
        after = await _answer(alice, await _send(alice, {"text": "after"}))
        assert after["data"]["text"] == "echo:after"
        await alice.close()
    finally:
        await remote.stop()


async def _send(client: WsClient, data: dict[str, Any]) -> str:
    sent = await client.request(
        {"type": "space.publish", "space": SPACE, "to": BRIDGE, "data": data}
    )
    return str(sent["event_id"])


async def _answer(client: WsClient, event_id: str, kind: str | None = None) -> dict[str, Any]:
    return await client._until(
        lambda m: (
            (kind is None or m.get("type") == kind)
            and m.get("from") == BRIDGE
            and (m.get("data") or {}).get("in_reply_to") == event_id
        ),
        30,
    )


async def _holder(nodes: list[Any], timeout: float = 30) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            for node in nodes:
                if any(line.get("event") == "a2a bridge active" for line in node.log_lines()):
                    return node
            await asyncio.sleep(0.1)  # polling a log file: there is no event to wait on


async def test_tasks_sent_through_every_node_are_listed_on_every_node(hub, redis_server):
    """The ListTasks index is shared: each node takes its next slot first and
    falls back to the shared hint when another node took it meanwhile."""
    one = await hub(adapters=[gateway()], redis_url=redis_server.url)
    two = await hub(adapters=[gateway()], redis_url=redis_server.url)
    urls = [f"{one.http_url}/a2a/{SPACE}", f"{two.http_url}/a2a/{SPACE}"]
    sent = []
    for n in (0, 0, 1, 0, 1, 1, 0):
        task = await a2a.send(
            urls[n], f"task {len(sent)}", configuration={"returnImmediately": True}
        )
        sent.append(task["id"])
    for url in urls:
        listed = (await a2a.call(url, "ListTasks", {}))["result"]["tasks"]
        assert sorted(t["id"] for t in listed) == sorted(sent)
