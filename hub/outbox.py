"""The outbound side of a connection: encode once, write without awaiting.

A fan-out builds one :class:`OutFrame` per message. With compression off the
WebSocket frame (header + payload) is built once too: server frames are not
masked, so the same bytes are valid on every connection. Each connection
appends those bytes to its pending list; the :class:`Flusher` writes every
dirty connection's pending bytes with a single ``transport.write`` per
connection at the end of the event loop's current iteration, so a burst of
events costs one syscall per connection, not one per event.

The outbound bound is ``pending + transport buffer`` bytes; a connection over
it is a slow consumer and is closed (4008) instead of slowing anyone else.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from websockets.frames import Frame, Opcode

if TYPE_CHECKING:
    from hub.connection import HubConnection


class OutFrame:
    """One outbound text message, encoded once for all its receivers."""

    __slots__ = ("payload", "wire")

    def __init__(self, payload: bytes, preframe: bool = True):
        self.payload = payload
        # None when connections compress: each then frames it itself.
        self.wire: bytes | None = (
            Frame(Opcode.TEXT, payload).serialize(mask=False) if preframe else None
        )


class Flusher:
    """Writes dirty connections once per event loop iteration."""

    __slots__ = ("_dirty", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop
        self._dirty: list[HubConnection] = []
        self._scheduled = False

    def add(self, conn: HubConnection) -> None:
        self._dirty.append(conn)
        if not self._scheduled:
            self._scheduled = True
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for conn in dirty:
            # One failing connection must not hold back the rest of the pass.
            try:
                conn.flush()
            except Exception:
                conn.flush_failed()
