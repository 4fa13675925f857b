"""protocol.mcp.jsonrpc and .revisions: framing, errors, the stateless envelope."""

from __future__ import annotations

import orjson
import pytest

from protocol.mcp import jsonrpc, revisions
from protocol.mcp.jsonrpc import ClientReply, JsonRpcError, Notification, Request, parse_message

META = {
    revisions.META_PROTOCOL_VERSION: "2026-07-28",
    revisions.META_CLIENT_CAPABILITIES: {},
}


def _code(body: bytes) -> tuple[int, object]:
    with pytest.raises(JsonRpcError) as caught:
        parse_message(body)
    return caught.value.code, caught.value.request_id


def test_requests_notifications_and_client_replies():
    assert parse_message(b'{"jsonrpc":"2.0","id":1,"method":"ping"}') == Request(1, "ping", {})
    assert parse_message(b'{"jsonrpc":"2.0","id":"a","method":"x","params":{"k":1}}') == Request(
        "a", "x", {"k": 1}
    )
    assert parse_message(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == (
        Notification("notifications/initialized", {})
    )
    assert parse_message(b'{"jsonrpc":"2.0","id":7,"result":{}}') == ClientReply(7)
    assert parse_message(b'{"jsonrpc":"2.0","id":7,"error":{"code":1}}') == ClientReply(7)


@pytest.mark.parametrize(
    ("body", "code", "request_id"),
    [
        (b"", jsonrpc.PARSE_ERROR, None),
        (b"{not json", jsonrpc.PARSE_ERROR, None),
        (b"\xff\xfe", jsonrpc.PARSE_ERROR, None),
        (b"[]", jsonrpc.INVALID_REQUEST, None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', jsonrpc.INVALID_REQUEST, None),
        (b'"ping"', jsonrpc.INVALID_REQUEST, None),
        (b'{"id":1,"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":1}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":{},"method":"ping"}', jsonrpc.INVALID_REQUEST, None),
        (b'{"jsonrpc":"2.0","id":1,"method":5}', jsonrpc.INVALID_REQUEST, 1),
        (b'{"jsonrpc":"2.0","id":1,"method":""}', jsonrpc.INVALID_REQUEST, 1),
        (b'{"jsonrpc":"2.0","id":2,"method":"x","params":[1]}', jsonrpc.INVALID_PARAMS, 2),
        (b'{"jsonrpc":"2.0","id":2,"method":"x","params":"p"}', jsonrpc.INVALID_PARAMS, 2),
    ],
)
def test_malformed_messages_get_the_specified_codes(body, code, request_id):
    assert _code(body) == (code, request_id)


def test_long_ids_and_methods_are_refused_not_echoed():
    long_id = orjson.dumps({"jsonrpc": "2.0", "id": "x" * 300, "method": "ping"})
    assert _code(long_id)[0] == jsonrpc.INVALID_REQUEST
    long_method = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "m" * 200})
    assert _code(long_method)[0] == jsonrpc.INVALID_REQUEST
    err = jsonrpc.method_not_found(1, "m" * 500)
    assert len(err.message) < 200


def test_responses_and_sse_framing():
    assert jsonrpc.result_response(3, {"a": 1}) == {"jsonrpc": "2.0", "id": 3, "result": {"a": 1}}
    err = JsonRpcError(jsonrpc.INVALID_PARAMS, "bad", data={"x": 1}, request_id="r")
    assert err.response() == {
        "jsonrpc": "2.0",
        "id": "r",
        "error": {"code": -32602, "message": "bad", "data": {"x": 1}},
    }
    assert JsonRpcError(-1, "m").response()["id"] is None  # "id": null, not absent
    frame = jsonrpc.sse_event(jsonrpc.notification("notifications/tools/list_changed"))
    assert frame.startswith(b"event: message\ndata: {") and frame.endswith(b"\n\n")
    assert orjson.loads(frame.split(b"data: ", 1)[1]) == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
    }


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2025-03-26", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
        (None, "2025-11-25"),
    ],
)
def test_initialize_negotiates_a_handshake_revision(requested, answered):
    assert revisions.negotiate(requested) == answered


def test_session_requests_accept_handshake_revision_headers():
    assert revisions.handshake_header_ok(None)
    assert revisions.handshake_header_ok("2025-06-18")
    assert revisions.handshake_header_ok("2025-03-26")
    assert not revisions.handshake_header_ok("1999-01-01")
    assert revisions.is_modern("2026-07-28") and not revisions.is_modern("2025-11-25")


def _headers(method: str = "tools/list", **extra: str) -> dict[str, str]:
    return {"mcp-protocol-version": "2026-07-28", "mcp-method": method, **extra}


def test_the_stateless_envelope_passes_when_headers_and_meta_agree():
    request = Request(1, "tools/call", {"name": "spaces_list", "_meta": META})
    envelope = revisions.check_envelope(
        request, _headers("tools/call", **{"mcp-name": "spaces_list"})
    )
    assert envelope.protocol_version == "2026-07-28"


@pytest.mark.parametrize(
    ("params", "headers", "code"),
    [
        ({}, _headers(), jsonrpc.INVALID_PARAMS),
        ({"_meta": "x"}, _headers(), jsonrpc.INVALID_PARAMS),
        ({"_meta": {revisions.META_PROTOCOL_VERSION: "2026-07-28"}}, _headers(), -32602),
        ({"_meta": META}, {"mcp-method": "tools/list"}, jsonrpc.HEADER_MISMATCH),
        ({"_meta": META}, _headers(method="tools/call"), jsonrpc.HEADER_MISMATCH),
        (
            {"_meta": {**META, revisions.META_PROTOCOL_VERSION: "2099-01-01"}},
            {"mcp-protocol-version": "2099-01-01", "mcp-method": "tools/list"},
            jsonrpc.UNSUPPORTED_PROTOCOL_VERSION,
        ),
    ],
)
def test_the_stateless_ladder_refuses_in_its_order(params, headers, code):
    with pytest.raises(JsonRpcError) as caught:
        revisions.check_envelope(Request(9, "tools/list", params), headers)
    assert caught.value.code == code and caught.value.request_id == 9


def test_an_unsupported_version_names_every_revision_served():
    with pytest.raises(JsonRpcError) as caught:
        revisions.check_envelope(
            Request(
                1, "server/discover", {"_meta": {**META, revisions.META_PROTOCOL_VERSION: "z"}}
            ),
            {"mcp-protocol-version": "z", "mcp-method": "server/discover"},
        )
    data = caught.value.data
    assert data["requested"] == "z"
    assert "2026-07-28" in data["supported"] and "2025-11-25" in data["supported"]


def test_tools_call_name_header_must_match():
    request = Request(1, "tools/call", {"name": "a.b", "_meta": META})
    with pytest.raises(JsonRpcError) as caught:
        revisions.check_envelope(request, _headers("tools/call", **{"mcp-name": "other"}))
    assert caught.value.code == jsonrpc.HEADER_MISMATCH
