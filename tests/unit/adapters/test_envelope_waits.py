"""The gateway's waits: which envelope answers which request, and the bounds."""

from __future__ import annotations

import time

import pytest
from nacl.signing import SigningKey

from adapters.envelope.waits import Waits
from protocol.envelope import EnvelopeError, Reason, agora, verify
from protocol.envelope import agentprotocol as ap

ALICE = SigningKey(b"\x01" * 32)
BOB = SigningKey(b"\x02" * 32)


def waits(max_waits: int = 10) -> Waits:
    return Waits(default_timeout=30, max_timeout=300, max_waits=max_waits)


def build(kind: str, payload: dict, key: SigningKey = BOB) -> dict:
    return agora.build(kind, payload, signing_key=key, now=time.time())


def delivered(space: str, envelope: dict, sender: str = "bob") -> dict:
    """``envelope`` as the gateway's member receives it: an event of ``space``."""
    return {"type": "space.event", "space": space, "from": sender, "verified": True,
            "data": envelope}  # fmt: skip


def request(**payload: object) -> tuple[dict, object]:
    env = build("REQUEST", {"resource": "r", **payload}, ALICE)
    return env, verify(env, now=time.time())


async def test_the_first_fitting_answer_resolves_the_wait():
    w = waits()
    env, v = request()
    wait = w.open(v, "s", time.time())
    now = time.time()
    # Not answers: another space, another request, a STATUS, a second REQUEST.
    result = build("RESULT", {"request_id": env["id"], "status": "success"})
    assert not w.offer(delivered("elsewhere", result), now)
    assert not w.offer(
        delivered("s", build("RESULT", {"request_id": "other", "status": "success"})), now
    )
    assert not w.offer(delivered("s", build("STATUS", {"request_id": env["id"]})), now)
    assert not w.offer(
        delivered("s", {**env, "payload": {**env["payload"], "request_id": env["id"]}}), now
    )
    assert not wait.answer.done()
    assert w.offer(delivered("s", result), now)
    assert wait.answer.result() == result and len(w) == 0
    assert not w.offer(
        delivered("s", build("RESULT", {"request_id": env["id"], "status": "success"})), now
    )


async def test_an_offer_answers_and_an_agentprotocol_response_does_not_answer_agora():
    w = waits()
    env, v = request()
    wait = w.open(v, "s", time.time())
    response = ap.build("response", {"correlationId": env["id"]}, signing_key=BOB, now=time.time())
    assert not w.offer(delivered("s", response), time.time())
    offer = build("OFFER", {"request_id": env["id"], "cost": 1})
    assert w.offer(delivered("s", offer), time.time())
    assert wait.answer.result()["type"] == "OFFER"


async def test_agentprotocol_requests_wait_on_their_correlation_id():
    w = waits()
    msg = ap.build(
        "request", {"action": "a", "correlationId": "c-9"}, signing_key=ALICE, now=time.time()
    )
    wait = w.open(verify(msg, now=time.time()), "s", time.time())
    assert wait.asked.event_id == "c-9" and wait.asked.space == "s"
    err = ap.build(
        "error",
        {"correlationId": "c-9", "code": "TIMEOUT", "message": "slow"},
        signing_key=BOB,
        now=time.time(),
    )
    assert w.offer(delivered("s", err), time.time())
    assert wait.answer.result()["type"] == "error"


async def test_the_table_bounds_the_waits_and_ids_wait_once():
    w = waits(max_waits=2)
    env, first = request()
    w.open(first, "s", time.time())
    with pytest.raises(EnvelopeError) as dup:  # the same signer's, again: a replay
        w.open(first, "s", time.time())
    assert dup.value.reason is Reason.REPLAYED and dup.value.agora_code == 401
    other = agora.sign({**env, "sender": {}}, BOB)  # another signer, the same id
    with pytest.raises(EnvelopeError) as taken:
        w.open(verify(other, now=time.time()), "s", time.time())
    assert taken.value.reason is Reason.ILLEGAL_TRANSITION
    w.open(request()[1], "s", time.time())
    with pytest.raises(EnvelopeError) as full:
        w.open(request()[1], "s", time.time())
    assert full.value.reason is Reason.TOO_MANY_TASKS and full.value.agora_code == 503


async def test_deadlines_come_from_the_request_capped():
    w = Waits(default_timeout=30, max_timeout=60, max_waits=10)
    now = time.time()
    assert w.open(request()[1], "s", now).deadline == pytest.approx(now + 30)
    assert w.open(request(timeout=500)[1], "s", now).deadline == pytest.approx(now + 0.5)
    assert w.open(request(timeout=10**9)[1], "s", now).deadline == pytest.approx(now + 60)


async def test_fail_all_ends_every_wait():
    w = waits()
    wait = w.open(request()[1], "s", time.time())
    w.fail_all(RuntimeError("closing"))
    with pytest.raises(RuntimeError):
        wait.answer.result()
    assert len(w) == 0
