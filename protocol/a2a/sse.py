"""Server-Sent Events as A2A's ``SendStreamingMessage`` uses them.

Each event is one ``data:`` line holding a whole JSON-RPC response whose
``result`` has exactly one of ``task``, ``message``, ``statusUpdate``,
``artifactUpdate``; the stream ends when the server ends the response (A2A
1.0 has no ``final`` flag — a server that never ends it hangs the client).

:func:`event` frames one response for the inbound gateway;
:class:`SseDecoder` reads a remote's stream for the outbound bridge,
incrementally and with a bound on one event's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import ErrorCode, ProtocolError

CONTENT_TYPE = "text/event-stream"


def event(payload: bytes) -> bytes:
    """One SSE event carrying ``payload`` (compact JSON: no newline in it)."""
    return b"data: " + payload + b"\n\n"


#: A comment line: keeps proxies from closing an idle stream.
KEEPALIVE = b": keepalive\n\n"


class SseError(ProtocolError):
    """A stream that breaks the format's bounds."""

    def __init__(self, reason: str):
        super().__init__(ErrorCode.INVALID_REQUEST, reason)


@dataclass(frozen=True, slots=True)
class SseEvent:
    name: str
    data: str


class SseDecoder:
    """Bytes of an event stream in, whole events out (W3C SSE parsing:
    ``\\n``, ``\\r\\n`` or ``\\r`` line ends, comments, multi-line data)."""

    def __init__(self, max_event_bytes: int):
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()
        self._name = "message"
        self._data: list[str] = []
        self._size = 0
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the \n of a \r\n split across chunks
        self._pending_cr = False
        self._buffer += chunk
        events: list[SseEvent] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                break
            end, skip = cut
            line = bytes(self._buffer[:end])
            if skip == 1 and self._buffer[end] == 0x0D and end + 1 == len(self._buffer):
                self._pending_cr = True  # a lone \r at the end may be half of \r\n
            del self._buffer[: end + skip]
            found = self._line(line)
            if found is not None:
                events.append(found)
        if len(self._buffer) + self._size > self.max_event_bytes:
            raise SseError(f"an event of the stream exceeds {self.max_event_bytes} bytes")
        return events

    def _line(self, raw: bytes) -> SseEvent | None:
        if not raw:
            if not self._data:
                self._name = "message"
                return None
            found = SseEvent(self._name, "\n".join(self._data))
            self._name, self._data, self._size = "message", [], 0
            return found
        if raw.startswith(b":"):
            return None
        name, _, value = raw.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        text = value.decode("utf-8", "replace")
        if name == b"data":
            self._data.append(text)
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise SseError(f"an event of the stream exceeds {self.max_event_bytes} bytes")
        elif name == b"event":
            self._name = text
        return None


def _line_end(buffer: bytearray) -> tuple[int, int] | None:
    """Where the first line of ``buffer`` ends, and the length of its terminator."""
    lf = buffer.find(b"\n")
    cr = buffer.find(b"\r", 0, lf if lf >= 0 else len(buffer))
    if cr >= 0:
        return cr, 2 if cr + 1 < len(buffer) and buffer[cr + 1] == 0x0A else 1
    if lf >= 0:
        return lf, 1
    return None
