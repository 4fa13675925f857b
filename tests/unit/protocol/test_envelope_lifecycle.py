"""The task state machine: legal paths, refused transitions, timeouts and bounds."""

from __future__ import annotations

from typing import Any

import pytest
from nacl.signing import SigningKey

from protocol.envelope import EnvelopeError, LifecycleError, Reason, agora, verify
from protocol.envelope import agentprotocol as ap
from protocol.envelope.lifecycle import (
    MAX_OFFERS_PER_TASK,
    TRANSITIONS,
    Task,
    TaskState,
    TaskTable,
)

T0 = 1000.0
S = TaskState


def req(timeout: float | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"resource": "agora:search:v1", "params": {}}
    if timeout is not None:
        payload["timeout"] = timeout
    return payload


def offer(ttl: float | None = None, request_id: str = "r1") -> dict[str, Any]:
    payload: dict[str, Any] = {"request_id": request_id, "cost": 5}
    if ttl is not None:
        payload["ttl"] = ttl
    return payload


def result(request_id: str = "r1") -> dict[str, Any]:
    return {"request_id": request_id, "status": "success", "data": {}}


def error(code: int = 500, request_id: str = "r1") -> dict[str, Any]:
    return {"request_id": request_id, "code": code, "message": "boom"}


def refused(fn: Any, *args: Any, **kwargs: Any) -> LifecycleError:
    with pytest.raises(LifecycleError) as err:
        fn(*args, **kwargs)
    return err.value


# ── paths ───────────────────────────────────────────────────────────────────


def test_direct_flow_completes_and_leaves_the_table() -> None:
    table = TaskTable()
    task = table.apply("REQUEST", req(), T0, envelope_id="r1")
    assert task is not None and task.state is S.PENDING and "r1" in table
    assert table.apply("RESULT", result(), T0 + 1, envelope_id="x1") is task
    assert task.state is S.COMPLETED and task.done
    assert len(table) == 0


def test_negotiated_flow() -> None:
    table = TaskTable()
    table.apply("REQUEST", req(), T0, envelope_id="r1")
    task = table.apply("OFFER", offer(), T0, envelope_id="o1")
    assert task is not None and task.state is S.NEGOTIATING
    table.apply("OFFER", offer(), T0, envelope_id="o2")
    table.apply("ACCEPT", {"offer_id": "o2"}, T0, envelope_id="a1")
    assert task.state is S.PROCESSING and task.accepted_offer == "o2"
    table.apply("RESULT", result(), T0, envelope_id="x1")
    assert task.state is S.COMPLETED and len(table) == 0


@pytest.mark.parametrize("before", ["PENDING", "NEGOTIATING", "PROCESSING"])
def test_error_fails_a_task_from_any_open_state(before: str) -> None:
    table = TaskTable()
    table.apply("REQUEST", req(), T0, envelope_id="r1")
    if before != "PENDING":
        table.apply("OFFER", offer(), T0, envelope_id="o1")
    if before == "PROCESSING":
        table.apply("ACCEPT", {"offer_id": "o1"}, T0, envelope_id="a1")
    task = table.apply("ERROR", error(402), T0, envelope_id="e1")
    assert task is not None
    assert (task.state, task.error_code, task.error_message) == (S.FAILED, 402, "boom")
    assert len(table) == 0


def test_agentprotocol_request_response_and_error() -> None:
    table = TaskTable()
    payload = {"action": "review", "correlationId": "c1", "params": {}}
    task = table.apply("request", payload, T0, envelope_id="m1", task_id="c1")
    assert task is not None and task.request_id == "c1"
    table.apply("response", {"correlationId": "c1", "result": 1}, T0, envelope_id="m2")
    assert task.state is S.COMPLETED
    table.apply("request", {**payload, "correlationId": "c2"}, T0, envelope_id="m3", task_id="c2")
    failed = table.apply(
        "error", {"correlationId": "c2", "code": "TIMEOUT", "message": "x"}, T0, envelope_id="m4"
    )
    assert failed is not None and (failed.state, failed.error_code) == (S.FAILED, "TIMEOUT")


def test_verified_envelopes_drive_the_table() -> None:
    key = SigningKey(b"\x31" * 32)
    now = 1_767_225_600.0
    table = TaskTable()
    r = verify(agora.build("REQUEST", req(), signing_key=key, now=now), now=now)
    table.apply_verified(r, now)
    o = verify(agora.build("OFFER", offer(request_id=r.id), signing_key=key, now=now), now=now)
    table.apply_verified(o, now)
    a = verify(agora.build("ACCEPT", {"offer_id": o.id}, signing_key=key, now=now), now=now)
    task = table.apply_verified(a, now)
    assert task is not None and task.state is S.PROCESSING
    m = ap.build("request", {"action": "a", "correlationId": "k"}, signing_key=key, now=now)
    assert table.apply_verified(verify(m, now=now), now) is table.get("k")


def test_types_outside_the_lifecycle_are_ignored() -> None:
    table = TaskTable()
    for kind in ["HELLO", "STATUS", "WELCOME", "hello", "notify"]:
        assert table.apply(kind, {}, T0, envelope_id="x") is None
    assert len(table) == 0


# ── refusals ────────────────────────────────────────────────────────────────

ILLEGAL = [
    (S.PENDING, "ACCEPT"),
    (S.NEGOTIATING, "RESULT"),
    (S.PROCESSING, "OFFER"),
    (S.PROCESSING, "ACCEPT"),
    (S.COMPLETED, "RESULT"),
    (S.COMPLETED, "ERROR"),
    (S.FAILED, "OFFER"),
    (S.FAILED, "RESULT"),
]
PAYLOADS = {
    "OFFER": offer(),
    "ACCEPT": {"offer_id": "o1"},
    "RESULT": result(),
    "ERROR": error(),
}


@pytest.mark.parametrize(("state", "kind"), ILLEGAL, ids=[f"{s}-{k}" for s, k in ILLEGAL])
def test_illegal_transitions_are_refused_and_change_nothing(state: TaskState, kind: str) -> None:
    task = Task("r1", T0, state=state, offers={"o1": None})
    err = refused(task.apply, kind, PAYLOADS[kind], T0, envelope_id="o9")
    assert err.reason is Reason.ILLEGAL_TRANSITION
    assert (err.task_id, err.state, err.event) == ("r1", state.value, kind)
    assert isinstance(err, EnvelopeError) and err.agora_code == 400
    assert task.state is state


def test_the_transition_table_is_exactly_the_seed_flows() -> None:
    assert {(s.value, e.value, n.value) for (s, e), n in TRANSITIONS.items()} == {
        ("PENDING", "OFFER", "NEGOTIATING"),
        ("NEGOTIATING", "OFFER", "NEGOTIATING"),
        ("NEGOTIATING", "ACCEPT", "PROCESSING"),
        ("PENDING", "RESULT", "COMPLETED"),
        ("PROCESSING", "RESULT", "COMPLETED"),
        ("PENDING", "ERROR", "FAILED"),
        ("NEGOTIATING", "ERROR", "FAILED"),
        ("PROCESSING", "ERROR", "FAILED"),
    }


def test_task_refuses_requests_hellos_and_answers_to_other_requests() -> None:
    task = Task("r1", T0)
    for kind, payload in [("REQUEST", req()), ("HELLO", {}), ("RESULT", result("r2"))]:
        assert refused(task.apply, kind, payload, T0).reason is Reason.ILLEGAL_TRANSITION
    with pytest.raises(EnvelopeError) as err:
        task.apply("OFFER", {"request_id": "r1", "ttl": "soon"}, T0, envelope_id="o1")
    assert err.value.reason is Reason.MALFORMED


def test_table_refusals() -> None:
    table = TaskTable()
    assert refused(table.apply, "RESULT", result("nope"), T0, envelope_id="x").reason is (
        Reason.UNKNOWN_TASK
    )
    assert refused(
        table.apply, "ERROR", {"code": 500, "message": "m"}, T0, envelope_id="x"
    ).reason is (Reason.UNKNOWN_TASK)
    table.apply("REQUEST", req(), T0, envelope_id="r1")
    assert refused(table.apply, "REQUEST", req(), T0, envelope_id="r1").reason is (
        Reason.ILLEGAL_TRANSITION
    )
    assert refused(table.apply, "ACCEPT", {"offer_id": "o?"}, T0, envelope_id="a").reason is (
        Reason.UNKNOWN_TASK
    )
    table.apply("OFFER", offer(), T0, envelope_id="o1")
    assert "already made" in refused(table.apply, "OFFER", offer(), T0, envelope_id="o1").message


def test_offers_per_task_are_bounded() -> None:
    table = TaskTable()
    table.apply("REQUEST", req(), T0, envelope_id="r1")
    for i in range(MAX_OFFERS_PER_TASK):
        table.apply("OFFER", offer(), T0, envelope_id=f"o{i}")
    err = refused(table.apply, "OFFER", offer(), T0, envelope_id="one-too-many")
    assert "offers" in err.message
    assert len(table.get("r1").offers) == MAX_OFFERS_PER_TASK  # type: ignore[union-attr]


def test_open_tasks_are_bounded_and_room_returns_when_one_ends() -> None:
    table = TaskTable(max_tasks=2)
    table.apply("REQUEST", req(), T0, envelope_id="r1")
    table.apply("REQUEST", req(), T0, envelope_id="r2")
    err = refused(table.apply, "REQUEST", req(), T0, envelope_id="r3")
    assert err.reason is Reason.TOO_MANY_TASKS and err.agora_code == 503
    table.apply("RESULT", result("r1"), T0, envelope_id="x")
    table.apply("REQUEST", req(), T0, envelope_id="r3")
    assert len(table) == 2


# ── time ────────────────────────────────────────────────────────────────────


def test_request_timeout_expires_with_408_and_late_answers_are_refused() -> None:
    table = TaskTable()
    task = table.apply("REQUEST", req(timeout=5000), T0, envelope_id="r1")
    assert table.next_deadline() == T0 + 5
    assert table.expire(T0 + 4.999) == []
    # past the deadline but before expire(): refused, left for expire() to report
    err = refused(table.apply, "RESULT", result(), T0 + 5, envelope_id="x")
    assert "timed out" in err.message and task is not None and task.state is S.PENDING
    assert table.expire(T0 + 5) == [task]
    assert (task.state, task.error_code) == (S.FAILED, 408)
    assert len(table) == 0 and table.next_deadline() is None
    assert refused(table.apply, "RESULT", result(), T0 + 6, envelope_id="x").reason is (
        Reason.UNKNOWN_TASK
    )


def test_default_and_maximum_timeouts() -> None:
    table = TaskTable(default_timeout=30, max_timeout=60)
    a = table.apply("REQUEST", req(), T0, envelope_id="a")
    b = table.apply("REQUEST", req(timeout=600_000), T0, envelope_id="b")
    c = table.apply("REQUEST", req(timeout=1000), T0, envelope_id="c")
    assert (a.deadline, b.deadline, c.deadline) == (T0 + 30, T0 + 60, T0 + 1)  # type: ignore[union-attr]
    assert [t.request_id for t in table.expire(T0 + 100)] == ["c", "a", "b"]
    forever = TaskTable().apply("REQUEST", req(), T0, envelope_id="f")
    assert forever is not None and forever.deadline_at is None


def test_when_every_offer_lapses_the_task_fails_with_408() -> None:
    table = TaskTable()
    task = table.apply("REQUEST", req(timeout=60_000), T0, envelope_id="r1")
    table.apply("OFFER", offer(ttl=2000), T0, envelope_id="o1")
    table.apply("OFFER", offer(ttl=4000), T0 + 1, envelope_id="o2")
    assert table.next_deadline() == T0 + 5
    err = refused(table.apply, "ACCEPT", {"offer_id": "o1"}, T0 + 3, envelope_id="a")
    assert "expired" in err.message
    assert table.expire(T0 + 4.9) == []
    assert table.expire(T0 + 5) == [task]
    assert task is not None and task.error_code == 408


def test_an_accepted_offer_no_longer_bounds_the_task() -> None:
    table = TaskTable()
    task = table.apply("REQUEST", req(timeout=60_000), T0, envelope_id="r1")
    table.apply("OFFER", offer(ttl=1000), T0, envelope_id="o1")
    table.apply("ACCEPT", {"offer_id": "o1"}, T0 + 0.5, envelope_id="a")
    assert table.expire(T0 + 30) == []
    assert table.next_deadline() == T0 + 60
    assert table.expire(T0 + 60) == [task]


def test_an_offer_without_ttl_keeps_negotiation_open_until_the_request_deadline() -> None:
    table = TaskTable()
    table.apply("REQUEST", req(timeout=10_000), T0, envelope_id="r1")
    table.apply("OFFER", offer(ttl=1000), T0, envelope_id="o1")
    table.apply("OFFER", offer(), T0, envelope_id="o2")
    assert table.expire(T0 + 5) == []
    assert table.next_deadline() == T0 + 10


def test_forget_drops_a_task() -> None:
    table = TaskTable()
    table.apply("REQUEST", req(timeout=1000), T0, envelope_id="r1")
    table.apply("OFFER", offer(), T0, envelope_id="o1")
    table.forget("r1")
    table.forget("r1")
    assert len(table) == 0 and table.expire(T0 + 10) == []
    assert refused(table.apply, "ACCEPT", {"offer_id": "o1"}, T0, envelope_id="a").reason is (
        Reason.UNKNOWN_TASK
    )
