"""Signed envelopes published into spaces over WebSocket (contract §9, "In spaces").

A valid envelope is delivered with top-level ``verified: true`` and
``signer`` and ``data`` exactly as signed; a forged, stale, future or
replayed one is refused ``UNAUTHORIZED`` with the request id and nothing is
delivered — the next event's seq follows the last delivered one, so no seq
was taken either. ``require_signed`` spaces accept nothing else.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from protocol.envelope import agora
from protocol.identity import did_key
from tests.support.envelopes import (
    ALICE,
    BOB,
    MALLORY,
    agora_env,
    agora_request,
    ap_msg,
    ap_request,
    bad_signature,
    forged,
    resigned_by,
)
from tests.support.wsclient import WsClient

SPACE = "market"
VAULT = "vault"
SIGNED = {"spaces": [{"id": VAULT, "require_signed": True}]}


async def _pair(server: Any, space: str = SPACE) -> tuple[WsClient, WsClient]:
    alice = await WsClient.connect(server.url, "alice")
    bob = await WsClient.connect(server.url, "bob")
    await alice.join(space)
    await bob.join(space)
    await alice.wait_for("space.members", joined="bob")
    return alice, bob


async def _publish(client: WsClient, data: Any, space: str = SPACE, **extra: Any) -> dict:
    return await client.request({"type": "space.publish", "space": space, "data": data, **extra})


async def _nothing_was_delivered(alice: WsClient, bob: WsClient, last_seq: int, space=SPACE):
    """A marker published now is the very next event bob sees, with the next seq."""
    marker = await _publish(alice, {"text": "marker"}, space)
    await _marker_is_next(bob, marker, last_seq)


async def _marker_is_next(bob: WsClient, marker: dict[str, Any], last_seq: int) -> None:
    while True:
        got = await bob.expect("space.event")
        if got["seq"] <= last_seq:
            continue  # delivered before the refused publishes
        assert got["event_id"] == marker["event_id"], got
        assert got["seq"] == last_seq + 1
        return


async def test_a_signed_agora_envelope_is_delivered_verified_and_untouched(hub):
    server = await hub()
    alice, bob = await _pair(server)
    env = agora_request(ALICE)
    mine = await _publish(alice, env)
    got = await bob.wait_for("space.event")
    for event in (mine, got):
        assert event["verified"] is True
        assert event["signer"] == did_key(bytes(ALICE.verify_key))
        assert event["from"] == "alice"  # the hub stamp: who published it
        assert event["data"] == env  # exactly as signed: no data.from fill-in
    assert "from" not in got["data"]
    await alice.close()
    await bob.close()


async def test_a_signed_agentprotocol_message_is_delivered_verified(hub):
    """Its own ``from`` object is not the hub's ``data.from`` rule's business."""
    server = await hub()
    alice, bob = await _pair(server)
    msg = ap_request(BOB, "c-42")
    await _publish(alice, msg)
    got = await bob.wait_for("space.event")
    assert got["verified"] is True
    assert got["signer"] == msg["from"]["agentId"]
    assert got["data"] == msg
    # A plain publish with a foreign data.from is still refused.
    err = await _publish(alice, {"from": {"agentId": "x"}, "text": "not an envelope"})
    assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
    await alice.close()
    await bob.close()


async def test_an_envelope_cannot_name_another_publisher_in_data_from(hub):
    """Contract §4: a ``data.from`` that is not the publisher's id is
    ``INVALID_REQUEST`` — in an envelope too, signed or not, unless it is
    agentprotocol/0.1's own sender object. agora/1.0 has no ``from`` of its
    own: one there would show members a sender the hub never checked."""
    server = await hub()
    alice, bob = await _pair(server)
    unsigned = {k: v for k, v in agora_request(ALICE).items() if k != "signature"}
    signed = agora.sign({**unsigned, "from": "bob"}, ALICE)
    ap_named = {**ap_request(ALICE), "from": "bob"}
    for env in ({**unsigned, "from": "bob"}, signed, ap_named):
        err = await _publish(alice, env)
        assert err["type"] == "error" and err["code"] == "INVALID_REQUEST", (env, err)
        assert "data.from" in err["message"]
    marker = await _publish(alice, {"text": "marker"})
    got = await bob.wait_for("space.event")
    assert got["event_id"] == marker["event_id"], "none of the refused was delivered"
    await alice.close()
    await bob.close()


async def test_ordinary_events_carry_no_verification_fields(hub):
    server = await hub()
    alice, bob = await _pair(server)
    await _publish(alice, {"text": "hi", "protocol": "something/else"})
    got = await bob.wait_for("space.event")
    assert "verified" not in got and "signer" not in got
    assert got["data"]["from"] == "alice"
    await alice.close()
    await bob.close()


async def test_an_unsigned_envelope_is_delivered_unverified(hub):
    server = await hub()
    alice, bob = await _pair(server)
    env = agora_request(ALICE)
    env["sender"]["signature"] = ""
    await _publish(alice, env)
    got = await bob.wait_for("space.event")
    assert got["verified"] is False and "signer" not in got
    assert got["data"] == env
    await alice.close()
    await bob.close()


@pytest.mark.parametrize(
    "spoil, reason",
    [
        (forged, "bad_signature"),
        (bad_signature, "bad_signature"),
        (lambda e: resigned_by(e, MALLORY), "bad_signature"),
    ],
    ids=["content-changed", "signature-changed", "signed-by-another-key"],
)
async def test_forged_envelopes_are_refused_and_nothing_is_delivered(hub, spoil, reason):
    server = await hub()
    alice, bob = await _pair(server)
    first = await _publish(alice, {"text": "before"})
    await bob.wait_for("space.event", event_id=first["event_id"])
    err = await _publish(alice, spoil(agora_request(ALICE)), id="forged-1")
    assert err["type"] == "error" and err["code"] == "UNAUTHORIZED"
    assert err["request_id"] == "forged-1" and reason in err["message"]
    await _nothing_was_delivered(alice, bob, first["seq"])
    await alice.close()
    await bob.close()


@pytest.mark.parametrize(
    "age, reason", [(120, "stale"), (-300, "future")], ids=["stale", "from-the-future"]
)
async def test_envelopes_outside_the_time_window_are_refused(hub, age, reason):
    server = await hub()
    alice, bob = await _pair(server)
    first = await _publish(alice, {"text": "before"})
    for env in (
        agora_env("STATUS", {"status": "ok"}, ALICE, age=age),
        ap_msg("notify", {"event": "tick"}, ALICE, age=age),
    ):
        err = await _publish(alice, env)
        assert err["type"] == "error" and err["code"] == "UNAUTHORIZED", err
        assert reason in err["message"]
    await _nothing_was_delivered(alice, bob, first["seq"])
    await alice.close()
    await bob.close()


async def test_a_replayed_envelope_is_refused_even_from_another_agent(hub):
    server = await hub()
    alice, bob = await _pair(server)
    env = agora_request(ALICE)
    first = await _publish(alice, env)
    assert first["verified"] is True
    await bob.wait_for("space.event", event_id=first["event_id"])
    again = await _publish(alice, copy.deepcopy(env))
    assert again["code"] == "UNAUTHORIZED" and "replayed" in again["message"]
    by_bob = await _publish(bob, copy.deepcopy(env))
    assert by_bob["code"] == "UNAUTHORIZED" and "replayed" in by_bob["message"]
    await _nothing_was_delivered(alice, bob, first["seq"])
    await alice.close()
    await bob.close()


async def test_a_refused_addressed_envelope_does_not_burn_its_id(hub):
    """Replay is recorded last: an envelope refused for another reason may be resent."""
    server = await hub()
    alice, bob = await _pair(server)
    env = agora_request(ALICE)
    err = await _publish(alice, env, to="ghost")
    assert err["code"] == "INVALID_REQUEST"
    ok = await _publish(alice, env, to="bob")
    assert ok["type"] == "space.event" and ok["verified"] is True and ok["to"] == "bob"
    got = await bob.wait_for("space.event")
    assert got["event_id"] == ok["event_id"] and got["verified"] is True
    await alice.close()
    await bob.close()


async def test_echo_false_is_acknowledged_and_delivered_verified(hub):
    server = await hub()
    alice, bob = await _pair(server)
    ack = await _publish(alice, agora_request(ALICE), echo=False)
    assert ack["type"] == "space.published"
    got = await bob.wait_for("space.event")
    assert got["event_id"] == ack["event_id"] and got["verified"] is True
    await alice.close()
    await bob.close()


# ── require_signed ──────────────────────────────────────────────────────────


async def test_a_signed_space_accepts_only_valid_envelopes(hub):
    server = await hub(**SIGNED)
    alice, bob = await _pair(server, VAULT)
    ok = await _publish(alice, agora_request(ALICE), VAULT)
    assert ok["verified"] is True
    got = await bob.wait_for("space.event", space=VAULT)
    assert got["event_id"] == ok["event_id"]
    unsigned = agora_request(ALICE)
    unsigned["sender"]["signature"] = ""
    stale = agora_env("STATUS", {"status": "late"}, ALICE, age=3600)
    replayed = copy.deepcopy(got["data"])
    for data in (
        {"text": "plain text is not an envelope"},
        unsigned,
        forged(agora_request(ALICE)),
        stale,
        replayed,
    ):
        err = await _publish(alice, data, VAULT)
        assert err["type"] == "error" and err["code"] == "UNAUTHORIZED", (data, err)
    await _nothing_was_delivered_signed(alice, bob, ok["seq"])
    await alice.close()
    await bob.close()


async def _nothing_was_delivered_signed(alice: WsClient, bob: WsClient, last_seq: int) -> None:
    marker = await _publish(alice, agora_env("STATUS", {"status": "marker"}, ALICE), VAULT)
    await _marker_is_next(bob, marker, last_seq)


async def test_a_signed_space_refuses_client_streams(hub):
    server = await hub(**SIGNED)
    alice, bob = await _pair(server, VAULT)
    err = await alice.request(
        {"type": "space.event.delta", "space": VAULT, "event_id": "s1", "data": {"text": "a"}}
    )
    assert err["type"] == "error" and err["code"] == "UNAUTHORIZED"
    # No stream was opened: finishing it is an error, not a relayed done.
    done = await alice.request({"type": "space.event.done", "space": VAULT, "event_id": "s1"})
    assert done["type"] == "error" and done["code"] == "INVALID_REQUEST"
    # Other spaces still stream.
    await alice.join(SPACE)
    await alice.send(
        {"type": "space.event.delta", "space": SPACE, "event_id": "s2", "data": {"text": "a"}}
    )
    await alice.wait_for("space.event.delta", space=SPACE)
    await _nothing_was_delivered_signed(alice, bob, 0)
    await alice.close()
    await bob.close()


# ── bad input over WebSocket ────────────────────────────────────────────────


def _bad_inputs() -> dict[str, tuple[Any, str]]:
    env = agora_request(ALICE)

    def edit(fn: Any) -> dict[str, Any]:
        out = copy.deepcopy(env)
        fn(out)
        return out

    ap_env = ap_request(ALICE)
    cases = [
        ("payload-not-object", edit(lambda e: e.update(payload=[1, 2])), "INVALID_REQUEST"),
        ("timestamp-number", edit(lambda e: e.update(timestamp=1767225600)), "INVALID_REQUEST"),
        ("type-unknown", edit(lambda e: e.update(type="BRIBE")), "INVALID_REQUEST"),
        (
            "did-key-undecodable",
            edit(lambda e: e["sender"].update(id="did:key:z6MkNOTbase58!!")),
            "INVALID_REQUEST",
        ),
        (
            "signature-too-short",
            edit(lambda e: e["sender"].update(signature=e["sender"]["signature"][:40])),
            "INVALID_REQUEST",
        ),
        (
            "signature-not-base64url",
            edit(lambda e: e["sender"].update(signature="***" * 28)),
            "INVALID_REQUEST",
        ),
        (
            "signature-wrong-type",
            edit(lambda e: e["sender"].update(signature=7)),
            "INVALID_REQUEST",
        ),
        (
            "ap-public-key-garbage",
            {**ap_env, "from": {**ap_env["from"], "publicKey": "bm90IGEga2V5"}},
            "INVALID_REQUEST",
        ),
        (
            "ap-key-of-someone-else",
            {**ap_env, "from": {**ap_env["from"], "agentId": "somebody-else"}},
            "UNAUTHORIZED",
        ),
    ]
    return {name: (body, expected) for name, body, expected in cases}


@pytest.mark.parametrize("name", list(_bad_inputs()))
async def test_bad_envelopes_get_the_protocol_error_and_nothing_is_delivered(hub, name):
    data, code = _bad_inputs()[name]  # built now: signed envelopes go stale
    server = await hub()
    alice, bob = await _pair(server)
    first = await _publish(alice, {"text": "before"})
    err = await _publish(alice, data, id="bad-1")
    assert err["type"] == "error" and err["code"] == code and err["request_id"] == "bad-1", err
    await _nothing_was_delivered(alice, bob, first["seq"])
    await alice.close()
    await bob.close()


async def test_raw_frames_nan_duplicates_and_a_10_mb_envelope(hub):
    """NaN is not JSON; with duplicate keys the last wins and *that* is verified
    (so a duplicate that changes signed content fails); an envelope over the
    1 MiB limit is refused, not canonicalised — the connection stays open."""
    server = await hub(max_frame_bytes=16 * 1024 * 1024, outbox_max_bytes=32 * 1024 * 1024)
    alice, bob = await _pair(server)
    first = await _publish(alice, {"text": "before"})
    env = agora_request(ALICE)
    body = orjson.dumps(env).decode()
    nan = body.replace('"q":1', '"q":NaN')
    await alice.send(f'{{"type":"space.publish","id":"n1","space":"{SPACE}","data":{nan}}}')
    err = await alice.wait_for("error")  # not JSON: the hub cannot read its id
    assert err["code"] == "INVALID_REQUEST"
    dup = body.replace('"q":1', '"q":1,"q":2')
    await alice.send(f'{{"type":"space.publish","id":"d1","space":"{SPACE}","data":{dup}}}')
    err = await alice.wait_for("error", request_id="d1")
    assert err["code"] == "UNAUTHORIZED" and "bad_signature" in err["message"]
    huge = agora_env("STATUS", {"status": "small"}, ALICE)
    huge["payload"]["status"] = "x" * (10 * 1024 * 1024)  # too big to have been signed here
    err = await _publish(alice, huge, id="big-1")
    assert err["type"] == "error" and err["code"] == "INVALID_REQUEST"
    assert "too_large" in err["message"]
    await _nothing_was_delivered(alice, bob, first["seq"])
    await alice.close()
    await bob.close()


async def test_the_sdk_exposes_verified_and_signer(hub, clients):
    server = await hub()
    alice = await clients(server, "alice")
    await alice.join(SPACE)
    event = await alice.publish(SPACE, agora_request(ALICE))
    assert event.verified is True and event.signer == did_key(bytes(ALICE.verify_key))
    plain = await alice.publish(SPACE, {"text": "plain"})
    assert plain.verified is None and plain.signer is None


# ── a cluster ───────────────────────────────────────────────────────────────


@pytest.mark.redis
async def test_an_envelope_replayed_to_another_node_is_refused(hub, redis_server):
    settings = {"redis_url": redis_server.url, "heartbeat_interval": 0.5, "heartbeat_timeout": 5}
    one = await hub(**settings)
    two = await hub(**settings)
    alice = await WsClient.connect(one.url, "alice")
    bob = await WsClient.connect(two.url, "bob")
    await alice.join(SPACE)
    await bob.join(SPACE)
    env = agora_request(ALICE)
    ok = await _publish(alice, env)
    got = await bob.wait_for("space.event", event_id=ok["event_id"])
    assert got["verified"] is True
    err = await _publish(bob, got["data"])  # the same envelope, on the other node
    assert err["type"] == "error" and err["code"] == "UNAUTHORIZED"
    assert "replayed" in err["message"]
    msg = ap_request(BOB, "c-cluster")
    ok2 = await _publish(bob, msg)
    assert ok2["verified"] is True
    err2 = await _publish(alice, msg)
    assert err2["code"] == "UNAUTHORIZED" and "replayed" in err2["message"]
    await alice.close()
    await bob.close()
