"""verify(): shapes, keys, the timestamp window, bad input, and the hub's own envelopes."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from nacl.signing import SigningKey

from protocol.envelope import (
    AgentProtocolErrorCode,
    AgoraErrorCode,
    EnvelopeError,
    Format,
    Reason,
    agora,
    detect,
    error_envelope,
    is_signed,
    parse,
    sign_agentprotocol,
    sign_agora,
    timeout_envelope,
    verify,
    welcome_envelope,
)
from protocol.envelope import agentprotocol as ap
from protocol.envelope.errors import REASONS
from protocol.envelope.verification import format_timestamp
from protocol.errors import ErrorCode, ProtocolError
from protocol.identity import (
    ED25519_MULTICODEC,
    agentprotocol_agent_id,
    b58encode,
    b64,
    b64url,
    did_key,
    spki_der,
)

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
ALICE = SigningKey(b"\x0a" * 32)
MALLORY = SigningKey(b"\x0b" * 32)
HUB = SigningKey(b"\x0c" * 32)
ALICE_PUB = bytes(ALICE.verify_key)


def request(key: SigningKey = ALICE, *, now: float = NOW, **payload: Any) -> dict[str, Any]:
    body = {"resource": "agora:search:v1", "params": {"q": "x"}, **payload}
    return agora.build("REQUEST", body, signing_key=key, now=now)


def ap_request(key: SigningKey = ALICE, *, now: float = NOW) -> dict[str, Any]:
    payload = {"action": "review", "correlationId": "c-1", "params": {}, "timeout": 5000}
    return ap.build("request", payload, signing_key=key, now=now, to="bob")


def reason_of(data: Any, **kwargs: Any) -> Reason:
    kwargs.setdefault("now", NOW)
    with pytest.raises(EnvelopeError) as err:
        verify(data, **kwargs)
    return err.value.reason


# ── round trips ─────────────────────────────────────────────────────────────


def test_agora_envelope_signed_with_a_did_key_sender_verifies() -> None:
    env = request()
    assert env["sender"]["id"] == did_key(ALICE_PUB)
    v = verify(env, now=NOW)
    assert (v.format, v.type, v.id, v.signer, v.task_id) == (
        Format.AGORA,
        "REQUEST",
        env["id"],
        did_key(ALICE_PUB),
        env["id"],
    )


def test_agora_sender_may_be_a_raw_base64url_key_and_signer_is_still_the_did() -> None:
    env = request()
    env["sender"] = {"id": b64url(ALICE_PUB), "signature": ""}
    signed = sign_agora(env, ALICE)
    assert len(signed["sender"]["signature"]) == 86  # 64 bytes, no padding
    assert verify(signed, now=NOW).signer == did_key(ALICE_PUB)


def test_sign_agora_refuses_a_sender_id_of_another_key() -> None:
    env = request()
    env["sender"]["id"] = did_key(bytes(MALLORY.verify_key))
    with pytest.raises(EnvelopeError):
        sign_agora(env, ALICE)


def test_agentprotocol_message_with_its_public_key_verifies_without_lookup() -> None:
    msg = ap_request()
    spki = b64(spki_der(ALICE_PUB))
    assert msg["from"]["publicKey"] == spki
    assert msg["from"]["agentId"] == agentprotocol_agent_id(spki)
    assert msg["signature"].endswith("==") and len(msg["signature"]) == 88
    v = verify(msg, now=NOW)
    assert (v.format, v.type, v.signer, v.did, v.task_id) == (
        Format.AGENTPROTOCOL,
        "request",
        msg["from"]["agentId"],
        did_key(ALICE_PUB),
        "c-1",
    )


@pytest.mark.parametrize(
    "agent_id",
    [b64(spki_der(ALICE_PUB)), b64(ALICE_PUB), did_key(ALICE_PUB)],
    ids=["spki", "raw", "did"],
)
def test_agentprotocol_key_may_sit_in_agent_id(agent_id: str) -> None:
    msg = ap_request()
    msg["from"] = {"agentId": agent_id, "capabilities": []}
    v = verify(sign_agentprotocol(msg, ALICE), now=NOW)
    assert v.signer == agent_id
    assert v.public_key == ALICE_PUB


def test_agentprotocol_key_may_be_known_out_of_band() -> None:
    msg = ap_request()
    msg["from"] = {"agentId": "alice", "capabilities": []}
    signed = sign_agentprotocol(msg, ALICE)
    assert verify(signed, now=NOW, keys={"alice": ALICE_PUB}).signer == "alice"
    assert reason_of(signed) is Reason.UNKNOWN_KEY
    assert reason_of(signed, keys={"alice": bytes(MALLORY.verify_key)}) is Reason.BAD_SIGNATURE


def test_agentprotocol_key_sources_that_disagree_are_refused() -> None:
    msg = ap_request()
    msg["from"]["agentId"] = "someone-else"
    assert reason_of(sign_agentprotocol(msg, ALICE)) is Reason.KEY_MISMATCH
    msg = ap_request()
    known = {msg["from"]["agentId"]: bytes(MALLORY.verify_key)}
    assert reason_of(msg, keys=known) is Reason.KEY_MISMATCH


def test_sign_agentprotocol_refuses_a_public_key_of_another_key() -> None:
    with pytest.raises(EnvelopeError):
        sign_agentprotocol(ap_request(MALLORY), ALICE)


def test_a_signature_by_another_key_is_a_bad_signature() -> None:
    env = request()
    forged = sign_agora({**env, "sender": {"id": did_key(bytes(MALLORY.verify_key))}}, MALLORY)
    forged["sender"]["id"] = env["sender"]["id"]
    assert reason_of(forged) is Reason.BAD_SIGNATURE


# ── the window ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("make", [request, ap_request], ids=["agora", "agentprotocol"])
def test_timestamp_window_edges(make: Any) -> None:
    env = make()
    verify(env, now=NOW + 60)
    verify(env, now=NOW - 30)
    assert reason_of(env, now=NOW + 60.5) is Reason.STALE
    assert reason_of(env, now=NOW - 30.5) is Reason.FUTURE
    verify(env, now=NOW - 100, max_skew=120)
    assert reason_of(env, now=NOW + 10, max_age=5) is Reason.STALE


@pytest.mark.parametrize(
    "stamp",
    ["2026-01-01T00:00:00", "yesterday", "", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00Z" * 4],
)
def test_timestamps_without_offset_or_not_iso_are_malformed(stamp: str) -> None:
    env = request()
    env["timestamp"] = stamp
    assert reason_of(sign_agora(env, ALICE)) is Reason.MALFORMED


def test_offsets_other_than_z_are_understood() -> None:
    env = request()
    env["timestamp"] = "2026-01-01T01:00:00+01:00"
    assert verify(sign_agora(env, ALICE), now=NOW).timestamp == NOW
    assert format_timestamp(NOW) == "2026-01-01T00:00:00.000Z"


# ── unsigned and malformed ──────────────────────────────────────────────────


def test_unsigned_envelopes_are_recognised_and_refused_by_verify() -> None:
    env = request()
    for unsigned in ("", None):
        env["sender"]["signature"] = unsigned
        assert detect(env) is Format.AGORA
        assert not is_signed(env)
    del env["sender"]["signature"]
    assert not is_signed(env)
    assert reason_of(env) is Reason.UNSIGNED
    msg = ap_request()
    del msg["signature"]
    assert not is_signed(msg)
    assert reason_of(msg) is Reason.UNSIGNED
    fmt, model, payload = parse(msg)
    assert model.id == msg["id"]  # type: ignore[attr-defined]
    assert fmt is Format.AGENTPROTOCOL
    assert payload.action == "review"  # type: ignore[attr-defined]


def test_a_garbled_signature_counts_as_signed_and_is_refused() -> None:
    env = request()
    env["sender"]["signature"] = 12345
    assert is_signed(env)
    assert reason_of(env) is Reason.MALFORMED


@pytest.mark.parametrize("data", [None, [], "agora/1.0", 7, {"protocol": "agora/2.0"}, {}])
def test_non_envelopes(data: Any) -> None:
    assert detect(data) is None
    assert not is_signed(data)
    assert reason_of(data) is Reason.MALFORMED


def _edit(env: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    env = copy.deepcopy(env)
    *parents, last = path.split(".")
    node = env
    for p in parents:
        node = node[p]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return env


BAD_AGORA = [
    ("id", 42),
    ("id", ""),
    ("id", "x" * 257),
    ("type", "PING"),
    ("type", "request"),
    ("payload", []),
    ("payload", KeyError),
    ("sender", "alice"),
    ("sender.id", ""),
    ("sender.id", "did:key:zzzz"),
    ("sender.id", "did:key:z" + b58encode(b"\xe7\x01" + b"\x02" * 33)),  # secp256k1
    ("sender.id", "did:key:z" + "2" * 10_000),
    ("sender.id", "did:web:example.com"),
    ("sender.id", b64url(b"\x01" * 31)),
    ("sender.id", "not base64!"),
    ("sender.signature", b64url(b"\x01" * 63)),
    ("sender.signature", b64url(b"\x01" * 65)),
    ("sender.signature", "***"),
    ("sender.signature", b64(b"\xff" * 64)),  # standard alphabet: '/' and '+'
    ("timestamp", 1767225600),
    ("payload.resource", KeyError),
    ("payload.resource", 5),
    ("payload.timeout", "10"),
    ("payload.timeout", -1),
    ("payload.timeout", True),
    ("payload.params", [1]),
]


@pytest.mark.parametrize(("path", "value"), BAD_AGORA, ids=[f"{p}={v!r:.20}" for p, v in BAD_AGORA])
def test_malformed_agora_envelopes(path: str, value: Any) -> None:
    assert reason_of(_edit(request(), path, value)) is Reason.MALFORMED


def test_malformed_payloads_of_each_type() -> None:
    for kind, payload in [
        ("OFFER", {"request_id": "r", "ttl": "soon"}),
        ("ACCEPT", {}),
        ("RESULT", {"request_id": "r", "status": "done"}),
        ("ERROR", {"code": "408", "message": "x"}),
        ("HELLO", {"capabilities": "all"}),
    ]:
        env = agora.build(kind, payload, signing_key=ALICE, now=NOW)
        assert reason_of(env) is Reason.MALFORMED, kind


BAD_AP = [
    ("from", KeyError),
    ("from.agentId", ""),
    ("from.publicKey", "MCowBQYDK2VwAyEA"),
    ("from.publicKey", 5),
    ("to", "bob"),
    ("type", "hello!"),
    ("payload.correlationId", KeyError),
    ("payload.action", ""),
    ("signature", b64(b"\x01" * 63)),
    ("signature", b64url(b"\xff" * 64)),  # url-safe alphabet: '-' and '_'
    ("metadata", "x"),
]


@pytest.mark.parametrize(("path", "value"), BAD_AP, ids=[f"{p}={v!r:.20}" for p, v in BAD_AP])
def test_malformed_agentprotocol_messages(path: str, value: Any) -> None:
    assert reason_of(_edit(ap_request(), path, value)) is Reason.MALFORMED


def test_a_ten_megabyte_envelope_is_too_large() -> None:
    env = request()
    env["payload"]["params"] = {"blob": "x" * (10 * 1024 * 1024)}
    assert reason_of(env) is Reason.TOO_LARGE
    small = request(params={"blob": "x" * 2000})
    assert reason_of(small, max_bytes=1000) is Reason.TOO_LARGE


def test_nan_and_wrong_json_types_in_payload_are_malformed() -> None:
    env = request()
    env["payload"]["params"] = {"x": float("nan")}
    assert reason_of(env) is Reason.MALFORMED
    env["payload"]["params"] = {"x": object()}
    assert reason_of(env) is Reason.MALFORMED


# ── errors ──────────────────────────────────────────────────────────────────


def test_every_reason_has_its_three_codes_and_is_a_protocol_error() -> None:
    assert set(REASONS) == set(Reason)
    for reason in Reason:
        err = EnvelopeError(reason, "why", envelope_id="e-1")
        assert isinstance(err, ProtocolError)
        assert isinstance(err.code, ErrorCode)
        assert 400 <= err.agora_code <= 503
        assert err.agentprotocol_code in AgentProtocolErrorCode
        assert reason.value in str(err)
    assert EnvelopeError(Reason.STALE, "x").code is ErrorCode.UNAUTHORIZED
    assert EnvelopeError(Reason.MALFORMED, "x").code is ErrorCode.INVALID_REQUEST


def test_replay_identity_is_per_signer_and_expires_with_the_window() -> None:
    env = request()
    v = verify(env, now=NOW + 10)
    other = request(MALLORY)
    other["id"] = env["id"]
    w = verify(sign_agora({**other, "sender": {}}, MALLORY), now=NOW + 10)
    assert v.id == w.id and v.replay_key != w.replay_key
    # remembered until the timestamp leaves the window, plus the skew margin
    assert v.replay_ttl == pytest.approx(60 - 10 + 30 + 1)
    assert verify(env, now=NOW - 20).replay_ttl == pytest.approx(60 + 20 + 30 + 1)
    assert v.replayed().reason is Reason.REPLAYED
    assert v.replayed().envelope_id == env["id"]


# ── envelopes the hub signs ─────────────────────────────────────────────────

HUB_CODES = {
    AgoraErrorCode.BAD_REQUEST: "INVALID_MESSAGE",
    AgoraErrorCode.UNAUTHORIZED: "INVALID_SIGNATURE",
    AgoraErrorCode.TOO_MANY_REQUESTS: "RATE_LIMITED",
    AgoraErrorCode.UNAVAILABLE: "INTERNAL_ERROR",  # agentprotocol/0.1 has no 503
}


@pytest.mark.parametrize("code", list(HUB_CODES), ids=[c.name for c in HUB_CODES])
def test_hub_error_envelopes_verify_in_both_formats(code: AgoraErrorCode) -> None:
    env = error_envelope(Format.AGORA, code, signing_key=HUB, now=NOW, request_id="r-1")
    v = verify(env, now=NOW)
    assert v.type == "ERROR" and v.signer == did_key(bytes(HUB.verify_key))
    assert env["payload"]["code"] == int(code)
    assert env["payload"]["request_id"] == "r-1"
    msg = error_envelope(
        Format.AGENTPROTOCOL, code, "no", signing_key=HUB, now=NOW, request_id="c-1", to="alice"
    )
    v = verify(msg, now=NOW)
    assert v.type == "error" and v.task_id == "c-1"
    assert msg["payload"]["code"] == HUB_CODES[code]
    assert msg["to"] == {"agentId": "alice", "broadcast": False}


def test_error_envelope_for_a_refusal_uses_its_codes() -> None:
    stale = EnvelopeError(Reason.STALE, "too old")
    env = error_envelope(Format.AGORA, stale, signing_key=HUB, now=NOW)
    assert env["payload"] == {"code": 401, "message": "too old"}
    msg = error_envelope(Format.AGENTPROTOCOL, stale, signing_key=HUB, now=NOW)
    assert msg["payload"]["code"] == "INVALID_MESSAGE"
    # without a request to answer, the reference validator still needs a correlationId
    assert msg["payload"]["correlationId"] == msg["id"]
    verify(msg, now=NOW)


def test_timeout_envelopes() -> None:
    env = timeout_envelope(Format.AGORA, signing_key=HUB, now=NOW, request_id="r-9")
    assert (env["type"], env["payload"]["code"], env["payload"]["request_id"]) == (
        "ERROR",
        408,
        "r-9",
    )
    msg = timeout_envelope(Format.AGENTPROTOCOL, signing_key=HUB, now=NOW, request_id="c-9")
    assert (msg["payload"]["code"], msg["payload"]["correlationId"]) == ("TIMEOUT", "c-9")
    for e in (env, msg):
        verify(e, now=NOW)


def test_welcome_answers_a_hello_in_its_format() -> None:
    members = [{"id": "bob", "capabilities": ["agora:search:v1"]}]
    hello = verify(agora.build("HELLO", {"name": "alice"}, signing_key=ALICE, now=NOW), now=NOW)
    env = welcome_envelope(hello, signing_key=HUB, now=NOW, space="lobby", members=members)
    v = verify(env, now=NOW)
    assert v.type == "WELCOME"
    assert env["payload"]["request_id"] == hello.id
    assert env["payload"]["members"] == members
    assert env["payload"]["identity"]["did"] == did_key(bytes(HUB.verify_key))
    ap_hello = verify(
        ap.build("hello", {"version": "0.1"}, signing_key=ALICE, now=NOW, to=None), now=NOW
    )
    msg = welcome_envelope(
        ap_hello, signing_key=HUB, now=NOW, space="lobby", members=members, capabilities=["x:y"]
    )
    v = verify(msg, now=NOW)
    assert v.type == "hello"
    assert msg["to"]["agentId"] == ap_hello.signer
    assert msg["from"]["capabilities"] == ["x:y"]
    assert msg["payload"]["members"] == members


def test_did_key_multicodec_prefix() -> None:
    assert did_key(ALICE_PUB) == "did:key:z" + b58encode(ED25519_MULTICODEC + ALICE_PUB)


def test_integers_beyond_double_precision_are_compared_as_javascript_sees_them() -> None:
    # 2**53 + 1 is 2**53 to every JavaScript peer: both spellings share a
    # signature (documented in docs/envelopes.md).
    env = request(params={"n": 2**53 + 1})
    verify(env, now=NOW)
    env["payload"]["params"]["n"] = 2**53
    verify(env, now=NOW)
    env["payload"]["params"]["n"] = 2**53 + 2
    assert reason_of(env) is Reason.BAD_SIGNATURE
