"""HandshakeSlots: a bounded number of handshakes, then a bounded waiting line."""

from __future__ import annotations

from hub.net.handshake import HandshakeSlots


def test_beyond_the_limit_connections_wait_in_line_and_are_admitted_in_order():
    slots = HandshakeSlots(2)
    assert slots.acquire() and slots.acquire()
    assert not slots.acquire()
    admitted: list[str] = []
    assert slots.wait("a", lambda: admitted.append("a"))
    assert slots.wait("b", lambda: admitted.append("b"))
    assert slots.waiting == 2
    slots.release()  # the slot passes on: still two in progress
    assert admitted == ["a"] and slots.in_progress == 2 and slots.waiting == 1
    slots.release()
    assert admitted == ["a", "b"] and slots.in_progress == 2
    slots.release()
    slots.release()
    assert slots.in_progress == 0 and slots.refused == 0


def test_a_full_line_refuses_and_counts():
    slots = HandshakeSlots(1, line=1)
    assert slots.acquire()
    assert slots.wait("a", lambda: None)
    assert not slots.wait("b", lambda: None)
    assert slots.refused == 1 and slots.waiting == 1


def test_one_that_gave_up_waiting_is_not_admitted():
    slots = HandshakeSlots(1, line=2)
    assert slots.acquire()
    admitted: list[str] = []
    slots.wait("gone", lambda: admitted.append("gone"))
    slots.wait("next", lambda: admitted.append("next"))
    slots.leave("gone")
    slots.release()
    assert admitted == ["next"] and slots.in_progress == 1
    slots.release()
    assert slots.in_progress == 0
