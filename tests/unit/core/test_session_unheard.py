"""The producer's session when nobody receives its stream any more (contract
§19): counting addressed recipients off, ending the stream, the notice, and
deltas in flight. Literal frames, a fake clock, the hub's default settings."""

from __future__ import annotations

import orjson

from hub.core.actions import Reject, Send, StreamCancel, StreamDelta, StreamDone
from hub.core.publisher_streams import FINISHED_STREAMS_REMEMBERED, Heard
from hub.core.session import Session
from protocol.errors import ErrorCode
from tests.unit.core.test_session_streams import delta, feed, make


def opened(to=None, eid="e1") -> Session:
    s = make()
    if to is not None:
        s.on_joined("general")
    first = delta(eid, "a") if to is None else delta(eid, "a", to=to)
    assert isinstance(feed(s, first, 0.0)[0], StreamDelta)
    return s


def gone(s: Session, stream: str, left: bool):
    """``bob`` stops receiving ``stream``, and it turns out he was the last."""
    s.receiver_stopped(stream, "bob", left)
    return s.receivers_gone(stream)


def notice(actions) -> dict:
    (action,) = actions
    assert isinstance(action, Send), action
    return orjson.loads(action.frame)


def test_addressed_recipients_are_counted_off_by_agent():
    s = opened(to=["bob", "carol"])
    assert s.receiver_stopped("alice/e1", "bob", False) is Heard.HEARD
    assert s.receiver_stopped("alice/e1", "bob", False) is Heard.HEARD  # told twice: still carol
    assert s.receiver_stopped("alice/e1", "dave", False) is Heard.HEARD  # not a recipient
    assert s.receiver_stopped("alice/e1", "alice", False) is Heard.HEARD  # its own echo
    assert s.receiver_stopped("e1", "carol", True) is Heard.NOBODY  # either form of the id


def test_an_unaddressed_stream_needs_a_census_and_unknown_ones_nothing():
    s = opened()
    assert s.receiver_stopped("alice/e1", "bob", False) is Heard.ASK
    assert s.receiver_stopped("alice/nope", "bob", False) is Heard.NOT_OPEN
    assert s.receiver_stopped("bob/e1", "carol", False) is Heard.NOT_OPEN
    assert make().receiver_stopped("alice/e1", "bob", False) is Heard.NOT_OPEN  # never streamed


def test_the_stream_ends_and_the_notice_carries_the_producers_own_id():
    s = opened(to="bob")
    ended = gone(s, "alice/e1", left=False)
    assert ended is not None and s.open_streams == 0  # the slot is free again
    msg = orjson.loads(ended.notice())
    assert msg == {
        "type": "space.event.cancel",
        "space": "general",
        "event_id": "e1",
        "from": "bob",
        "timestamp": msg["timestamp"],
        "reason": "receiver_cancelled",
    }
    assert ended.relayed() == StreamCancel(
        "general", "alice/e1", "receiver_cancelled", None, ("bob", "alice")
    )
    assert gone(s, "alice/e1", left=False) is None  # once


def test_receivers_that_left_give_their_own_reason():
    s = opened()
    ended = gone(s, "alice/e1", left=True)
    assert ended is not None and orjson.loads(ended.notice())["reason"] == "receivers_left"


def test_the_receiver_last_heard_to_stop_is_named():
    """Censuses may cross: the one that finds nobody names whoever stopped last."""
    s = opened()
    assert s.receivers_gone("alice/e1") is None, "nobody has stopped yet"
    s.receiver_stopped("alice/e1", "bob", True)
    s.receiver_stopped("alice/e1", "carol", False)
    ended = s.receivers_gone("alice/e1")
    assert ended is not None and (ended.receiver, ended.reason) == ("carol", "receiver_cancelled")


def test_deltas_in_flight_are_dropped_without_a_word():
    s = opened()
    gone(s, "alice/e1", left=False)
    for i in range(50):
        assert feed(s, delta("e1", f"t{i}", id=f"d{i}"), 0.01 * i) == []


def test_deltas_in_flight_take_from_the_stream_budget_not_the_message_bucket():
    """An old client that never heard keeps streaming: it is neither refused
    nor closed for it, and its ordinary messages still go through."""
    s = opened()
    gone(s, "alice/e1", left=False)
    frame = orjson.dumps(delta("e1")).decode()
    for i in range(300 * 10):  # 300 deltas/s for 10 s: three times rate_limit
        assert s.receive(frame, i / 300) == []
    publish = {"type": "space.publish", "id": "p", "space": "general", "data": {}}
    assert type(feed(s, publish, 10.0)[0]).__name__ == "Publish"


def test_a_done_in_flight_is_answered_with_the_notice_then_the_id_is_ended():
    s = opened()
    gone(s, "alice/e1", left=True)
    done = {"type": "space.event.done", "id": "s1.9", "space": "general", "event_id": "e1"}
    answer = notice(feed(s, done, 1.0))
    assert answer["id"] == "s1.9" and answer["event_id"] == "e1"
    assert answer["reason"] == "receivers_left" and answer["from"] == "bob"
    (late,) = feed(s, delta("e1", id="d"), 1.1)
    assert isinstance(late, Reject) and late.error.code is ErrorCode.INVALID_REQUEST
    assert "already ended" in late.error.message


def test_a_cancel_in_flight_is_answered_with_the_notice_too():
    s = opened()
    gone(s, "alice/e1", left=False)
    cancel = {"type": "space.event.cancel", "id": "c", "space": "general",
              "event_id": "alice/e1", "reason": "user stop"}  # fmt: skip
    answer = notice(feed(s, cancel, 1.0))
    assert answer["id"] == "c" and answer["reason"] == "receiver_cancelled"
    again = feed(s, {**cancel, "event_id": "e1"}, 1.1)
    assert isinstance(again[0], Reject), "ended now, like after a done"


def test_a_done_crossing_nothing_still_ends_the_stream_normally():
    s = opened(to="bob")
    done = feed(s, {"type": "space.event.done", "space": "general", "event_id": "e1"}, 1.0)
    assert isinstance(done[0], StreamDone)
    assert gone(s, "alice/e1", left=False) is None  # too late: ended


def test_ended_streams_are_remembered_in_a_bounded_window():
    s = make()
    last = FINISHED_STREAMS_REMEMBERED
    for i in range(last + 1):
        assert isinstance(feed(s, delta(f"e{i}"), float(i))[0], StreamDelta)
        assert gone(s, f"alice/e{i}", left=False) is not None
    assert feed(s, delta(f"e{last}"), last + 1.0) == []  # still dropped
    (oldest,) = feed(s, delta("e0"), last + 1.0)  # fell out: ended like any other
    assert isinstance(oldest, Reject) and "already ended" in oldest.error.message


def test_the_spaces_open_streams_are_listed_for_the_reaper():
    s = opened(eid="e1")
    s.on_joined("lab")
    feed(s, {**delta("e2"), "space": "lab"}, 0.0)
    assert s.streams_in("general") == ["alice/e1"] and s.streams_in("lab") == ["alice/e2"]
    assert make().streams_in("general") == []
