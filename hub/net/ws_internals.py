"""Everything the hub knows of websockets' private API (websockets 17), and nothing else.

The hub builds and drives websockets' connections itself where that was
measured to pay (docs/performance.md, "What each optimisation bought"); each
such piece relies on how websockets 17 works inside, not on its documented
API. This module is the only one of the hub that does, and
tests/unit/net/test_ws_internals.py checks each reliance by behaviour, so a
websockets release that changes one fails there:

- :class:`HubProtocol` — websockets' ``ServerProtocol`` with its
  per-connection constants on the class, its UUID drawn when first read, its
  request parser started when first fed, a request that came whole in its
  first read parsed in one pass (:func:`plain_request`), the ``bearer.*`` subprotocol
  chosen from an attribute, and the 101 answering a plain upgrade request
  written as websockets' ``accept()`` and ``send_response()`` write it
  (:meth:`HubProtocol.upgrade`).
- :class:`WebSocketsConnection` — websockets' ``ServerConnection`` as the
  hub builds it (no ``Connection.__init__``: the per-connection part only),
  runs it (its own task, not ``serve()``'s ``protocol_handler``; its own
  opening handshake, the 101 written with the first frames) and reads it:
  whole plain frames are read by the hub (:mod:`hub.net.inbox`) only where
  websockets' frame parser is between frames
  (:class:`~hub.net.inbox.ParserPosition`, which follows every byte handed
  to websockets from the first after the request); every frame websockets'
  parser completes passes its ``process_event``
  (:meth:`~WebSocketsConnection.frame_parsed`). The hub's own write path is
  ordered with websockets' writes through :meth:`~WebSocketsConnection.send_data`.
- :func:`make_server` — websockets' ``Server`` around the hub's connection
  factory; :func:`handler_tasks` — its connections' tasks.

The hub's own parts of a connection (its outbox, limits, closes) are
:class:`hub.net.connection.HubConnection`, which uses only the hooks below
and websockets' documented API.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any, cast

from websockets.asyncio.messages import MAX_FRAGMENTS
from websockets.asyncio.server import Server, ServerConnection
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.extensions import ServerExtensionFactory
from websockets.http11 import (
    MAX_LINE_LENGTH,
    MAX_NUM_HEADERS,
    Request,
    Response,
    _token_re,
    _value_re,
)
from websockets.protocol import CONNECTING, SERVER, Protocol, State
from websockets.server import ServerProtocol
from websockets.streams import StreamReader
from websockets.typing import LoggerLike, Subprotocol
from websockets.utils import accept_key

from hub.net.inbox import Inbox, ParserPosition, read_frames

__all__ = [
    "ConnectionClosed",
    "HubProtocol",
    "WebSocketsConnection",
    "handler_tasks",
    "make_server",
]

OPEN = State.OPEN
#: websockets takes a request that is not None as "the handshake is over": a
#: shared empty one stands in once the hub let go of the real one.
_HANDSHAKE_OVER = Request("", Headers())


class HubProtocol(ServerProtocol):
    """websockets' ``ServerProtocol`` for one hub connection.

    ``ServerProtocol.__init__`` sets some thirty attributes per connection,
    most to the same value every time, draws a UUID (a ``getrandom`` system
    call) that only its debug lines read, and starts its request parser;
    ``serve()`` wraps ``select_subprotocol`` in a closure per connection.
    Here the constants are class attributes, the UUID is drawn when first
    read, the parser starts when first fed, and the ``bearer.*`` subprotocol
    comes from an attribute the handshake sets.
    """

    side = SERVER
    current_size: int | None = None
    expect_continuation_frame = False
    origin = None
    extensions: Any = ()  # only ever replaced by accept(), never appended to
    subprotocol = None
    close_rcvd = None
    close_sent = None
    close_rcvd_then_sent = None
    handshake_exc = None
    eof_sent = False
    parser_exc = None
    origins = None  # the hub checks Origin itself (hub.net.handshake.OriginPolicy)
    available_subprotocols = None
    accept_called = False
    #: The ``bearer.*`` subprotocol the token came in: the only one ever selected.
    bearer_subprotocol: str | None = None

    def __init__(
        self,
        *,
        extensions: Sequence[ServerExtensionFactory] | None,
        max_size: int | None,
        logger: LoggerLike,
        state: State = CONNECTING,
    ) -> None:
        self.logger = logger
        self.debug = logger.isEnabledFor(logging.DEBUG)
        self.state = state
        self.max_message_size = max_size
        self.max_fragment_size = None
        self.available_extensions = extensions
        self.reader = StreamReader()
        self.events: list[Any] = []
        self.writes: list[bytes] = []
        self.parser: Any = None  # the request parser, once websockets' parser is fed

    @property
    def id(self) -> uuid.UUID:  # type: ignore[override]
        """websockets' connection id (its debug lines), drawn when first read."""
        ident = self.__dict__.get("_id")
        if ident is None:
            ident = self.__dict__["_id"] = uuid.uuid4()
        return ident

    def _start(self) -> None:
        self.parser = self.parse()
        next(self.parser)

    def receive_data(self, data: bytes | bytearray) -> None:
        if self.parser is None:
            self._start()
        super().receive_data(data)

    def receive_eof(self) -> None:
        if self.parser is None and not self.reader.eof:
            self._start()
        super().receive_eof()

    def parse(self) -> Generator[None]:
        """websockets' parser: the request, then frames. A request that came
        whole with the first bytes (as clients send it) is read by
        :func:`plain_request` in one pass, and not kept by the parser for the
        connection's life; any other, and every request at debug (websockets
        logs each header it reads), by websockets' own ``ServerProtocol.parse``,
        from the first byte."""
        if self.state is CONNECTING and not self.debug:
            yield  # until the first bytes (or the end of the stream) came
            request = plain_request(self.reader.buffer)
            if request is not None:
                self.events.append(request)
                del request
                yield from Protocol.parse(self)
                return
        yield from super().parse()

    def select_subprotocol(self, subprotocols: Sequence[Subprotocol]) -> Subprotocol | None:
        chosen = self.bearer_subprotocol
        return chosen if chosen is not None and chosen in subprotocols else None  # type: ignore[return-value]

    def upgrade(self, request: Request, server_header: str | None) -> bytes | None:
        """The 101 answering ``request``, byte for byte as websockets'
        ``accept()`` then ``send_response()`` write it (``Server`` last, as the
        handshake adds it), with the protocol left OPEN as they leave it — when
        the request is the plain kind: a GET over HTTP/1.1 with one
        ``Connection: Upgrade``, one ``Upgrade: websocket``, one valid key,
        version 13, at most one ``Origin``, no subprotocol offered and no
        extension to negotiate. None for anything else (nothing is changed):
        websockets' ``accept()`` then checks it, and answers or refuses it.

        websockets builds a ``Headers`` and a ``Response`` for the answer, parses
        the ``Connection`` and ``Upgrade`` values with its header grammar and
        formats the ``Date`` anew: a tenth of an upgrade's cost in a fill of
        idle agents. Checked against websockets' own answer by
        tests/unit/net/test_ws_internals.py."""
        if self.debug or self.state is not CONNECTING:
            return None  # at debug, websockets logs every header it answers
        if request.method != "GET" or request.protocol != "HTTP/1.1":
            return None
        headers = request.headers
        get = headers.get_all
        if not _is_one(get("Connection"), "upgrade") or not _is_one(get("Upgrade"), "websocket"):
            return None
        keys, origins = get("Sec-WebSocket-Key"), get("Origin")
        if len(keys) != 1 or get("Sec-WebSocket-Version") != ["13"] or len(origins) > 1:
            return None
        if get("Sec-WebSocket-Protocol") or (
            self.available_extensions and get("Sec-WebSocket-Extensions")
        ):
            return None
        key = keys[0]
        try:
            if len(base64.b64decode(key.encode(), validate=True)) != 16:
                return None
        except binascii.Error:
            return None
        self.accept_called = True
        self.origin = origins[0] if origins else None  # type: ignore[assignment]
        answer = (
            f"HTTP/1.1 101 Switching Protocols\r\nDate: {http_date()}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_key(key)}\r\n"
        )
        if server_header is not None:
            answer += f"Server: {server_header}\r\n"
        self.state = OPEN
        self.logger.info("connection open")
        return (answer + "\r\n").encode()


#: The most a request may take (websockets' bounds: lines, each with its CRLF).
_REQUEST_MAX = (MAX_NUM_HEADERS + 2) * MAX_LINE_LENGTH


def plain_request(buffer: bytearray) -> Request | None:
    """The request at the start of ``buffer``, taken from it, when it is there
    whole and websockets' ``Request.parse`` would read it without complaint —
    read as it reads it: every line ends with CRLF and fits its bound, at most
    its number of headers, a request line of three parts with HTTP/1.1 or 1.0
    in ASCII, header names tokens and values of its allowed octets (decoded as
    ISO-8859-1), no ``Transfer-Encoding``, no body. None, with ``buffer``
    untouched, for anything else: websockets then reads it and answers as it
    always did. Checked against ``Request.parse`` by
    tests/unit/net/test_ws_internals.py (examples and generated requests)."""
    end = buffer.find(b"\r\n\r\n", 0, _REQUEST_MAX)
    if end < 0:
        return None
    block = bytes(buffer[:end])
    if block.count(b"\n") != block.count(b"\r\n"):
        return None  # a line ending in a bare LF
    lines = block.split(b"\r\n")
    if len(lines) > MAX_NUM_HEADERS + 1 or max(map(len, lines)) + 2 > MAX_LINE_LENGTH:
        return None
    parts = lines[0].split(b" ", 2)
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    method, path, protocol = parts
    if not (method.isascii() and path.isascii()):
        return None
    headers = Headers()
    token, value_octets = _token_re.fullmatch, _value_re.fullmatch
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not token(name):
            return None
        value = value.strip(b" \t")
        if not value_octets(value):
            return None
        headers.set_insecure(name.decode("ascii"), value.decode("iso-8859-1"))
    if "Transfer-Encoding" in headers or not set(headers.get_all("Content-Length")) <= {"0"}:
        return None
    del buffer[: end + 4]
    return Request(path.decode("ascii"), headers, method.decode("ascii"), protocol.decode("ascii"))


def _is_one(values: list[str], expected: str) -> bool:
    """One header value, ``expected`` in any case (websockets' own check
    takes that, and more: a list of options)."""
    return len(values) == 1 and values[0].lower() == expected


#: The ``Date`` of the answers sent within one second: (that second, its text).
_date: list[Any] = [-1, ""]


def http_date() -> str:
    """``email.utils.formatdate(usegmt=True)`` (websockets' ``Date``), formatted
    once a second."""
    second = int(time.time())
    if _date[0] != second:
        _date[:] = [second, email.utils.formatdate(second, usegmt=True)]
    return _date[1]  # type: ignore[no-any-return]


class WebSocketsConnection(ServerConnection):
    """websockets' ``ServerConnection`` as the hub builds, runs and reads it.

    Subclasses give :meth:`connection_ready`, :meth:`before_library_write`,
    :meth:`after_library_write`, :meth:`handshake_over`,
    :meth:`connection_gone` and :meth:`frame_parsed` (below), and ``context`` (a
    :class:`~hub.net.connection.ConnectionContext`).
    """

    #: The server's hub.net.connection.ConnectionContext (handler,
    #: process_request, server_header, close_timeout are read here).
    context: Any

    # What websockets' Connection.__init__ sets to the same value for every
    # hub connection: class attributes (an assignment later makes an
    # instance attribute, as before).
    ping_interval = None  # the hub's heartbeat is a message
    ping_timeout = None
    max_queue_high: int | None = 16
    max_queue_low: int | None = None
    write_limit_high = 2**15
    write_limit_low: int | None = None
    logger: Any = logging.getLogger("websockets.server")  # no LoggerAdapter per connection
    request: Request | None = None
    response: Response | None = None
    close_deadline: float | None = None
    send_in_progress = None
    latency = 0.0
    keepalive_task = None
    connection_exc: BaseException | None = None
    paused = False

    def __init__(
        self, protocol: HubProtocol, server: Server, loop: asyncio.AbstractEventLoop
    ) -> None:
        # The per-connection part of websockets' ServerConnection.__init__.
        self.protocol = protocol
        self.server = server
        self.loop = loop
        self.pending_pings = {}
        self.connection_lost_waiter = loop.create_future()
        # websockets only appends to, iterates and removes from its drain
        # waiters (hardly ever: the hub's writes do not wait): a list does
        # that as well, and an empty deque costs some 700 bytes per connection.
        self.drain_waiters = []  # type: ignore[assignment]
        self.request_rcvd = loop.create_future()

    # The slots of a subclass's own state: websockets' instance __dict__ then
    # holds only its own (about ten keys: the rest are class attributes).
    __slots__ = ("_first_read", "_frame_limit", "_frames_read", "_parser_at")

    @property
    def close_timeout(self) -> float | None:  # type: ignore[override]
        """The closing handshake's deadline, websockets' and the hub's."""
        return self.context.close_timeout

    @property
    def id(self) -> Any:  # type: ignore[override]
        return self.protocol.id

    @property
    def debug(self) -> bool:  # type: ignore[override]
        return self.protocol.debug

    # ── hooks for the hub ────────────────────────────────────────────────

    def connection_ready(self, transport: asyncio.Transport) -> None:
        """The socket is accepted and the connection's task runs."""

    def before_library_write(self) -> None:
        """websockets is about to write (its handshake answer, a pong, a close)."""

    def after_library_write(self) -> None:
        """websockets wrote."""

    def handshake_over(self) -> None:
        """The opening handshake ended (whichever way)."""

    def connection_gone(self) -> None:
        """The socket is closed (before websockets' own clean-up)."""

    def frame_parsed(self) -> None:
        """A whole frame arrived: websockets' parser completed one (a control
        frame — ping, pong, close — or a data frame the hub's reader left to
        it: a fragment, a 64-bit length…), or the hub's reader took one or
        more in one socket read."""

    def preamble(self, data: bytes) -> None:
        """The handshake's answer, for the hub to write before its first frames."""
        raise NotImplementedError

    # ── being accepted and run ───────────────────────────────────────────

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # websockets' own connection_made, with the hub's Inbox where
        # websockets puts an Assembler; then the connection's task.
        transport = cast(asyncio.Transport, transport)
        self.recv_messages = Inbox(  # type: ignore[assignment]
            self.max_queue_high, self.max_queue_low,
            transport.pause_reading, transport.resume_reading, MAX_FRAGMENTS,
        )  # fmt: skip
        transport.set_write_buffer_limits(self.write_limit_high, self.write_limit_low)
        self.transport = transport
        self._first_read = True
        self._frames_read = False
        self._frame_limit: int | None = None
        # Where websockets' frame parser is: known from the first byte after
        # a request the hub read whole, else None and the hub reads no frame.
        self._parser_at: ParserPosition | None = None
        self.server.handler_tasks.add(self.loop.create_task(self._serve()))
        self.connection_ready(transport)

    async def _serve(self) -> None:
        """websockets' ``protocol_handler`` for a hub connection: the
        handshake, the hub's handler, the close — without its
        ``asyncio.timeout`` (the hub keeps ``handshake_timeout`` itself) and
        its keepalive (off: the hub's heartbeat is a message)."""
        server = self.server
        context = self.context
        try:
            await self.handshake(context.process_request, None, context.server_header)
            if self.protocol.state is not OPEN:
                self.transport.abort()
                return
            server.all_connections.add(self)
            try:
                try:
                    await context.handler(self)  # type: ignore[arg-type]
                except BaseException:
                    await self.close(1011)
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
        async write context: websockets' ``accept()`` answers, and its 101
        goes to :meth:`preamble`, written with the first frames. Anything
        else — a refusal, an HTTP answer, a hook of another shape — takes
        websockets' own path.
        """
        if not self.request_rcvd.done():
            await self.request_rcvd
        request = self.request
        if request is None or self.transport.is_closing():
            # The connection was lost before a request came, or with it (the
            # client gave up waiting): nothing is checked, nothing upgraded.
            return
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
        answer = protocol.upgrade(request, server_header)
        if answer is not None:
            self.preamble(answer)
            return
        self.response = response = protocol.accept(request)
        if response.status_code != 101:  # accept() refused: a 400 or 426
            # websockets adds the Server header to the answer it sends.
            await self._library_handshake(response, server_header)
            return
        if server_header is not None:
            response.headers["Server"] = server_header
        if protocol.state is not CONNECTING:
            return
        protocol.send_response(response)
        for data in protocol.data_to_send():
            self.preamble(data)

    async def _library_handshake(
        self, outcome: Response | Exception | None, server_header: str | None
    ) -> None:
        """websockets' handshake, with ``process_request`` already answered:
        ``outcome`` is its response (None to accept) or what it raised."""

        def answered(_connection: Any, _request: Any) -> Response | None:
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        await super().handshake(answered, None, server_header)

    def forget_handshake(self, read_frames_limit: int | None) -> None:
        """The handshake is over and the hub kept what it needs of it: let go
        of the request and the answer (~2.5 KiB and a few objects for the
        collector for the connection's life); from here on the hub reads whole
        plain frames of up to ``read_frames_limit`` bytes itself — unless
        websockets logs every frame (its logger at DEBUG), when its parser
        reads them all."""
        if self.request is not None:
            # websockets keeps the request its parser read: emptied.
            self.request.headers.clear()
            self.request = _HANDSHAKE_OVER
        if self.response is not None:
            self.response.headers.clear()
            self.response = None
        if not self.protocol.debug:
            self._frame_limit = read_frames_limit
            self._frames_read = True

    @property
    def frame_limit(self) -> int | None:
        """The size limit of a frame (None: none), websockets' own."""
        protocol = self.protocol
        limit, fragment = protocol.max_message_size, protocol.max_fragment_size
        if fragment is not None and (limit is None or fragment < limit):
            limit = fragment
        return limit

    # ── reading ──────────────────────────────────────────────────────────

    def data_received(self, data: bytes) -> None:
        position = self._parser_at
        if position is None:
            super().data_received(data)
            if self._first_read:
                self._first_read = False
                # websockets read the request. An HTTP request ends at its first
                # empty line: when the first read ends there, websockets' frame
                # parser starts at the next read's first byte, and the hub can
                # follow it from there (else it never reads a frame itself).
                if self.request is not None and data.find(b"\r\n\r\n") == len(data) - 4:
                    self._parser_at = ParserPosition()
            return
        protocol = self.protocol
        if (
            self._frames_read
            and position.between_frames
            and protocol.state is OPEN
            and protocol.current_size is None  # no fragmented message under way
        ):
            read = read_frames(data, self._frame_limit, self.recv_messages.put_message)  # type: ignore[attr-defined]
            if read:
                # Liveness as the frames arrive, not when the handler takes
                # them: one clock read per socket read that completed frames.
                self.frame_parsed()
                if read == len(data):
                    return
                data = data[read:]
        position.passed(data)
        super().data_received(data)

    def process_event(self, event: Any) -> None:
        # websockets hands each event its parser completed here (its
        # data_received, eof_received): the request, then whole frames.
        if self.request is not None:
            self.frame_parsed()
        super().process_event(event)

    async def receive(self) -> str | bytes | None:
        """The next message; None once the connection is closed."""
        try:
            return await self.recv()
        except ConnectionClosed:
            return None

    # ── writing ──────────────────────────────────────────────────────────

    def send_data(self) -> None:
        # websockets writes everything of its own through here.
        self.before_library_write()
        super().send_data()
        self.after_library_write()

    # ── the end ──────────────────────────────────────────────────────────

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.request_rcvd.done():
            self.request_rcvd.set_result(None)  # the handshake stops waiting
        self.connection_gone()
        super().connection_lost(exc)
        # websockets leaves the protocol in a cycle (its parser generator holds
        # it): broken here, a closed connection is freed by reference counting
        # at once instead of waiting, with all it holds, for the cycle
        # collector — a storm's worth of connections at a time.
        self.protocol.parser = None  # receive_eof() ran: no more input


def make_server(
    factory: Callable[[Server, asyncio.AbstractEventLoop], WebSocketsConnection],
    create_server: Callable[
        [Callable[[], WebSocketsConnection]], Coroutine[Any, Any, asyncio.Server]
    ],
    logger: LoggerLike,
) -> Server:
    """websockets' ``Server`` (its connection sets, ``close()``,
    ``wait_closed()``) around ``create_server(protocol_factory)``, whose
    protocol factory builds each connection as ``factory(server, loop)``.
    Each connection runs its own task (:meth:`WebSocketsConnection._serve`)."""

    async def start() -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await create_server(lambda: factory(server, loop))

    async def unused(_connection: ServerConnection) -> None:  # pragma: no cover
        raise AssertionError("hub connections run their own task")

    server = Server(start, unused, logger)
    return server


def handler_tasks(server: Server) -> set[asyncio.Task[None]]:
    """The tasks running ``server``'s connections (to cancel at shutdown)."""
    return server.handler_tasks
