"""Space permissions over real sockets (contract §11): tokens-file claims, JWT
claims, declared spaces' allow_join / allow_publish — allowed and denied on
join, publish, stream open, addressed publish and reads — on one node and
across a Redis cluster. A refusal is ``error UNAUTHORIZED`` with the request
id; the connection stays open and nothing changes."""

from __future__ import annotations

import time
from typing import Any

import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.support.wsclient import WsClient

TOKENS = {
    "alice": {"token": "tok-alice-91c2", "join": ["lobby", "task.*"], "publish": ["task.*"]},
    "bob": "tok-bob-55e0",
    "ops-1": "tok-ops1-0af3",
    "ops-lead": {"token": "tok-lead-77d1"},
    "reader": {"token": "tok-reader-3b10", "join": ["agent.status", "lobby"], "publish": []},
}
CONFIG = """
[[spaces]]
id = "ops"
allow_join = ["ops-*"]
allow_publish = ["ops-lead"]
"""


def token_of(agent: str) -> str:
    entry = TOKENS[agent]
    return entry if isinstance(entry, str) else entry["token"]


@pytest.fixture
def auth_files(tmp_path) -> dict[str, Any]:
    tokens = tmp_path / "tokens.json"
    tokens.write_bytes(orjson.dumps(TOKENS))
    config = tmp_path / "hub.toml"
    config.write_text(CONFIG)
    return {"auth_mode": "tokens", "auth_tokens_file": str(tokens), "config": str(config)}


async def connect(url: str, agent: str, token: str | None = None) -> WsClient:
    return await WsClient.connect(url, agent, token=token or token_of(agent), heartbeat=True)


async def refused(client: WsClient, msg: dict[str, Any], rid: str) -> str:
    """``msg`` is answered UNAUTHORIZED with its id, and the connection still works."""
    reply = await client.request({**msg, "id": rid})
    assert reply["type"] == "error", reply
    assert reply["code"] == "UNAUTHORIZED" and reply["request_id"] == rid, reply
    pong = await client.request({"type": "agent.heartbeat"})
    assert pong["type"] == "agent.heartbeat"
    return reply["message"]


async def first_event(client: WsClient, space: str) -> dict[str, Any]:
    return await client.wait_for("space.event", space=space)


def publish(space: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "space.publish", "space": space, "data": {"text": text}, **extra}


def delta(space: str, event_id: str) -> dict[str, Any]:
    data = {"text": "x"}
    return {"type": "space.event.delta", "space": space, "event_id": event_id, "data": data}


async def test_tokens_file_claims_allow_and_refuse(hub, auth_files):
    server = await hub(**auth_files)
    bob = await connect(server.url, "bob")
    for space in ("general", "lobby", "task.build"):
        await bob.join(space)  # no claims: anything
    alice = await connect(server.url, "alice")

    # join: the claim's patterns, over space names.
    await alice.join("lobby")
    await alice.join("task.build")
    assert "general" in await refused(alice, {"type": "space.join", "space": "general"}, "j1")
    await refused(alice, {"type": "space.join", "space": "agent.status"}, "j2")
    page = await bob.request({"type": "space.members", "space": "general"})
    assert page["members"] == ["bob"]  # the refused join changed nothing

    # publish, stream open and addressed publish: the publish claim.
    await refused(alice, publish("lobby", "nope"), "p1")
    await refused(alice, delta("lobby", "s1"), "d1")
    await refused(alice, publish("lobby", "nope", to="bob"), "p2")
    await bob.send(publish("lobby", "marker"))
    assert (await first_event(bob, "lobby"))["data"]["text"] == "marker"  # none of alice's

    echo = await alice.request(publish("task.build", "built"))
    assert echo["type"] == "space.event" and echo["seq"] >= 1
    assert (await first_event(bob, "task.build"))["data"]["text"] == "built"
    addressed = await alice.request(publish("task.build", "for bob", to="bob"))
    assert addressed["to"] == "bob"
    await alice.send({**delta("task.build", "s2"), "id": "d2"})
    opened = await bob.wait_for("space.event.delta", space="task.build")
    assert opened["from"] == "alice"

    # reads: space.members requests and agent.list by space need the right to join.
    await refused(alice, {"type": "space.members", "space": "general"}, "m1")
    page = await alice.request({"type": "space.members", "space": "lobby"})
    assert sorted(page["members"]) == ["alice", "bob"]
    await refused(alice, {"type": "agent.list", "space": "general"}, "a1")
    listed = await alice.request({"type": "agent.list", "space": "lobby"})
    assert sorted(a["id"] for a in listed["agents"]) == ["alice", "bob"]
    everyone = await alice.request({"type": "agent.list"})  # no space: not a read of one
    assert {"alice", "bob"} <= {a["id"] for a in everyone["agents"]}
    await alice.close()
    await bob.close()


async def test_system_spaces_follow_join_claims_and_stay_read_only(hub, auth_files):
    server = await hub(**auth_files)
    reader = await connect(server.url, "reader")
    await reader.join("agent.status")  # listed in its join claim
    message = await refused(reader, publish("agent.status", "hi"), "p1")
    assert "read-only" in message
    await reader.join("lobby")
    await refused(reader, publish("lobby", "hi"), "p2")  # "publish": [] allows nothing
    await reader.close()


async def test_declared_space_rules_over_agent_ids(hub, auth_files):
    server = await hub(**auth_files)
    bob = await connect(server.url, "bob")  # unrestricted by its token, not by the space
    ops1 = await connect(server.url, "ops-1")
    lead = await connect(server.url, "ops-lead")

    await refused(bob, {"type": "space.join", "space": "ops"}, "j1")
    await refused(bob, {"type": "space.members", "space": "ops"}, "m1")
    await refused(bob, {"type": "agent.list", "space": "ops"}, "a1")
    await ops1.join("ops")
    await lead.join("ops")
    # ops-1 may join and read ops, not speak there.
    await refused(ops1, publish("ops", "hello"), "p1")
    await refused(ops1, delta("ops", "s1"), "d1")
    await refused(ops1, publish("ops", "hello", to="ops-lead"), "p2")
    page = await ops1.request({"type": "space.members", "space": "ops"})
    assert page["members"] == ["ops-1", "ops-lead"]
    await lead.send(publish("ops", "from the lead"))
    event = await first_event(ops1, "ops")
    assert event["from"] == "ops-lead" and event["data"]["text"] == "from the lead"
    for c in (bob, ops1, lead):
        await c.close()


async def test_adapters_are_not_restricted_by_declared_rules(hub, auth_files):
    server = await hub(**auth_files)
    member = await server.node.host.hosting.attach("bridge")
    joined = await member.join("ops")
    assert joined["type"] == "space.joined"
    ops1 = await connect(server.url, "ops-1")
    await ops1.join("ops")
    await member.publish("ops", {"text": "relayed"})
    assert (await first_event(ops1, "ops"))["from"] == "bridge"
    await ops1.close()
    await member.aclose()


def _ed25519_key(tmp_path) -> tuple[ed25519.Ed25519PrivateKey, str]:
    key = ed25519.Ed25519PrivateKey.generate()
    path = tmp_path / "idp.pem"
    path.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key, str(path)


async def test_jwt_claims_allow_and_refuse(hub, tmp_path):
    key, public = _ed25519_key(tmp_path)
    server = await hub(auth_mode="jwt", jwt_public_key=public)

    def token(sub: str, **claims: Any) -> str:
        payload = {"sub": sub, "exp": int(time.time()) + 300, **claims}
        return jwt.encode(payload, key, algorithm="EdDSA")

    alice = await connect(server.url, "alice", token("alice", join=["lobby", "task.*"]))
    bob = await connect(server.url, "bob", token("bob"))  # no claims: unrestricted
    carol = await connect(server.url, "carol", token("carol", publish=["task.*"]))

    await alice.join("lobby")
    await refused(alice, {"type": "space.join", "space": "general"}, "j1")
    await refused(alice, {"type": "space.members", "space": "general"}, "m1")
    echo = await alice.request(publish("lobby", "hi"))  # no publish claim: unrestricted
    assert echo["type"] == "space.event"

    await bob.join("general")
    await bob.join("lobby")
    await carol.join("lobby")  # no join claim: unrestricted
    await carol.join("task.x")
    await refused(carol, publish("lobby", "no"), "p1")
    await refused(carol, delta("lobby", "s1"), "d1")
    assert (await carol.request(publish("task.x", "yes")))["type"] == "space.event"
    assert (await bob.request(publish("lobby", "bob")))["type"] == "space.event"
    for c in (alice, bob, carol):
        await c.close()


@pytest.mark.redis
async def test_same_rules_on_every_node_of_a_cluster(hub, auth_files, redis_server):
    one = await hub(redis_url=redis_server.url, node_id="node-1", **auth_files)
    two = await hub(redis_url=redis_server.url, node_id="node-2", **auth_files)
    lead = await connect(one.url, "ops-lead")
    ops1 = await connect(two.url, "ops-1")
    bob = await connect(two.url, "bob")
    alice = await connect(one.url, "alice")

    await lead.join("ops")
    await ops1.join("ops")
    await refused(bob, {"type": "space.join", "space": "ops"}, "j1")
    await refused(ops1, publish("ops", "no"), "p1")
    await lead.send(publish("ops", "across nodes"))
    assert (await first_event(ops1, "ops"))["data"]["text"] == "across nodes"

    await bob.join("general")
    await refused(alice, {"type": "space.join", "space": "general"}, "j2")
    await refused(alice, {"type": "space.members", "space": "general"}, "m1")
    page = await bob.request({"type": "space.members", "space": "general"})
    assert page["members"] == ["bob"]
    await bob.join("task.x")
    await alice.join("task.x")
    await alice.send(publish("task.x", "from node one"))
    assert (await first_event(bob, "task.x"))["from"] == "alice"
    for c in (lead, ops1, bob, alice):
        await c.close()
