"""HandshakeDeadlines: one timer cuts every handshake past handshake_timeout."""

from __future__ import annotations

import asyncio

from hub.net.handshake import HandshakeDeadlines


class Conn:
    """Puts its name on ``cut`` when its deadline cuts it."""

    def __init__(self, name: str, cut: asyncio.Queue[str]):
        self.name = name
        self._cut = cut

    def handshake_timed_out(self) -> None:
        self._cut.put_nowait(self.name)


async def _next_cut(cut: asyncio.Queue[str]) -> str:
    async with asyncio.timeout(5):
        return await cut.get()


async def test_only_the_handshakes_still_open_at_their_deadline_are_cut_in_order():
    cut: asyncio.Queue[str] = asyncio.Queue()
    deadlines = HandshakeDeadlines(0.2)
    a, b, c = Conn("a", cut), Conn("b", cut), Conn("c", cut)
    deadlines.start(a)
    deadlines.start(b)
    deadlines.start(c)
    deadlines.done(b)  # b finished its handshake in time
    assert [await _next_cut(cut), await _next_cut(cut)] == ["a", "c"]
    assert len(deadlines) == 0 and cut.empty()


async def test_a_later_arrival_gets_its_own_full_timeout():
    cut: asyncio.Queue[str] = asyncio.Queue()
    deadlines = HandshakeDeadlines(0.3)
    loop = asyncio.get_running_loop()
    deadlines.start(Conn("early", cut))
    await asyncio.sleep(0.2)  # the late one arrives 0.2 s after
    deadlines.start(Conn("late", cut))
    started_late = loop.time()
    assert await _next_cut(cut) == "early"
    assert len(deadlines) == 1  # the late one still has time left
    assert await _next_cut(cut) == "late"
    assert loop.time() - started_late >= 0.3 - 0.01  # not before its own deadline


async def test_one_failing_cut_does_not_spare_the_others():
    cut: asyncio.Queue[str] = asyncio.Queue()

    class Broken(Conn):
        def handshake_timed_out(self) -> None:
            raise RuntimeError("transport already gone")

    deadlines = HandshakeDeadlines(0.1)
    deadlines.start(Broken("x", cut))
    deadlines.start(Conn("y", cut))
    assert await _next_cut(cut) == "y"
    assert len(deadlines) == 0
