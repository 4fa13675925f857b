"""Token expiry on live connections and ``agent.refresh`` (contract §11).

A JWT's ``exp`` has one-second resolution, so these tokens expire three to four
seconds after they are made (time to connect on a busy machine), with ``jwt_leeway = 0`` and a short
``token_refresh_grace``; every wait is for an event, with a generous timeout.
"""

from __future__ import annotations

import time
from typing import Any

import jwt
import orjson
import pytest
import structlog

from agora_client import Unauthorized
from hub.process.reload import reload_hub
from tests.integration.test_cli_tools import cli
from tests.support.wsclient import WsClient

SECRET = "s" * 32
EXPIRY = {"auth_mode": "jwt", "jwt_secret": SECRET, "jwt_leeway": 0, "token_refresh_grace": 2.0}
TIMEOUT = 15.0


def token(sub: str, expires_in: float = 300, key: str = SECRET, **claims: Any) -> str:
    return jwt.encode(
        {"sub": sub, "exp": int(time.time() + expires_in), **claims}, key, algorithm="HS256"
    )


def short_token(sub: str) -> str:
    """Expires 3–4 s from now: time to connect, then it runs out."""
    return token(sub, expires_in=4)


async def connect(url: str, agent: str, tok: str) -> WsClient:
    return await WsClient.connect(url, agent, token=tok, heartbeat=True)


async def expiry_notice(client: WsClient) -> dict[str, Any]:
    notice = await client.wait_for("error", timeout=TIMEOUT, request_id=None)
    assert notice["code"] == "UNAUTHORIZED", notice
    assert notice["message"].startswith("token expired:"), notice
    return notice


async def refresh(client: WsClient, tok: str) -> dict[str, Any]:
    return await client.request({"type": "agent.refresh", "token": tok})


async def test_expired_token_is_told_then_closed_unless_refreshed(hub):
    server = await hub(**EXPIRY)
    alice = await connect(server.url, "alice", short_token("alice"))
    carol = await connect(server.url, "carol", short_token("carol"))  # never refreshes
    eve = await connect(server.url, "eve", short_token("eve"))  # refreshes before expiry

    renewed = token("eve", expires_in=600)
    reply = await refresh(eve, renewed)
    assert reply["type"] == "agent.refreshed"
    assert reply["expires_at"] == jwt.decode(renewed, SECRET, algorithms=["HS256"])["exp"] * 1000

    await expiry_notice(alice)
    await alice.join("lobby")  # still served during the grace
    new = token("alice", expires_in=600, publish=["task.*"])
    reply = await refresh(alice, new)
    assert reply["type"] == "agent.refreshed" and reply["expires_at"] > time.time() * 1000

    code, frames = await carol.closed(timeout=TIMEOUT)
    assert code == 4401
    errors = [f for f in frames if f["type"] == "error"]
    assert errors[0]["message"].startswith("token expired:")
    assert errors[-1] == {
        "type": "error",
        "code": "UNAUTHORIZED",
        "message": "token expired",
        "request_id": None,
    }

    # Past carol's close (same expiry, same sweep): alice and eve are still served.
    for client in (alice, eve):
        pong = await client.request({"type": "agent.heartbeat"})
        assert pong["type"] == "agent.heartbeat"
    assert not [f for f in eve.backlog if f["type"] == "error"]
    # The refreshed token's claims replace the old (unrestricted) ones.
    denied = await alice.request({"type": "space.publish", "space": "lobby", "data": {"text": "x"}})
    assert denied["type"] == "error" and denied["code"] == "UNAUTHORIZED"
    await alice.close()
    await eve.close()


async def test_refused_refresh_keeps_the_clock_running(hub):
    server = await hub(**EXPIRY)
    dave = await connect(server.url, "dave", short_token("dave"))
    await expiry_notice(dave)
    attempts = {
        "bad signature": token("dave", key="k" * 32),
        "another agent": token("bob"),
        "expired": token("dave", expires_in=-60),
        "not a jwt": "garbage",
    }
    for why, tok in attempts.items():
        reply = await refresh(dave, tok)
        assert reply["type"] == "error" and reply["code"] == "UNAUTHORIZED", why
        assert reply["message"].startswith("refresh refused"), why
        assert tok not in reply["message"]
    code, frames = await dave.closed(timeout=TIMEOUT)
    assert code == 4401
    assert frames[-1]["message"] == "token expired"


async def test_refresh_with_a_tokens_file(hub, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"alice": "tok-a-1", "bob": "tok-b-1"}))
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens))
    alice = await connect(server.url, "alice", "tok-a-1")
    reply = await refresh(alice, "tok-b-1")  # bob's token is not alice's
    assert reply["type"] == "error" and reply["code"] == "UNAUTHORIZED"
    reply = await refresh(alice, "tok-a-1")
    assert reply == {"type": "agent.refreshed", "id": reply["id"], "expires_at": None}
    # Claims changed by a reload apply to the connection once it refreshes.
    tokens.write_bytes(orjson.dumps({"alice": {"token": "tok-a-2", "join": ["lobby"]}}))
    assert reload_hub(server, structlog.get_logger("test"))
    await alice.join("general")  # still the grant of the handshake
    assert (await refresh(alice, "tok-a-1"))["code"] == "UNAUTHORIZED"  # gone from the file
    assert (await refresh(alice, "tok-a-2"))["type"] == "agent.refreshed"
    denied = await alice.request({"type": "space.join", "space": "task.x"})
    assert denied["type"] == "error" and denied["code"] == "UNAUTHORIZED"
    await alice.join("lobby")
    await alice.close()


async def test_sdk_refreshes_from_its_token_provider(hub, clients):
    server = await hub(**EXPIRY)
    issued: list[str] = []

    async def provider() -> str:
        issued.append(short_token("alice") if not issued else token("alice", expires_in=600))
        return issued[-1]

    alice = await clients(server, "alice", token_provider=provider)
    control = await connect(server.url, "control", short_token("control"))
    code, _ = await control.closed(timeout=TIMEOUT)
    assert code == 4401
    # Same expiry as control's token: the SDK answered the notice with a new token.
    assert len(issued) == 2
    await alice.join("lobby")
    assert (await alice.publish("lobby", "still here")).data["text"] == "still here"
    assert alice.connected

    with pytest.raises(Unauthorized):
        await alice.refresh_token(token("mallory"))
    expires_at = await alice.refresh_token(token("alice", expires_in=900))
    assert expires_at is not None and expires_at > (time.time() + 800) * 1000


async def test_cli_reads_the_token_file(hub, tmp_path):
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps({"cli-user": "tok-cli-31"}))
    server = await hub(auth_mode="tokens", auth_tokens_file=str(tokens))
    token_file = tmp_path / "token"
    token_file.write_text("tok-cli-31\n")
    common = ("--url", server.url, "--agent-id", "cli-user", "--json")
    status, out, err = await cli("spaces", *common, "--token-file", str(token_file))
    assert status == 0, err
    assert any(orjson.loads(line)["id"] == "agent.status" for line in out.splitlines())
    status, _, err = await cli("spaces", *common, "--token-file", str(tmp_path / "missing"))
    assert status == 1 and "token file" in err


async def test_refresh_tokens_never_appear_in_the_log(hub_process):
    proc = hub_process(auth_mode="jwt", jwt_secret=SECRET, log_level="debug")
    first, good, other = token("alice"), token("alice", expires_in=900), token("bob")
    forged = token("alice", key="f" * 32)
    alice = await connect(proc.url, "alice", first)
    for tok in (good, other, forged, "not-a-jwt-but-secret-9f1c"):
        await refresh(alice, tok)
    await alice.send({"type": "agent.refresh", "token": "x" * 9000, "id": "long"})
    await alice.wait_for("error", request_id="long")
    await alice.close()
    proc.stop()
    log = proc.log()
    assert "connection closed" in log
    for secret in (first, good, other, forged, "not-a-jwt-but-secret-9f1c", "x" * 100):
        assert secret not in log
