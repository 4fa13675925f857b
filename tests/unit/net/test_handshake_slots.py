"""HandshakeSlots: a bounded number of handshakes, then a bounded waiting line."""

from __future__ import annotations

from collections.abc import Callable

from hub.net.handshake import HandshakeSlots


def admits(admitted: list[str], key: str, *, there: bool = True) -> Callable[[], bool]:
    """An ``admit`` callback: records ``key`` and takes the slot when ``there``."""

    def admit() -> bool:
        if there:
            admitted.append(key)
        return there

    return admit


def test_beyond_the_limit_connections_wait_in_line_and_are_admitted_in_order():
    slots = HandshakeSlots(2)
    assert slots.acquire() and slots.acquire()
    assert not slots.acquire()
    admitted: list[str] = []
    assert slots.wait("a", admits(admitted, "a"))
    assert slots.wait("b", admits(admitted, "b"))
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
    assert slots.wait("a", lambda: True)
    assert not slots.wait("b", lambda: True)
    assert slots.refused == 1 and slots.waiting == 1


def test_one_that_gave_up_waiting_is_not_admitted():
    slots = HandshakeSlots(1, line=2)
    assert slots.acquire()
    admitted: list[str] = []
    slots.wait("gone", admits(admitted, "gone"))
    slots.wait("next", admits(admitted, "next"))
    slots.leave("gone")
    slots.release()
    assert admitted == ["next"] and slots.in_progress == 1
    slots.release()
    assert slots.in_progress == 0


def test_a_freed_slot_skips_those_whose_client_has_gone():
    slots = HandshakeSlots(1, line=4)
    assert slots.acquire()
    admitted: list[str] = []
    slots.wait("left-1", admits(admitted, "left-1", there=False))
    slots.wait("left-2", admits(admitted, "left-2", there=False))
    slots.wait("next", admits(admitted, "next"))
    slots.release()
    assert admitted == ["next"] and slots.in_progress == 1
    assert slots.waiting == 0 and slots.abandoned == 2


def test_a_slot_nobody_in_line_takes_is_freed():
    slots = HandshakeSlots(1, line=2)
    assert slots.acquire()
    slots.wait("left", lambda: False)
    slots.release()
    assert slots.in_progress == 0 and slots.waiting == 0 and slots.abandoned == 1
    assert slots.acquire()
