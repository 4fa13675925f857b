"""The A2A gateway's refusals, on one hub with real WebSocket agents: a send
refused keeps nothing (no task, no index entry, no slot, no wait), a member
URL naming nobody is 404 for every method as its card is, and refusals come
in the order docs/a2a.md gives ("Errors and HTTP statuses")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import orjson
import pytest

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from tests.support import a2a_http as a2a
from tests.support.a2a_agents import Answerer

SPACE = "lab"


def gateway(**options: Any) -> A2aGateway:
    return A2aGateway({SPACE: SpaceCard()}, InboundOptions(**options))


def request(method: str, params: dict[str, Any], rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


async def listed(url: str, context: str, **headers: str) -> list[dict[str, Any]]:
    answer = await a2a.call(url, "ListTasks", {"contextId": context}, headers=headers or None)
    return list(answer["result"]["tasks"])


async def card_status(url: str, **headers: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{url}/.well-known/agent-card.json", headers=headers) as resp,
    ):
        return resp.status


async def settled(gw: A2aGateway) -> None:
    """Every run of the gateway over (its slot given back, its wait closed)."""
    runs = list(gw.tasks.runs.values())
    await asyncio.wait_for(asyncio.gather(*(run.wait_closed() for run in runs)), 10)


def nothing_held(gw: A2aGateway) -> None:
    assert len(gw.tasks) == 0 and not gw.tasks.by_event
    assert gw.task_slots.taken == 0 and gw.stream_slots.taken == 0
    assert gw.background_slots.taken == 0
    assert len(gw.waiters) == 0


# ── D1: a refused send keeps nothing ───────────────────────────────────────


async def test_sends_over_the_rate_limit_keep_no_task(hub, clients):
    """Sends the gateway's member may not publish (``bridge_rate_limit``) are
    429 and leave no task behind: ``ListTasks`` shows the accepted ones only."""
    gw = gateway()
    server = await hub(adapters=[gw], bridge_rate_limit=0.01, bridge_rate_burst=3)
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    context = "rate-limited"

    async def send(n: int) -> tuple[int, dict[str, Any]]:
        message = a2a.message(f"n{n}", contextId=context)
        return await a2a.post(base, request("SendMessage", {"message": message}, f"r{n}"))

    answers = await asyncio.gather(*(send(n) for n in range(8)))
    statuses = sorted(status for status, _ in answers)
    assert 429 in statuses and set(statuses) <= {200, 429}, statuses
    accepted = {answer["result"]["task"]["id"] for status, answer in answers if status == 200}
    await settled(gw)
    tasks = await listed(base, context)
    assert {t["id"] for t in tasks} == accepted
    assert all(a2a.state(t) == "TASK_STATE_COMPLETED" for t in tasks)
    nothing_held(gw)
    await helper.aclose()


async def test_a_member_gone_before_the_publish_keeps_no_task(hub, clients, monkeypatch):
    """The member leaves between the gateway's check and its publish: the hub
    refuses the addressed publish (404) and the task written before it is removed."""
    gw = gateway()
    server = await hub(adapters=[gw])
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    asked: list[str] = []
    ask = gw.member.ask

    async def leave_first(asker: Any, space: str, data: dict[str, Any], *rest: Any) -> Any:
        asked.append(data["task_id"])
        await helper.client.leave(SPACE)
        return await ask(asker, space, data, *rest)

    monkeypatch.setattr(gw.member, "ask", leave_first)
    for method in ("SendMessage", "SendStreamingMessage"):
        message = a2a.message("hi", contextId="left")
        status, answer = await a2a.post(f"{base}/helper", request(method, {"message": message}))
        assert status == 404 and answer["error"]["code"] == -32600, (method, answer)
        await helper.client.join(SPACE)
    monkeypatch.undo()
    assert len(asked) == 2
    for task_id in asked:  # the stored task is gone again
        unknown = await a2a.call(base, "GetTask", {"id": task_id})
        assert unknown.get("error", {}).get("code") == -32001, unknown
    assert await listed(base, "left") == []
    nothing_held(gw)
    # The member back, the next send is served.
    done = await a2a.send(f"{base}/helper", "again", message=a2a.message("again"))
    assert a2a.state(done) == "TASK_STATE_COMPLETED"
    await helper.aclose()


async def test_a_refused_follow_up_leaves_a_background_task_working(hub, clients):
    """A follow-up refused (429) leaves the task as it was: the turn the agent
    works on in the background goes on, and its answer still ends the task."""
    gw = gateway()
    # Two messages for the gateway's member: its join of the space, the first turn.
    server = await hub(adapters=[gw], bridge_rate_limit=0.01, bridge_rate_burst=2)
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    task = await a2a.send(base, "work on it")
    assert a2a.state(task) == "TASK_STATE_WORKING"  # in the background
    run = gw.tasks.runs[task["id"]]
    follow = request("SendMessage", {"message": a2a.message("more", taskId=task["id"])})
    status, answer = await a2a.post(base, follow)
    assert status == 429 and answer["error"]["code"] == -32603, answer
    got = (await a2a.call(base, "GetTask", {"id": task["id"]}))["result"]
    assert a2a.state(got) == "TASK_STATE_WORKING"
    await helper.finish(task["id"])
    await asyncio.wait_for(run.finished.wait(), 10)
    got = (await a2a.call(base, "GetTask", {"id": task["id"]}))["result"]
    assert a2a.state(got) == "TASK_STATE_COMPLETED", got
    assert got["artifacts"][-1]["parts"] == [{"text": "done"}]
    await settled(gw)
    nothing_held(gw)
    await helper.aclose()


# ── D2: a member URL naming nobody is 404 for every method ─────────────────


async def test_a_member_url_naming_nobody_is_404_for_every_method(hub, clients):
    gw = gateway(max_body_bytes=4096)
    server = await hub(adapters=[gw])
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    task = await a2a.send(f"{base}/helper", "hi")
    send = {"message": a2a.message("hi", contextId="ghostly")}
    calls = [
        ("GetTask", {"id": task["id"]}),
        ("ListTasks", {}),
        ("CancelTask", {"id": task["id"]}),
        ("SubscribeToTask", {"id": task["id"]}),
        ("SendMessage", send),
        ("SendStreamingMessage", send),
        ("CreateTaskPushNotificationConfig", {}),
        ("Frobnicate", {}),
    ]
    assert await card_status(f"{base}/ghost") == 404
    for method, params in calls:
        status, answer = await a2a.post(f"{base}/ghost", request(method, params))
        assert status == 404 and answer["error"]["code"] == -32600, (method, answer)
    # Before the body is read: neither its size nor its syntax is looked at.
    for body in (b"{" + b" " * 8192 + b"}", b"{not json"):
        status, answer = await a2a.post(f"{base}/ghost", body)
        assert status == 404 and answer["id"] is None, answer
    # The refused sends kept nothing; the task is there, at its member's URL.
    assert await listed(base, "ghostly") == []
    nothing_held(gw)
    got = await a2a.call(f"{base}/helper", "GetTask", {"id": task["id"]})
    assert got["result"]["id"] == task["id"]
    # A member that left is nobody there any more: its card and its methods alike.
    await helper.client.leave(SPACE)
    assert await card_status(f"{base}/helper") == 404
    status, _ = await a2a.post(f"{base}/helper", request("GetTask", {"id": task["id"]}))
    assert status == 404
    got = await a2a.call(base, "GetTask", {"id": task["id"]})  # the space's URL still knows it
    assert got["result"]["id"] == task["id"]
    await helper.client.join(SPACE)
    assert await card_status(f"{base}/helper") == 200
    got = await a2a.call(f"{base}/helper", "GetTask", {"id": task["id"]})
    assert got["result"]["id"] == task["id"]
    await helper.aclose()


# ── D3: the order of refusals ──────────────────────────────────────────────


async def test_refusals_come_in_the_documented_order(hub, clients, tmp_path):
    """401, 409, 404 (as the card says), 413 / 400, then 403 for a send by a
    caller who may join but not publish — before its params are looked at."""
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({
        "helper": "h-token", "alice": "a-token", "a2a": "x-token",
        "carol": {"token": "c-token", "join": [SPACE], "publish": []},
        "dave": {"token": "d-token", "join": ["elsewhere"], "publish": []},
    }))  # fmt: skip
    gw = gateway(max_body_bytes=4096)
    server = await hub(
        adapters=[gw], auth_mode="tokens", auth_tokens_file=str(tokens), a2a_cards_public=True
    )
    helper = await Answerer.start(lambda s, a: clients(s, a, token="h-token"), server)
    base = f"{server.http_url}/a2a/{SPACE}"
    send = request("SendMessage", {"message": a2a.message("hi", contextId="ordered")})
    big = b"{" + b" " * 8192 + b"}"

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def status_of(url: str, body: Any, token: str | None) -> int:
        status, answer = await a2a.post(url, body, headers=bearer(token) if token else None)
        assert answer["jsonrpc"] == "2.0" and "error" in answer, answer
        return status

    # No or a bad token, then a token naming the hub's own agent: before any space.
    assert await status_of(f"{base}/ghost", big, None) == 401
    assert await status_of(f"{base}/ghost", big, "x-token") == 409
    for token in ("c-token", "a-token", "d-token"):
        # An unknown member: 404 for everyone, as its card says, whatever the body.
        assert await card_status(f"{base}/ghost", **bearer(token)) == 404
        for body in (send, big, b"{not json"):
            assert await status_of(f"{base}/ghost", body, token) == 404, (token, body)
    # A space the caller may not join: 404 as well, its member URLs too.
    for url in (base, f"{base}/helper"):
        assert await card_status(url, **bearer("d-token")) == 404
        assert await status_of(url, send, "d-token") == 404
    # carol may join, not publish: the member is there (its card says so) ...
    assert await card_status(f"{base}/helper", **bearer("c-token")) == 200
    for url in (base, f"{base}/helper"):
        assert await status_of(url, big, "c-token") == 413  # the body read first
        assert await status_of(url, send, "c-token") == 403
        no_params = request("SendMessage", {})
        assert await status_of(url, no_params, "c-token") == 403  # before the params
        # ... and reading is hers.
        got = await a2a.call(url, "GetTask", {"id": "nope"}, headers=bearer("c-token"))
        assert got["error"]["code"] == -32001
    # alice may send.
    status, answer = await a2a.post(f"{base}/helper", send, headers=bearer("a-token"))
    assert status == 200, answer
    tasks = await listed(base, "ordered", **bearer("a-token"))
    assert [t["id"] for t in tasks] == [answer["result"]["task"]["id"]]
    assert await listed(base, "ordered", **bearer("c-token")) == []
    await settled(gw)
    nothing_held(gw)
    await helper.aclose()


async def test_the_phantom_task_of_the_audit(hub, clients):
    """The audit's reproduction (phantom.py): a send to a member URL naming
    nobody is 404, and no task of its context is listed or found afterwards."""
    gw = gateway()
    server = await hub(adapters=[gw])
    helper = await Answerer.start(clients, server)
    base = f"{server.http_url}/a2a/{SPACE}"
    message = a2a.message("hello", contextId="phantom")
    status, _ = await a2a.post(f"{base}/ghost", request("SendMessage", {"message": message}))
    assert status == 404
    assert await listed(base, "phantom") == []
    body = request("SendStreamingMessage", {"message": message})
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/ghost", json=body, headers=a2a.HEADERS) as resp,
    ):
        assert resp.status == 404
        assert json.loads(await resp.read())["error"]["code"] == -32600
    assert await listed(base, "phantom") == []
    nothing_held(gw)
    await helper.aclose()


@pytest.mark.redis
async def test_a_member_on_another_node_answers_at_its_url(hub, clients, redis_server):
    """Membership is the cluster's: a member URL answers on every node for an
    agent connected to any of them, and nowhere for one that is not a member."""
    one = await hub(adapters=[gateway()], redis_url=redis_server.url)
    two = await hub(adapters=[gateway()], redis_url=redis_server.url)
    helper = await Answerer.start(clients, two)  # the agent is on the second node
    url_one = f"{one.http_url}/a2a/{SPACE}"
    assert await card_status(f"{url_one}/helper") == 200
    task = await a2a.send(f"{url_one}/helper", "hi")
    assert a2a.state(task) == "TASK_STATE_COMPLETED"
    got = await a2a.call(f"{url_one}/helper", "GetTask", {"id": task["id"]})
    assert got["result"]["id"] == task["id"]
    for url in (url_one, f"{two.http_url}/a2a/{SPACE}"):
        assert await card_status(f"{url}/ghost") == 404
        status, _ = await a2a.post(f"{url}/ghost", request("GetTask", {"id": task["id"]}))
        assert status == 404
    await helper.aclose()
