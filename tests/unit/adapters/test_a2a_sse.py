"""Server-Sent Events: the frames the gateway writes, and the decoder the bridge
reads a remote's stream with (any line ending, split anywhere, bounded)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.a2a import sse
from protocol.a2a.sse import SseDecoder, SseError, SseEvent


def test_an_event_is_one_data_line_and_a_blank_line():
    assert sse.event(b'{"a":1}') == b'data: {"a":1}\n\n'


def test_the_decoder_reads_events_comments_and_names():
    decoder = SseDecoder(1024)
    stream = b': keepalive\n\ndata: {"a":1}\n\nevent: error\ndata: x\ndata: y\n\n'
    assert decoder.feed(stream) == [SseEvent("message", '{"a":1}'), SseEvent("error", "x\ny")]


@given(st.lists(st.integers(min_value=1, max_value=7), max_size=40), st.sampled_from(
    [b"\n", b"\r\n", b"\r"]))  # fmt: skip
def test_events_survive_any_split_and_any_line_ending(cuts, newline):
    wire = b"".join(
        b"data: " + f'{{"n":{n}}}'.encode() + newline + b": c" + newline + newline for n in range(5)
    )
    decoder = SseDecoder(1024)
    events, at = [], 0
    for cut in cuts:
        events += decoder.feed(wire[at : at + cut])
        at += cut
    events += decoder.feed(wire[at:])
    assert [e.data for e in events] == [f'{{"n":{n}}}' for n in range(5)]


def test_an_event_over_the_bound_is_refused():
    decoder = SseDecoder(100)
    with pytest.raises(SseError):
        decoder.feed(b"data: " + b"x" * 200)  # no newline yet: the buffer alone is too big
    decoder = SseDecoder(100)
    with pytest.raises(SseError):
        decoder.feed(b"data: " + b"x" * 60 + b"\ndata: " + b"y" * 60 + b"\n")
