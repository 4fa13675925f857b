"""The dispatcher: each action to its handler, each failure to the right ``error`` event.

A refusal, a full space, an unreachable backplane and a bug each become one
``error`` event for the peer that asked (counted), and none escapes into the
connection loop — except a closed connection, which ends that loop.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from hub.core.actions import Join, ListSpaces, Publish, Reject, Send
from hub.core.counters import Counters
from hub.core.session import Session, SessionLimits
from hub.errors import BackplaneUnavailable, SpaceFull
from hub.handlers.dispatch import Dispatcher, ErrorSender
from protocol.errors import ErrorCode, ProtocolError
from tests.support.handlers import HandlerRig
from tests.support.peers import FakePeer


def peer(agent_id: str = "alice") -> FakePeer:
    p = FakePeer(agent_id, "c-1")
    p.session = Session(agent_id, "c-1", SessionLimits(), now=0.0)
    p.session.on_joined("room")
    return p


def dispatcher(**handlers: Any) -> tuple[Dispatcher, Counters, list[tuple[str, Any]]]:
    """A dispatcher whose handlers record what they ran; ``handlers`` replace
    those of the named action types."""
    ran: list[tuple[str, Any]] = []
    counters = Counters()

    def record(name: str) -> Any:
        def handler(p: FakePeer, action: Any) -> None:
            ran.append((name, action))

        return handler

    table: dict[type, Any] = {t: record(t.__name__) for t in (Send, Reject, Join, Publish)}
    table.update({globals()[name]: h for name, h in handlers.items()})
    return Dispatcher(counters, ErrorSender(counters), table), counters, ran


def frame(**msg: Any) -> str:
    return orjson.dumps(msg).decode()


async def test_a_frame_goes_through_the_session_to_the_handler_of_its_action() -> None:
    d, counters, ran = dispatcher()
    p = peer()
    await d.receive(p, frame(type="space.join", id="j1", space="lab"), 1.0)
    await d.receive(p, frame(type="space.publish", id="p1", space="room", data={"t": 1}), 2.0)
    assert [name for name, _ in ran] == ["Join", "Publish"]
    assert ran[0][1] == Join("lab", "j1")
    assert ran[1][1].data == {"t": 1} and ran[1][1].request_id == "p1"
    assert counters.messages_in == 2
    assert p.frames == [], "handlers answer, the dispatcher itself sends nothing"


async def test_a_peer_without_a_session_is_ignored() -> None:
    d, counters, ran = dispatcher()
    p = FakePeer("alice", "c-1")
    await d.receive(p, frame(type="space.join", id="j1", space="lab"), 1.0)
    assert ran == [] and counters.messages_in == 0 and p.frames == []


async def test_async_handlers_are_awaited() -> None:
    done: list[Join] = []

    async def join(p: FakePeer, a: Join) -> None:
        done.append(a)

    d, _, _ = dispatcher(Join=join)
    await d.run(peer(), Join("lab", "j1"))
    assert done == [Join("lab", "j1")]


def raising(exc: BaseException) -> Any:
    async def handler(p: FakePeer, a: Any) -> None:
        raise exc

    return handler


@pytest.mark.parametrize(
    ("exc", "code", "message"),
    [
        (
            ProtocolError(ErrorCode.UNAUTHORIZED, "not yours", "other-id"),
            "UNAUTHORIZED",
            "not yours",
        ),
        (SpaceFull("lab", 3), "SPACE_FULL", "lab"),
        (BackplaneUnavailable("redis down"), "UNAVAILABLE", "redis down: request not carried out"),
        (RuntimeError("boom"), "INTERNAL_ERROR", "internal error"),
        (KeyError("no handler"), "INTERNAL_ERROR", "internal error"),
    ],
)
async def test_each_failure_kind_is_one_error_event(
    exc: BaseException, code: str, message: str
) -> None:
    d, counters, _ = dispatcher(Join=raising(exc))
    p = peer()
    await d.run(p, Join("lab", "j1"))
    error = p.one()
    assert error["type"] == "error" and error["code"] == code
    assert message in error["message"]
    # A ProtocolError carries its own request id; the others answer the action's.
    expected_rid = exc.request_id if isinstance(exc, ProtocolError) else "j1"
    assert error.get("request_id") == expected_rid
    assert counters.errors == {code: 1}
    assert counters.backplane_errors == (1 if code == "UNAVAILABLE" else 0)
    assert not p.closing, "an error event, never a close"


async def test_a_bug_is_logged_with_the_action_and_the_agent() -> None:
    d, _, _ = dispatcher(Join=raising(RuntimeError("boom")))
    with capture_logs() as logs:
        await d.run(peer("carol"), Join("lab", "j1"))
    failed = [e for e in logs if e["event"] == "action failed"]
    assert len(failed) == 1
    assert failed[0]["action"] == "Join" and failed[0]["agent_id"] == "carol"
    assert failed[0]["log_level"] == "error"


async def test_an_action_without_a_handler_is_an_internal_error_not_a_crash() -> None:
    d, counters, _ = dispatcher()
    p = peer()
    await d.run(p, ListSpaces("l1"))  # nobody registered a handler for it
    assert p.errors() == [("INTERNAL_ERROR", "l1")]
    assert counters.errors == {"INTERNAL_ERROR": 1}


async def test_an_action_without_a_request_id_answers_with_none() -> None:
    d, _, _ = dispatcher(Send=raising(BackplaneUnavailable()))
    p = peer()
    await d.run(p, Send(b"{}"))
    assert p.one("error").get("request_id") is None


async def test_a_failing_action_does_not_stop_the_next_frame() -> None:
    calls: list[str] = []

    async def join(p: FakePeer, a: Join) -> None:
        calls.append(a.space)
        if a.space == "bad":
            raise RuntimeError("boom")

    d, counters, _ = dispatcher(Join=join)
    p = peer()
    await d.receive(p, frame(type="space.join", id="j1", space="bad"), 1.0)
    await d.receive(p, frame(type="space.join", id="j2", space="good"), 2.0)
    assert calls == ["bad", "good"]
    assert p.errors() == [("INTERNAL_ERROR", "j1")]
    assert counters.messages_in == 2


async def test_bad_frames_become_errors_through_the_nodes_table(rig: HandlerRig) -> None:
    """Wired as the node wires it: the session's refusals reach the peer."""
    alice = await rig.connect("alice")
    for bad in (b'{"type":"agent.heartbeat"}', "[1,2]", '{"type":"no.such","id":"x1"}', "{"):
        await rig.send(alice, bad)
    await rig.send(alice, {"type": "space.publish", "id": "p1", "space": "Bad Name!", "data": {}})
    assert [code for code, _ in alice.errors()] == ["INVALID_REQUEST"] * 5
    assert alice.errors()[2][1] == "x1" and alice.errors()[4][1] == "p1"
    assert rig.counters.errors == {"INVALID_REQUEST": 5}
    assert rig.counters.messages_in == 5
    assert not alice.closing
    # …and the connection still works.
    await rig.send(alice, {"type": "agent.heartbeat", "id": "h1"})
    assert alice.messages()[-1]["type"] == "agent.heartbeat"
