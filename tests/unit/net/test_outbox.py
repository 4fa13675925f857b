"""The outbox without sockets: a recording transport and a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from hub.core.counters import Counters
from hub.core.frames import OutFrame, text_frame
from hub.net.outbox import Flusher, Outbox


class FakeTransport:
    """Records writes; can refuse them, or report a full socket buffer."""

    def __init__(self, buffered: int = 0, fail: bool = False):
        self.writes: list[bytes] = []
        self.buffered = buffered
        self.fail = fail
        self.aborted = False

    def write(self, data: bytes) -> None:
        if self.fail:
            raise RuntimeError("Cannot call write() after write_eof()")
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.aborted

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def abort(self) -> None:
        self.aborted = True


def make(
    transport: FakeTransport, flusher: Flusher, limit: int = 1000, **kw
) -> tuple[Outbox, list[str]]:
    events: list[str] = []
    outbox = Outbox(
        flusher,
        Counters(),
        limit,
        on_overflow=lambda: events.append("overflow"),
        transport=transport,
        **kw,
    )
    return outbox, events


async def _next_iteration() -> None:
    """Let the loop run the flusher's ``call_soon`` (one iteration)."""
    done = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(done.set_result, None)
    await done


async def test_a_burst_is_one_write_of_the_frames_in_order():
    t = FakeTransport()
    outbox, _ = make(t, Flusher())
    frames = [OutFrame(b'{"n":%d}' % i) for i in range(5)]
    for f in frames:
        assert outbox.push(f)
    assert t.writes == []  # nothing written before the loop turns
    await _next_iteration()
    assert t.writes == [b"".join(text_frame(f.payload) for f in frames)]
    assert outbox.counters.messages_out == 5 and outbox.frames_out == 5


async def test_over_the_bound_is_a_slow_consumer():
    t = FakeTransport()
    outbox, events = make(t, Flusher(), limit=100)
    assert outbox.push(OutFrame(b"x" * 60))
    assert not outbox.push(OutFrame(b"y" * 60))  # 2 frames > 100 bytes pending
    assert events == ["overflow"]
    assert outbox.counters.slow_consumer_closes == 1
    assert outbox.pending_bytes == 0  # dropped, not kept


async def test_the_socket_buffer_counts_once_writing_paused():
    t = FakeTransport(buffered=90)
    outbox, events = make(t, Flusher(), limit=100)
    assert outbox.push(OutFrame(b"z" * 20))  # not paused: the buffer is not looked at
    outbox.paused = True
    assert not outbox.push(OutFrame(b"z" * 20))
    assert events == ["overflow"]


async def test_push_last_goes_past_the_bound_and_closes_the_outbox():
    t = FakeTransport()
    outbox, _ = make(t, Flusher(), limit=10)
    outbox.push_last(OutFrame(b'{"type":"error","reason":"' + b"r" * 50 + b'"}'))
    assert len(t.writes) == 1  # written at once, not on the next iteration
    assert not outbox.open
    assert not outbox.push(OutFrame(b"late"))
    assert outbox.counters.dropped == 1


async def test_a_failing_transport_holds_back_nobody_in_the_pass():
    flusher = Flusher()
    broken = FakeTransport(fail=True)
    fine = FakeTransport()
    a, _ = make(broken, flusher)
    b, _ = make(fine, flusher)
    frame = OutFrame(b'{"n":1}')
    a.push(frame)
    b.push(frame)
    await _next_iteration()
    assert broken.aborted and not a.open
    assert fine.writes == [text_frame(b'{"n":1}')]
    # The next pass still works for the healthy one.
    b.push(frame)
    await _next_iteration()
    assert len(fine.writes) == 2


async def test_stopped_outbox_writes_nothing_and_counts_drops():
    t = FakeTransport()
    outbox, _ = make(t, Flusher())
    outbox.push(OutFrame(b"a"))
    outbox.stop()
    await _next_iteration()
    assert t.writes == []
    assert outbox.counters.dropped == 1
    assert not outbox.push(OutFrame(b"b"))


async def test_compression_frames_each_payload_itself():
    t = FakeTransport()
    seen: list[bytes] = []

    def compress(payload: bytes) -> list[bytes]:
        seen.append(payload)
        return [b"C" + payload]

    outbox, _ = make(t, Flusher(), compress=compress)
    assert not outbox.preframed
    outbox.push(OutFrame(b"hello", preframe=False))
    await _next_iteration()
    assert seen == [b"hello"] and t.writes == [b"Chello"]


@pytest.mark.parametrize("n", [0, 125, 126, 65535, 65536])
def test_text_frame_matches_websockets(n):
    from websockets.frames import Frame, Opcode

    payload = b"p" * n
    assert text_frame(payload) == Frame(Opcode.TEXT, payload).serialize(mask=False)


async def test_a_preamble_goes_first_in_the_same_write_and_is_not_a_message():
    t = FakeTransport()
    outbox, _ = make(t, Flusher())
    outbox.push_preamble(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    first = OutFrame(b'{"type":"agent.registered"}')
    assert outbox.push(first)
    await _next_iteration()
    assert t.writes == [b"HTTP/1.1 101 Switching Protocols\r\n\r\n" + text_frame(first.payload)]
    assert outbox.counters.messages_out == 1 and outbox.frames_out == 1


async def test_a_preamble_alone_is_written_within_the_pass():
    t = FakeTransport()
    outbox, _ = make(t, Flusher())
    outbox.push_preamble(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    await _next_iteration()
    assert t.writes == [b"HTTP/1.1 101 Switching Protocols\r\n\r\n"]
    assert outbox.counters.messages_out == 0


async def test_a_stopped_outbox_drops_its_preamble_without_counting_it_a_message():
    t = FakeTransport()
    outbox, _ = make(t, Flusher())
    outbox.push_preamble(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
    assert outbox.push(OutFrame(b"{}"))
    outbox.stop()
    await _next_iteration()
    assert t.writes == [] and outbox.counters.dropped == 1
