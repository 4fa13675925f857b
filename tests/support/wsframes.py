"""Client byte streams of valid and invalid WebSocket frames, and what websockets makes of them.

For the tests that hold the hub's reading of a socket to websockets' own
(tests/unit/net/test_reading.py, tests/integration/test_frame_cuts.py):

- :class:`RawFrame` writes any frame a client could send — every length
  encoding (7, 16 and 64 bits, minimal or not), any mask key, reserved bits,
  unknown opcodes, unmasked, a length announced but not sent — and says where
  its header, extended length and mask end (:meth:`RawFrame.cuts`).
- :func:`streams` is a Hypothesis strategy of such frame sequences: whole
  messages, fragmented ones with control frames between their fragments,
  pings, pongs, closes, and every kind of bad frame.
- :func:`websockets_alone` is the reference: what websockets' own server
  protocol, fed the whole stream, delivers (messages as ``recv()`` would
  return them), writes (pongs, its close frame, the end of the stream) and
  fails with.
- :func:`server_frames` splits what a server wrote into frames.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from websockets.frames import CONT, TEXT, Opcode, apply_mask
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

FIN = 0x80
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
#: Opcodes RFC 6455 leaves undefined: websockets fails the connection (1002).
BAD_OPCODES = (0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF)


@dataclass(frozen=True)
class RawFrame:
    """One frame as a client writes it."""

    first: int  # FIN, RSV1-3, opcode
    payload: bytes = b""
    masked: bool = True
    key: bytes = b"\x00\x00\x00\x00"
    #: 0: the shortest length encoding; 2: a 16-bit length; 8: a 64-bit one.
    length_bytes: int = 0
    #: The length announced, when not the payload's (an oversized frame is
    #: announced, not sent: websockets refuses it on reading its length).
    announced: int | None = None

    def _length(self) -> bytes:
        n = len(self.payload) if self.announced is None else self.announced
        size = max(self.length_bytes, 0 if n < 126 else 2 if n < 65536 else 8)
        mask = 0x80 if self.masked else 0
        if size == 0:
            return bytes([mask | n])
        if size == 2:
            return bytes([mask | 126]) + struct.pack("!H", n)
        return bytes([mask | 127]) + struct.pack("!Q", n)

    def __repr__(self) -> str:
        payload = self.payload if len(self.payload) <= 64 else f"<{len(self.payload)} bytes>"
        return (
            f"RawFrame({self.first:#04x}, {payload!r}, masked={self.masked}, key={self.key!r}, "
            f"length_bytes={self.length_bytes}, announced={self.announced})"
        )

    def header(self) -> bytes:
        return bytes([self.first]) + self._length() + (self.key if self.masked else b"")

    @functools.cached_property
    def wire(self) -> bytes:
        payload = apply_mask(self.payload, self.key) if self.masked else self.payload
        return self.header() + payload

    def cuts(self) -> list[int]:
        """Offsets inside the frame where a read may end and a parser must
        wait: after the first byte, after the 2-byte header, after the
        extended length, after the mask."""
        ext = len(self._length()) - 1
        out = [1, 2]
        if ext:
            out.append(2 + ext)
        if self.masked:
            out.append(2 + ext + 4)
        return out


def _short(value: Any) -> Any:
    if isinstance(value, (bytes, str)) and len(value) > 40:
        return f"<{len(value)} {'bytes' if isinstance(value, bytes) else 'chars'}: {value[:24]!r}…>"
    if isinstance(value, (list, tuple)):
        return type(value)(_short(v) for v in value)
    return value


@dataclass(repr=False)
class Outcome:
    """What a server made of a client's byte stream."""

    #: ``("text", str)``, ``("bytes", b)`` or ``("invalid utf-8",)``, in order.
    messages: list[tuple[Any, ...]] = field(default_factory=list)
    #: The control frames the server wrote: ``(opcode, payload)``.
    control: list[tuple[int, bytes]] = field(default_factory=list)
    #: The server ended its side of the TCP stream.
    eof: bool = False
    close_sent: tuple[int, str] | None = None
    close_rcvd: tuple[int, str] | None = None
    #: The parser's failure, as ``type: message``.
    failure: str | None = None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={_short(v)!r}" for k, v in vars(self).items())
        return f"Outcome({fields})"


def _close(close: Any) -> tuple[int, str] | None:
    return None if close is None else (int(close.code), close.reason)


def failure_of(exc: BaseException | None) -> str | None:
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def message_of(text: bool, payload: bytes) -> tuple[Any, ...]:
    """A message as websockets' ``recv()`` returns it (text is decoded when taken)."""
    if not text:
        return ("bytes", payload)
    try:
        return ("text", payload.decode())
    except UnicodeDecodeError:
        return ("invalid utf-8",)


def websockets_alone(stream: bytes, max_size: int | None) -> Outcome:
    """What websockets' server protocol, past its handshake, makes of ``stream``."""
    protocol = ServerProtocol(max_size=max_size, state=OPEN)
    protocol.receive_data(stream)
    out = Outcome()
    parts: list[bytes] = []
    text = False
    for frame in protocol.events_received():
        if frame.opcode is CONT:
            parts.append(bytes(frame.data))
        elif frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            text, parts = frame.opcode is TEXT, [bytes(frame.data)]
        else:
            continue
        if frame.fin:
            out.messages.append(message_of(text, b"".join(parts)))
    written = b"".join(protocol.data_to_send())
    out.control = [(op, payload) for op, payload in server_frames(written)]
    out.eof = protocol.eof_sent
    out.close_sent = _close(protocol.close_sent)
    out.close_rcvd = _close(protocol.close_rcvd)
    out.failure = failure_of(protocol.parser_exc)
    return out


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """The unmasked frames a server wrote: ``(opcode, payload)``."""
    frames = []
    at = 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        n = second & 0x7F
        at += 2
        if n == 126:
            (n,) = struct.unpack("!H", data[at : at + 2])
            at += 2
        elif n == 127:
            (n,) = struct.unpack("!Q", data[at : at + 8])
            at += 8
        frames.append((first & 0x0F, data[at : at + n]))
        at += n
    return frames


# ── Hypothesis strategies ───────────────────────────────────────────────────

# A reader that mistakes the middle of a frame for the start of one finds a
# frame there when the bytes look like one: keys and payloads that do.
_LOOKALIKE = st.builds(
    lambda first, n, rest: bytes([first, 0x80 | n]) + rest,
    st.sampled_from((0x81, 0x82, 0x89, 0x88, 0x01, 0xC1)),
    st.sampled_from((0, 1, 2, 5, 126, 127)),
    st.binary(min_size=2, max_size=12),
)
_keys = st.one_of(
    st.just(b"\x00\x00\x00\x00"),
    st.binary(min_size=4, max_size=4),
    _LOOKALIKE.map(lambda b: (b + b"\x00\x00")[:4]),
)
_encodings = st.sampled_from((0, 0, 2, 8))


def _payloads(max_size: int) -> st.SearchStrategy[bytes]:
    # Mostly short (7-bit lengths), some past 125 (16-bit lengths), some that
    # start like a frame (with a zero mask key the wire shows them as they are).
    return st.one_of(
        st.binary(max_size=40),
        st.binary(min_size=120, max_size=max_size),
        st.builds(lambda a, b: a + b, _LOOKALIKE, st.binary(max_size=20)),
    )


@st.composite
def _frame(draw: Any, first: int, payload: bytes, **overrides: Any) -> RawFrame:
    return RawFrame(first, payload, key=draw(_keys), length_bytes=draw(_encodings), **overrides)


def _text() -> st.SearchStrategy[bytes]:
    return st.text(max_size=60).map(str.encode)


_INVALID_UTF8 = st.sampled_from((b"\xff", b"ok \xc3", b"\xed\xa0\x80", b"a\x80b"))


@st.composite
def _message(draw: Any) -> list[RawFrame]:
    """A whole message: one frame, or fragments with control frames between them."""
    text = draw(st.booleans())
    if text:
        payload = draw(st.one_of(_text(), _text(), _INVALID_UTF8, _payloads(400)))
    else:
        payload = draw(_payloads(400))
    opcode = OP_TEXT if text else OP_BINARY
    pieces = draw(st.integers(min_value=1, max_value=4))
    if pieces == 1:
        return [draw(_frame(FIN | opcode, payload))]
    cuts = sorted(
        draw(st.lists(st.integers(0, len(payload)), min_size=pieces - 1, max_size=pieces - 1))
    )
    bounds = [0, *cuts, len(payload)]
    frames: list[RawFrame] = []
    for i in range(pieces):
        first = (OP_CONT if i else opcode) | (FIN if i == pieces - 1 else 0)
        frames.append(draw(_frame(first, payload[bounds[i] : bounds[i + 1]])))
        if i < pieces - 1 and draw(st.booleans()):
            frames.append(draw(_control()))
    return frames


@st.composite
def _control(draw: Any) -> RawFrame:
    opcode = draw(st.sampled_from((OP_PING, OP_PING, OP_PONG)))
    return draw(_frame(FIN | opcode, draw(st.binary(max_size=125))))


@st.composite
def _big(draw: Any) -> RawFrame:
    """A frame with a real 64-bit length (a payload of 64 KiB or more)."""
    n = draw(st.integers(min_value=65536, max_value=65600))
    return draw(_frame(FIN | OP_BINARY, bytes(range(256)) * (n // 256) + b"x" * (n % 256)))


@st.composite
def _close_frame(draw: Any) -> RawFrame:
    payload = draw(
        st.one_of(
            st.just(b""),
            st.builds(
                lambda code, reason: struct.pack("!H", code) + reason,
                st.sampled_from((1000, 1001, 1003, 3000, 4999)),
                _text().filter(lambda r: len(r) <= 123),
            ),
            st.just(b"\x03"),  # too short
            st.just(struct.pack("!H", 999)),  # an invalid code
            st.just(struct.pack("!H", 1000) + b"\xff"),  # a reason that is not UTF-8
        )
    )
    return draw(_frame(FIN | OP_CLOSE, payload))


@st.composite
def _bad(draw: Any, limit: int) -> RawFrame:
    """A frame websockets fails the connection over."""
    kind = draw(
        st.sampled_from(
            (
                "opcode",
                "reserved",
                "unmasked",
                "oversize",
                "long control",
                "fragmented control",
                "stray continuation",
            )
        )
    )
    payload = draw(st.binary(max_size=30))
    if kind == "opcode":
        return draw(_frame(FIN | draw(st.sampled_from(BAD_OPCODES)), payload))
    if kind == "reserved":
        rsv = draw(st.sampled_from((0x40, 0x20, 0x10)))
        return draw(
            _frame(FIN | rsv | draw(st.sampled_from((OP_TEXT, OP_BINARY, OP_PING))), payload)
        )
    if kind == "unmasked":
        return draw(_frame(FIN | OP_TEXT, payload, masked=False))
    if kind == "oversize":
        announced = draw(
            st.one_of(st.integers(limit + 1, limit + 1000), st.integers(2**32, 2**63 - 1))
        )
        return draw(_frame(FIN | OP_TEXT, payload, announced=announced))
    if kind == "long control":
        return draw(_frame(FIN | OP_PING, draw(st.binary(min_size=126, max_size=200))))
    if kind == "fragmented control":
        return draw(_frame(OP_PING, payload))
    return draw(_frame(FIN | OP_CONT, payload))


def streams(limit: int, *, big: bool = True) -> st.SearchStrategy[list[RawFrame]]:
    """Sequences of frames, mostly valid, sometimes broken by a bad one; ``big``
    allows a frame of 64 KiB and more (``limit`` must then exceed it)."""
    items = st.one_of(
        _message(),
        _message(),
        _message(),
        st.builds(lambda f: [f], _control()),
        st.builds(lambda f: [f], _close_frame()),
        st.builds(lambda f: [f], _bad(limit)),
        *([st.builds(lambda f: [f], _big())] if big else []),
    )
    return st.lists(items, max_size=8).map(lambda parts: [f for part in parts for f in part])


def boundaries(frames: list[RawFrame]) -> list[int]:
    """Every offset of the stream of ``frames`` where a header, an extended
    length or a mask ends (and one byte into each frame)."""
    cuts = []
    at = 0
    for f in frames:
        cuts.extend(at + c for c in f.cuts())
        at += len(f.wire)
    return cuts


@st.composite
def cut_points(draw: Any, frames: list[RawFrame], *, one_byte_up_to: int = 1500) -> list[int]:
    """Where to cut the stream of ``frames`` into reads: at every header,
    extended length and mask boundary, at random points, or — short
    streams — at every byte."""
    size = sum(len(f.wire) for f in frames)
    if size < 2:
        return []
    if size <= one_byte_up_to and draw(st.integers(0, 5)) == 0:
        return list(range(1, size))
    cuts = set(draw(st.lists(st.integers(1, size - 1), max_size=12)))
    if draw(st.booleans()):
        cuts.update(boundaries(frames))
    return sorted(c for c in cuts if 0 < c < size)


def frame_cuts(frame: bytes) -> list[int]:
    """Where a read may end inside the (masked) frame that starts ``frame``:
    after its first byte, its header, its extended length, its mask."""
    second = frame[1]
    n = second & 0x7F
    ext = 2 if n == 126 else 8 if n == 127 else 0
    cuts = [1, 2, 2 + ext] + ([2 + ext + 4] if second & 0x80 else [])
    return sorted({c for c in cuts if c < len(frame)})


def cut(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` as reads ending at ``cuts``."""
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# ── what a server has not read yet ──────────────────────────────────────────


class Unread:
    """Waits until a server on ``server_port`` (this machine, IPv4) has read
    all a client sent — its socket has nothing unread, the client's nothing
    unacknowledged — so the server's last read ended where the client's
    write did: one poller (:func:`_queue`, sock_diag) for every waiting client."""

    def __init__(self, server_port: int) -> None:
        self.server_port = server_port
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._poller: asyncio.Task[None] | None = None

    async def settled(self, client_port: int) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting[client_port] = future
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        await asyncio.wait_for(future, 60.0)

    async def _poll(self) -> None:
        while self._waiting:
            for port, future in list(self._waiting.items()):
                # The hub's side read everything, the client's side has
                # nothing in flight: the hub's last read ended at the cut.
                # (A connection the hub closed reads nothing more.)
                server = _queue(self.server_port, port)
                client = _queue(port, self.server_port)
                if server is None or (server[0] == 0 and (client is None or client[1] == 0)):
                    del self._waiting[port]
                    if not future.done():
                        future.set_result(None)
            await asyncio.sleep(0.001)


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_LOOPBACK = socket.inet_aton("127.0.0.1") + bytes(12)


def _queue(local_port: int, remote_port: int) -> tuple[int, int] | None:
    """(bytes unread, bytes sent and not acknowledged) of the established TCP
    socket 127.0.0.1:``local_port`` → 127.0.0.1:``remote_port``, or None when
    there is none (closed): one exact sock_diag lookup over netlink — what
    ``ss`` shows as Recv-Q and Send-Q, without reading every socket of the
    machine."""
    request = struct.pack(
        "=BBBBI2H16s16sI2I",
        socket.AF_INET, socket.IPPROTO_TCP, 0, 0,
        1 << 1,  # TCP_ESTABLISHED
        socket.htons(local_port), socket.htons(remote_port),
        _LOOPBACK, _LOOPBACK, 0, 0xFFFFFFFF, 0xFFFFFFFF,
    )  # fmt: skip
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 0, 0)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.send(header + request)
        reply = nl.recv(65536)
    kind = struct.unpack_from("=H", reply, 4)[0]
    if kind == _NLMSG_ERROR:
        return None
    # inet_diag_msg after the 16-byte header: family, state, timer, retrans,
    # the 48-byte socket id, expires, rqueue, wqueue, ...
    rqueue, wqueue = struct.unpack_from("=II", reply, 16 + 4 + 48 + 4)
    return rqueue, wqueue
