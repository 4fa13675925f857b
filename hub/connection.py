"""A hub connection: websockets' ServerConnection plus a byte-bounded outbox.

websockets drives the protocol (handshake, parsing, pings, closing); this
class adds the hub's write path (:meth:`push`, :meth:`flush`) and keeps the
two in order: before websockets writes anything of its own (a pong, a close
frame) the pending outbox bytes go first, so no frame can overtake another.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, PayloadTooBig
from websockets.protocol import State

from hub.outbox import Flusher, OutFrame
from protocol import codec
from protocol.errors import CloseCode, ErrorCode

if TYPE_CHECKING:
    from hub.metrics import Counters
    from hub.presence import AgentRecord
    from hub.session import Session

OPEN = State.OPEN
_ENDING = (State.CLOSING, State.CLOSED)
# Closes websockets makes on its own when a peer breaks the protocol.
_FAILURE_CODES = frozenset(
    {int(CloseCode.PROTOCOL_ERROR), int(CloseCode.INVALID_DATA), int(CloseCode.MESSAGE_TOO_BIG)}
)


class HubConnection(ServerConnection):
    """One agent's WebSocket. Node-wide parts are class attributes set by the node."""

    flusher: Flusher
    counters: Counters
    outbox_limit: int = 4 * 1024 * 1024
    preframed: bool = True  # False when permessage-deflate may be negotiated
    hub_close_timeout: float = 5.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_id: str = ""
        self.token: str | None = None
        self.session: Session | None = None
        self.record: AgentRecord | None = None
        self.opened_at = time.monotonic()
        self.frames_out = 0
        self.hub_close_code: int | None = None
        self.cleaned_up = asyncio.Event()
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._dirty = False
        self._outbox_open = True
        self._deflate = False
        self._failure_reported = False
        self._writable = True
        self._close_task: asyncio.Task[None] | None = None

    def start_outbox(self) -> None:
        """Called once the handshake is done: fixes the write path."""
        self._deflate = bool(self.protocol.extensions) or not self.preframed

    # ── the write path ───────────────────────────────────────────────────

    def push(self, out: OutFrame) -> bool:
        """Queue a frame; False if it was dropped (closing or slow consumer)."""
        if not self._outbox_open:
            self.counters.dropped += 1
            return False
        if self._deflate:
            if self.protocol.state is not OPEN:
                self.counters.dropped += 1
                return False
            # permessage-deflate: every connection compresses with its own context.
            self.protocol.send_text(out.payload)
            for data in self.protocol.data_to_send():
                self._pending.append(data)
                self._pending_bytes += len(data)
        else:
            wire = out.wire
            assert wire is not None
            self._pending.append(wire)
            self._pending_bytes += len(wire)
        self.frames_out += 1
        # The socket's own buffer is only looked at once the transport has
        # paused writing (its buffer passed the high-water mark): a healthy
        # connection pays nothing for the bound.
        if (self.paused or self._pending_bytes > self.outbox_limit) and self._over_limit():
            return False
        if not self._dirty:
            self._dirty = True
            self.flusher.add(self)
        return True

    def send_frame(self, payload: bytes) -> bool:
        """Queue one message for this connection only."""
        return self.push(OutFrame(payload, preframe=not self._deflate))

    def flush(self) -> None:
        self._dirty = False
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        # Counted here, once per write: replies, events and stream frames alike.
        self.counters.messages_out += len(pending)
        pending.clear()
        self._pending_bytes = 0
        if self._writable:
            self.transport.write(data)

    def flush_failed(self) -> None:
        """The transport refused a write: drop this connection, nobody else."""
        self._stop_writing()
        self.transport.abort()

    def _stop_writing(self) -> None:
        """No more data frames: the closing handshake began or the socket is gone."""
        self._writable = False
        self._outbox_open = False
        if self._pending:
            self.counters.dropped += len(self._pending)
            self._pending.clear()
            self._pending_bytes = 0

    def _over_limit(self) -> bool:
        buffered = self.transport.get_write_buffer_size()
        if self._pending_bytes + buffered <= self.outbox_limit:
            return False
        self.counters.slow_consumer_closes += 1
        self.counters.dropped += len(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self.close_for(
            CloseCode.SLOW_CONSUMER,
            ErrorCode.SLOW_CONSUMER,
            f"outbound queue over {self.outbox_limit} bytes: reading too slowly",
        )
        return True

    def send_data(self) -> None:
        # websockets is about to write (pong, close frame…): our bytes first.
        if self._pending:
            self.flush()
        if not self._failure_reported:
            sent = self.protocol.close_sent
            if sent is not None and sent.code in _FAILURE_CODES:
                self._report_failure(int(sent.code))
        super().send_data()
        # After a close frame (ours or the peer's) only the handshake may
        # follow, and a server half-closes right after it: never write again.
        if self._writable and self.protocol.state in _ENDING:
            self._stop_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_writing()
        super().connection_lost(exc)

    def _report_failure(self, code: int) -> None:
        """websockets failed the connection over a bad frame and queued its
        close (1009, 1007, 1002): the contract wants an ``error`` event first."""
        self._failure_reported = True
        exc = self.protocol.parser_exc or self.connection_exc
        if isinstance(exc, PayloadTooBig):
            message = f"frame too big: {exc}"
        elif isinstance(exc, UnicodeDecodeError) or code == CloseCode.INVALID_DATA:
            message = "invalid UTF-8 in a text frame"
        else:
            message = f"WebSocket protocol error: {exc}"
        self.counters.closes[code] += 1
        self.counters.errors[ErrorCode.INVALID_REQUEST] += 1
        self.hub_close_code = code
        frame = OutFrame(codec.error(ErrorCode.INVALID_REQUEST, message), preframe=True)
        assert frame.wire is not None
        if self._writable and not self.transport.is_closing():
            self.transport.write(frame.wire)

    # ── closing ──────────────────────────────────────────────────────────

    @property
    def closing(self) -> bool:
        return not self._outbox_open

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        """Send an ``error`` event, then close with ``code``. Does not block.

        Every close the hub initiates for a reason comes through here (or
        :meth:`_report_parser_error`), so this is where closes are counted.
        """
        if not self._outbox_open:
            return
        self._failure_reported = True  # this close is the hub's own, reported here
        self.counters.closes[int(code)] += 1
        self.counters.errors[error] += 1
        if self.protocol.state is OPEN:
            self.send_frame(codec.error(error, reason))
            self.flush()
        self._outbox_open = False
        self.hub_close_code = int(code)
        if self.session is not None:
            self.session.begin_close()
        self._close_task = asyncio.get_running_loop().create_task(
            self.close_gracefully(code, reason)
        )

    async def close_gracefully(self, code: int, reason: str) -> None:
        """Closing handshake with a deadline; a peer that doesn't answer is cut."""
        self._outbox_open = False
        if self.hub_close_code is None:
            self.hub_close_code = int(code)
        reason = reason.encode()[:120].decode(errors="ignore")
        try:
            async with asyncio.timeout(self.hub_close_timeout):
                await self.close(code, reason)
        except (TimeoutError, ConnectionClosed, OSError):
            self.transport.abort()

    async def probe(self, timeout: float) -> bool:
        """Is the peer alive? A ping answered within ``timeout``."""
        if self.protocol.state is not OPEN or not self._outbox_open:
            return False
        try:
            async with asyncio.timeout(timeout):
                waiter = await self.ping()
                await waiter
        except (TimeoutError, ConnectionClosed, OSError):
            return False
        return True

    async def wait_cleaned_up(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.cleaned_up.wait()
