"""The HTTP port's connection protocol: deadlines and fixed error pages.

The port defends itself, for every route, before and while any handler runs:
a request's line and headers must arrive within ``http_header_timeout``, its
body must keep up with ``http_body_min_rate`` after ``http_body_timeout`` —
else a fixed 408 and the connection is closed — and a kept-alive connection
idle for ``http_keepalive_timeout`` is closed. A request aiohttp cannot parse
is answered with a fixed page that repeats nothing of it: aiohttp's own
quotes the offending header line, API key or bearer token included.

aiohttp has no option for any of this, so the port runs its own subclass of
aiohttp's connection protocol (:class:`GuardedRequestHandler`), made by a
:class:`GuardedServer` that a :class:`GuardedAppRunner` puts around the
application — public hooks and overridable methods only, nothing of aiohttp
replaced at run time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import StreamReader, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import (
    BadStatusLine,
    InvalidHeader,
    LineTooLong,
    PayloadEncodingError,
)
from aiohttp.web_protocol import RequestHandler

from hub.core.counters import HttpStats

#: Status of a request whose head or body did not come in time.
REQUEST_TIMEOUT = 408


@dataclass(frozen=True, slots=True)
class HttpDeadlines:
    """How long the HTTP port waits for a client (the ``http_*`` settings)."""

    #: Request line and headers, from connecting or from their first byte.
    header_timeout: float = 10.0
    #: A body may lag this long behind ``body_min_rate``…
    body_timeout: float = 10.0
    #: …which it must otherwise keep up, in bytes per second.
    body_min_rate: int = 8192
    #: A kept-alive connection between requests.
    keepalive_timeout: float = 75.0

    @classmethod
    def from_settings(cls, s: Any) -> HttpDeadlines:
        return cls(
            s.http_header_timeout, s.http_body_timeout, s.http_body_min_rate,
            s.http_keepalive_timeout,
        )  # fmt: skip


def _fixed(status: int, text: str) -> bytes:
    body = f"{status} {HTTPStatus(status).phrase}: {text}\n".encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


#: What a client too slow with its request gets, written straight to the socket.
TIMED_OUT = _fixed(REQUEST_TIMEOUT, "the request did not arrive in time")
#: Time a timed-out client gets to take the 408 before its socket is aborted.
ABORT_AFTER = 5.0


def describe_parse_error(exc: BaseException | None) -> str:
    """Why a request could not be parsed, in fixed words (never the parser's
    message, which quotes the request)."""
    if isinstance(exc, LineTooLong):
        return "request line or header too long"
    if isinstance(exc, BadStatusLine):
        return "invalid request line"
    if isinstance(exc, InvalidHeader):
        return "invalid header"
    if isinstance(exc, PayloadEncodingError | web.RequestPayloadError):
        return "malformed request body"
    return "malformed request"


class GuardedRequestHandler(RequestHandler):
    """aiohttp's connection protocol with the HTTP port's deadlines and fixed
    error pages (made by :class:`GuardedServer`, one per connection).

    A connection is *idle* between requests until the first byte of the next
    one; aiohttp closes it after ``keepalive_timeout`` idle. From connecting,
    or from that first byte, the request's head must be complete within
    ``header_timeout``. Once the head is read, its body must arrive at
    ``body_min_rate`` after a grace of ``body_timeout`` (checked when it would
    be overdue, so a body costs one timer, moved as bytes come). A request
    too slow gets a fixed 408 — when nothing of an answer was written yet —
    and its connection is closed; a handler waiting for that body sees the
    client gone (:func:`hub.net.http.client_gone`). Once a request is answered,
    aiohttp drains what is left of its body for at most ``body_timeout``
    (its ``lingering_time``), then closes the connection.
    """

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        deadlines: HttpDeadlines,
        stats: HttpStats | None = None,
        **kwargs: Any,
    ):
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=deadlines.keepalive_timeout,
            # What is left of a body after its answer is drained for as long as a
            # body may lag, then the connection is closed.
            lingering_time=deadlines.body_timeout,
            **kwargs,
        )
        self.deadlines = deadlines
        #: Set once this connection was closed for being too slow.
        self.timed_out = False
        self._clock = loop
        self._stats = stats
        self._idle = False
        self._head_began = 0.0
        self._head_bytes = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None
        self._body_began = 0.0
        self._body_timer: asyncio.TimerHandle | None = None
        self._writer: AbstractStreamWriter | None = None
        self._gone: asyncio.Future[None] | None = None

    def gone(self) -> asyncio.Future[None]:
        """Done once the client's connection is lost (aiohttp does not cancel
        a handler for it: one that waits long, for an agent's answer, watches
        this instead)."""
        if self._gone is None:
            self._gone = self._clock.create_future()
            if self.transport is None or self.transport.is_closing():
                self._gone.set_result(None)
        return self._gone

    # ── aiohttp's protocol ──────────────────────────────────────────────

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._await_head(bytes_seen=False)

    def data_received(self, data: bytes) -> None:
        if self._idle:
            self._await_head(bytes_seen=True)
        elif self._head_timer is not None:
            self._head_bytes = True
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_head_timer()
        self._stop_body_timer()
        # aiohttp tells only a handler already running; one about to start would
        # read on and get a RuntimeError ("Connection closed."): tell the body.
        self._fail_body("Connection lost")
        super().connection_lost(exc)
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._answered()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's page would repeat ``message``, the parser's account of the
        # request — which quotes the offending header line, secrets and all.
        text = describe_parse_error(exc) if status == 400 else "the request was not carried out"
        return super().handle_error(
            request, status, exc, f"{status} {HTTPStatus(status).phrase}: {text}\n"
        )

    # ── the deadlines ───────────────────────────────────────────────────

    def request_started(self, payload: StreamReader, writer: AbstractStreamWriter) -> None:
        """The head of a request has been read (:class:`GuardedServer` calls this)."""
        self._stop_head_timer()
        self._idle = False
        self._writer = writer
        if payload.is_eof():
            return
        self._body, self._body_began = payload, self._clock.time()
        payload.on_eof(self._stop_body_timer)
        self._watch_body()

    def _await_head(self, *, bytes_seen: bool) -> None:
        self._idle = False
        self._head_began = self._clock.time()
        self._head_bytes = bytes_seen
        self._head_timer = self._clock.call_at(
            self._head_began + self.deadlines.header_timeout, self._head_overdue
        )

    def _head_overdue(self) -> None:
        self._head_timer = None
        # Nothing sent at all: just close, as an idle connection is closed.
        self._time_out(answer=self._head_bytes)
        if self._head_bytes and self._stats is not None:
            self._stats.header_timeouts += 1

    def _watch_body(self) -> None:
        body, d = self._body, self.deadlines
        if body is None or body.is_eof() or body.exception() is not None:
            return
        due = self._body_began + d.body_timeout + body.total_bytes / d.body_min_rate
        if due > self._clock.time():
            self._body_timer = self._clock.call_at(due, self._body_overdue)
        else:
            self._time_out(answer=self._writer is None or self._writer.output_size == 0)

    def _body_overdue(self) -> None:
        self._body_timer = None
        self._watch_body()

    def _answered(self) -> None:
        self._stop_body_timer()
        body, self._body, self._writer = self._body, None, None
        if body is None or body.is_eof():
            self._idle = True
        else:  # the rest of the body is drained first (or the connection closed)
            body.on_eof(self._become_idle)

    def _become_idle(self) -> None:
        self._idle = True

    def _time_out(self, *, answer: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.timed_out = True
        self._fail_body("Request timed out")  # its handler sees the client gone
        if answer:
            transport.write(TIMED_OUT)
        self.force_close()  # flushes the 408, then closes
        # A client that reads nothing could keep a closing socket forever.
        self._clock.call_later(ABORT_AFTER, transport.abort)

    def _fail_body(self, reason: str) -> None:
        body = self._body
        if body is not None and not body.is_eof() and body.exception() is None:
            body.set_exception(ConnectionResetError(reason))

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None


class GuardedServer(web.Server):
    """aiohttp's low-level server, making :class:`GuardedRequestHandler`\\ s and
    telling each when a request's head has been read."""

    def __init__(
        self,
        app_server: web.Server,
        deadlines: HttpDeadlines,
        stats: HttpStats | None,
        **handler_options: Any,
    ):
        self._app_factory = app_server.request_factory
        super().__init__(
            app_server.request_handler,
            request_factory=self._request,
            handler_cancellation=app_server.handler_cancellation,
        )
        self._handler_options = {"deadlines": deadlines, "stats": stats, **handler_options}

    def _request(
        self,
        message: Any,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        if isinstance(protocol, GuardedRequestHandler):
            protocol.request_started(payload, writer)
        return self._app_factory(message, payload, protocol, writer, task)

    def __call__(self) -> GuardedRequestHandler:
        return GuardedRequestHandler(self, loop=asyncio.get_running_loop(), **self._handler_options)


class GuardedAppRunner(web.AppRunner):
    """``web.AppRunner`` serving the application through a :class:`GuardedServer`.

    aiohttp has no setting for its connection protocol's class; a runner's
    server factory (``_make_server``, the abstract method every runner
    implements) is where one is chosen. The application is started and
    frozen by ``AppRunner`` as usual; only the server around it changes.
    """

    def __init__(
        self,
        app: web.Application,
        deadlines: HttpDeadlines,
        stats: HttpStats | None = None,
        **kwargs: Any,
    ):
        super().__init__(app, **kwargs)
        self._deadlines = deadlines
        self._stats = stats

    async def _make_server(self) -> web.Server:
        app_server = await super()._make_server()
        return GuardedServer(app_server, self._deadlines, self._stats, access_log=None)
