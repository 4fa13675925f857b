"""The HTTP envelope gateway end to end: a real hub, real HTTP, and a real
agent answering over WebSocket (contract §9, "Inbound over HTTP")."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from websockets.exceptions import ConnectionClosed

from hub.process.cli import main
from protocol.envelope import agora, verify
from protocol.identity import did_key
from tests.support.envelopes import (
    ALICE,
    BOB,
    agora_env,
    agora_request,
    ap_msg,
    ap_request,
    bad_signature,
    forged,
)
from tests.support.wsclient import WsClient

SPACE = "market"
Answer = Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]]


class Worker:
    """An agent over WebSocket that answers the REQUESTs it sees in a space."""

    def __init__(self, client: WsClient, answer: Answer | None):
        self.client = client
        self.answer = answer
        self.seen: list[dict[str, Any]] = []
        self.read = 0
        self.arrived = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    @classmethod
    async def start(
        cls, server: Any, answer: Answer | None = None, agent_id: str = "worker"
    ) -> Worker:
        client = await WsClient.connect(server.url, agent_id, heartbeat=True)
        reply = await client.request(
            {
                "type": "agent.register",
                "agent": {"id": agent_id, "type": "reviewer", "capabilities": ["review", "echo"]},
            }
        )
        assert reply["type"] == "agent.registered"
        await client.join(SPACE)
        return cls(client, answer)

    async def _run(self) -> None:
        with contextlib.suppress(ConnectionClosed):  # the hub went away: done
            await self._answer_all()

    async def _answer_all(self) -> None:
        while True:
            event = await self.client.wait_for("space.event", timeout=3600)
            self.seen.append(event)
            self.arrived.set()
            data = event["data"]
            if self.answer is None or data.get("type") not in ("REQUEST", "request"):
                continue
            for reply in await self.answer(data):
                await self.client.send(
                    {"type": "space.publish", "space": SPACE, "data": reply, "to": event["from"]}
                )

    async def next_event(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next event not yet read with this method (in delivery order)."""
        async with asyncio.timeout(timeout):
            while len(self.seen) <= self.read:
                self.arrived.clear()
                await self.arrived.wait()
        self.read += 1
        return self.seen[self.read - 1]

    async def close(self) -> None:
        self._task.cancel()
        await self.client.close()


async def result_for(request: dict[str, Any]) -> list[dict[str, Any]]:
    if request["protocol"] == "agora/1.0":
        payload = {"request_id": request["id"], "status": "success", "data": {"ok": 1}}
        return [agora_env("RESULT", payload, BOB)]
    payload = {"correlationId": request["payload"]["correlationId"], "result": {"ok": 1}}
    return [ap_msg("response", payload, BOB, to=request["from"]["agentId"])]


async def post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    async with aiohttp.ClientSession() as http, http.post(url, data=raw) as resp:
        return resp.status, orjson.loads(await resp.read())


async def hub_did(server: Any) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{server.http_url}/identity") as resp:
        return (await resp.json())["did"]


def assert_hub_error(server_did: str, envelope: dict[str, Any], code: int | str) -> None:
    """A well-formed error envelope, signed by the hub, with ``code``."""

    v = verify(envelope, now=time.time())
    assert v.did == server_did
    assert v.type in ("ERROR", "error")
    assert envelope["payload"]["code"] == code, envelope


# ── answers ─────────────────────────────────────────────────────────────────


async def test_an_agora_request_gets_the_agents_signed_result_verbatim(hub):
    server = await hub()
    worker = await Worker.start(server, result_for)
    request = agora_request(ALICE)
    status, answer = await post(f"{server.http_url}/envelope/{SPACE}", request)
    assert status == 200
    assert answer["type"] == "RESULT" and answer["payload"]["request_id"] == request["id"]

    v = verify(answer, now=time.time())  # its own signature, not the hub's
    assert v.signer == did_key(bytes(BOB.verify_key))
    # The worker saw the request as a verified event from the gateway.
    event = worker.seen[0]
    assert event["from"] == "envelope-gateway" and event["verified"] is True
    assert event["signer"] == did_key(bytes(ALICE.verify_key)) and event["data"] == request
    await worker.close()


async def test_an_offer_is_the_first_answer_to_a_request(hub):
    async def offer(request: dict[str, Any]) -> list[dict[str, Any]]:
        return [agora_env("OFFER", {"request_id": request["id"], "cost": 3, "ttl": 60000}, BOB)]

    server = await hub()
    worker = await Worker.start(server, offer)
    request = agora_request(ALICE)
    status, answer = await post(f"{server.http_url}/envelope/{SPACE}", request)
    assert status == 200 and answer["type"] == "OFFER"
    assert answer["payload"]["request_id"] == request["id"]
    await worker.close()


async def test_unrelated_and_unsigned_envelopes_do_not_answer(hub):
    """Only a verified envelope answering *this* request completes the wait."""

    async def noise_then_result(request: dict[str, Any]) -> list[dict[str, Any]]:
        unsigned = agora_env("RESULT", {"request_id": request["id"], "status": "success"}, BOB)
        unsigned["sender"]["signature"] = ""
        other = agora_env("RESULT", {"request_id": "someone-else", "status": "success"}, BOB)
        status = agora_env("STATUS", {"request_id": request["id"], "status": "working"}, BOB)
        return [unsigned, other, status, *(await result_for(request))]

    server = await hub()
    worker = await Worker.start(server, noise_then_result)
    request = agora_request(ALICE)
    status, answer = await post(f"{server.http_url}/envelope/{SPACE}", request)
    assert status == 200 and answer["type"] == "RESULT" and answer["sender"]["signature"]
    assert answer["payload"]["request_id"] == request["id"]
    await worker.close()


async def test_agentprotocol_requests_on_both_routes(hub):
    server = await hub(agentprotocol_space=SPACE)
    worker = await Worker.start(server, result_for)
    for url in (f"{server.http_url}/agentprotocol/{SPACE}", f"{server.http_url}/agentprotocol"):
        request = ap_request(ALICE, f"c-{url[-6:]}")
        status, answer = await post(url, request)
        assert status == 200, answer
        assert answer["type"] == "response"
        assert answer["payload"]["correlationId"] == request["payload"]["correlationId"]
    await worker.close()


async def test_agentprotocol_without_a_space_is_404(hub):
    server = await hub()
    status, answer = await post(f"{server.http_url}/agentprotocol", ap_request(ALICE))
    assert status == 404
    assert_hub_error(await hub_did(server), answer, "CAPABILITY_NOT_SUPPORTED")


async def test_no_answer_in_time_is_a_hub_signed_408(hub):
    server = await hub(bridge_timeout=5)
    worker = await Worker.start(server)  # never answers
    did = await hub_did(server)
    request = agora_request(ALICE, timeout=300)  # ms: the request's own timeout wins
    status, answer = await post(f"{server.http_url}/envelope/{SPACE}", request)
    assert status == 408
    assert_hub_error(did, answer, 408)
    assert answer["payload"]["request_id"] == request["id"]
    ap = ap_request(ALICE, "c-slow", timeout=300)
    status, answer = await post(f"{server.http_url}/agentprotocol/{SPACE}", ap)
    assert status == 408
    assert_hub_error(did, answer, "TIMEOUT")
    assert answer["payload"]["correlationId"] == "c-slow"
    assert answer["to"]["agentId"] == ap["from"]["agentId"]
    await worker.close()


async def test_bridge_timeout_applies_when_the_request_has_none(hub):
    server = await hub(bridge_timeout=0.3)
    worker = await Worker.start(server)
    status, answer = await post(f"{server.http_url}/envelope/{SPACE}", agora_request(ALICE))
    assert status == 408 and answer["payload"]["code"] == 408
    await worker.close()


async def test_hello_is_answered_by_the_hub_with_the_members(hub):
    server = await hub()
    worker = await Worker.start(server)
    did = await hub_did(server)
    status, welcome = await post(
        f"{server.http_url}/envelope/{SPACE}", agora_env("HELLO", {"name": "alice"}, ALICE)
    )
    assert status == 200 and welcome["type"] == "WELCOME"

    assert verify(welcome, now=time.time()).did == did
    assert welcome["payload"]["identity"]["did"] == did
    assert {"id": "worker", "capabilities": ["review", "echo"]} in welcome["payload"]["members"]
    hello = ap_msg("hello", {"version": "0.1"}, ALICE)
    status, back = await post(f"{server.http_url}/agentprotocol/{SPACE}", hello)
    assert status == 200 and back["type"] == "hello"
    assert back["to"]["agentId"] == hello["from"]["agentId"]
    assert {"id": "worker", "capabilities": ["review", "echo"]} in back["payload"]["members"]
    # A replayed HELLO is refused like any replay.
    status, err = await post(f"{server.http_url}/agentprotocol/{SPACE}", hello)
    assert status == 401
    assert_hub_error(did, err, "INVALID_MESSAGE")
    await worker.close()


async def test_other_types_are_published_and_accepted(hub):
    server = await hub()
    worker = await Worker.start(server)
    status_env = agora_env("STATUS", {"status": "up"}, ALICE)
    status, body = await post(f"{server.http_url}/envelope/{SPACE}", status_env)
    assert status == 202 and body["status"] == "accepted" and body["id"] == status_env["id"]
    event = await worker.next_event()
    assert event["event_id"] == body["event_id"] and event["seq"] == body["seq"]
    assert event["verified"] is True and event["data"] == status_env
    await worker.close()


# ── refusals ────────────────────────────────────────────────────────────────


def _spoiled() -> dict[str, tuple[Any, int]]:
    env = agora_env("STATUS", {"status": "x"}, ALICE)
    raw = orjson.dumps(env).decode()

    def edit(fn: Any) -> dict[str, Any]:
        out = copy.deepcopy(env)
        fn(out)
        return out

    cases = [
        ("not-json", b"{not json", 400),
        ("not-an-object", b"[1, 2]", 400),
        ("not-utf8", b'{"a":"\xff"}', 400),
        ("nan", raw.replace('"status":"x"', '"status":NaN').encode(), 400),
        ("duplicate-keys", raw.replace('"status":"x"', '"status":"x","status":"y"').encode(), 400),
        ("ten-megabytes", b'{"pad":"' + b"x" * (10 * 1024 * 1024) + b'"}', 400),
        ("deeply-nested", b"[" * 100_000 + b"]" * 100_000, 400),
        ("wrong-protocol", ap_msg("notify", {"event": "x"}, ALICE), 400),
        ("payload-wrong-type", edit(lambda e: e.update(payload="x")), 400),
        ("did-key-undecodable", edit(lambda e: e["sender"].update(id="did:key:z6Mk0OIl")), 400),
        (
            "signature-wrong-length",
            edit(lambda e: e["sender"].update(signature=e["sender"]["signature"][:60])),
            400,
        ),
        ("bad-signature", bad_signature(env), 401),
        ("forged", forged(env), 401),
        ("stale", agora_env("STATUS", {"status": "old"}, ALICE, age=600), 401),
        ("unsigned", edit(lambda e: e["sender"].update(signature="")), 401),
    ]
    return {name: (body, expected) for name, body, expected in cases}


@pytest.mark.parametrize("name", list(_spoiled()))
async def test_bad_input_gets_a_signed_error_and_nothing_is_published(hub, name):
    body, status = _spoiled()[name]  # built now: signed envelopes go stale
    server = await hub()
    worker = await Worker.start(server)
    got, answer = await post(f"{server.http_url}/envelope/{SPACE}", body)
    assert got == status
    assert_hub_error(await hub_did(server), answer, status)
    marker = agora_env("STATUS", {"status": "marker"}, ALICE)
    ok, _ = await post(f"{server.http_url}/envelope/{SPACE}", marker)
    assert ok == 202
    event = await worker.next_event()
    assert event["data"] == marker  # the first thing the worker saw
    await worker.close()


async def test_a_replayed_post_is_401(hub):
    server = await hub()
    worker = await Worker.start(server)
    env = agora_env("STATUS", {"status": "once"}, ALICE)
    assert (await post(f"{server.http_url}/envelope/{SPACE}", env))[0] == 202
    status, err = await post(f"{server.http_url}/envelope/{SPACE}", env)
    assert status == 401 and "already seen" in err["payload"]["message"]
    assert err["payload"]["request_id"] == env["id"]
    await worker.close()


async def test_a_request_replayed_while_it_waits_is_401(hub):
    """Contract §9: replayed → 401, while the original still waits too (not
    only once it has ended). Another signer's request with an id that is
    waiting is no replay of it, but cannot wait beside it: 400."""
    server = await hub(bridge_timeout=5)
    worker = await Worker.start(server)  # never answers
    url = f"{server.http_url}/envelope/{SPACE}"
    request = agora_request(ALICE, timeout=3000)
    waiting = asyncio.create_task(post(url, request))
    await worker.next_event()  # published: waiting
    status, err = await post(url, request)
    assert status == 401 and "already seen" in err["payload"]["message"], err
    unsigned = {**request, "sender": {}}
    status, err = await post(url, agora.sign(unsigned, BOB))
    assert status == 400 and "already open" in err["payload"]["message"], err
    assert (await waiting)[0] == 408
    await worker.close()


@pytest.mark.parametrize("space", ["nowhere", "agent.status", "Bad Name!", "x" * 200])
async def test_unknown_or_unusable_spaces_are_404(hub, space):
    server = await hub()
    status, err = await post(f"{server.http_url}/envelope/{space}", agora_request(ALICE))
    assert status == 404
    assert_hub_error(await hub_did(server), err, 404)


async def test_waits_are_bounded(hub):
    # One client takes every slot: no per-caller share here (test_authz_isolation's).
    server = await hub(envelope_max_waits=2, bridge_timeout=5, caller_share=1)
    worker = await Worker.start(server)  # never answers
    url = f"{server.http_url}/envelope/{SPACE}"
    first = [asyncio.create_task(post(url, agora_request(ALICE, timeout=3000))) for _ in range(2)]
    for _ in range(2):  # both are published, so both are waiting
        await worker.next_event()
    status, err = await post(url, agora_request(ALICE))
    assert status == 503
    assert_hub_error(await hub_did(server), err, 503)
    status, err = await post(f"{url.replace('/envelope/', '/agentprotocol/')}", ap_request(ALICE))
    assert status == 503 and err["payload"]["code"] == "RATE_LIMITED"
    assert [s for s, _ in await asyncio.gather(*first)] == [408, 408]
    await worker.close()


async def test_waiting_callers_get_503_when_the_hub_shuts_down(hub):
    server = await hub(bridge_timeout=60)
    worker = await Worker.start(server)  # never answers
    did = await hub_did(server)
    waiting = asyncio.create_task(post(f"{server.http_url}/envelope/{SPACE}", agora_request(ALICE)))
    await worker.next_event()  # published: the caller is waiting
    await server.aclose()
    status, err = await waiting
    assert status == 503 and "shutting down" in err["payload"]["message"]
    assert_hub_error(did, err, 503)


async def test_the_gateway_obeys_the_rate_limit_all_or_nothing(hub):
    server = await hub(bridge_rate_limit=2, bridge_rate_burst=3)
    worker = await Worker.start(server)
    url = f"{server.http_url}/envelope/{SPACE}"
    envs = [agora_env("STATUS", {"n": n}, ALICE) for n in range(12)]
    results = await asyncio.gather(*(post(url, e) for e in envs))
    statuses = [s for s, _ in results]
    assert 429 in statuses and set(statuses) <= {202, 429}
    accepted = [e for e, (s, _) in zip(envs, results, strict=True) if s == 202]
    for _ in accepted:
        await worker.next_event()
    assert sorted(e["data"]["id"] for e in worker.seen) == sorted(e["id"] for e in accepted)
    await worker.close()


async def test_the_hub_signs_with_its_identity_file(hub, tmp_path):
    key_file = tmp_path / "hub.key"
    assert main(["keygen", "--out", str(key_file)]) == 0
    did = orjson.loads(key_file.read_bytes())["did"]
    server = await hub(identity_file=str(key_file))
    assert await hub_did(server) == did
    status, err = await post(f"{server.http_url}/envelope/nowhere", agora_request(ALICE))
    assert status == 404
    assert_hub_error(did, err, 404)


async def test_the_gateway_can_be_turned_off(hub):
    server = await hub(envelope_http=False)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{server.http_url}/envelope/{SPACE}", data=b"{}") as resp,
    ):
        assert resp.status == 404


# ── a cluster ───────────────────────────────────────────────────────────────


@pytest.mark.redis
async def test_across_two_nodes_answers_and_replays(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    worker = await Worker.start(one, result_for)  # the agent is on node one
    request = agora_request(ALICE)
    status, answer = await post(f"{two.http_url}/envelope/{SPACE}", request)  # HTTP on two
    assert status == 200 and answer["payload"]["request_id"] == request["id"]
    env = agora_env("STATUS", {"status": "once"}, ALICE)
    assert (await post(f"{one.http_url}/envelope/{SPACE}", env))[0] == 202
    status, err = await post(f"{two.http_url}/envelope/{SPACE}", env)
    assert status == 401 and "already seen" in err["payload"]["message"]
    await worker.close()
