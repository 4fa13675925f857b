"""A2A messages and tasks ⇄ hub events, both ways, without any I/O: what an
agent is sent, what its reply makes of the task, what a remote's answer
becomes, and the task record (states, wire form, storage)."""

from __future__ import annotations

import pytest

from protocol.a2a import mapping
from protocol.a2a.jsonrpc import INVALID_PARAMS, RpcError
from protocol.a2a.mapping import Outcome, RemoteOutcome, interpret_reply, remote_outcome
from protocol.a2a.model import TaskState, send_params, task_query, timestamp
from protocol.a2a.tasks import TaskRecord, TaskRecordError


def message(**fields):
    return {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], **fields}


# ── inbound: a message becomes an event ────────────────────────────────────


def test_a_message_becomes_the_event_agents_receive():
    params = send_params(
        {"message": message(parts=[{"text": "a"}, {"data": {"k": [1]}}, {"text": "b"},
                                   {"url": "https://x/y", "mediaType": "text/plain"},
                                   {"raw": "aGk=", "filename": "h.txt"}])},
        1, max_parts=8,
    )  # fmt: skip
    data = mapping.request_data("t1", "c1", params.message, "alice")
    assert data == {
        "via": "a2a", "task_id": "t1", "context_id": "c1", "message_id": "m1", "text": "a\nb",
        "parts": [{"text": "a"}, {"data": {"k": [1]}}, {"text": "b"},
                  {"url": "https://x/y", "mediaType": "text/plain"},
                  {"raw": "aGk=", "filename": "h.txt"}],
        "caller": "alice",
    }  # fmt: skip
    assert mapping.cancel_data("t1") == {"via": "a2a", "task_id": "t1", "cancel": True}


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"message": "hi"},
        {"message": message(messageId=5)},
        {"message": message(role="user")},  # the 0.3 spelling
        {"message": message(parts=[])},
        {"message": message(parts=[{"text": "a", "data": 1}])},
        {"message": message(parts=[{"kind": "text"}])},
        {"message": message(parts=[{"raw": "not base64!"}])},
        {"message": message(parts=[{"text": "x"}] * 9)},
        {"message": message(), "configuration": {"returnImmediately": "yes"}},
        {"message": message(taskId="")},
    ],
)
def test_bad_params_are_invalid_params(params):
    with pytest.raises(RpcError) as caught:
        send_params(params, "r", max_parts=8)
    assert (caught.value.rpc_code, caught.value.rpc_id) == (INVALID_PARAMS, "r")


def test_unknown_members_are_ignored_and_queries_checked():
    extended = {"message": message(extensions=[], kind="message"), "x": 1}
    params = send_params(extended, 1, max_parts=1)
    assert params.message.text == "hi"
    assert task_query({"id": "t", "historyLength": 3}, 1).id == "t"
    with pytest.raises(RpcError):
        task_query({"id": 5}, 1)


# ── inbound: the agent's reply becomes the task's outcome ──────────────────


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        ({"text": "hi"}, Outcome(TaskState.COMPLETED, None, ({"text": "hi"},), 2)),
        ({"body": "hi"}, Outcome(TaskState.COMPLETED, None, ({"text": "hi"},), 2)),
        ({"body": {"a": 1}}, Outcome(TaskState.COMPLETED, None, ({"data": {"a": 1}},), 7)),
        ({"text": "t", "data": [1]}, Outcome(TaskState.COMPLETED, None,
                                              ({"text": "t"}, {"data": [1]}), 4)),
        ({}, Outcome(TaskState.COMPLETED)),
        ({"status": "failure", "error": "no"}, Outcome(TaskState.FAILED, "no")),
        ({"status": "error", "message": "lib"}, Outcome(TaskState.FAILED, "lib")),
        ({"status": "failure"}, Outcome(TaskState.FAILED, "The agent reported a failure")),
        ({"status": "failure", "error": {"c": 1}}, Outcome(TaskState.FAILED, '{"c":1}')),
        ({"state": "input-required", "text": "city?"},
         Outcome(TaskState.INPUT_REQUIRED, "city?")),
    ],
)  # fmt: skip
def test_a_reply_makes_the_outcome(data, outcome):
    assert interpret_reply(data) == outcome


def test_every_state_on_the_wire_is_spelled_the_1_0_way():
    for state in TaskState:
        assert state.value.startswith("TASK_STATE_") and state.value.isupper()
    assert {s for s in TaskState if s.terminal} == {
        TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED,
    }  # fmt: skip


# ── outbound: an event becomes a message, the remote's answer an event ─────


def test_an_event_becomes_parts():
    assert mapping.outbound_parts({"text": "hi"}) == [{"text": "hi"}]
    assert mapping.outbound_parts({"body": "hi"}) == [{"text": "hi"}]
    assert mapping.outbound_parts({"body": {"a": 1}}) == [{"data": {"a": 1}}]
    assert mapping.outbound_parts({"text": "t", "data": {"a": 1}}) == [
        {"text": "t"}, {"data": {"a": 1}},
    ]  # fmt: skip
    assert mapping.outbound_parts({"via": "x"}) == []


def task(state, *, parts=None, status_text=None):
    status = {"state": state}
    if status_text is not None:
        status["message"] = {"role": "ROLE_AGENT", "parts": [{"text": status_text}]}
    value = {"id": "t", "contextId": "c", "status": status}
    if parts is not None:
        value["artifacts"] = [{"artifactId": "a", "parts": parts}]
    return value


def test_a_remote_task_becomes_an_outcome():
    assert remote_outcome(task("TASK_STATE_WORKING")) is None
    assert remote_outcome(task("TASK_STATE_COMPLETED", parts=[{"text": "a"}, {"text": "b"}])) == (
        RemoteOutcome("success", "ab")
    )
    assert remote_outcome(task("TASK_STATE_COMPLETED", parts=[{"data": {"x": 1}}])) == (
        RemoteOutcome("success", None, {"x": 1})
    )
    assert remote_outcome(task("TASK_STATE_COMPLETED", status_text="done")) == (
        RemoteOutcome("success", "done")
    )
    assert remote_outcome(task("TASK_STATE_INPUT_REQUIRED", status_text="city?")) == (
        RemoteOutcome("input-required", "city?")
    )
    assert remote_outcome(task("TASK_STATE_FAILED", status_text="broke")) == (
        RemoteOutcome("failure", error="broke")
    )
    rejected = remote_outcome(task("TASK_STATE_REJECTED"))
    assert rejected is not None and rejected.kind == "failure"
    assert remote_outcome(task("completed")) is None  # the 0.3 spelling is no state
    assert mapping.message_outcome({"parts": [{"text": "x"}, {"url": "u"}]}) == (
        RemoteOutcome("success", "x", {"url": "u"})
    )


def test_reply_data_for_the_sender():
    assert mapping.success_data("e", "hi", None, "t", "c") == {
        "in_reply_to": "e", "status": "success", "text": "hi", "task_id": "t", "context_id": "c",
    }  # fmt: skip
    assert mapping.failure_data("e", "no") == {"in_reply_to": "e", "status": "failure",
                                               "error": "no"}  # fmt: skip
    assert mapping.input_required_data("e", "t", "c", "city?") == {
        "in_reply_to": "e", "state": "input-required", "task_id": "t", "context_id": "c",
        "text": "city?",
    }  # fmt: skip
    assert mapping.parts_text([{"text": "a"}, {"data": {"b": 1}}]) == 'a{"data":{"b":1}}'
    assert mapping.parts_text([{"file": {"b": 1}}]) == '{"file":{"b":1}}'  # a kind not in 1.0


# ── the task record ────────────────────────────────────────────────────────


def record(**fields):
    base = dict(id="t", context_id="c", space="lab", to=None, caller="alice",
                state=TaskState.WORKING, updated_ms=1_700_000_000_123)  # fmt: skip
    return TaskRecord(**{**base, **fields})


def test_the_record_on_the_wire_and_in_the_store():
    r = record()
    r.add_artifact("a1", [{"text": "hi"}], 2)
    assert r.move(TaskState.INPUT_REQUIRED, 1_700_000_000_456, "city?")
    wire = r.wire()
    assert wire["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert wire["status"]["timestamp"] == "2023-11-14T22:13:20.456000Z"
    assert wire["status"]["message"]["parts"] == [{"text": "city?"}]
    assert wire["status"]["message"]["role"] == "ROLE_AGENT"
    assert wire["artifacts"] == [{"artifactId": "a1", "parts": [{"text": "hi"}]}]
    assert TaskRecord.from_bytes(r.to_bytes()) == r
    assert r.move(TaskState.COMPLETED, 1, None) and r.terminal
    assert not r.move(TaskState.WORKING, 2)  # a terminal state is final
    with pytest.raises(TaskRecordError):
        TaskRecord.from_bytes(b'{"id": 1}')


def test_timestamps_are_iso_utc_with_z():
    assert timestamp(0) == "1970-01-01T00:00:00.000000Z"
