"""Authorization and token expiry in the session state machine, fed literal frames.

The session holds the connection's grant and the declared spaces' rules, so
every refusal here happens before the node does anything (nothing changes).
"""

from __future__ import annotations

import orjson
import pytest

from hub.config.settings import DeclaredSpace
from hub.core.actions import (
    Close,
    Denied,
    Join,
    ListAgents,
    ListMembers,
    Publish,
    Refresh,
    Reject,
    StreamDelta,
)
from hub.core.authz import Grant, SpacePolicy, space_rules
from hub.core.session import Session, SessionLimits
from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.messages import MAX_TOKEN

RULES = space_rules(
    [
        DeclaredSpace(id="ops", allow_join=["ops-*", "oncall"], allow_publish=["oncall"]),
        DeclaredSpace(id="announcements", allow_publish=["hub-bot"]),
    ]
)


def session(
    agent: str = "alice",
    grant: Grant = Grant.unrestricted,
    rules=None,
    member_of=(),
    leeway: float = 0.0,
    grace: float = 10.0,
) -> Session:
    limits = SessionLimits(
        policy=SpacePolicy(rules), token_leeway=leeway, token_refresh_grace=grace, max_streams=4
    )
    s = Session(agent, "ws-1", limits, now=0.0, grant=grant)
    for space in member_of:
        s.on_joined(space)
    return s


def feed(s: Session, msg: dict) -> list:
    return s.receive(orjson.dumps(msg).decode(), 1.0)


def refused(actions: list, request_id: str, code: ErrorCode = ErrorCode.UNAUTHORIZED) -> str:
    assert len(actions) == 1, actions
    action = actions[0]
    assert isinstance(action, Reject), action
    assert action.error.code is code and action.error.request_id == request_id, action.error
    return action.error.message


def join(space: str, rid: str = "j") -> dict:
    return {"type": "space.join", "id": rid, "space": space}


def publish(space: str, rid: str = "p", **extra) -> dict:
    return {"type": "space.publish", "id": rid, "space": space, "data": {"text": "hi"}, **extra}


def delta(space: str, rid: str = "d", event_id: str = "s1") -> dict:
    return {
        "type": "space.event.delta",
        "id": rid,
        "space": space,
        "event_id": event_id,
        "data": {"text": "x"},
    }


# ── join and reads ──────────────────────────────────────────────────────────


def test_unrestricted_grant_without_rules_allows_everything():
    s = session(member_of=("anything", "task.x"))
    assert isinstance(feed(s, join("anything"))[0], Join)
    assert isinstance(feed(s, join("agent.status"))[0], Join)
    assert isinstance(feed(s, publish("task.x"))[0], Publish)
    assert isinstance(feed(s, delta("anything"))[0], StreamDelta)
    members = {"type": "space.members", "id": "m", "space": "anything"}
    assert isinstance(feed(s, members)[0], ListMembers)


def test_join_claim_allows_matching_spaces_and_refuses_others():
    s = session(grant=Grant(join=("lobby", "task.ci.*")))
    assert isinstance(feed(s, join("lobby"))[0], Join)
    assert isinstance(feed(s, join("task.ci.build.42"))[0], Join)  # * crosses dots
    message = refused(feed(s, join("general", "j2")), "j2")
    assert "general" in message
    # System spaces are spaces too: a restricted join claim must list them.
    refused(feed(s, join("agent.status", "j3")), "j3")
    assert isinstance(feed(session(grant=Grant(join=("agent.*",))), join("agent.status"))[0], Join)


def test_an_empty_join_claim_allows_no_space():
    s = session(grant=Grant(join=()))
    refused(feed(s, join("lobby", "j1")), "j1")
    refused(feed(s, join("agent.status", "j2")), "j2")


def test_reads_need_the_right_to_join():
    s = session(grant=Grant(join=("lobby",)))
    members = {"type": "space.members", "id": "m1", "space": "secret"}
    refused(feed(s, members), "m1")
    assert isinstance(feed(s, {**members, "id": "m2", "space": "lobby"})[0], ListMembers)
    by_space = {"type": "agent.list", "id": "a1", "space": "secret"}
    refused(feed(s, by_space), "a1")
    assert isinstance(feed(s, {**by_space, "id": "a2", "space": "lobby"})[0], ListAgents)
    # The directory without a space filter is not a read of any space.
    assert isinstance(feed(s, {"type": "agent.list", "id": "a3"})[0], ListAgents)


def test_check_read_is_the_helper_for_other_reads():
    s = session(agent="bob", rules=RULES)
    s.check_read("lobby", "h1")
    with pytest.raises(ProtocolError) as exc:
        s.check_read("ops", "h2")
    assert exc.value.code is ErrorCode.UNAUTHORIZED and exc.value.request_id == "h2"
    session(agent="ops-1", rules=RULES).check_read("ops", "h3")


def test_declared_allow_join_is_over_agent_ids():
    assert isinstance(feed(session(agent="ops-7", rules=RULES), join("ops"))[0], Join)
    assert isinstance(feed(session(agent="oncall", rules=RULES), join("ops"))[0], Join)
    refused(feed(session(agent="alice", rules=RULES), join("ops")), "j")
    # Other spaces are not affected by another space's rules.
    assert isinstance(feed(session(agent="alice", rules=RULES), join("lobby"))[0], Join)
    # allow_publish alone leaves joining open.
    assert isinstance(feed(session(agent="alice", rules=RULES), join("announcements"))[0], Join)


def test_grant_and_space_rules_must_both_allow():
    # The rule allows ops-1; the grant does not list the space.
    s = session(agent="ops-1", grant=Grant(join=("lobby",)), rules=RULES)
    refused(feed(s, join("ops")), "j")
    s = session(agent="ops-1", grant=Grant(join=("ops",)), rules=RULES)
    assert isinstance(feed(s, join("ops"))[0], Join)


# ── publish, streams, addressed publish ──────────────────────────────────────


def test_publish_claim_refuses_a_member_publishing_elsewhere():
    s = session(grant=Grant(publish=("task.*",)), member_of=("lobby", "task.a"))
    assert isinstance(feed(s, publish("task.a"))[0], Publish)
    message = refused(feed(s, publish("lobby", "p2")), "p2")
    assert "publish" in message and "lobby" in message
    # Joining is not restricted by a publish claim.
    assert isinstance(feed(s, join("general"))[0], Join)


def test_publish_claim_covers_stream_opening_and_addressed_publish():
    s = session(grant=Grant(publish=()), member_of=("lobby",))
    refused(feed(s, delta("lobby", "d1")), "d1")
    refused(feed(s, publish("lobby", "p1", to="bob")), "p1")
    refused(feed(s, publish("lobby", "p2", to=["bob", "carol"])), "p2")
    assert s.open_streams == 0  # nothing was opened


def test_a_stream_opened_before_counts_as_allowed():
    s = session(grant=Grant(publish=("lobby",)), member_of=("lobby",))
    assert isinstance(feed(s, delta("lobby", "d1"))[0], StreamDelta)
    s.refreshed(Grant(publish=()))
    # Later deltas of the open stream go on; a new stream is refused.
    follow = feed(s, delta("lobby", "d2"))[0]
    assert isinstance(follow, StreamDelta) and not follow.first
    refused(feed(s, delta("lobby", "d3", event_id="s2")), "d3")


def test_declared_allow_publish():
    s = session(agent="hub-bot", rules=RULES, member_of=("announcements",))
    assert isinstance(feed(s, publish("announcements"))[0], Publish)
    s = session(agent="alice", rules=RULES, member_of=("announcements",))
    refused(feed(s, publish("announcements")), "p")
    refused(feed(s, delta("announcements", "d")), "d")
    s = session(agent="ops-1", rules=RULES, member_of=("ops",))
    refused(feed(s, publish("ops")), "p")  # may join ops, not speak there


def test_non_members_still_get_the_membership_answer():
    s = session(grant=Grant(publish=()))
    assert isinstance(feed(s, publish("lobby"))[0], Denied)


def test_a_space_one_may_not_join_is_refused_before_its_existence_is_asked():
    # Denied would have the node answer SPACE_NOT_FOUND or "not a member",
    # telling an outsider whether someone made the space (contract §18).
    s = session(grant=Grant(join=("lobby",)))
    assert "not allowed" in refused(feed(s, publish("task.x.hidden")), "p")
    assert "not allowed" in refused(feed(s, delta("task.x.hidden", "d")), "d")
    s = session(agent="alice", rules=RULES)
    refused(feed(s, publish("ops")), "p")


def test_system_spaces_stay_read_only_whatever_the_grant():
    s = session(grant=Grant(publish=("*",)), member_of=("agent.status",))
    assert "read-only" in refused(feed(s, publish("agent.status")), "p")


# ── agent.refresh and expiry ────────────────────────────────────────────────


def test_refresh_becomes_an_action_that_never_shows_the_token():
    token = "eyJ.secret-token-value.sig"
    action = feed(session(), {"type": "agent.refresh", "id": "r1", "token": token})[0]
    assert isinstance(action, Refresh) and action.token == token and action.request_id == "r1"
    assert token not in repr(action)


@pytest.mark.parametrize(
    "msg",
    [
        {"type": "agent.refresh", "id": "r"},
        {"type": "agent.refresh", "id": "r", "token": ""},
        {"type": "agent.refresh", "id": "r", "token": 42},
        {"type": "agent.refresh", "id": "r", "token": "t" * (MAX_TOKEN + 1)},
    ],
)
def test_malformed_refresh_is_invalid_and_quotes_nothing(msg):
    message = refused(feed(session(), msg), "r", ErrorCode.INVALID_REQUEST)
    assert "t" * 50 not in message


def test_expiry_notice_then_close_after_the_grace():
    s = session(grant=Grant(expires_at=100.0), leeway=5.0, grace=10.0)
    assert s.check_expiry(104.9) is None  # within the leeway
    notice = s.check_expiry(105.0)
    assert isinstance(notice, Reject)
    assert notice.error.code is ErrorCode.UNAUTHORIZED and notice.error.request_id is None
    assert notice.error.message.startswith("token expired")
    assert s.check_expiry(110.0) is None  # told once
    assert isinstance(feed(s, join("lobby"))[0], Join)  # still served during the grace
    close = s.check_expiry(115.0)
    assert isinstance(close, Close)
    assert close.code is CloseCode.UNAUTHORIZED and close.error is ErrorCode.UNAUTHORIZED
    assert s.check_expiry(200.0) is None  # closing: nothing more


def test_refresh_stops_the_clock_and_replaces_the_grant():
    s = session(grant=Grant(expires_at=100.0), member_of=("lobby",), grace=10.0)
    assert isinstance(s.check_expiry(101.0), Reject)
    s.refreshed(Grant(publish=("task.*",), expires_at=200.0))
    assert s.check_expiry(150.0) is None
    refused(feed(s, publish("lobby")), "p")  # the new claims apply
    assert isinstance(s.check_expiry(200.0), Reject)  # and the new expiry
    s.refreshed(Grant.unrestricted)  # a token without expiry (tokens file)
    assert s.check_expiry(10_000.0) is None
    assert isinstance(feed(s, publish("lobby", "p2"))[0], Publish)


def test_credentials_without_expiry_never_expire():
    assert session().check_expiry(1e12) is None
