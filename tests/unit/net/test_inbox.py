"""hub.net.inbox: the hub's reading of whole plain frames, and its message queue.

read_frames is checked against websockets' own parser: whatever it takes,
and whatever websockets then parses from the rest, must be the messages
websockets alone finds in the same bytes.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.messages import MAX_FRAGMENTS
from websockets.exceptions import ConcurrencyError, TooManyFragments
from websockets.frames import BINARY, CONT, PING, TEXT, Frame
from websockets.protocol import OPEN, Protocol
from websockets.server import ServerProtocol

from hub.net.inbox import Inbox, read_frames

LIMIT = 1 << 20


def wire(frame: Frame) -> bytes:
    """A frame as a client sends it (masked)."""
    return frame.serialize(mask=True, extensions=[])


def taken(data: bytes, limit: int | None = LIMIT) -> tuple[list[tuple[bool, bytes]], int]:
    out: list[tuple[bool, bytes]] = []
    read = read_frames(data, limit, lambda text, payload: out.append((text, payload)))
    return out, read


# ── read_frames ─────────────────────────────────────────────────────────────


def test_a_whole_text_frame_is_read_and_unmasked():
    data = wire(Frame(TEXT, b'{"type":"space.join"}'))
    assert taken(data) == ([(True, b'{"type":"space.join"}')], len(data))


def test_binary_empty_and_16_bit_lengths():
    big = b"x" * 300  # a 16-bit length
    data = wire(Frame(BINARY, b"\x00\x01")) + wire(Frame(TEXT, b"")) + wire(Frame(TEXT, big))
    messages, read = taken(data)
    assert messages == [(False, b"\x00\x01"), (True, b""), (True, big)]
    assert read == len(data)


@pytest.mark.parametrize(
    "frame",
    [
        Frame(PING, b"hi"),  # a control frame
        Frame(TEXT, b"part", fin=False),  # the start of a fragmented message
        Frame(CONT, b"more"),  # a continuation
        Frame(TEXT, b"y" * 70_000),  # a 64-bit length
    ],
)
def test_reading_stops_before_anything_but_a_whole_plain_frame(frame):
    first = wire(Frame(TEXT, b"first"))
    messages, read = taken(first + wire(frame) + wire(Frame(TEXT, b"after")))
    assert messages == [(True, b"first")]
    assert read == len(first)


def test_reading_stops_at_an_unmasked_frame_a_partial_one_and_the_limit():
    first = wire(Frame(TEXT, b"first"))
    unmasked = Frame(TEXT, b"plain").serialize(mask=False, extensions=[])
    assert taken(first + unmasked)[1] == len(first)
    whole = wire(Frame(TEXT, b"z" * 200))
    for cut in (1, 2, 3, 5, len(whole) - 1):
        assert taken(first + whole[:cut])[1] == len(first)
    assert taken(first + wire(Frame(TEXT, b"z" * 101)), limit=100)[1] == len(first)
    at_limit = wire(Frame(TEXT, b"z" * 100))
    assert taken(first + at_limit, limit=100)[1] == len(first + at_limit)
    # A reserved bit set (a compressed frame): websockets' extension decides.
    compressed = bytes([wire(Frame(TEXT, b"c"))[0] | 0x40]) + wire(Frame(TEXT, b"c"))[1:]
    assert taken(first + compressed)[1] == len(first)


def _drain(protocol: ServerProtocol, data: bytes) -> list[tuple[bool, bytes]]:
    """The whole messages websockets' parser finds in ``data`` (a server
    protocol past its handshake parses frames: the swap the hub makes)."""
    protocol.parser = Protocol.parse(protocol)
    next(protocol.parser)
    protocol.receive_data(data)
    out: list[tuple[bool, bytes]] = []
    parts: list[bytes] = []
    text = False
    for event in protocol.events_received():
        if event.opcode in (TEXT, BINARY):
            text, parts = event.opcode is TEXT, [bytes(event.data)]
        elif event.opcode is CONT:
            parts.append(bytes(event.data))
        else:
            continue
        if event.fin:
            out.append((text, b"".join(parts)))
    return out


_frames = st.one_of(
    st.builds(lambda p: Frame(TEXT, p), st.binary(max_size=300)),
    st.builds(lambda p: Frame(BINARY, p), st.binary(max_size=300)),
    st.builds(lambda p: Frame(PING, p), st.binary(max_size=20)),
    st.builds(
        lambda a, b: [Frame(TEXT, a, fin=False), Frame(CONT, b)],
        st.binary(max_size=50),
        st.binary(max_size=50),
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_frames, max_size=8), st.integers(min_value=0, max_value=40))
def test_read_frames_then_websockets_finds_what_websockets_alone_finds(frames, cut):
    flat: list[Frame] = []
    for f in frames:
        flat.extend(f if isinstance(f, list) else [f])
    data = b"".join(wire(f) for f in flat)
    data = data[: max(0, len(data) - cut)]  # often a partial frame at the end
    mine, read = taken(data)
    assert mine + _drain(_opened(), data[read:]) == _drain(_opened(), data)


def _opened() -> ServerProtocol:
    protocol = ServerProtocol(max_size=LIMIT)
    protocol.state = OPEN
    return protocol


# ── Inbox ───────────────────────────────────────────────────────────────────


class Flow:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def inbox(self, high: int | None = 16, low: int | None = None) -> Inbox:
        return Inbox(
            high,
            low,
            lambda: self.calls.append("pause"),
            lambda: self.calls.append("resume"),
            MAX_FRAGMENTS,
        )


async def test_messages_from_both_paths_come_out_in_order_decoded():
    inbox = Flow().inbox()
    inbox.put_message(True, b'{"a":1}')
    inbox.put(Frame(TEXT, b"frag-", fin=False))
    inbox.put(Frame(CONT, b"ment", fin=False))
    inbox.put(Frame(CONT, b"ed"))
    inbox.put(Frame(BINARY, b"\x00\xff"))
    inbox.put_message(True, "é".encode())
    assert [await inbox.get() for _ in range(4)] == ['{"a":1}', "frag-mented", b"\x00\xff", "é"]
    assert len(inbox) == 0


async def test_get_waits_for_a_message_and_close_ends_the_stream_after_what_waits():
    inbox = Flow().inbox()
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    inbox.put_message(True, b"late")
    assert await asyncio.wait_for(waiting, 5) == "late"
    inbox.put_message(False, b"kept")
    inbox.close()
    assert await inbox.get() == b"kept"
    with pytest.raises(EOFError):
        await inbox.get()
    with pytest.raises(EOFError):
        inbox.put_message(True, b"after the end")


async def test_close_wakes_a_waiting_get_with_eof():
    inbox = Flow().inbox()
    waiting = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    inbox.close()
    with pytest.raises(EOFError):
        await asyncio.wait_for(waiting, 5)


async def test_invalid_utf8_is_raised_when_taken_after_the_messages_before_it():
    inbox = Flow().inbox()
    inbox.put_message(True, b"fine")
    inbox.put_message(True, b"\xed\xa0\x80")
    assert await inbox.get() == "fine"
    with pytest.raises(UnicodeDecodeError):
        await inbox.get()
    inbox.put_message(True, b"\xff")
    assert await inbox.get(decode=False) == b"\xff"  # websockets' decode=False


async def test_too_many_fragments_is_raised_in_place_of_that_message():
    inbox = Flow().inbox()
    inbox.put_message(True, b"before")
    inbox.put(Frame(TEXT, b"x", fin=False))
    for _ in range(MAX_FRAGMENTS + 5):
        inbox.put(Frame(CONT, b"x", fin=False))
    inbox.put(Frame(CONT, b"x"))
    inbox.put_message(True, b"after")
    assert await inbox.get() == "before"
    with pytest.raises(TooManyFragments):
        await inbox.get()
    assert await inbox.get() == "after"


async def test_reading_pauses_above_high_and_resumes_at_low():
    flow = Flow()
    inbox = flow.inbox(high=4, low=1)
    for i in range(5):
        inbox.put_message(True, b"%d" % i)
    assert flow.calls == ["pause"]
    inbox.put_message(True, b"5")
    assert flow.calls == ["pause"]  # once
    for _ in range(4):
        await inbox.get()
    assert flow.calls == ["pause"]  # two still wait
    await inbox.get()
    assert flow.calls == ["pause", "resume"]
    # Fragments of a message still arriving do not count: never paused by them.
    inbox.put(Frame(TEXT, b"a", fin=False))
    for _ in range(20):
        inbox.put(Frame(CONT, b"a", fin=False))
    assert flow.calls == ["pause", "resume"]


async def test_two_concurrent_gets_are_refused_as_websockets_does():
    inbox = Flow().inbox()
    first = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    with pytest.raises(ConcurrencyError):
        await inbox.get()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    inbox.put_message(True, b"ok")
    assert await inbox.get() == "ok"  # a cancelled get leaves it usable
