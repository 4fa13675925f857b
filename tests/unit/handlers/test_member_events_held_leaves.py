"""Held leaves are noted for a reaper and dropped once told; a held leave of
an agent that is a member again is told in both lists (contract §21):
the throttle alone (hub/handlers/member_events.py) with a fake clock."""

from __future__ import annotations

from hub.handlers.member_events import Batch, MemberEvents
from tests.unit.handlers.test_member_events import Announced, Clock


async def test_a_held_batch_carries_its_noted_leaves_and_is_marked_held() -> None:
    clock, announced = Clock(), Announced()
    events = MemberEvents(1.0, announced, sleep=clock.sleep)
    assert not events.holding("room")
    await events.changed("room", "y", False, noted=True)  # at once: noted, not held
    assert events.holding("room")
    await events.changed("room", "x", False, noted=True)  # held
    await events.changed("room", "z", True)
    await clock.tick()
    await announced.count(2)
    (_, first), (_, second) = announced.batches
    assert (first.changes, first.noted, first.held) == ((("y", False),), ("y",), False)
    assert (second.changes, second.noted, second.held) == (
        (("x", False), ("z", True)),
        ("x",),
        True,
    )
    await events.aclose()


async def test_a_sealed_batch_keeps_the_note_of_its_own_leave() -> None:
    clock, announced = Clock(), Announced()
    events = MemberEvents(1.0, announced, sleep=clock.sleep)
    await events.changed("room", "h", True)  # opens the window
    await events.changed("room", "a", False, noted=True)
    await events.changed("room", "a", True)
    await events.changed("room", "a", False, noted=True)  # a's third change: next batch
    await clock.tick()
    await announced.count(3)
    held = [batch for _, batch in announced.batches[1:]]
    assert [(b.changes, b.noted) for b in held] == [
        ((("a", False), ("a", True)), ()),  # its note goes with the last one
        ((("a", False),), ("a",)),
    ]
    await events.aclose()


def test_rejoined_lists_a_lone_leaver_in_both() -> None:
    batch = Batch((("m", False), ("h", True), ("k", False), ("k", True)), noted=("m",), held=True)
    assert batch.lone_leavers == ["m"]
    both = batch.rejoined(["m"])
    assert (both.joined, both.left, both.noted, both.held) == (
        ["h", "k", "m"],
        ["m", "k"],
        ("m",),
        True,
    )
    assert both.lone_leavers == [] and both.lone_joiner is None
    assert b'"joined":["h","k","m"]' in both.frame("room", None, 3)
