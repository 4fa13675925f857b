"""HTTP Agora requests and replies: every bad input answered at the right layer."""

import json

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.agora_http import (
    MAX_ERROR_CHARS,
    MISSING_BODY,
    UNSUPPORTED_PROTOCOL,
    AgoraHttpError,
    AgoraLimits,
    AgoraRequest,
    ErrorLayer,
    HashForm,
    Reply,
    check_follow_up,
    decode_reply,
    decode_request,
    encode_source,
    failure,
    hash_document,
    interpret_reply,
    outbound_request,
    parse_request,
    success,
    wellknown,
)
from protocol.errors import ErrorCode, ProtocolError
from tests.support.vectors import load_vector

DOC = 'ADDITION PROTOCOL\n\nAlice sends "2 + 2"; Bob replies "4".'
DOC_HEX = "d5b7e8b5d9657e0fc2d2bbcc4548872c5868190e"


@pytest.fixture(scope="module")
def wire():
    return load_vector("agora-http-0.2", "agora_protocol_0.2.0_wire.json")


def _raises(raw, limits=None):
    with pytest.raises(AgoraHttpError) as info:
        decode_request(raw, limits) if limits else decode_request(raw)
    return info.value


# ── inbound requests ───────────────────────────────────────────────────────


def test_every_request_the_real_sender_emits_is_accepted(wire):
    posts = [x for x in wire["exchanges"] if x["side"] == "sender->server" and x["body"]]
    assert len(posts) == 4
    for exchange in posts:
        request = decode_request(exchange["body"].encode())
        sent = json.loads(exchange["body"])
        assert request.body == sent["body"]
        assert request.multiround is sent.get("multiround", False)
        if sent["protocolHash"] is None:
            assert (request.protocol_hash, request.documents) == (None, ())
        else:
            assert request.protocol_hash == DOC_HEX
            assert request.document_for(DOC_HEX) == DOC
            assert request.protocol_sources == tuple(sent["protocolSources"])


def test_minimal_request_and_its_event_data():
    request = decode_request(b'{"body": "Hello!"}')
    assert request == AgoraRequest(body="Hello!")
    assert request.event_data() == {
        "via": "agora-http",
        "body": "Hello!",
        "text": "Hello!",
        "protocolHash": None,
        "protocolSources": [],
        "multiround": False,
        "conversation_id": None,
    }


def test_object_body_has_no_text_and_keeps_the_conversation():
    request = parse_request(
        {"body": {"location": "London"}, "protocolHash": DOC_HEX.upper(), "multiround": True}
    )
    data = request.event_data("c" * 32)
    assert "text" not in data
    assert data["body"] == {"location": "London"}
    assert (data["protocolHash"], data["multiround"], data["conversation_id"]) == (
        DOC_HEX,
        True,
        "c" * 32,
    )


def test_unknown_fields_and_nulls_are_ignored():
    request = parse_request(
        {"body": "x", "status": "success", "protocolSources": None, "multiround": None, "z": 1}
    )
    assert request == AgoraRequest(body="x")


def test_document_for_matches_only_its_own_hash():
    request = parse_request(
        {"body": "x", "protocolHash": DOC_HEX, "protocolSources": ["other", encode_source(DOC)]}
    )
    assert request.documents == ("other", DOC)
    assert request.document_for(DOC_HEX) == DOC
    assert request.document_for(hash_document("missing")) is None


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"not json", "malformed JSON"),
        (b"", "malformed JSON"),
        (b'{"body": "x"', "malformed JSON"),
        (b'{"body": "\xff"}', "malformed JSON"),
        (b"[" * 2000 + b"]" * 2000, "malformed JSON"),
        (b"[1, 2]", "JSON object"),
        (b'"body"', "JSON object"),
        (b"null", "JSON object"),
        (b'{"body": 5}', "body must be"),
        (b'{"body": null}', "body must be"),
        (b'{"body": ["a"]}', "body must be"),
        (b'{"body": "x", "multiround": "yes"}', "multiround"),
        (b'{"body": "x", "protocolSources": "data:,x"}', "list of strings"),
        (b'{"body": "x", "protocolSources": [1]}', "list of strings"),
        (b'{"body": "x", "protocolSources": ["data:,%FF"]}', "UTF-8"),
        (b'{"body": "x", "protocolHash": 12}', "protocolHash"),
        # a type error wins over the Agora-level failures of the same request
        (b'{"protocolHash": "nope", "multiround": 1}', "multiround"),
    ],
)
def test_malformed_requests_are_http_400(raw, fragment):
    err = _raises(raw)
    assert (err.layer, err.http_status) == (ErrorLayer.TRANSPORT, 400)
    assert fragment in err.error
    status, body = err.response()
    assert status == 400 and body["status"] == "failure" and fragment in body["error"]
    assert isinstance(err, ProtocolError) and err.code is ErrorCode.INVALID_REQUEST


def test_missing_body_is_an_agora_failure():
    err = _raises(b'{"protocolHash": null}')
    assert err.response() == (200, {"status": "failure", "error": MISSING_BODY})


def test_unrecognisable_hash_is_an_unsupported_protocol():
    err = _raises(b'{"protocolHash": "reject-me", "protocolSources": [], "body": "x"}')
    assert err.response() == (200, {"status": "failure", "error": UNSUPPORTED_PROTOCOL})


def test_request_size_limit():
    limits = AgoraLimits(max_request_bytes=100)
    fits = b'{"body": "' + b"a" * 88 + b'"}'
    assert len(fits) == 100
    assert decode_request(fits, limits).body == "a" * 88
    err = _raises(fits + b" ", limits)
    assert err.response() == (413, {"status": "failure", "error": "request body exceeds 100 bytes"})


def test_a_10_mb_body_is_413_by_default():
    raw = orjson.dumps({"body": "a" * 10_000_000})
    assert _raises(raw).http_status == 413


def test_number_of_sources_limit():
    limits = AgoraLimits(max_sources=2)
    assert len(parse_request({"body": "x", "protocolSources": ["a", "b"]}, limits).documents) == 2
    with pytest.raises(AgoraHttpError, match="more than 2 items") as info:
        parse_request({"body": "x", "protocolSources": ["a", "b", "c"]}, limits)
    assert info.value.http_status == 400


def test_source_size_limit():
    limits = AgoraLimits(max_source_bytes=10)
    assert parse_request({"body": "x", "protocolSources": ["a" * 10]}, limits).documents
    with pytest.raises(AgoraHttpError, match="exceeds 10 bytes") as info:
        parse_request({"body": "x", "protocolSources": [encode_source("a" * 11)]}, limits)
    assert info.value.http_status == 400


@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_else(raw):
    try:
        decode_request(raw)
    except AgoraHttpError:
        pass


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from(["body", "protocolHash", "protocolSources", "multiround", "x"]), _json
    )
)
def test_random_objects_never_raise_anything_else(obj):
    try:
        request = parse_request(obj)
    except AgoraHttpError as err:
        assert err.http_status in {200, 400}
        return
    assert isinstance(request.body, str | dict)


def test_follow_ups_may_repeat_the_protocol_but_not_change_it():
    same = parse_request({"body": "again", "protocolHash": DOC_HEX, "multiround": True})
    check_follow_up(same, DOC_HEX)
    check_follow_up(parse_request({"body": "again"}), DOC_HEX)
    with pytest.raises(AgoraHttpError, match="cannot change") as info:
        check_follow_up(same, None)
    assert info.value.http_status == 400
    with pytest.raises(AgoraHttpError):
        check_follow_up(same, hash_document("another protocol"))


# ── replies the hub sends ──────────────────────────────────────────────────


def test_reply_builders():
    assert success("4") == {"status": "success", "body": "4"}
    assert success({"a": 1}, conversation_id="c", conversation_expires=1741910401) == {
        "status": "success",
        "body": {"a": 1},
        "conversationId": "c",
        "conversationExpires": 1741910401,
    }
    assert failure("Timeout") == {"status": "failure", "error": "Timeout"}


def test_wellknown_lists_each_document_under_its_hash():
    assert wellknown([DOC, "other"]) == {DOC_HEX: [DOC], hash_document("other"): ["other"]}
    assert wellknown([]) == {}


# ── outbound requests and the replies they get ─────────────────────────────


def test_outbound_request_matches_what_the_library_sends(wire):
    sent = json.loads(wire["exchanges"][1]["body"])
    built = outbound_request(
        "first",
        protocol_hash=DOC_HEX,
        protocol_sources=[encode_source(DOC)],
        multiround=True,
        hash_form=HashForm.BASE64,
    )
    assert built == sent and list(built) == list(sent)
    assert outbound_request("x") == {"protocolHash": None, "protocolSources": [], "body": "x"}
    assert outbound_request("x", protocol_hash=DOC_HEX)["protocolHash"] == DOC_HEX


def test_every_captured_receiver_reply_is_interpreted(wire):
    replies = [
        decode_reply(x["http_status"], x["response_text"].encode())
        for x in wire["exchanges"]
        if x["side"] == "server->sender"
    ]
    assert [(r.status, r.body, r.error) for r in replies] == [
        ("success", "echo:hi", None),
        ("success", {"echo": {"a": 1}}, None),
        ("success", "echo:hi", None),
        ("success", "echo:again", None),
        ("success", None, None),
        ("failure", None, "Conversation not found."),
        ("failure", None, "Protocol rejected by stub"),
        ("failure", None, "'protocolHash'"),
        (
            "failure",
            None,
            "400 Bad Request: The browser (or proxy) sent a request that this server "
            "could not understand.",
        ),
        ("failure", None, "HTTP 404 from the remote Agora server"),
    ]
    assert replies[2].conversation_id == "fdb2ff12-71c5-4669-a477-e8426a791d9d"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"status": "success", "body": "ok"}, Reply("success", body="ok")),
        (
            {"status": "success", "body": 1, "conversationId": "c1", "conversationExpires": 17e8},
            Reply("success", body=1, conversation_id="c1", conversation_expires=1_700_000_000),
        ),
        (
            {"status": "success", "body": 1, "conversationExpires": True},
            Reply("success", body=1),
        ),
        (
            {"status": "success", "body": 1, "conversationExpires": -5},
            Reply("success", body=1),
        ),
        (
            {"status": "success", "body": 1, "conversationExpires": 1e300},
            Reply("success", body=1),
        ),
        (
            {"status": "success", "body": 1, "conversationExpires": float("nan")},
            Reply("success", body=1),
        ),
        ({"status": "failure", "error": "Timeout"}, Reply("failure", error="Timeout")),
        ({"status": "failure"}, Reply("failure", error="failure without an error")),
        ({"status": "failure", "error": ""}, Reply("failure", error="failure without an error")),
        ({"status": "failure", "error": {"code": 7}}, Reply("failure", error='{"code":7}')),
        ({"status": "failure", "error": 2**70}, Reply("failure", error=str(2**70))),
        ({"status": "error", "message": "boom"}, Reply("failure", error="boom")),
        ({"status": "error"}, Reply("failure", error="error without a message")),
        ({"status": "ok"}, Reply("failure", error="reply has no valid status ('ok')")),
        ({"body": "x"}, Reply("failure", error="reply has no valid status ('None')")),
        ([1], Reply("failure", error="reply is not a JSON object")),
        (
            {"status": "success", "body": 1, "conversationId": "../../admin"},
            Reply("failure", error="reply has an invalid conversationId"),
        ),
        (
            {"status": "success", "body": 1, "conversationId": 5},
            Reply("failure", error="reply has an invalid conversationId"),
        ),
    ],
)
def test_interpret_reply(obj, expected):
    assert interpret_reply(obj) == expected


def test_reply_event_data():
    assert Reply("success", body={"a": 1}).event_data() == {"status": "success", "body": {"a": 1}}
    assert Reply("failure", error="x").event_data() == {"status": "failure", "error": "x"}
    assert Reply("success").ok and not Reply("failure", error="x").ok


def test_decode_reply_bounds_and_errors():
    limits = AgoraLimits(max_request_bytes=40)
    assert decode_reply(200, b'{"status":"success","body":"x"}', limits).body == "x"
    too_big = b'{"status":"success","body":"' + b"x" * 40 + b'"}'
    assert decode_reply(200, too_big, limits) == Reply("failure", error="reply exceeds 40 bytes")
    assert decode_reply(200, b"<html>") == Reply("failure", error="reply is not JSON")
    assert (
        decode_reply(500, b'{"status":"success"}').error == "HTTP 500 from the remote Agora server"
    )
    long_error = orjson.dumps({"status": "error", "message": "e" * 5000})
    assert decode_reply(200, long_error).error == "e" * MAX_ERROR_CHARS
