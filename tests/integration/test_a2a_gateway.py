"""The A2A gateway inbound, on one hub with real WebSocket agents answering:
cards, tasks and their states, streaming, multi-turn, cancel, auth, and
every bound and every kind of bad input."""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import orjson
import pytest

from adapters.a2a import A2aGateway, InboundOptions, SpaceCard
from tests.support import a2a_http as a2a
from tests.support.a2a_agents import Answerer

SPACE = "lab"


def gateway(**options: object) -> A2aGateway:
    return A2aGateway({SPACE: SpaceCard()}, InboundOptions(**options))  # type: ignore[arg-type]


async def started(hub, clients, **settings: object):
    options = settings.pop("options", {})
    server = await hub(adapters=[gateway(**options)], **settings)  # type: ignore[arg-type]
    helper = await Answerer.start(clients, server)
    return server, helper, f"{server.http_url}/a2a/{SPACE}"


# ── cards ──────────────────────────────────────────────────────────────────


async def get_card(url: str, **headers: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_cards_list_the_members_skills(hub, clients):
    server, helper, base = await started(hub, clients, trusted_proxies=["127.0.0.1"])
    other = await clients(server, "translator")
    about = {"a2a": {"name": "Translator", "description": "Any language"}}
    await other.register(capabilities=["urn:test:translate", "urn:test:echo"], metadata=about)
    await other.join(SPACE)
    status, card = await get_card(f"{base}/.well-known/agent-card.json")
    assert status == 200 and card["name"] == SPACE
    assert [(s["id"], s["tags"]) for s in card["skills"]] == [
        ("urn:test:echo", ["helper", "translator"]), ("urn:test:translate", ["translator"]),
    ]  # fmt: skip
    assert card["supportedInterfaces"][0]["url"] == base
    status, mine = await get_card(f"{base}/translator/.well-known/agent-card.json")
    assert (mine["name"], mine["description"]) == ("Translator", "Any language")
    assert mine["supportedInterfaces"][0]["url"] == f"{base}/translator"
    # Behind a trusted proxy the card names the URL the client reached.
    _, proxied = await get_card(
        f"{base}/.well-known/agent-card.json",
        **{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "agents.example"},
    )
    assert proxied["supportedInterfaces"][0]["url"] == f"https://agents.example/a2a/{SPACE}"
    for missing in ("/a2a/nowhere", f"/a2a/{SPACE}/nobody", f"/a2a/{SPACE}/a2a"):
        status, _ = await get_card(f"{server.http_url}{missing}/.well-known/agent-card.json")
        assert status == 404, missing
    await helper.aclose()


# ── tasks ──────────────────────────────────────────────────────────────────


async def test_a_message_becomes_an_event_and_its_reply_the_task(hub, clients):
    _server, helper, base = await started(hub, clients)
    task = await a2a.send(base, "data please", metadata={"x": 1})
    assert a2a.state(task) == "TASK_STATE_COMPLETED"
    seen = await helper.wait_for(lambda d: d.get("text") == "data please")
    caller = seen["caller"]
    assert caller.startswith("a2a-caller-")  # auth off: a made-up caller
    assert seen == {
        "via": "a2a", "task_id": task["id"], "context_id": task["contextId"],
        "message_id": seen["message_id"], "text": "data please",
        "parts": [{"text": "data please"}], "caller": caller, "from": "a2a",
    }  # fmt: skip
    assert task["artifacts"][0]["parts"] == [{"data": {"answer": 42, "caller": caller}}]
    # The same context goes on in a new task; a member URL sends to that member only.
    again = await a2a.send(f"{base}/helper", "hi", message=a2a.message("hi", contextId="c-1"))
    assert again["contextId"] == "c-1" and again["artifacts"][0]["parts"] == [{"text": "echo:hi"}]
    got = await a2a.call(base, "GetTask", {"id": task["id"]})
    assert got["result"] == task
    await helper.aclose()


async def test_return_immediately_then_get_task(hub, clients):
    _server, helper, base = await started(hub, clients)
    answer = await a2a.call(
        base, "SendMessage",
        {"message": a2a.message("hello"), "configuration": {"returnImmediately": True}},
    )  # fmt: skip
    task = answer["result"]["task"]
    assert a2a.state(task) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    async with asyncio.timeout(10):
        while a2a.state(task) != "TASK_STATE_COMPLETED":
            task = (await a2a.call(base, "GetTask", {"id": task["id"]}))["result"]
    assert task["artifacts"][0]["parts"] == [{"text": "echo:hello"}]
    await helper.aclose()


async def test_failures_and_timeouts_fail_the_task(hub, clients):
    _server, helper, base = await started(hub, clients, bridge_timeout=0.5)
    failed = await a2a.send(base, "fail")
    assert a2a.state(failed) == "TASK_STATE_FAILED"
    assert failed["status"]["message"]["parts"] == [{"text": "it broke"}]
    silent = await a2a.send(base, "silent")
    assert a2a.state(silent) == "TASK_STATE_FAILED"
    assert silent["status"]["message"]["parts"] == [{"text": "Timeout"}]
    await helper.aclose()


async def test_a_streamed_reply_streams(hub, clients):
    _server, helper, base = await started(hub, clients)
    results = await a2a.stream(base, {"message": a2a.message("stream it")})
    kinds = [next(iter(r)) for r in results]
    assert kinds[:2] == ["task", "statusUpdate"] and kinds[-1] == "statusUpdate"
    assert a2a.state(results[0]["task"]) == "TASK_STATE_SUBMITTED"
    assert a2a.state(results[1]["statusUpdate"]) == "TASK_STATE_WORKING"
    updates = [r["artifactUpdate"] for r in results if "artifactUpdate" in r]
    assert len({u["artifact"]["artifactId"] for u in updates}) == 1
    assert [u.get("append", False) for u in updates] == [False] + [True] * (len(updates) - 1)
    assert [u.get("lastChunk", False) for u in updates][-1] is True
    assert "".join(p["text"] for u in updates for p in u["artifact"]["parts"]) == "one two three"
    assert a2a.state(results[-1]["statusUpdate"]) == "TASK_STATE_COMPLETED"
    # A plain reply is one artifactUpdate.
    plain = await a2a.stream(base, {"message": a2a.message("hi")})
    assert [next(iter(r)) for r in plain] == ["task", "statusUpdate", "artifactUpdate",
                                              "statusUpdate"]  # fmt: skip
    await helper.aclose()


async def test_multi_turn_through_input_required(hub, clients):
    _server, helper, base = await started(hub, clients, options={"max_turns": 2})
    asked = await a2a.send(base, "ask")
    assert a2a.state(asked) == "TASK_STATE_INPUT_REQUIRED"
    assert asked["status"]["message"]["parts"] == [{"text": "which city?"}]
    task_id, context = asked["id"], asked["contextId"]
    mismatched = a2a.message("x", taskId=task_id, contextId="other")
    wrong = await a2a.call(base, "SendMessage", {"message": mismatched})
    assert wrong["error"]["code"] == -32602
    done = await a2a.send(base, "Oslo", message=a2a.message("Oslo", taskId=task_id))
    assert (done["id"], done["contextId"], a2a.state(done)) == (task_id, context,
                                                                "TASK_STATE_COMPLETED")  # fmt: skip
    follow = await helper.wait_for(lambda d: d.get("text") == "Oslo")
    assert follow["task_id"] == task_id
    finished = await a2a.call(base, "SendMessage", {"message": a2a.message("x", taskId=task_id)})
    assert finished["error"]["code"] == -32004
    unknown = await a2a.call(base, "SendMessage", {"message": a2a.message("x", taskId="nope")})
    assert unknown["error"]["code"] == -32001
    await helper.aclose()


async def test_too_many_turns(hub, clients):
    _server, helper, base = await started(hub, clients, options={"max_turns": 1})
    asked = await a2a.send(base, "ask")
    again = await a2a.call(base, "SendMessage", {"message": a2a.message("x", taskId=asked["id"])})
    assert again["error"]["code"] == -32004 and "turns" in again["error"]["message"]
    await helper.aclose()


async def test_cancel_tells_the_agent_and_stops_the_stream(hub, clients):
    _server, helper, base = await started(hub, clients)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": a2a.message("slow")}}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(base, json=body, headers=a2a.HEADERS) as resp,
    ):
        lines = resp.content.__aiter__()
        results = []
        while not any("artifactUpdate" in r for r in results):
            line = await asyncio.wait_for(lines.__anext__(), 10)
            if line.startswith(b"data: "):
                results.append(json.loads(line[6:])["result"])
        task_id = results[0]["task"]["id"]
        cancelled = await a2a.call(base, "CancelTask", {"id": task_id})
        assert a2a.state(cancelled["result"]) == "TASK_STATE_CANCELED"
        rest = [json.loads(line[6:])["result"] async for line in resp.content
                if line.startswith(b"data: ")]  # fmt: skip
    assert a2a.state(rest[-1]["statusUpdate"]) == "TASK_STATE_CANCELED"
    told = await helper.wait_for(lambda d: d.get("cancel") is True)
    assert told["task_id"] == task_id
    again = await a2a.call(base, "CancelTask", {"id": task_id})
    assert again["error"]["code"] == -32002
    done = await a2a.send(base, "hi")
    finished = await a2a.call(base, "CancelTask", {"id": done["id"]})
    assert finished["error"]["code"] == -32002
    got = await a2a.call(base, "GetTask", {"id": task_id})
    assert a2a.state(got["result"]) == "TASK_STATE_CANCELED"
    await helper.aclose()


async def test_a_client_that_drops_its_stream_mid_answer(hub, clients):
    _server, helper, base = await started(hub, clients)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": a2a.message("slow")}}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        resp = await http.post(base, json=body, headers=a2a.HEADERS)
        first = json.loads((await resp.content.readline())[6:])["result"]
        resp.close()  # gone mid-answer
    task_id = first["task"]["id"]
    # The task goes on without its listener: the agent's stream ends, the task is stored.
    seen = await helper.wait_for(lambda d: d.get("task_id") == task_id)
    stream = helper._slow.pop(task_id)
    await stream.send("done")
    await stream.close()
    async with asyncio.timeout(10):
        while True:
            task = (await a2a.call(base, "GetTask", {"id": task_id}))["result"]
            if a2a.state(task) == "TASK_STATE_COMPLETED":
                break
    assert task["artifacts"][0]["parts"] == [{"text": "working… done"}] and seen
    assert a2a.state(await a2a.send(base, "hi")) == "TASK_STATE_COMPLETED"  # still serving
    await helper.aclose()


# ── bad input ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("body", "code", "status"),
    [
        (b"{not json", -32700, 200),
        (b"[]", -32600, 200),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]', -32600, 200),
        (b'"GetTask"', -32600, 200),
        (b'{"jsonrpc": "2.0", "id": [1], "method": "GetTask"}', -32600, 200),
        (b'{"id": 1, "method": "GetTask"}', -32600, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "Frobnicate"}', -32601, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}', -32001, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {}}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
         b'{"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": '
         b'{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}, '
         b'"configuration": {"taskPushNotificationConfig": {"url": "http://x"}}}}', -32003, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig"}', -32003, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 0}}',
         -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageToken": "x"}}',
         -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x", '
         b'"historyLength": -1}}', -32602, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard"}', -32004, 200),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}, "d": '
         + b"[" * 100 + b"]" * 100 + b"}", -32600, 400),
    ],
)  # fmt: skip
async def test_bad_requests_get_the_spec_answer(hub, body, code, status):
    server = await hub(adapters=[gateway()])
    got_status, answer = await a2a.post(f"{server.http_url}/a2a/{SPACE}", body)
    assert (got_status, answer["error"]["code"]) == (status, code), answer
    assert answer["jsonrpc"] == "2.0"


async def test_versions_other_than_1_x_are_refused(hub):
    server = await hub(adapters=[gateway()])
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    url = f"{server.http_url}/a2a/{SPACE}"
    _, old = await a2a.post(url, body, headers={"A2A-Version": "0.3"})
    assert old["error"]["code"] == -32009 and old["id"] == 1
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as resp:
        assert (await resp.json())["error"]["code"] == -32001  # no header: 1.0


async def test_unknown_spaces_and_agents_are_404(hub, clients):
    server, helper, base = await started(hub, clients)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": a2a.message("hi")}}  # fmt: skip
    for url in (f"{server.http_url}/a2a/elsewhere", f"{base}/nobody", f"{base}/a2a"):
        status, answer = await a2a.post(url, body)
        assert status == 404, url
        assert answer["error"]["code"] == -32600 and answer["error"]["message"], url
    await helper.aclose()


# ── bounds ─────────────────────────────────────────────────────────────────


async def test_a_20_mb_body_is_refused_and_the_hub_keeps_serving(hub, clients):
    _server, helper, base = await started(hub, clients)
    status, answer = await a2a.post(base, b"{" + b" " * (20 * 1024 * 1024) + b"}")
    assert status == 413 and answer["error"]["code"] == -32600
    assert a2a.state(await a2a.send(base, "hi")) == "TASK_STATE_COMPLETED"
    await helper.aclose()


async def test_body_and_parts_bounds(hub, clients):
    _server, helper, base = await started(
        hub, clients, options={"max_body_bytes": 2048, "max_parts": 2}
    )
    status, _ = await a2a.post(
        base, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
               "params": {"message": a2a.message("x" * 3000)}},
    )  # fmt: skip
    assert status == 413
    three = a2a.message("a", parts=[{"text": "a"}, {"text": "b"}, {"text": "c"}])
    answer = await a2a.call(base, "SendMessage", {"message": three})
    assert answer["error"]["code"] == -32602 and "parts" in answer["error"]["message"]
    await helper.aclose()


async def test_open_tasks_and_streams_per_node_are_bounded(hub, clients):
    _server, helper, base = await started(
        hub, clients, bridge_timeout=5, options={"max_open_tasks": 1, "max_streams": 1}
    )
    waiting = asyncio.ensure_future(a2a.send(base, "silent"))
    await helper.wait_for(lambda d: d.get("text") == "silent")
    status, busy = await a2a.post(
        base, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
               "params": {"message": a2a.message("hi")}},
    )  # fmt: skip
    assert status == 503 and busy["error"]["code"] == -32603
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    await helper.aclose()


async def test_tasks_in_the_background_have_their_own_bound(hub, clients):
    """Tasks the agent works on in the background (after a progress note) no
    longer hold a slot of the open tasks, up to their own bound."""
    _server, helper, base = await started(
        hub, clients, bridge_timeout=30, caller_share=1.0,
        options={"max_open_tasks": 2, "max_background_tasks": 3},
    )  # fmt: skip
    for n in range(5):  # three in the background, then two that keep their open slot
        assert a2a.state(await a2a.send(base, f"work {n}")) == "TASK_STATE_WORKING"
    status, busy = await a2a.post(
        base, {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
               "params": {"message": a2a.message("work more")}},
    )  # fmt: skip
    assert status == 503 and busy["error"]["code"] == -32603
    await helper.aclose()


async def test_one_stream_per_node(hub, clients):
    _server, helper, base = await started(
        hub, clients, options={"max_streams": 1, "max_open_tasks": 10}
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": a2a.message("slow")}}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        first = await http.post(base, json=body, headers=a2a.HEADERS)
        await first.content.readline()
        status, busy = await a2a.post(base, body)
        assert status == 503 and "streams" in busy["error"]["message"]
        first.close()
    await helper.aclose()


async def test_a_reply_over_the_bound_fails_the_task(hub, clients):
    _server, helper, base = await started(hub, clients, options={"max_reply_bytes": 8})
    big = await a2a.send(base, "0123456789")  # echo:0123456789 is 15 bytes
    assert a2a.state(big) == "TASK_STATE_FAILED"
    assert "exceeds 8 bytes" in big["status"]["message"]["parts"][0]["text"]
    streamed = await a2a.send(base, "stream")
    assert a2a.state(streamed) == "TASK_STATE_FAILED"
    await helper.aclose()


# ── auth ───────────────────────────────────────────────────────────────────


async def test_bearer_tokens_name_the_caller_and_its_claims_apply(hub, clients, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({
        "helper": "h-token", "alice": "a-token",
        "reader": {"token": "r-token", "publish": ["elsewhere"]},
        "a2a": "x-token",  # the gateway's own id: no caller may act as it
    }))  # fmt: skip
    server = await hub(adapters=[gateway()], auth_mode="tokens", auth_tokens_file=str(tokens))
    helper = await Answerer.start(lambda s, a: clients(s, a, token="h-token"), server)
    base = f"{server.http_url}/a2a/{SPACE}"
    status, _ = await get_card(f"{base}/.well-known/agent-card.json")
    assert status == 401  # cards too want a token (a2a_cards_public is off)
    _, card = await get_card(f"{base}/.well-known/agent-card.json", Authorization="Bearer a-token")
    assert "bearer" in card["securitySchemes"]
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": a2a.message("data")}}  # fmt: skip
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, refused = await a2a.post(base, body, headers=headers)
        assert status == 401 and refused["error"]["code"] == -32600  # a JSON-RPC error body
    status, own = await a2a.post(base, body, headers={"Authorization": "Bearer x-token"})
    assert status == 409 and "hub's own" in own["error"]["message"]
    status, answer = await a2a.post(base, body, headers={"Authorization": "Bearer a-token"})
    assert status == 200
    task = answer["result"]["task"]
    assert task["artifacts"][0]["parts"] == [{"data": {"answer": 42, "caller": "alice"}}]
    status, refused = await a2a.post(base, body, headers={"Authorization": "Bearer r-token"})
    assert status == 403 and refused["error"]["code"] == -32600
    # A task is seen only by its caller.
    get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task["id"]}}
    _, other = await a2a.post(base, get, headers={"Authorization": "Bearer r-token"})
    assert other["error"]["code"] == -32001
    _, own = await a2a.post(base, get, headers={"Authorization": "Bearer a-token"})
    assert own["result"]["id"] == task["id"]
    await helper.aclose()


async def test_shutdown_answers_open_tasks(hub, clients):
    server, helper, base = await started(hub, clients)
    waiting = asyncio.ensure_future(a2a.stream(base, {"message": a2a.message("silent")}))
    await helper.wait_for(lambda d: d.get("text") == "silent")
    await helper.aclose()
    await server.aclose()
    results = await asyncio.wait_for(waiting, 10)
    final = results[-1]["statusUpdate"]
    assert a2a.state(final) == "TASK_STATE_FAILED"
    assert "shutting down" in final["status"]["message"]["parts"][0]["text"]


# ── seeded junk ────────────────────────────────────────────────────────────


def junk_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-(2**40), 2**40)
    if kind == 3:
        return rng.random() * 1e6
    if kind in (4, 5):
        return rng.choice(["", "x", "ROLE_USER", "user", "TASK_STATE_COMPLETED", "é" * 40,
                           "\u0000", "a" * 300])  # fmt: skip
    if kind == 6:
        return [junk_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["message", "messageId", "role", "parts", "text", "data", "url", "raw", "taskId",
            "contextId", "configuration", "returnImmediately", "id", "x"]  # fmt: skip
    return {rng.choice(keys): junk_value(rng, depth + 1) for _ in range(rng.randrange(5))}


def junk_bodies(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    methods = ["SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "ListTasks",
               "", "sendMessage", "message/send"]  # fmt: skip
    bodies = []
    for _ in range(count):
        request: dict[str, object] = {"jsonrpc": rng.choice(["2.0", "2.0", "1.0", 2])}
        if rng.random() < 0.9:
            request["id"] = rng.choice([1, "r", None, [1], {"a": 1}, 1.5, True])
        request["method"] = rng.choice(methods) if rng.random() < 0.95 else junk_value(rng)
        if rng.random() < 0.9:
            request["params"] = junk_value(rng) if rng.random() < 0.3 else {
                "message": junk_value(rng, 1), "id": junk_value(rng, 3),
                "configuration": junk_value(rng, 3),
            }  # fmt: skip
        raw = orjson.dumps(request, option=orjson.OPT_NON_STR_KEYS)
        if rng.random() < 0.1:
            raw = raw[: rng.randrange(len(raw))]  # cut short
        bodies.append(raw)
    return bodies


async def test_seeded_junk_never_gets_a_5xx(hub):
    server = await hub(adapters=[gateway(max_open_tasks=1000)], bridge_timeout=0.2)
    url = f"{server.http_url}/a2a/{SPACE}"
    async with aiohttp.ClientSession() as http:
        for body in junk_bodies(seed=22, count=200):
            async with http.post(url, data=body, headers=a2a.HEADERS) as resp:
                assert resp.status in (200, 400, 413), (resp.status, body)
                if resp.content_type == "text/event-stream":
                    await resp.read()  # a valid streaming call: it times out, then ends
                    continue
                answer = await resp.json()
                assert answer["jsonrpc"] == "2.0" and ("result" in answer or "error" in answer)
                assert answer.get("error", {}).get("code") != -32603, (body, answer)
    task = await a2a.call(url, "GetTask", {"id": "nope"})
    assert task["error"]["code"] == -32001  # still serving


async def test_silence_on_a_stream_sends_keepalives(hub, clients):
    _, helper, base = await started(hub, clients, bridge_timeout=0.6,
                                    options={"keepalive": 0.05})  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": a2a.message("silent")}}  # fmt: skip
    async with (
        aiohttp.ClientSession() as http,
        http.post(base, json=body, headers=a2a.HEADERS) as resp,
    ):
        lines = [line async for line in resp.content]
    assert b": keepalive\n" in lines
    assert b"Timeout" in lines[-2]  # then the final status, and the end
    await helper.aclose()


async def test_cards_read_a_bounded_number_of_members(hub, clients):
    server, helper, base = await started(hub, clients, options={"member_scan_limit": 2})
    for n in range(3):
        other = await clients(server, f"agent{n}")
        await other.register(capabilities=[f"urn:test:skill{n}"])
        await other.join(SPACE)
    _, card = await get_card(f"{base}/.well-known/agent-card.json")
    # The first two members in join order (the gateway's own member, then helper).
    assert [s["id"] for s in card["skills"]] == ["urn:test:echo"]
    await helper.aclose()


async def test_a_follow_up_that_cannot_be_delivered_leaves_the_task_waiting(hub, clients):
    _, helper, base = await started(hub, clients)
    asked = await a2a.send(f"{base}/helper", "ask")
    assert a2a.state(asked) == "TASK_STATE_INPUT_REQUIRED"
    await helper.client.leave(SPACE)
    follow = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
              "params": {"message": a2a.message("Oslo", taskId=asked["id"])}}  # fmt: skip
    status, _ = await a2a.post(f"{base}/helper", follow)
    assert status == 404  # the member left: nothing was sent
    await helper.client.join(SPACE)
    done = await a2a.send(f"{base}/helper", "Oslo", message=a2a.message("Oslo", taskId=asked["id"]))
    assert a2a.state(done) == "TASK_STATE_COMPLETED"
    assert done["artifacts"][-1]["parts"] == [{"text": "thanks for Oslo"}]
    await helper.aclose()


async def test_the_gateway_obeys_the_bridge_rate_limit(hub, clients):
    """One ``a2a`` member publishes for every caller of the node: over
    ``bridge_rate_limit`` a request is 429 with ``Retry-After``."""
    _server, helper, base = await started(hub, clients, bridge_rate_limit=0.1, bridge_rate_burst=3)
    answers = []
    for n in range(4):
        params = {"message": a2a.message(f"n{n}"), "configuration": {"returnImmediately": True}}
        body = {"jsonrpc": "2.0", "id": f"r{n}", "method": "SendMessage", "params": params}
        answers.append(await a2a.post(base, body))
    statuses = [status for status, _ in answers]
    assert statuses[0] == 200 and 429 in statuses, statuses
    refused = next(answer for status, answer in answers if status == 429)
    assert refused["error"]["code"] == -32603 and "try again" in refused["error"]["message"]
    await helper.aclose()
