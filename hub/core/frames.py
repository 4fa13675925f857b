"""Outbound frames, encoded once for every receiver.

A fan-out builds one :class:`OutFrame` per message. With compression off the
whole WebSocket frame (header + payload) is built once too: server frames are
not masked, so the same bytes are valid on every connection. Pure: no I/O.
"""

from __future__ import annotations

import struct

_TEXT_FIN = 0x81  # FIN + opcode 1 (text)


def text_frame(payload: bytes) -> bytes:
    """An unmasked, unfragmented WebSocket text frame (RFC 6455 §5.2)."""
    n = len(payload)
    if n < 126:
        return bytes((_TEXT_FIN, n)) + payload
    if n < 65536:
        return struct.pack("!BBH", _TEXT_FIN, 126, n) + payload
    return struct.pack("!BBQ", _TEXT_FIN, 127, n) + payload


class OutFrame:
    """One outbound text message, encoded once for all its receivers."""

    __slots__ = ("payload", "wire")

    def __init__(self, payload: bytes, preframe: bool = True):
        self.payload = payload
        # None when connections compress: each then frames it itself.
        self.wire: bytes | None = text_frame(payload) if preframe else None
