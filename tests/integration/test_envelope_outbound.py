"""Outbound ``[[bridges.envelope]]``: a remote agent behind a real HTTP server
in the test, a member of a space here (contract §9, "Outbound")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from nacl.signing import SigningKey

from adapters.envelope import EnvelopeBridge
from adapters.envelope.outbound import EnvelopePeer
from hub.config.settings import load_settings
from protocol.envelope import agentprotocol as ap
from protocol.envelope import agora, verify
from protocol.identity import did_key
from tests.support.envelopes import ALICE, agora_env, agora_request, ap_request, forged
from tests.support.servers import FAST, HubProcess, free_port
from tests.support.wsclient import WsClient

SPACE = "market"
REMOTE = SigningKey(b"\x33" * 32)
REMOTE_DID = did_key(bytes(REMOTE.verify_key))


class RemoteAgent:
    """A signed-envelope agent on its own HTTP server: verifies what it gets
    and answers with its own key — or misbehaves as ``mode`` says."""

    def __init__(self) -> None:
        self.mode = "result"
        self.received: list[bytes] = []
        self.release = asyncio.Event()
        self.called = asyncio.Event()
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> RemoteAgent:
        app = web.Application()
        app.router.add_post("/agent", self._post)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/agent"
        return self

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.received.append(body)
        self.called.set()
        env = orjson.loads(body)
        verify(env, now=time.time())  # the sender's own signature arrives intact
        mode = self.mode
        if mode == "slow":
            await asyncio.sleep(5)
        if mode == "block":
            await self.release.wait()
        if mode == "http500":
            return web.Response(status=500, text="boom")
        if mode == "redirect":
            raise web.HTTPFound("http://127.0.0.1:9/elsewhere")
        if mode == "huge":
            return web.Response(body=b'{"pad":"' + b"x" * (2 * 1024 * 1024) + b'"}')
        answer = self._answer(env)
        if mode == "forged":
            answer = forged(answer)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    def _answer(self, env: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        if env["protocol"] == "agora/1.0":
            payload = {"request_id": env["id"], "status": "success", "data": {"answer": 42}}
            return agora.build("RESULT", payload, signing_key=REMOTE, now=now)
        payload = {"correlationId": env["payload"]["correlationId"], "result": {"answer": 42}}
        return ap.build("response", payload, signing_key=REMOTE, now=now, to="x")


@pytest.fixture
async def remote() -> AsyncIterator[RemoteAgent]:
    agent = await RemoteAgent().start()
    yield agent
    agent.release.set()
    await agent.aclose()


def bridge(url: str, protocol: str = "agora/1.0", timeout: float = 3.0) -> dict[str, Any]:
    return {
        "space": SPACE,
        "agent_id": "remote",
        "url": url,
        "protocol": protocol,
        "timeout": timeout,
    }


async def ask(alice: WsClient, data: dict[str, Any]) -> dict[str, Any]:
    """Address ``data`` to the bridge; return what comes back from it."""
    sent = await alice.request(
        {"type": "space.publish", "space": SPACE, "data": data, "to": "remote"}
    )
    assert sent["type"] == "space.event", sent
    return await alice.wait_for("space.event", **{"from": "remote"})


async def alice_in(server: Any) -> WsClient:
    alice = await WsClient.connect(server.url, "alice")
    joined = await alice.join(SPACE)
    assert "remote" in joined["members"]
    return alice


def hub_error(server: Any, event: dict[str, Any], code: int | str) -> dict[str, Any]:
    """An error envelope from the hub's own key, addressed to alice, verified."""
    assert event["to"] == "alice" and event["verified"] is True
    assert event["signer"] == server.node.identity.did
    payload = event["data"]["payload"]
    assert payload["code"] == code, event["data"]
    return payload


async def test_a_request_is_forwarded_as_signed_and_the_answer_comes_back(hub, remote):
    server = await hub(bridges={"envelope": [bridge(remote.url)]})
    alice = await alice_in(server)
    request = agora_request(ALICE)
    answer = await ask(alice, request)
    assert orjson.loads(remote.received[0]) == request  # as signed, never re-signed
    assert answer["to"] == "alice" and answer["verified"] is True
    assert answer["signer"] == REMOTE_DID
    assert answer["data"]["type"] == "RESULT"
    assert answer["data"]["payload"]["request_id"] == request["id"]
    await alice.close()


async def test_agentprotocol_peer(hub, remote):
    server = await hub(bridges={"envelope": [bridge(remote.url, "agentprotocol/0.1")]})
    alice = await alice_in(server)
    request = ap_request(ALICE, "c-remote")
    answer = await ask(alice, request)
    assert orjson.loads(remote.received[0]) == request
    assert answer["verified"] is True and answer["data"]["type"] == "response"
    assert answer["data"]["payload"]["correlationId"] == "c-remote"
    # An agora envelope is not this peer's protocol: refused (in the sender's
    # format), never sent.
    refused = await ask(alice, agora_request(ALICE))
    assert refused["data"]["protocol"] == "agora/1.0"
    hub_error(server, refused, 400)
    assert len(remote.received) == 1
    await alice.close()


@pytest.mark.parametrize(
    "mode, code, words",
    [
        ("slow", 408, "did not answer"),
        ("http500", 503, "HTTP 500"),
        ("forged", 503, "remote answer refused"),
        ("huge", 503, "remote answer refused"),
        ("redirect", 503, "HTTP 302"),
    ],
)
async def test_remote_failures_become_hub_signed_errors(hub, remote, mode, code, words):
    remote.mode = mode
    server = await hub(bridges={"envelope": [bridge(remote.url, timeout=0.5)]})
    alice = await alice_in(server)
    request = agora_request(ALICE)
    payload = hub_error(server, await ask(alice, request), code)
    assert payload["request_id"] == request["id"] and words in payload["message"]
    await alice.close()


async def test_an_unreachable_remote_is_an_error_too(hub):
    url = f"http://127.0.0.1:{free_port()}/agent"
    server = await hub(bridges={"envelope": [bridge(url)]})
    alice = await alice_in(server)
    payload = hub_error(server, await ask(alice, agora_request(ALICE)), 503)
    assert "unreachable" in payload["message"]
    await alice.close()


async def test_only_signed_envelopes_are_forwarded(hub, remote):
    server = await hub(bridges={"envelope": [bridge(remote.url)]})
    alice = await alice_in(server)
    unsigned = agora_request(ALICE)
    unsigned["sender"]["signature"] = ""
    hub_error(server, await ask(alice, unsigned), 401)
    hub_error(server, await ask(alice, {"text": "plain words"}), 400)
    # Not addressed to the bridge: not its business.
    await alice.request(
        {"type": "space.publish", "space": SPACE, "data": agora_env("STATUS", {}, ALICE)}
    )
    assert remote.received == []
    await alice.close()


async def test_concurrent_calls_are_bounded(hub, remote):
    remote.mode = "block"
    settings = load_settings({"port": 0, **FAST})
    peer = EnvelopePeer(
        EnvelopeBridge(**bridge(remote.url, timeout=10)), settings, max_concurrent=1
    )
    server = await hub(adapters=[peer])
    alice = await alice_in(server)
    one, two = agora_request(ALICE), agora_request(ALICE)
    await alice.request({"type": "space.publish", "space": SPACE, "data": one, "to": "remote"})
    await asyncio.wait_for(remote.called.wait(), 10)
    busy = await ask(alice, two)
    payload = hub_error(server, busy, 429)
    assert payload["request_id"] == two["id"]
    remote.release.set()
    answer = await alice.wait_for("space.event", **{"from": "remote"})
    assert answer["data"]["payload"]["request_id"] == one["id"]
    assert len(remote.received) == 1
    await alice.close()


# ── one holder in a cluster, the others stand by ────────────────────────────


def _peer(server: Any) -> EnvelopePeer:
    return next(a for a in server.node.adapters if isinstance(a, EnvelopePeer))


@pytest.mark.redis
async def test_the_bridge_moves_to_another_node_when_its_holder_closes(hub, remote, redis_server):
    settings = {
        "redis_url": redis_server.url,
        "heartbeat_interval": 0.3,
        "heartbeat_timeout": 3,
        "bridges": {"envelope": [bridge(remote.url)]},
    }
    one = await hub(**settings)
    two = await hub(**settings)
    assert _peer(one).held.is_set() and not _peer(two).held.is_set()
    await one.aclose()
    await asyncio.wait_for(_peer(two).held.wait(), 20)
    alice = await alice_in(two)
    answer = await ask(alice, agora_request(ALICE))
    assert answer["verified"] is True and answer["signer"] == REMOTE_DID
    await alice.close()


@pytest.mark.redis
async def test_the_bridge_survives_a_killed_node(hub, remote, redis_server, tmp_path: Path):
    holder, standby = await _holder_process_and_standby(hub, remote, redis_server, tmp_path, 3)
    try:
        holder.kill()  # no goodbye: its presence lapses, probes go unanswered
        await asyncio.wait_for(_peer(standby).held.wait(), 30)
        alice = await alice_in(standby)
        answer = await ask(alice, agora_request(ALICE))
        assert answer["verified"] is True and answer["signer"] == REMOTE_DID
        await alice.close()
    finally:
        holder.close()


async def _holder_process_and_standby(
    hub: Any, remote: RemoteAgent, redis_server: Any, tmp_path: Path, timeout: float
) -> tuple[HubProcess, Any]:
    """A hub process holding the bridge, and an in-process standby beside it."""
    config = tmp_path / "hub.toml"
    config.write_text(
        "[[bridges.envelope]]\n"
        f'space = "{SPACE}"\nagent_id = "remote"\nurl = "{remote.url}"\n'
        f'protocol = "agora/1.0"\ntimeout = {timeout:g}\n'
    )
    common = {"redis_url": redis_server.url, "heartbeat_interval": 0.3, "heartbeat_timeout": 3}
    holder = HubProcess(config=str(config), **common).start()
    try:
        watcher = await WsClient.connect(holder.url, "watcher")
        assert "remote" in (await watcher.join(SPACE))["members"]  # the process holds it
        await watcher.close()
        standby = await hub(config=config, **common)
    except BaseException:
        holder.close()
        raise
    assert not _peer(standby).held.is_set()
    return holder, standby


async def answer_about(alice: WsClient, request: dict[str, Any]) -> dict[str, Any]:
    """The bridge's answer (a result or an error) to ``request``."""

    def about(m: dict[str, Any]) -> bool:
        payload = m.get("data", {}).get("payload", {})
        return (
            m.get("type") == "space.event"
            and m.get("from") == "remote"
            and payload.get("request_id") == request["id"]
        )

    return await alice._until(about, 30)


@pytest.mark.redis
async def test_requests_a_killed_holder_left_are_answered_by_its_successor(
    hub, remote, redis_server, tmp_path: Path
):
    """One request is in flight at the remote when the holder's node is
    killed, another is published before a standby has the bridge: neither is
    lost in silence — the new holder finds both in the space's history
    (unanswered) and answers 503; what arrives after the takeover is served."""
    holder, standby = await _holder_process_and_standby(hub, remote, redis_server, tmp_path, 20)
    try:
        alice = await alice_in(standby)
        remote.mode = "block"
        in_flight, in_gap, later = (agora_request(ALICE) for _ in range(3))
        await alice.request(
            {"type": "space.publish", "space": SPACE, "data": in_flight, "to": "remote"}
        )
        await asyncio.wait_for(remote.called.wait(), 10)  # the holder is calling the remote
        holder.kill()
        remote.mode = "result"
        gap = await alice.request(
            {"type": "space.publish", "space": SPACE, "data": in_gap, "to": "remote"}
        )
        await asyncio.wait_for(_peer(standby).held.wait(), 30)
        lost = await answer_about(alice, in_flight)
        assert hub_error(standby, lost, 503)["message"].startswith("the bridge moved")
        if gap["type"] == "space.event":  # (not when the dead holder had already left)
            answer = await answer_about(alice, in_gap)
            # In history before the takeover (503), or delivered live after it (served).
            assert answer["data"]["type"] in ("ERROR", "RESULT"), answer
        served = await ask(alice, later)
        assert served["data"]["payload"]["request_id"] == later["id"]
        assert served["signer"] == REMOTE_DID
        await alice.close()
    finally:
        remote.release.set()
        holder.close()


async def test_calls_in_flight_are_answered_when_the_bridge_closes(hub, remote):
    remote.mode = "block"
    server = await hub(bridges={"envelope": [bridge(remote.url, timeout=20)]})
    alice = await alice_in(server)
    request = agora_request(ALICE)
    await alice.request({"type": "space.publish", "space": SPACE, "data": request, "to": "remote"})
    await asyncio.wait_for(remote.called.wait(), 10)
    await _peer(server).aclose()
    payload = hub_error(server, await answer_about(alice, request), 503)
    assert "shut down" in payload["message"]
    await alice.close()


async def test_a_response_body_is_read_with_a_bound(hub, remote):
    """The bound is the peer's, not the remote's: 2 MiB is refused at 1 MiB."""
    remote.mode = "huge"
    server = await hub(bridges={"envelope": [bridge(remote.url)]})
    alice = await alice_in(server)
    payload = hub_error(server, await ask(alice, agora_request(ALICE)), 503)
    assert "larger than" in payload["message"]
    await alice.close()
