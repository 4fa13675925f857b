"""Auth modes and duplicate agent ids."""

import time

import jwt
import orjson
import pytest

from tests.support.wsclient import WsClient


async def _refused(url, agent_id, token=None):
    c = await WsClient.connect(url, agent_id, token=token, registered=False)
    code, frames = await c.closed()
    return code, frames


async def test_tokens_file(hub, tmp_path):
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps({"alice": "s3cret", "bob": "hunter2"}))
    server = await hub(auth_mode="tokens", auth_tokens_file=str(path))
    ok = await WsClient.connect(server.url, "alice", token="s3cret")
    assert ok.registered["agent"]["id"] == "alice"
    for agent, token in [("alice", "wrong"), ("alice", None), ("carol", "s3cret"), ("bob", "")]:
        code, frames = await _refused(server.url, agent, token)
        assert code == 4401, (agent, token)
        assert [f["type"] for f in frames] == ["error"]
        assert frames[0]["code"] == "UNAUTHORIZED"
    await ok.close()


async def test_bearer_header_is_accepted(hub, tmp_path):
    path = tmp_path / "tokens.json"
    path.write_bytes(orjson.dumps({"alice": "s3cret"}))
    server = await hub(auth_mode="tokens", auth_tokens_file=str(path))
    c = await WsClient.connect(
        server.url, "alice", additional_headers={"Authorization": "Bearer s3cret"}
    )
    assert c.registered is not None
    await c.close()


async def test_jwt(hub):
    secret = "x" * 32
    server = await hub(auth_mode="jwt", jwt_secret=secret)

    def token(sub, exp_in=60, key=secret, **extra):
        claims = {"sub": sub, "exp": int(time.time()) + exp_in, **extra}
        return jwt.encode(claims, key, algorithm="HS256")

    ok = await WsClient.connect(server.url, "alice", token=token("alice"))
    assert ok.registered is not None
    cases = {
        "wrong subject": token("bob"),
        "expired": token("alice", exp_in=-120),
        "bad signature": token("alice", key="y" * 32),
        "not a jwt": "abc",
        "no exp": jwt.encode({"sub": "alice"}, secret, algorithm="HS256"),
    }
    for why, tok in cases.items():
        code, frames = await _refused(server.url, "alice2", tok)
        assert code == 4401, why
        assert frames and frames[0]["code"] == "UNAUTHORIZED", why
    await ok.close()


async def test_duplicate_of_a_live_agent_is_refused(hub):
    server = await hub(liveness_probe_timeout=1.0)
    first = await WsClient.connect(server.url, "alice")
    await first.join("general")
    code, frames = await _refused(server.url, "alice")
    assert code == 4409 and frames[0]["code"] == "AGENT_EXISTS"
    # The first connection is untouched.
    reply = await first.request({"type": "space.publish", "space": "general", "data": {"n": 1}})
    assert reply["type"] == "space.event"
    await first.close()


async def test_duplicate_of_a_dead_agent_replaces_it(hub):
    server = await hub(liveness_probe_timeout=0.5)
    watcher = await WsClient.connect(server.url, "watcher")
    await watcher.join("general")
    ghost = await WsClient.connect(server.url, "alice")
    await ghost.join("general")
    await watcher.wait_for("space.members", joined="alice")
    # The ghost stops reading: it can no longer answer the hub's ping.
    ghost.ws.transport.pause_reading()
    fresh = await WsClient.connect(server.url, "alice")
    assert fresh.registered["agent"]["connection_id"] != ghost.registered["agent"]["connection_id"]
    left = await watcher.wait_for("space.members", left="alice")
    assert left["member_count"] == 1
    await fresh.join("general")
    reply = await fresh.request({"type": "space.publish", "space": "general", "data": {"n": 1}})
    assert reply["from"] == "alice"
    got = await watcher.wait_for("space.event")
    assert got["event_id"] == reply["event_id"]
    ghost.ws.transport.abort()
    await fresh.close()
    await watcher.close()


@pytest.mark.parametrize("mode", ["tokens", "jwt"])
async def test_auth_modes_need_their_settings(mode):
    from hub.config.settings import load_settings
    from hub.errors import ConfigError

    with pytest.raises(ConfigError):
        load_settings({"auth_mode": mode})
