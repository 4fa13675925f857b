"""A hub connection: websockets' ServerConnection as a :class:`~hub.core.peer.Peer`.

websockets drives the protocol (handshake, parsing, pings, closing); the
hub's write path is the connection's :class:`~hub.net.outbox.Outbox`. This
class keeps the two in order — before websockets writes anything of its own
(a pong, a close frame) the pending outbox bytes go first, so no frame can
overtake another, and a close websockets makes over a bad frame is announced
by an ``error`` event first — and makes sure nothing is written once the
closing handshake began.

What it knows of websockets beyond its documented API is in
:mod:`hub.net.ws_internals` (:class:`~hub.net.ws_internals.WebSocketsConnection`,
its base). Every connection of a server is handed the node-wide parts in one
:class:`ConnectionContext` when it is built (:func:`hub.net.listener.listen`).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from hub.core.authz import Grant
from hub.core.frames import OutFrame
from hub.core.peer import CleanedUp, PeerKind
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.outbox import Flusher, Outbox
from hub.net.ws_internals import WebSocketsConnection
from protocol import codec
from protocol.errors import CloseCode, ErrorCode

if TYPE_CHECKING:
    from websockets.asyncio.server import Server

    from hub.core.agent_record import AgentRecord
    from hub.core.counters import Counters
    from hub.core.session import Session
    from hub.net.proxies import ClientAddress
    from hub.net.ws_internals import HubProtocol
    from protocol.messages import AgentInfo

OPEN = State.OPEN
_ENDING = (State.CLOSING, State.CLOSED)
# Closes websockets makes on its own when a peer breaks the protocol.
_FAILURE_CODES = frozenset(
    {int(CloseCode.PROTOCOL_ERROR), int(CloseCode.INVALID_DATA), int(CloseCode.MESSAGE_TOO_BIG)}
)


@dataclass(frozen=True, slots=True)
class ConnectionContext:
    """What every connection of a server shares: handed to each when it is built."""

    flusher: Flusher
    counters: Counters
    handshakes: HandshakeSlots
    #: ``handshake_timeout`` (websockets' own ``open_timeout`` is off: one
    #: timer for all handshakes instead of one per connection).
    deadlines: HandshakeDeadlines
    per_ip: ConnectionsPerIp
    #: What runs a connection once it is open (the node's ConnectionLifecycle.handle).
    handler: Callable[[HubConnection], Awaitable[None]]
    #: The handshake's checks (websockets' ``process_request`` hook) and its
    #: ``Server`` header.
    process_request: Callable[..., Any] | None = None
    server_header: str | None = None
    outbox_limit: int = 4 * 1024 * 1024
    #: permessage-deflate may be negotiated (``compression = deflate``).
    compress_frames: bool = False
    #: The closing handshake's deadline, websockets' and the hub's.
    close_timeout: float | None = 10.0


class HubConnection(WebSocketsConnection):
    """One agent's WebSocket."""

    kind = PeerKind.SOCKET
    shared = False

    # The hub's state of a connection lives in slots, not in the instance
    # __dict__, which holds only what websockets keeps per connection (about
    # ten attributes: the rest are class attributes of WebSocketsConnection).
    # A dict past 30 keys would become a full table of its own (~1.4 KiB).
    __slots__ = (
        "_close_task",
        "_ending",
        "_failure_reported",
        "_first",
        "_in_handshake",
        "_in_line",
        "agent_id",
        "cleaned_up",
        "client",
        "connection_id",
        "context",
        "declared",
        "grant",
        "holds_ip_slot",
        "hub_close_code",
        "opened_at",
        "outbox",
        "push",
        "record",
        "session",
        "token",
    )

    def __init__(
        self,
        protocol: HubProtocol,
        server: Server,
        loop: asyncio.AbstractEventLoop,
        context: ConnectionContext,
    ) -> None:
        super().__init__(protocol, server, loop)
        self.context = context
        self.agent_id: str = ""
        self.connection_id: str = ""
        self.token: str | None = None
        #: Who opened the connection (behind trusted proxies: the forwarded client).
        self.client: ClientAddress | None = None
        self.grant: Grant = Grant.unrestricted
        #: What the handshake query declared (type, capabilities, metadata).
        self.declared: AgentInfo | None = None
        self.session: Session | None = None
        self.record: AgentRecord | None = None
        self.opened_at = time.monotonic()
        self.hub_close_code: int | None = None
        self.cleaned_up = CleanedUp()
        self.outbox = Outbox(
            context.flusher, context.counters, context.outbox_limit, on_overflow=self._slow_consumer
        )
        #: The fan-out hands frames straight to the outbox: one call per delivery.
        self.push: Callable[[OutFrame], bool] = self.outbox.push
        #: Set by the server when this connection holds a per-IP slot.
        self.holds_ip_slot = False
        self._in_handshake = False
        self._in_line = False
        #: b"" until the request's first bytes came; while in line, those bytes.
        self._first: bytes | None = None
        self._failure_reported = False
        self._close_task: asyncio.Task[None] | None = None
        # Resolved once the hub gives up on the connection (a probe stops waiting).
        self._ending: asyncio.Future[None] | None = None

    def connection_ready(self, transport: asyncio.Transport) -> None:
        # The handshake's deadline runs from now; a slot is taken with the
        # request's first bytes (_first_bytes): a client that has not written
        # yet holds no slot that one whose request is waiting could use.
        self.context.deadlines.start(self)
        self._first = b""

    def _first_bytes(self, data: bytes) -> bool:
        """The request's first bytes: a slot, a place in line (keeping them,
        unread by websockets), or cut. True when they are to be read now."""
        self._first = None
        slots = self.context.handshakes
        if slots.acquire():
            self._in_handshake = True
            return True
        transport = self.transport
        if slots.wait(self, self._admitted):
            # Too many handshakes in progress: wait in line, unread, for a
            # slot (the handshake's deadline still runs).
            self._in_line = True
            self._first = data
            transport.pause_reading()
        else:
            transport.abort()  # the line is full too: cut at once
        return False

    def _admitted(self) -> bool:
        """A slot passed on from a finished handshake: read the request now —
        unless the client gave up while it waited (the slot then passes on and
        the connection is cut, its request never read nor upgraded)."""
        self._in_line = False
        transport = self.transport
        if transport.is_closing() or client_gone(transport):
            transport.abort()
            return False
        self._in_handshake = True
        self.loop.call_soon(self._read_kept)
        return True

    def _read_kept(self) -> None:
        """The bytes kept while in line, then what the socket has since."""
        data, self._first = self._first, None
        if self.transport.is_closing() or not data:
            return
        super().data_received(data)
        if not self.transport.is_closing():
            self.transport.resume_reading()

    def handshake_timed_out(self) -> None:
        """Past ``handshake_timeout``: cut (the handshake then ends)."""
        self.transport.abort()

    def handshake_over(self) -> None:
        context = self.context
        context.deadlines.done(self)
        if self._in_line:
            self._in_line = False
            context.handshakes.leave(self)
        if self._in_handshake:
            self._in_handshake = False
            context.handshakes.release()

    def preamble(self, data: bytes) -> None:
        # The handshake's 101: written with the first frames.
        self.start_outbox()
        self.outbox.push_preamble(data)

    def start_outbox(self) -> None:
        """Called once the handshake is done: the outbox starts writing.
        Again (the node calls it for every connection it runs) it does nothing."""
        if self.outbox.started:
            return
        self.handshake_over()
        self.forget_handshake(self.frame_limit)
        compress = None
        protocol = self.protocol
        if protocol.extensions or self.context.compress_frames:

            def compress(payload: bytes) -> list[bytes]:
                # permessage-deflate: every connection compresses with its own context.
                protocol.send_text(payload)
                return protocol.data_to_send()

        self.outbox.start(self.transport, compress)

    # ── the write path ───────────────────────────────────────────────────

    @property
    def preframed(self) -> bool:
        return self.outbox.preframed

    def send_frame(self, payload: bytes) -> bool:
        """Queue one message for this connection only."""
        return self.outbox.push(OutFrame(payload, preframe=self.outbox.preframed))

    def backlog(self) -> int:
        return self.outbox.backlog

    @property
    def frames_out(self) -> int:
        return self.outbox.frames_out

    def _slow_consumer(self) -> None:
        self.close_for(
            CloseCode.SLOW_CONSUMER,
            ErrorCode.SLOW_CONSUMER,
            f"outbound queue over {self.context.outbox_limit} bytes: reading too slowly",
        )

    def before_library_write(self) -> None:
        # websockets is about to write (pong, close frame…): our bytes first,
        # and the error event of a close over a bad frame before that close.
        outbox = self.outbox
        if outbox.pending_bytes:
            outbox.flush()
        if not self._failure_reported:
            sent = self.protocol.close_sent
            if sent is not None and sent.code in _FAILURE_CODES:
                self._report_failure(int(sent.code), sent.reason)

    def after_library_write(self) -> None:
        # After a close frame (ours or the peer's) only the handshake may
        # follow, and a server half-closes right after it: never write again.
        outbox = self.outbox
        if outbox.open and self.protocol.state in _ENDING:
            outbox.stop()
        elif outbox.started:
            # Its pongs count against the bound too: a client that pings and
            # never reads is a slow consumer, not a sink for the hub's memory.
            outbox.bounded()

    def pause_writing(self) -> None:
        super().pause_writing()
        self.outbox.paused = True

    def resume_writing(self) -> None:
        super().resume_writing()
        self.outbox.paused = False

    def data_received(self, data: bytes) -> None:
        first = self._first
        if first is not None:  # the request's first bytes, or more while in line
            if self._in_line:
                self._first = first + data
                return
            if not self._first_bytes(data):
                return
        # Bytes are not liveness (a frame dribbled a byte at a time would
        # keep a connection for ever): whole frames are, as they arrive
        # (frame_parsed).
        super().data_received(data)

    def frame_parsed(self) -> None:
        # Any inbound frame is liveness, control frames included: browsers and
        # client libraries keep connections alive with pings.
        session = self.session
        if session is not None:
            session.last_seen = self.loop.time()

    def connection_gone(self) -> None:
        self.handshake_over()
        if self.holds_ip_slot and self.client is not None:
            self.holds_ip_slot = False
            self.context.per_ip.release(self.client.ip)
        self.outbox.stop()
        self._end()

    def _end(self) -> None:
        ending = self._ending
        if ending is not None and not ending.done():
            ending.set_result(None)

    def _report_failure(self, code: int, reason: str) -> None:
        """websockets failed the connection over a bad frame and queued its
        close (1009, 1007, 1002) with ``reason``: the contract wants an
        ``error`` event first."""
        self._failure_reported = True
        if code == CloseCode.MESSAGE_TOO_BIG:
            message = f"frame too big: {reason}"
        elif code == CloseCode.INVALID_DATA:
            message = "invalid UTF-8 in a text frame"
        else:
            message = f"WebSocket protocol error: {reason}"
        counters = self.context.counters
        counters.closes[code] += 1
        counters.errors[ErrorCode.INVALID_REQUEST] += 1
        self.hub_close_code = int(code)
        self.outbox.push_last(OutFrame(codec.error(ErrorCode.INVALID_REQUEST, message)))

    # ── closing ──────────────────────────────────────────────────────────

    @property
    def closing(self) -> bool:
        return not self.outbox.open

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        """Send an ``error`` event, then close with ``code``. Does not block.

        Every close the hub initiates for a reason comes through here (or
        :meth:`_report_failure`), so this is where closes are counted.
        """
        if self.hub_close_code is not None:
            return
        self._failure_reported = True  # this close is the hub's own, reported here
        counters = self.context.counters
        counters.closes[int(code)] += 1
        counters.errors[error] += 1
        self.hub_close_code = int(code)
        if self.protocol.state is OPEN:
            self.outbox.push_last(OutFrame(codec.error(error, reason)))
        else:
            self.outbox.stop()
        if self.session is not None:
            self.session.begin_close()
        self._end()
        self._close_task = asyncio.get_running_loop().create_task(
            self.close_gracefully(code, reason)
        )

    async def close_gracefully(self, code: int, reason: str) -> None:
        """Closing handshake with a deadline; a peer that doesn't answer is cut."""
        self.outbox.open = False
        if self.hub_close_code is None:
            self.hub_close_code = int(code)
        reason = reason.encode()[:120].decode(errors="ignore")
        try:
            async with asyncio.timeout(self.close_timeout):
                await self.close(code, reason)
        except (TimeoutError, ConnectionClosed, OSError):
            self.transport.abort()

    def abort(self) -> None:
        self.outbox.stop()
        self.transport.abort()

    async def probe(self, timeout: float) -> bool:
        """Is the peer alive? A ping answered within ``timeout`` — and no
        longer than the hub keeps the connection: closing it (heartbeat
        timeout, abuse…) or losing it answers "dead" at once."""
        if self.protocol.state is not OPEN or self.closing or timeout <= 0:
            return False
        if self._ending is None:
            self._ending = self.loop.create_future()
        ending = self._ending

        async def pong() -> None:
            waiter = await self.ping()
            await waiter

        task = self.loop.create_task(pong())
        task.add_done_callback(_retrieve)
        try:
            done, _ = await asyncio.wait(
                {task, ending}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            task.cancel()
        return task in done and not task.cancelled() and task.exception() is None


_TCP_INFO = getattr(socket, "TCP_INFO", None)  # Linux
_ESTABLISHED = 1  # tcpi_state, the first byte of struct tcp_info


def client_gone(transport: asyncio.BaseTransport) -> bool:
    """Has the client closed or reset a connection the hub is not reading?

    A connection waiting in line is not read, so its reset or end of stream
    is not seen: the kernel's TCP state says it (one system call, made only
    when its turn comes). Where that is not known (no ``TCP_INFO``), it is
    taken as still there.
    """
    sock = transport.get_extra_info("socket")
    if sock is None or _TCP_INFO is None:
        return False
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)
    except (OSError, ValueError):
        return False
    return bool(info) and info[0] != _ESTABLISHED


def _retrieve(task: asyncio.Task[None]) -> None:
    """A probe's ping that lost the race may still fail: nobody awaits it."""
    if not task.cancelled():
        task.exception()
