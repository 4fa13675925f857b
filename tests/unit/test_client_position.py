"""The SDK's position in a space follows the frames in the order they arrive.

Fed literal frames, no socket: the reader may dispatch a ``space.joined``
reply and the events right behind it before the ``join()`` call resumes, and
the position must still end at the last event.
"""

from __future__ import annotations

from agora_client import Client, Position, Resumed

SPACE = "room"


def joined(seq: int, epoch: str = "e1", **extra: object) -> dict[str, object]:
    return {"type": "space.joined", "id": "c1", "space": SPACE, "members": [],
            "member_count": 1, "epoch": epoch, "seq": seq, **extra}  # fmt: skip


def event(seq: int) -> dict[str, object]:
    return {"type": "space.event", "space": SPACE, "event_id": f"e{seq}", "seq": seq,
            "from": "bob", "timestamp": 1, "data": {}}  # fmt: skip


async def test_events_right_behind_the_join_reply_move_the_position() -> None:
    c = Client("ws://127.0.0.1:1/ws", "alice")
    c._dispatch(joined(4))
    c._dispatch(event(5))
    c._dispatch(event(6))
    result = c._joined_reply(SPACE, joined(4))  # join() resumes only now
    assert result.seq == 4 and result.epoch == "e1"
    assert c.position(SPACE) == Position("e1", 6)


async def test_a_recovered_rejoin_keeps_the_position_until_the_replay_moves_it() -> None:
    c = Client("ws://127.0.0.1:1/ws", "alice")
    c._dispatch(joined(3))
    seen = c.subscribe(SPACE, kinds=frozenset({"resumed"}))
    c._resuming[SPACE] = Position("e1", 3)
    c._dispatch(joined(9, recovered=True))
    assert c.position(SPACE) == Position("e1", 3), "not jumped to 9: the replay follows"
    c._dispatch(event(4))
    assert c.position(SPACE) == Position("e1", 4)
    note = await seen.get(1)
    assert note == Resumed(SPACE, True, Position("e1", 3), "e1", 9)


async def test_an_unrecovered_rejoin_starts_over_from_the_new_position() -> None:
    c = Client("ws://127.0.0.1:1/ws", "alice")
    c._dispatch(joined(3))
    c._resuming[SPACE] = Position("e1", 3)
    c._dispatch(joined(1, epoch="e2", recovered=False))
    assert c.position(SPACE) == Position("e2", 1)
    assert SPACE not in c._resuming
