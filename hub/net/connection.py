"""A hub connection: websockets' ServerConnection as a :class:`~hub.core.peer.Peer`.

websockets drives the protocol (handshake, parsing, pings, closing); the
hub's write path is the connection's :class:`~hub.net.outbox.Outbox`. This class
keeps the two in order — before websockets writes anything of its own (a
pong, a close frame) the pending outbox bytes go first, so no frame can
overtake another — and makes sure nothing is written once the closing
handshake began.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

from websockets.asyncio.server import Server, ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, PayloadTooBig
from websockets.http11 import Request, Response
from websockets.protocol import Protocol, State

from hub.core.authz import Grant
from hub.core.frames import OutFrame
from hub.core.peer import CleanedUp, PeerKind
from hub.net.handshake import ConnectionsPerIp, HandshakeDeadlines, HandshakeSlots
from hub.net.inbox import Inbox, ParserPosition, read_frames
from hub.net.outbox import Flusher, Outbox
from hub.net.sansio import HubProtocol
from hub.net.upgrade import accept, parse_request
from protocol import codec
from protocol.errors import CloseCode, ErrorCode

if TYPE_CHECKING:
    from hub.core.agent_record import AgentRecord
    from hub.core.counters import Counters
    from hub.core.session import Session
    from hub.net.proxies import ClientAddress
    from protocol.messages import AgentInfo

OPEN = State.OPEN
_HANDSHAKE_OVER = Request("", Headers())
_ENDING = (State.CLOSING, State.CLOSED)
# Closes websockets makes on its own when a peer breaks the protocol.
_FAILURE_CODES = frozenset(
    {int(CloseCode.PROTOCOL_ERROR), int(CloseCode.INVALID_DATA), int(CloseCode.MESSAGE_TOO_BIG)}
)


class HubConnection(ServerConnection):
    """One agent's WebSocket. Node-wide parts are class attributes set by the server."""

    kind = PeerKind.SOCKET
    shared = False
    flusher: Flusher
    counters: Counters
    handshakes: HandshakeSlots
    #: ``handshake_timeout`` (websockets' own ``open_timeout`` is off: one
    #: timer for all handshakes instead of one per connection).
    deadlines: HandshakeDeadlines
    per_ip: ConnectionsPerIp
    outbox_limit: int = 4 * 1024 * 1024
    #: permessage-deflate may be negotiated (``compression = deflate``).
    compress_frames: bool = False
    #: What runs a connection once it is open (the node's ConnectionLifecycle.handle),
    #: the handshake's ``process_request`` and its ``Server`` header: set by
    #: :func:`hub.net.listener.listen`.
    hub_handler: Callable[[HubConnection], Awaitable[None]]
    hub_process_request: Callable[..., Any] | None = None
    hub_server_header: str | None = None

    # The hub's state of a connection lives in slots, not in the instance
    # __dict__, which holds only what websockets keeps per connection (about
    # ten attributes: the rest are class attributes below). A dict past 30
    # keys would become a full table of its own — about 1.4 KiB each.
    __slots__ = (
        "_close_task",
        "_ending",
        "_failure_reported",
        "_first_read",
        "_frame_limit",
        "_frames_read",
        "_in_handshake",
        "_in_line",
        "_parser_at",
        "agent_id",
        "cleaned_up",
        "client",
        "connection_id",
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

    # What websockets' Connection.__init__ sets to the same value for every hub
    # connection (websockets 17; tests/unit/net/test_sansio.py compares them):
    # class attributes. Assignments later make instance attributes, as before.
    ping_interval = None  # the hub's heartbeat is a message
    ping_timeout = None
    max_queue_high: int | None = 16
    max_queue_low: int | None = None
    write_limit_high = 2**15
    write_limit_low: int | None = None
    #: The closing handshake's deadline, websockets' and the hub's (set by the server).
    close_timeout: float | None = 10.0
    logger: Any = logging.getLogger("websockets.server")  # no LoggerAdapter per connection
    request: Request | None = None
    response: Response | None = None
    close_deadline: float | None = None
    send_in_progress = None
    latency = 0.0
    keepalive_task = None
    connection_exc: BaseException | None = None
    paused = False
    #: The server's event loop (set by hub.net.listener).
    loop: asyncio.AbstractEventLoop

    def __init__(self, protocol: HubProtocol, server: Server) -> None:
        # The per-connection part of websockets' ServerConnection.__init__.
        self.protocol = protocol
        self.server = server
        loop = self.loop
        self.pending_pings = {}
        self.connection_lost_waiter = loop.create_future()
        # websockets only appends to, iterates and removes from its drain
        # waiters (hardly ever: the hub's writes do not wait): a list does
        # that as well, and an empty deque costs some 700 bytes per connection.
        self.drain_waiters = []  # type: ignore[assignment]
        self.request_rcvd = loop.create_future()
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
            self.flusher, self.counters, self.outbox_limit, on_overflow=self._slow_consumer
        )
        #: The fan-out hands frames straight to the outbox: one call per delivery.
        self.push: Callable[[OutFrame], bool] = self.outbox.push
        #: Set by the server when this connection holds a per-IP slot (:attr:`per_ip`).
        self.holds_ip_slot = False
        self._in_handshake = False
        self._in_line = False
        self._first_read = True
        # Whole plain frames are read by the hub (hub.net.inbox) once the
        # handshake is over, up to the size limit (None: no limit).
        self._frames_read = False
        self._frame_limit: int | None = None
        # Where websockets' frame parser is: known when its first byte was
        # known (a request the hub read whole), else None and the hub reads
        # no frame of this connection.
        self._parser_at: ParserPosition | None = None
        self._failure_reported = False
        self._close_task: asyncio.Task[None] | None = None
        # Resolved once the hub gives up on the connection (a probe stops waiting).
        self._ending: asyncio.Future[None] | None = None

    @property
    def id(self) -> Any:  # type: ignore[override]
        return self.protocol.id

    @property
    def debug(self) -> bool:  # type: ignore[override]
        return self.protocol.debug

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # websockets' own connection_made (websockets 17), with the hub's
        # Inbox where websockets puts an Assembler: then the handler task.
        transport = cast(asyncio.Transport, transport)
        self.recv_messages = Inbox(  # type: ignore[assignment]
            self.max_queue_high, self.max_queue_low,
            transport.pause_reading, transport.resume_reading,
        )  # fmt: skip
        transport.set_write_buffer_limits(self.write_limit_high, self.write_limit_low)
        self.transport = transport
        self.server.handler_tasks.add(self.loop.create_task(self._serve()))
        self.deadlines.start(self)
        slots = self.handshakes
        if slots.acquire():
            self._in_handshake = True
        elif slots.wait(self, self._admitted):
            # Too many handshakes in progress: wait in line, unread, for a
            # slot (the handshake's deadline still runs).
            self._in_line = True
            transport.pause_reading()  # type: ignore[attr-defined]
        else:
            # The line is full too: cut at once, before any read.
            transport.abort()  # type: ignore[attr-defined]

    async def _serve(self) -> None:
        """websockets' per-connection ``protocol_handler`` for a hub connection:
        the handshake, the hub's handler, the close. Without its
        ``asyncio.timeout`` (``open_timeout`` is off: the hub keeps
        ``handshake_timeout`` itself, :class:`HandshakeDeadlines`) and its
        keepalive task (off: the hub's heartbeat is a message)."""
        server = self.server
        try:
            await self.handshake(self.hub_process_request, None, self.hub_server_header)
            if self.protocol.state is not OPEN:
                self.transport.abort()
                return
            server.all_connections.add(self)
            try:
                try:
                    await self.hub_handler(self)
                except BaseException:
                    await self.close(CloseCode.INTERNAL_ERROR)
                    raise
                await self.close()
            except Exception:
                self.logger.error("connection handler failed", exc_info=True)
            finally:
                server.all_connections.discard(self)
        except Exception:
            # Don't leak connections when the handshake fails unexpectedly.
            self.transport.abort()
        finally:
            server.handler_tasks.discard(asyncio.current_task())  # type: ignore[arg-type]

    async def handshake(
        self,
        process_request: Any = None,
        process_response: Any = None,
        server_header: str | None = None,
    ) -> None:
        """websockets' opening handshake, without its costs a hub does not need.

        The hub's ``process_request`` is synchronous and it sets no
        ``process_response``, so an upgrade needs no ``asyncio.wait`` for the
        request (``connection_lost`` resolves ``request_rcvd`` too) and no
        async write context: the 101 goes to the outbox, which writes it with
        ``agent.registered`` in one ``transport.write`` when registration
        does not wait on the backplane. Anything else — a refusal, an HTTP
        answer, a hook of another shape — takes websockets' own path.
        """
        if not self.request_rcvd.done():
            await self.request_rcvd
        request = self.request
        if request is None:
            return  # the connection was lost before a request came
        if process_response is not None or process_request is None:
            await super().handshake(process_request, process_response, server_header)
            return
        try:
            response = process_request(self, request)
            if response is not None and inspect.isawaitable(response):
                response = await response
        except Exception as exc:
            # websockets logs it and answers 500, as it would have.
            await self._library_handshake(exc, server_header)
            return
        if response is not None or not self.server.is_serving():
            await self._library_handshake(response, server_header)
            return
        protocol = self.protocol
        # A plain upgrade is answered from a template (hub.net.upgrade);
        # accept() negotiates anything else, or refuses.
        answer = accept(request, server_header) if protocol.origins is None else None
        if answer is not None:
            if protocol.state is not State.CONNECTING:
                return
            protocol.state = OPEN
            self.start_outbox()
            self.outbox.push_preamble(answer)
            return
        self.response = response = protocol.accept(request)
        if response.status_code != 101:  # accept() refused: a 400 or 426
            # websockets adds the Server header to the answer it sends.
            await self._library_handshake(response, server_header)
            return
        if server_header is not None:
            response.headers["Server"] = server_header
        if protocol.state is not State.CONNECTING:
            return
        protocol.send_response(response)
        self.start_outbox()
        for data in protocol.data_to_send():
            self.outbox.push_preamble(data)

    async def _library_handshake(
        self, outcome: Response | Exception | None, server_header: str | None
    ) -> None:
        """websockets' handshake, with ``process_request`` already answered:
        ``outcome`` is its response (None to accept) or what it raised. The
        hook is not run twice."""

        def answered(_connection: Any, _request: Any) -> Response | None:
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        await super().handshake(answered, None, server_header)

    def _admitted(self) -> None:
        """A slot passed on from a finished handshake: read the request now."""
        self._in_line = False
        self._in_handshake = True
        transport = self.transport
        if not transport.is_closing():
            transport.resume_reading()  # type: ignore[attr-defined]

    def handshake_timed_out(self) -> None:
        """Past ``handshake_timeout``: cut (the handshake then ends)."""
        self.transport.abort()

    def _handshake_over(self) -> None:
        self.deadlines.done(self)
        if self._in_line:
            self._in_line = False
            self.handshakes.leave(self)
        if self._in_handshake:
            self._in_handshake = False
            self.handshakes.release()

    def start_outbox(self) -> None:
        """Called once the handshake is done: the outbox starts writing.
        Again (the node calls it for every connection it runs) it does nothing."""
        if self.outbox.started:
            return
        self._handshake_over()
        # The handshake was read (what the hub keeps of it is in token, client,
        # declared): let go, it stops costing ~2.5 KiB and a few objects for the
        # collector for the connection's life. websockets takes a request that
        # is not None as "the handshake is over": a shared empty one stands in.
        # When websockets' parser read the request it keeps the object itself:
        # its headers are emptied.
        if self.request is not None:
            self.request.headers.clear()
            self.request = _HANDSHAKE_OVER
        if self.response is not None:
            self.response.headers.clear()
            self.response = None
        compress = None
        if self.protocol.extensions or self.compress_frames:
            protocol = self.protocol

            def compress(payload: bytes) -> list[bytes]:
                # permessage-deflate: every connection compresses with its own context.
                protocol.send_text(payload)
                return protocol.data_to_send()

        self.outbox.start(self.transport, compress)
        protocol = self.protocol
        # websockets logs every frame at debug level: then its parser reads them all.
        if not protocol.debug:
            limit, fragment = protocol.max_message_size, protocol.max_fragment_size
            if fragment is not None and (limit is None or fragment < limit):
                limit = fragment
            self._frame_limit = limit
            self._frames_read = True

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
            f"outbound queue over {self.outbox_limit} bytes: reading too slowly",
        )

    def send_data(self) -> None:
        # websockets is about to write (pong, close frame…): our bytes first.
        outbox = self.outbox
        if outbox.pending_bytes:
            outbox.flush()
        if not self._failure_reported:
            sent = self.protocol.close_sent
            if sent is not None and sent.code in _FAILURE_CODES:
                self._report_failure(int(sent.code))
        super().send_data()
        # After a close frame (ours or the peer's) only the handshake may
        # follow, and a server half-closes right after it: never write again.
        if outbox.open and self.protocol.state in _ENDING:
            outbox.stop()

    def pause_writing(self) -> None:
        super().pause_writing()
        self.outbox.paused = True

    def resume_writing(self) -> None:
        super().resume_writing()
        self.outbox.paused = False

    def data_received(self, data: bytes) -> None:
        if self._first_read:
            self._first_read = False
            # A whole plain request in the first read skips websockets'
            # request parser (hub.net.upgrade); anything else goes to it.
            request = parse_request(data)
            if request is not None:
                protocol = self.protocol
                # From here on the protocol parses frames only.
                protocol.parser = Protocol.parse(protocol)
                next(protocol.parser)
                self._parser_at = ParserPosition()
                self.request = request
                self.request_rcvd.set_result(None)
                return
        # Any inbound frame is liveness, control frames included: browsers and
        # client libraries keep connections alive with pings. One clock read
        # per socket read.
        session = self.session
        if session is not None:
            session.last_seen = self.loop.time()
        position = self._parser_at
        if position is not None:
            protocol = self.protocol
            if (
                self._frames_read
                and position.between_frames
                and protocol.state is OPEN
                and protocol.current_size is None  # no fragmented message under way
            ):
                read = read_frames(data, self._frame_limit, self.recv_messages.put_message)
                if read == len(data):
                    return
                if read:
                    data = data[read:]
            position.passed(data)
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.request_rcvd.done():
            self.request_rcvd.set_result(None)  # the handshake stops waiting
        self._handshake_over()
        if self.holds_ip_slot and self.client is not None:
            self.holds_ip_slot = False
            self.per_ip.release(self.client.ip)
        self.outbox.stop()
        self._end()
        super().connection_lost(exc)
        # websockets leaves the protocol in a cycle (its parser generator holds
        # it): broken here, a closed connection is freed by reference counting
        # at once instead of waiting, with all it holds, for the cycle
        # collector — a storm's worth of connections at a time.
        self.protocol.parser = None  # receive_eof() ran: no more input

    def _end(self) -> None:
        ending = self._ending
        if ending is not None and not ending.done():
            ending.set_result(None)

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
        frame = OutFrame(codec.error(ErrorCode.INVALID_REQUEST, message))
        self.outbox.push_last(frame)

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
        self.counters.closes[int(code)] += 1
        self.counters.errors[error] += 1
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


def _retrieve(task: asyncio.Task[None]) -> None:
    """A probe's ping that lost the race may still fail: nobody awaits it."""
    if not task.cancelled():
        task.exception()
