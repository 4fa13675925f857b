"""What a hub connection has received: whole messages, in order, for its loop.

websockets queues every data frame in an ``Assembler`` (a queue object, a
deque, two callbacks per connection) and its parser runs each frame through
a chain of generators. An agent's frames are nearly all small, whole, masked
text frames — a join, a publish, a heartbeat — so the hub reads those itself:

- :func:`read_frames` takes whole, unfragmented, masked text or binary
  frames with a 7- or 16-bit length within the size limit from the front of
  what the socket gave, and stops at the first thing that is anything else
  (a control frame, a fragment, a partial frame, reserved bits, an
  oversized or unmasked frame). The rest goes to websockets' parser, which
  is then at a frame boundary and answers it as it always did.
- :class:`Inbox` stands in for websockets' ``Assembler`` (the same
  ``get``/``put``/``close`` and the same errors, so websockets' ``recv``
  works unchanged on it): whole messages from both paths queue in arrival
  order; fragments are joined as they come; text is decoded when taken, so
  invalid UTF-8 fails the connection (1007) only after the messages before
  it were handled, as before. Reading pauses while more than ``high``
  messages wait and resumes at ``low``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from websockets.exceptions import ConcurrencyError, TooManyFragments
from websockets.frames import CONT, TEXT, Frame, apply_mask

__all__ = ["Inbox", "ParserPosition", "read_frames"]

_TEXT_FIN = 0x81
_BINARY_FIN = 0x82


def read_frames(data: bytes, limit: int | None, put: Callable[[bool, bytes], None]) -> int:
    """Hands each whole, plain frame at the front of ``data`` to ``put`` (is
    it text, the unmasked payload); returns how many bytes were read."""
    end = len(data)
    at = 0
    while end - at >= 6:
        first = data[at]
        if first != _TEXT_FIN and first != _BINARY_FIN:
            break
        second = data[at + 1]
        if second < 0x80:  # unmasked: websockets fails it (1002)
            break
        length = second & 0x7F
        if length < 126:
            key = at + 2
        elif length == 126:
            if end - at < 8:
                break
            length = (data[at + 2] << 8) | data[at + 3]
            key = at + 4
        else:
            break
        if limit is not None and length > limit:
            break  # websockets refuses it: 1009
        start = key + 4
        stop = start + length
        if stop > end:
            break  # the frame's end has not arrived
        put(first == _TEXT_FIN, apply_mask(data[start:stop], data[key:start]) if length else b"")
        at = stop
    return at


class ParserPosition:
    """Where websockets' frame parser is in a connection's byte stream.

    The hub may read a frame itself only where websockets' parser is between
    two frames. That is not "its buffer is empty": its parser takes a frame's
    header, then its extended length, then its mask as each arrives, and waits
    for the rest with an empty buffer. So the hub follows every byte it hands
    to websockets' parser, frame by frame, from the first — the bytes right
    after a request that ended exactly where the first read did — and knows
    how many more the frame under way needs: :attr:`between_frames` is true
    only when none. No inference from websockets' state: RFC 6455's framing
    alone says where a frame ends. (Past a frame websockets refuses, nothing
    here matters: the connection is no longer open, the hub reads nothing.)
    """

    __slots__ = ("_head", "_owed")

    def __init__(self) -> None:
        # The start of a header whose end has not arrived (at most 13 bytes).
        self._head = b""
        # Payload bytes of the frame under way that have not arrived.
        self._owed = 0

    @property
    def between_frames(self) -> bool:
        return not self._owed and not self._head

    def passed(self, data: bytes) -> None:
        """``data`` went to websockets' parser: move on by as much."""
        end = len(data)
        at = 0
        while at < end:
            owed = self._owed
            if owed:
                if end - at <= owed:
                    self._owed = owed - (end - at)
                    return
                at += owed
                self._owed = 0
            head = self._head
            known = len(head)
            # A header is at most 14 bytes: 2, an 8-byte length, a 4-byte mask.
            chunk = head + data[at : at + 14 - known] if known else data[at : at + 14]
            size = _header_size(chunk)
            if size == 0 or len(chunk) < size:
                self._head = chunk  # the rest of data, all of it header
                return
            self._head = b""
            self._owed = _payload_length(chunk)
            at += size - known


def _header_size(head: bytes) -> int:
    """A frame header's size from its first bytes (0: fewer than two)."""
    if len(head) < 2:
        return 0
    second = head[1]
    length = second & 0x7F
    extended = 2 if length == 126 else 8 if length == 127 else 0
    return 2 + extended + (4 if second & 0x80 else 0)


def _payload_length(head: bytes) -> int:
    length = head[1] & 0x7F
    if length == 126:
        return int.from_bytes(head[2:4], "big")
    if length == 127:
        return int.from_bytes(head[2:10], "big")
    return length


class Inbox:
    """A connection's received messages (websockets' ``Assembler``'s place)."""

    __slots__ = (
        "_fragments",
        "_head",
        "_max_fragments",
        "_messages",
        "_pause",
        "_resume",
        "_waiter",
        "closed",
        "get_in_progress",
        "high",
        "low",
        "paused",
    )

    def __init__(
        self,
        high: int | None,
        low: int | None,
        pause: Callable[[], Any],
        resume: Callable[[], Any],
        max_fragments: int,
    ) -> None:
        if high is not None and low is None:
            low = high // 4
        self.high, self.low = high, low
        #: websockets' own bound on the fragments of one message.
        self._max_fragments = max_fragments
        self._pause = pause
        self._resume = resume
        self.paused = False
        self.closed = False
        self.get_in_progress = False
        # (is text, payload) of whole messages; taken from _head on. A list:
        # an empty deque costs some 600 bytes per connection.
        self._messages: list[tuple[bool, bytes] | None] = []
        self._head = 0
        # The fragments of a message still arriving (its first frame first).
        self._fragments: list[Frame] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._messages) - self._head

    # ── arriving ─────────────────────────────────────────────────────────

    def put_message(self, text: bool, payload: bytes) -> None:
        """A whole message (read by :func:`read_frames`)."""
        self._queue((text, payload))

    def _queue(self, entry: tuple[bool, bytes] | None) -> None:
        # None: a message of too many fragments, for get() to refuse.
        if self.closed:
            raise EOFError("stream of frames ended")
        self._messages.append(entry)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        high = self.high
        if high is not None and not self.paused and len(self._messages) - self._head > high:
            self.paused = True
            self._pause()

    def put(self, frame: Frame) -> None:
        """A data frame from websockets' parser (which checked the sequence)."""
        if self.closed:
            raise EOFError("stream of frames ended")
        fragments = self._fragments
        if frame.opcode is CONT:
            if fragments is None:
                return  # the rest of a message already refused (too many fragments)
            if len(fragments) >= self._max_fragments:
                self._fragments = None
                self._queue(None)
                return
            fragments.append(frame)
            if not frame.fin:
                return
            self._fragments = None
            payload = b"".join(f.data for f in fragments)
            self.put_message(fragments[0].opcode is TEXT, payload)
        elif frame.fin:
            self.put_message(frame.opcode is TEXT, bytes(frame.data))
        else:
            self._fragments = [frame]

    # ── taking ───────────────────────────────────────────────────────────

    async def get(self, decode: bool | None = None) -> str | bytes:
        """The next message, waiting for it; EOFError once closed and empty.
        Raises UnicodeDecodeError for invalid UTF-8 in a text message."""
        if self.get_in_progress:
            raise ConcurrencyError("get() or get_iter() is already running")
        if self._head == len(self._messages):
            if self.closed:
                raise EOFError("stream of frames ended")
            self.get_in_progress = True
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
                self.get_in_progress = False
            if self._head == len(self._messages):
                raise EOFError("stream of frames ended")
        messages = self._messages
        head = self._head
        entry = messages[head]
        head += 1
        if head == len(messages):
            messages.clear()
            head = 0
        else:
            messages[head - 1] = None
        self._head = head
        if self.paused and len(messages) - head <= (self.low or 0):
            self.paused = False
            self._resume()
        if entry is None:
            raise TooManyFragments(self._max_fragments)
        text, payload = entry
        if decode is None:
            decode = text
        return payload.decode() if decode else payload

    def get_iter(self, decode: bool | None = None) -> Any:
        raise NotImplementedError("a hub connection receives whole messages (recv)")

    def close(self) -> None:
        """End the stream: get() returns what is queued, then raises EOFError."""
        if self.closed:
            return
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
