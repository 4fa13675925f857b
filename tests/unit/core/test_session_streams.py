"""Client streams against the rate limits, and addressed streams: the session
fed literal frames and a fake clock, on the hub's default settings."""

import orjson
import pytest

from hub.config.settings import Settings
from hub.core.actions import Close, Publish, Reject, Send, StreamCancel, StreamDelta, StreamDone
from hub.core.session import Session, SessionState
from hub.node.node import _session_limits
from protocol.errors import CloseCode, ErrorCode

DEFAULTS = _session_limits(Settings(), frozenset())


def make(**limits) -> Session:
    from dataclasses import replace

    s = Session("alice", "ws-1", replace(DEFAULTS, **limits), now=0.0)
    s.on_joined("general")
    return s


def feed(session: Session, msg, now: float):
    return session.receive(orjson.dumps(msg).decode(), now)


def delta(eid="e1", text="tok", **extra):
    return {"type": "space.event.delta", "space": "general", "event_id": eid,
            "data": {"text": text}, **extra}  # fmt: skip


def publish(n: int):
    return {"type": "space.publish", "id": f"p{n}", "space": "general", "data": {"n": n}}


# ── the stream budget ───────────────────────────────────────────────────────


def test_defaults_carry_300_deltas_a_second_for_minutes():
    """Issue 28: a model's token stream, one delta per token, on default settings."""
    assert DEFAULTS.rate_limit == 100 and DEFAULTS.stream_rate_limit >= 300
    s = make()
    frame = orjson.dumps(delta()).decode()
    refused = []
    for i in range(300 * 120):  # 300 deltas/s for two minutes
        actions = s.receive(frame, i / 300)
        if type(actions[0]) is not StreamDelta:
            refused.append((i, actions))
    assert refused == []
    done = feed(s, {"type": "space.event.done", "space": "general", "event_id": "e1"}, 120.0)
    assert isinstance(done[0], StreamDone)


def test_a_flood_of_separate_publishes_is_still_limited_and_closed():
    """300 publishes/s (three times rate_limit): refused past the burst, and
    closed 4429 once kept up for rate_abuse_seconds."""
    s = make()
    first_refusal = closed_at = None
    for i in range(300 * 20):
        now = i / 300
        actions = feed(s, publish(i), now)
        if isinstance(actions[0], Reject):
            assert actions[0].error.code is ErrorCode.RATE_LIMITED
            first_refusal = now if first_refusal is None else first_refusal
        if len(actions) == 2:
            assert actions[1] == Close(CloseCode.RATE_LIMIT_ABUSE, ErrorCode.RATE_LIMITED,
                                       actions[1].reason)  # fmt: skip
            closed_at = now
            break
    assert first_refusal is not None and 0.5 < first_refusal < 1.5  # the burst of 200
    assert closed_at is not None and closed_at - first_refusal >= DEFAULTS.rate_abuse_seconds
    assert closed_at < 10
    assert s.state is SessionState.CLOSING


def test_streaming_does_not_spend_the_message_budget_nor_the_other_way_round():
    s = make()
    for i in range(200):  # the message bucket emptied at once
        assert isinstance(feed(s, publish(i), 0.0)[0], Publish)
    assert isinstance(feed(s, publish(200), 0.0)[0], Reject)
    # The first delta opens a stream: a message like a publish, refused now...
    refused = feed(s, delta("e1", id="open"), 0.0)
    assert refused[0].error.code is ErrorCode.RATE_LIMITED
    # ...and taken once the bucket has refilled a little.
    assert feed(s, delta("e1"), 0.02)[0].first
    # Its later deltas take from the stream budget: 300/s with the message
    # bucket kept near empty by 50 publishes/s, nothing refused on either side.
    for i in range(3000):
        now = 0.02 + i / 300
        assert isinstance(feed(s, delta("e1"), now)[0], StreamDelta)
        if i % 6 == 0:
            assert isinstance(feed(s, publish(1000 + i), now)[0], Publish)


def test_a_delta_flood_is_refused_and_closed_4429():
    s = make(stream_rate_limit=100, stream_rate_burst=100, rate_abuse_seconds=1)
    feed(s, delta("e1"), 0.0)
    refused = 0
    for i in range(1, 5000):
        actions = feed(s, delta("e1", id=f"d{i}"), i / 1000)  # 1000/s: ten times the rate
        if isinstance(actions[0], Reject):
            assert actions[0].error.code is ErrorCode.RATE_LIMITED
            assert actions[0].error.request_id == f"d{i}"
            refused += 1
        if len(actions) == 2:
            assert actions[1].code is CloseCode.RATE_LIMIT_ABUSE
            break
    assert 1.0 <= i / 1000 < 2.0 and refused > 500
    assert s.state is SessionState.CLOSING
    # A burst of the stream budget alone never closes.
    s = make(stream_rate_limit=100, stream_rate_burst=100, rate_abuse_seconds=1)
    feed(s, delta("e1"), 0.0)
    actions = [a for i in range(2000) for a in feed(s, delta("e1"), 0.5)]
    assert not any(isinstance(a, Close) for a in actions)


def test_the_done_is_charged_to_the_stream_budget_and_garbage_to_the_message_bucket():
    s = make(stream_rate_limit=1, stream_rate_burst=1)
    feed(s, delta("e1"), 0.0)
    assert isinstance(feed(s, delta("e1"), 0.0)[0], StreamDelta)
    done = {"type": "space.event.done", "id": "d", "space": "general", "event_id": "e1"}
    assert feed(s, done, 0.0)[0].error.code is ErrorCode.RATE_LIMITED
    # The message bucket is untouched by it: a heartbeat goes through.
    assert isinstance(feed(s, {"type": "agent.heartbeat"}, 0.0)[0], Send)
    assert isinstance(feed(s, done, 1.0)[0], StreamDone)
    # A delta naming no open stream is a message (it would open one).
    s = make(rate_limit=1, rate_burst=1)
    assert feed(s, delta("e1"), 0.0)[0].first
    assert feed(s, delta("e2", id="x"), 0.0)[0].error.code is ErrorCode.RATE_LIMITED


# ── addressed streams ───────────────────────────────────────────────────────


def test_to_on_the_first_delta_addresses_every_frame_of_the_stream():
    s = make()
    s.on_joined("other")
    first = feed(s, delta("e1", to=["bob", "carol", "bob"], id="f"), 0.0)[0]
    assert first == StreamDelta("general", "alice/e1", {"text": "tok"}, True, True, "f",
                                ("bob", "carol", "alice"), ["bob", "carol", "bob"])  # fmt: skip
    later = feed(s, delta("e1", text="more"), 0.1)[0]
    assert later.to == ("bob", "carol", "alice") and later.to_field is None
    done = feed(s, {"type": "space.event.done", "space": "general", "event_id": "e1"}, 0.2)
    assert done == [StreamDone("general", "alice/e1", None, ("bob", "carol", "alice"))]
    # A single id; the publisher naming itself; cancels by the publisher and the hub.
    assert feed(s, delta("e2", to="bob"), 0.3)[0].to == ("bob", "alice")
    assert feed(s, delta("e3", to=["alice"]), 0.3)[0].to == ("alice",)
    cancel = {"type": "space.event.cancel", "space": "general", "event_id": "e2"}
    assert feed(s, cancel, 0.4) == [StreamCancel("general", "alice/e2", "cancelled", None,
                                                 ("bob", "alice"))]  # fmt: skip
    feed(s, delta("e4", to="bob"), 0.5)
    hub_cancels = s.closed()
    assert [c.to for c in hub_cancels] == [("alice",), ("bob", "alice")]
    # Unaddressed streams stay unaddressed.
    s = make()
    assert feed(s, delta("e1"), 0.0)[0].to is None


@pytest.mark.parametrize(
    "to",
    ["", "no spaces", [], ["ok", 5], ["a"] * 101, {"id": "bob"}, 7],
)
def test_a_bad_to_is_refused_and_opens_nothing(to):
    s = make()
    err = feed(s, delta("e1", to=to, id="x"), 0.0)[0]
    assert isinstance(err, Reject) and err.error.code is ErrorCode.INVALID_REQUEST
    assert err.error.request_id == "x" and s.open_streams == 0


def test_to_on_a_later_delta_is_refused():
    s = make()
    feed(s, delta("e1", to="bob"), 0.0)
    for to in ("bob", "carol"):
        err = feed(s, delta("e1", to=to, id="y"), 0.1)[0]
        assert isinstance(err, Reject) and err.error.code is ErrorCode.INVALID_REQUEST
        assert "first delta" in err.error.message and err.error.request_id == "y"
    feed(s, delta("e2"), 0.0)
    err = feed(s, delta("e2", to="bob", id="z"), 0.1)[0]
    assert err.error.code is ErrorCode.INVALID_REQUEST
    assert s.open_streams == 2  # both still open: only the offending delta was refused


def test_a_stream_the_node_refused_stays_closed():
    """The node found a non-member in ``to``: a later delta must not reopen the
    stream, unaddressed, for every member to see."""
    s = make()
    first = feed(s, delta("e1", to="ghost"), 0.0)[0]
    s.stream_refused(first.stream_id)
    assert s.open_streams == 0
    err = feed(s, delta("e1", id="again"), 0.1)[0]
    assert err.error.code is ErrorCode.INVALID_REQUEST and "already ended" in err.error.message
    s.stream_refused("alice/unknown")  # nothing to forget: no error
