"""JSON-RPC 2.0 framing as A2A uses it: what a request may look like, and the
errors (codes, ids, ErrorInfo) the a2a-sdk client maps to its typed errors."""

from __future__ import annotations

import orjson
import pytest

from protocol.a2a import jsonrpc
from protocol.a2a.jsonrpc import RpcError, parse_request


def test_a_request_is_parsed():
    rpc = parse_request({"jsonrpc": "2.0", "id": "r1", "method": "GetTask", "params": {"id": "t"}})
    assert (rpc.id, rpc.method, rpc.params) == ("r1", "GetTask", {"id": "t"})
    assert parse_request({"jsonrpc": "2.0", "id": 7, "method": "M"}).params == {}
    assert parse_request({"jsonrpc": "2.0", "method": "M"}).id is None  # answered with id null


@pytest.mark.parametrize(
    ("obj", "code", "request_id"),
    [
        ([], jsonrpc.INVALID_REQUEST, None),  # a batch
        ("GetTask", jsonrpc.INVALID_REQUEST, None),
        ({"jsonrpc": "2.0", "id": {"x": 1}, "method": "M"}, jsonrpc.INVALID_REQUEST, None),
        ({"jsonrpc": "2.0", "id": True, "method": "M"}, jsonrpc.INVALID_REQUEST, None),
        ({"id": 1, "method": "M"}, jsonrpc.INVALID_REQUEST, 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "M"}, jsonrpc.INVALID_REQUEST, 1),
        ({"jsonrpc": "2.0", "id": 1}, jsonrpc.INVALID_REQUEST, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, jsonrpc.INVALID_REQUEST, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "x" * 200}, jsonrpc.INVALID_REQUEST, 1),
        ({"jsonrpc": "2.0", "id": 1, "method": "M", "params": [1]}, jsonrpc.INVALID_PARAMS, 1),
    ],
)
def test_what_is_not_a_request(obj, code, request_id):
    with pytest.raises(RpcError) as caught:
        parse_request(obj)
    assert (caught.value.rpc_code, caught.value.rpc_id) == (code, request_id)


def test_invalid_json_is_a_parse_error():
    with pytest.raises(RpcError) as caught:
        jsonrpc.decode(b"{not json")
    assert caught.value.rpc_code == jsonrpc.PARSE_ERROR


def test_responses_and_errors_on_the_wire():
    assert orjson.loads(jsonrpc.response(3, {"task": {}})) == {
        "jsonrpc": "2.0", "id": 3, "result": {"task": {}},
    }  # fmt: skip
    error = RpcError(jsonrpc.TASK_NOT_FOUND, "Task not found", "r9")
    wire = orjson.loads(jsonrpc.error_response(error))
    assert wire["id"] == "r9" and wire["error"]["code"] == -32001
    assert wire["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"
    assert wire["error"]["data"][0]["@type"].endswith("google.rpc.ErrorInfo")
    plain = orjson.loads(jsonrpc.error_response(RpcError(jsonrpc.METHOD_NOT_FOUND, "no")))
    assert "data" not in plain["error"] and plain["id"] is None
    assert len(RpcError(-32600, "x" * 5000).message) == jsonrpc.MAX_ERROR_CHARS


def test_a_remote_answer_is_its_result_or_an_error():
    assert jsonrpc.parse_response({"jsonrpc": "2.0", "id": 1, "result": {"task": {}}}) == {
        "task": {}
    }
    with pytest.raises(RpcError) as caught:
        jsonrpc.parse_response({"error": {"code": -32002, "message": "not cancelable"}})
    assert (caught.value.rpc_code, caught.value.message) == (-32002, "not cancelable")
    for garbage in ([], {"id": 1}, {"result": 5}, {"error": "boom"}):
        with pytest.raises(RpcError) as caught:
            jsonrpc.parse_response(garbage)
        assert caught.value.rpc_code == jsonrpc.INVALID_AGENT_RESPONSE
