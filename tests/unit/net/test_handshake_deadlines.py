"""HandshakeDeadlines: one timer cuts every handshake past handshake_timeout."""

from __future__ import annotations

import asyncio

from hub.net.handshake import HandshakeDeadlines


class Conn:
    def __init__(self, name: str, cut: list[str]):
        self.name = name
        self._cut = cut

    def handshake_timed_out(self) -> None:
        self._cut.append(self.name)


async def test_only_the_handshakes_still_open_at_their_deadline_are_cut_in_order():
    cut: list[str] = []
    deadlines = HandshakeDeadlines(0.2)
    a, b, c = Conn("a", cut), Conn("b", cut), Conn("c", cut)
    deadlines.start(a)
    deadlines.start(b)
    deadlines.start(c)
    deadlines.done(b)  # b finished its handshake in time
    async with asyncio.timeout(5):
        while len(cut) < 2:
            await asyncio.sleep(0.05)
    assert cut == ["a", "c"] and len(deadlines) == 0


async def test_a_later_arrival_gets_its_own_full_timeout():
    cut: list[str] = []
    deadlines = HandshakeDeadlines(0.3)
    early, late = Conn("early", cut), Conn("late", cut)
    loop = asyncio.get_running_loop()
    deadlines.start(early)
    await asyncio.sleep(0.2)
    deadlines.start(late)
    started_late = loop.time()
    async with asyncio.timeout(5):
        while cut != ["early"]:
            await asyncio.sleep(0.02)
    assert len(deadlines) == 1  # the late one still has time left
    async with asyncio.timeout(5):
        while cut != ["early", "late"]:
            await asyncio.sleep(0.02)
    assert loop.time() - started_late >= 0.3 - 0.01  # not before its own deadline


async def test_one_failing_cut_does_not_spare_the_others():
    cut: list[str] = []

    class Broken(Conn):
        def handshake_timed_out(self) -> None:
            raise RuntimeError("transport already gone")

    deadlines = HandshakeDeadlines(0.1)
    deadlines.start(Broken("x", cut))
    deadlines.start(Conn("y", cut))
    async with asyncio.timeout(5):
        while cut != ["y"]:
            await asyncio.sleep(0.02)
    assert len(deadlines) == 0
