"""The session state machine, fed literal frames — no sockets, no clock."""

import orjson
import pytest

from hub.core.actions import (
    Close,
    Denied,
    Join,
    Leave,
    ListAgents,
    ListMembers,
    ListSpaces,
    Publish,
    ReceiverCancel,
    Register,
    Reject,
    Send,
    StreamCancel,
    StreamDelta,
    StreamDone,
)
from hub.core.session import Session, SessionLimits, SessionState
from protocol.errors import CloseCode, ErrorCode

LIMITS = SessionLimits(
    heartbeat_timeout=60, rate_limit=100, rate_burst=200, rate_abuse_seconds=5, max_streams=2
)


def make(limits: SessionLimits = LIMITS, spaces=("general",)) -> Session:
    s = Session("alice", "ws-1", limits, now=0.0)
    for space in spaces:
        s.on_joined(space)
    return s


def feed(session: Session, msg, now: float = 1.0):
    frame = msg if isinstance(msg, str | bytes) else orjson.dumps(msg).decode()
    return session.receive(frame, now)


def only(actions):
    assert len(actions) == 1, actions
    return actions[0]


def rejected(actions, code: ErrorCode, request_id=None):
    action = only(actions)
    assert isinstance(action, Reject), action
    assert action.error.code is code, action.error
    assert action.error.request_id == request_id
    return action.error


def test_heartbeat_is_answered_with_a_timestamp():
    action = only(feed(make(), {"type": "agent.heartbeat", "id": "h"}))
    assert isinstance(action, Send)
    reply = orjson.loads(action.frame)
    assert reply["type"] == "agent.heartbeat" and reply["id"] == "h"
    assert isinstance(reply["timestamp"], int) and reply["timestamp"] > 1_600_000_000_000


def test_register_must_use_the_connection_id():
    s = make()
    ok = only(
        feed(s, {"type": "agent.register", "id": "r", "agent": {"id": "alice", "type": "llm"}})
    )
    assert isinstance(ok, Register) and ok.info.type == "llm" and ok.request_id == "r"
    err = rejected(
        feed(s, {"type": "agent.register", "id": "r2", "agent": {"id": "mallory"}}),
        ErrorCode.INVALID_REQUEST,
        "r2",
    )
    assert "mallory" in err.message


def test_join_validates_the_name_then_asks_the_node():
    s = make(spaces=())
    assert only(feed(s, {"type": "space.join", "id": "j", "space": "general"})) == Join(
        "general", "j"
    )
    rejected(
        feed(s, {"type": "space.join", "id": "j2", "space": "Bad Name"}),
        ErrorCode.INVALID_REQUEST,
        "j2",
    )


def test_leave_requires_membership():
    s = make()
    assert isinstance(only(feed(s, {"type": "space.leave", "id": "l", "space": "general"})), Leave)
    rejected(
        feed(s, {"type": "space.leave", "id": "l2", "space": "other"}),
        ErrorCode.INVALID_REQUEST,
        "l2",
    )


def test_publish_by_member_non_member_and_to_system_space():
    s = make(spaces=("general", "agent.status"))
    ok = only(
        feed(
            s,
            {
                "type": "space.publish",
                "id": "p",
                "space": "general",
                "data": {"t": 1},
                "echo": False,
            },
        )
    )
    assert ok == Publish("general", {"t": 1}, False, "p")
    assert only(
        feed(s, {"type": "space.publish", "id": "p2", "space": "elsewhere", "data": {}})
    ) == Denied("elsewhere", "p2")
    rejected(
        feed(s, {"type": "space.publish", "id": "p3", "space": "agent.status", "data": {}}),
        ErrorCode.UNAUTHORIZED,
        "p3",
    )


def test_publish_with_someone_elses_from_is_invalid():
    s = make()
    rejected(
        feed(s, {"type": "space.publish", "id": "p", "space": "general", "data": {"from": "bob"}}),
        ErrorCode.INVALID_REQUEST,
        "p",
    )
    ok = only(feed(s, {"type": "space.publish", "space": "general", "data": {"from": "alice"}}))
    assert isinstance(ok, Publish)


def test_list_and_unknown_types():
    s = make()
    assert only(feed(s, {"type": "space.list", "id": "s"})) == ListSpaces("s")
    rejected(feed(s, {"type": "space.destroy", "id": "x"}), ErrorCode.INVALID_REQUEST, "x")
    rejected(feed(s, b"\x00\x01"), ErrorCode.INVALID_REQUEST)
    assert s.state is SessionState.OPEN


def test_rate_limit_refuses_excess_and_closes_on_abuse():
    limits = SessionLimits(rate_limit=10, rate_burst=3, rate_abuse_seconds=1)
    s = make(limits)
    hb = {"type": "agent.heartbeat", "id": "h"}
    for _ in range(3):
        assert isinstance(only(feed(s, hb, now=1.0)), Send)
    err = rejected(feed(s, hb, now=1.0), ErrorCode.RATE_LIMITED, "h")
    assert "not processed" in err.message
    # Bad frames over the limit are reported as rate limited too.
    rejected(feed(s, "garbage", now=1.0), ErrorCode.RATE_LIMITED)
    # A burst, however long, is refused message by message: no close.
    for n in range(200):
        rejected(feed(s, {**hb, "id": f"b{n}"}, now=1.0), ErrorCode.RATE_LIMITED, f"b{n}")
    # Kept up far above the rate for rate_abuse_seconds of wall time: closed,
    # and the message that tipped it over still gets its own refusal.
    actions = []
    for n in range(1000):
        actions = feed(s, {**hb, "id": f"s{n}"}, now=1.0 + n / 100)
        if len(actions) > 1:
            break
    refusal, close = actions
    assert refusal.error.code is ErrorCode.RATE_LIMITED and refusal.error.request_id == f"s{n}"
    assert close == Close(CloseCode.RATE_LIMIT_ABUSE, ErrorCode.RATE_LIMITED, close.reason)
    assert 1.0 <= n / 100 < 1.2
    assert s.state is SessionState.CLOSING
    assert feed(s, hb, now=3.0) == []


def test_liveness_counts_any_frame():
    s = make(SessionLimits(heartbeat_timeout=10))
    assert s.check_liveness(9.0) is None
    feed(s, "not even json", now=9.0)
    assert s.check_liveness(18.0) is None
    close = s.check_liveness(19.5)
    assert close is not None and close.code is CloseCode.HEARTBEAT_TIMEOUT
    assert close.error is ErrorCode.HEARTBEAT_TIMEOUT


# ── client streams (publisher side) ─────────────────────────────────────────


def delta(eid="e1", text="tok", space="general", **extra):
    return {
        "type": "space.event.delta",
        "space": space,
        "event_id": eid,
        "data": {"text": text, **extra.pop("data", {})},
        **extra,
    }


def test_stream_open_continue_done():
    s = make()
    first = only(feed(s, delta(data={"model": "m"})))
    assert first == StreamDelta(
        "general", "alice/e1", {"text": "tok", "model": "m"}, True, True, None
    )
    nxt = only(feed(s, delta(text="more")))
    assert isinstance(nxt, StreamDelta) and not nxt.first and nxt.stream_id == "alice/e1"
    assert s.open_streams == 1
    done = only(
        feed(s, {"type": "space.event.done", "id": "d", "space": "general", "event_id": "e1"})
    )
    assert done == StreamDone("general", "alice/e1", "d")
    assert s.open_streams == 0
    rejected(feed(s, delta(id="late")), ErrorCode.INVALID_REQUEST, "late")
    rejected(
        feed(s, {"type": "space.event.done", "id": "d2", "space": "general", "event_id": "e1"}),
        ErrorCode.INVALID_REQUEST,
        "d2",
    )


def test_stream_rules():
    s = make(spaces=("general", "other"))
    rejected(feed(s, delta(id="x", text=None)), ErrorCode.INVALID_REQUEST, "x")
    rejected(feed(s, delta(eid="a/b", id="y")), ErrorCode.INVALID_REQUEST, "y")
    assert only(feed(s, delta(space="nowhere", id="z"))) == Denied("nowhere", "z")
    feed(s, delta("e1"))
    rejected(feed(s, delta("e1", space="other", id="w")), ErrorCode.INVALID_REQUEST, "w")
    feed(s, delta("e2"))
    err = rejected(feed(s, delta("e3", id="v")), ErrorCode.RATE_LIMITED, "v")
    assert "open streams" in err.message


def test_publisher_cancel_by_own_or_namespaced_id():
    s = make()
    feed(s, delta("e1"))
    feed(s, delta("e2"))
    c1 = only(feed(s, {"type": "space.event.cancel", "space": "general", "event_id": "e1"}))
    assert c1 == StreamCancel("general", "alice/e1", "cancelled", None)
    c2 = only(
        feed(
            s,
            {
                "type": "space.event.cancel",
                "space": "general",
                "event_id": "alice/e2",
                "reason": "user stop",
                "id": "c",
            },
        )
    )
    assert c2 == StreamCancel("general", "alice/e2", "user stop", "c")
    rejected(feed(s, delta("e1", id="again")), ErrorCode.INVALID_REQUEST, "again")


def test_cancel_of_someone_elses_stream_is_a_receiver_cancel():
    s = make()
    action = only(
        feed(s, {"type": "space.event.cancel", "id": "r", "space": "general", "event_id": "bob/e9"})
    )
    assert action == ReceiverCancel("general", "bob/e9", "r")


def test_hub_cancels_idle_left_and_disconnected_streams():
    s = make(spaces=("general", "other"))
    feed(s, delta("e1"), now=1.0)
    feed(s, delta("e2", space="other"), now=5.0)
    assert s.expire_streams(now=8.0, idle_timeout=5.0) == [
        StreamCancel("general", "alice/e1", "idle_timeout")
    ]
    leave = only(feed(s, {"type": "space.leave", "space": "other"}, now=9.0))
    assert leave.cancelled == (StreamCancel("other", "alice/e2", "publisher_left_space"),)
    feed(s, delta("e3"), now=9.0)
    assert s.closed() == [StreamCancel("general", "alice/e3", "publisher_disconnected")]
    assert s.state is SessionState.CLOSED
    assert s.open_streams == 0


def test_finished_ids_are_remembered_with_a_bound():
    from hub.core.publisher_streams import FINISHED_STREAMS_REMEMBERED

    s = make(SessionLimits(max_streams=1, rate_burst=10_000))
    for i in range(FINISHED_STREAMS_REMEMBERED + 50):
        feed(s, delta(f"e{i}"))
        feed(s, {"type": "space.event.done", "space": "general", "event_id": f"e{i}"})
    assert s.open_streams == 0
    last = FINISHED_STREAMS_REMEMBERED + 49
    # The newest finished ids are remembered: a late delta is refused...
    late = feed(s, delta(f"e{last - FINISHED_STREAMS_REMEMBERED + 1}"))
    assert isinstance(late[0], Reject) and "already ended" in late[0].error.message
    # ...the oldest are forgotten (bounded memory): the id may open a new stream.
    again = feed(s, delta("e0"))
    assert isinstance(again[0], StreamDelta) and again[0].first


@pytest.mark.parametrize(
    "frame",
    [
        '{"type":"space.event.delta","space":"general","event_id":"e","data":{"text":"x","from":"bob"}}',
        '{"type":"space.event.delta","space":"general","event_id":"","data":{"text":"x"}}',
    ],
)
def test_invalid_stream_frames(frame):
    rejected(feed(make(), frame), ErrorCode.INVALID_REQUEST)


def test_members_and_agent_list_requests_become_actions():
    s = make(spaces=())
    a = only(feed(s, {"type": "space.members", "id": "m", "space": "big", "cursor": "12"}))
    assert a == ListMembers("big", "12", 100, "m")
    a = only(feed(s, {"type": "space.members", "id": "m", "space": "big", "limit": 1000}))
    assert a == ListMembers("big", None, 1000, "m")
    a = only(feed(s, {"type": "agent.list", "id": "l", "capability": "urn:x:*", "limit": 5}))
    assert a == ListAgents("urn:x:*", None, None, 5, "l")
    a = only(feed(s, {"type": "agent.list", "id": "l", "space": "room", "cursor": "7"}))
    assert a == ListAgents(None, "room", "7", 100, "l")
    for bad in (
        {"type": "space.members", "id": "x", "space": "Bad!"},
        {"type": "space.members", "id": "x", "space": "big", "limit": 1001},
        {"type": "space.members", "id": "x", "space": "big", "limit": True},
        {"type": "space.members", "id": "x", "space": "big", "cursor": ""},
        {"type": "agent.list", "id": "x", "space": "No Such Name"},
        {"type": "agent.list", "id": "x", "capability": "c" * 130},
        {"type": "agent.list", "id": "x", "limit": 0},
    ):
        rejected(feed(s, bad), ErrorCode.INVALID_REQUEST, "x")
