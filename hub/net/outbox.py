"""The outbound side of a connection: queue without awaiting, write once per pass.

Each connection has an :class:`Outbox`. A fan-out appends the same
already-framed bytes (:class:`~hub.core.frames.OutFrame`) to every member's outbox;
the :class:`Flusher` writes every dirty outbox's pending bytes with a single
``transport.write`` at the end of the event loop's current iteration, so a
burst of events costs one syscall per connection, not one per event.

The outbound bound is ``pending + transport buffer`` bytes; a connection over
it is a slow consumer and is closed (4008) instead of slowing anyone else. The
transport buffer is only looked at once the transport has paused writing
(its buffer passed the high-water mark): a healthy connection pays nothing for
the bound.

Pure of websockets: the transport is anything with ``write``,
``is_closing``, ``get_write_buffer_size`` and ``abort``; permessage-deflate
comes in as a ``compress`` callable that turns a payload into wire chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from hub.core.counters import Counters
    from hub.core.frames import OutFrame


class Transport(Protocol):
    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    def get_write_buffer_size(self) -> int: ...

    def abort(self) -> None: ...


class Outbox:
    """Pending frames of one connection, bounded in bytes."""

    __slots__ = (
        "_compress",
        "_dirty",
        "_flusher",
        "_on_failure",
        "_on_overflow",
        "_pending",
        "_pending_bytes",
        "_preamble",
        "_transport",
        "_writable",
        "counters",
        "frames_out",
        "limit",
        "open",
        "paused",
    )

    def __init__(
        self,
        flusher: Flusher,
        counters: Counters,
        limit: int,
        *,
        on_overflow: Callable[[], None],
        on_failure: Callable[[], None] | None = None,
        transport: Transport | None = None,
        compress: Callable[[bytes], list[bytes]] | None = None,
    ):
        self._transport: Transport = transport if transport is not None else _NOT_YET
        self._flusher = flusher
        self.counters = counters
        self.limit = limit
        self._on_overflow = on_overflow
        self._on_failure = on_failure
        self._compress = compress
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        #: Pending chunks that are not messages (the handshake's answer).
        self._preamble = 0
        self._dirty = False
        self._writable = transport is not None
        #: True from :meth:`start` (or a transport given) until closing; pushes
        #: to an outbox that is not open are dropped (and counted).
        self.open = transport is not None
        #: Set by the transport's flow control (pause_writing/resume_writing).
        self.paused = False
        self.frames_out = 0

    def start(
        self, transport: Transport, compress: Callable[[bytes], list[bytes]] | None = None
    ) -> None:
        """The connection is open (handshake done, extensions agreed): write to
        ``transport``, compressing with ``compress`` when given. Once."""
        if self._transport is not _NOT_YET:
            return
        self._transport = transport
        self._compress = compress
        self._writable = self.open = True

    @property
    def started(self) -> bool:
        return self._transport is not _NOT_YET

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    @property
    def backlog(self) -> int:
        """Bytes not yet on the wire: pending here and in the transport's buffer."""
        return self._pending_bytes + self._transport.get_write_buffer_size()

    # ── the write path ───────────────────────────────────────────────────

    def push(self, out: OutFrame) -> bool:
        """Queue a frame; False if it was dropped (closing or slow consumer)."""
        if not self.open:
            self.counters.dropped += 1
            return False
        compress = self._compress
        if compress is None:
            wire = out.wire
            assert wire is not None
            self._pending.append(wire)
            self._pending_bytes += len(wire)
        else:
            # permessage-deflate: every connection compresses with its own context.
            for data in compress(out.payload):
                self._pending.append(data)
                self._pending_bytes += len(data)
        self.frames_out += 1
        if (self.paused or self._pending_bytes > self.limit) and self._over_limit():
            return False
        if not self._dirty:
            self._dirty = True
            self._flusher.add(self)
        return True

    def push_preamble(self, data: bytes) -> None:
        """Queue bytes that go before every frame (the opening handshake's
        101): written with the first frames, in the same ``transport.write``."""
        if not self.open:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        self._preamble += 1
        if not self._dirty:
            self._dirty = True
            self._flusher.add(self)

    def push_last(self, out: OutFrame) -> None:
        """Queue a final frame (the error event before a close) even past the
        bound, write it now, and accept nothing more.

        Always sent uncompressed (RSV1 clear, which permessage-deflate allows):
        the protocol may already be closing and refuse to compress.
        """
        if not self.open:
            return
        self.open = False
        wire = out.wire
        assert wire is not None
        self._pending.append(wire)
        self._pending_bytes += len(wire)
        self.frames_out += 1
        self.flush()

    @property
    def preframed(self) -> bool:
        """True when pushed frames must carry their wire bytes (no compression)."""
        return self._compress is None

    def flush(self) -> None:
        """Write everything pending in one ``transport.write``."""
        self._dirty = False
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        # Counted here, once per write: replies, events and stream frames alike.
        self.counters.messages_out += len(pending) - self._preamble
        self._preamble = 0
        pending.clear()
        self._pending_bytes = 0
        if self._writable:
            self._transport.write(data)

    def flush_failed(self) -> None:
        """The transport refused a write: drop this connection, nobody else."""
        self.stop()
        if self._on_failure is not None:
            self._on_failure()
        else:
            self._transport.abort()

    def stop(self) -> None:
        """No more writes at all: the closing handshake began or the socket is gone."""
        self._writable = False
        self.open = False
        self._drop_pending()
        # Nothing can overflow any more; the callback (a method of the
        # connection) would keep the connection and its outbox in a cycle.
        self._on_overflow = _nothing

    def bounded(self) -> bool:
        """After a write that did not go through :meth:`push` (websockets' own:
        its pongs): True while what waits to be written is within the bound;
        past it the connection is a slow consumer, as for a frame pushed."""
        return not self.open or not self._over_limit()

    def _over_limit(self) -> bool:
        buffered = self._transport.get_write_buffer_size()
        if self._pending_bytes + buffered <= self.limit:
            return False
        self.counters.slow_consumer_closes += 1
        self._drop_pending()
        self._on_overflow()
        return True

    def _drop_pending(self) -> None:
        """Forget what is pending, counting the frames among it as dropped."""
        self.counters.dropped += len(self._pending) - self._preamble
        self._preamble = 0
        self._pending.clear()
        self._pending_bytes = 0


class _NoTransport:
    """Where an outbox writes before its connection is open: nowhere."""

    def write(self, data: bytes) -> None:
        return None

    def is_closing(self) -> bool:
        return True

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        return None


_NOT_YET: Transport = _NoTransport()


class Flusher:
    """Writes dirty outboxes once per event loop iteration."""

    __slots__ = ("_dirty", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None):
        self._loop = loop
        self._dirty: list[Outbox] = []
        self._scheduled = False

    def add(self, outbox: Outbox) -> None:
        self._dirty.append(outbox)
        if not self._scheduled:
            self._scheduled = True
            loop = self._loop or asyncio.get_running_loop()
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        dirty, self._dirty = self._dirty, []
        for outbox in dirty:
            # One failing connection must not hold back the rest of the pass.
            try:
                outbox.flush()
            except Exception:
                outbox.flush_failed()


def _nothing() -> None:
    pass
