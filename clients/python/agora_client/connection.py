"""The connection under a :class:`~agora_client.Client`: opened, read, kept alive, reopened.

Lifecycle: :meth:`Connection.connect` opens the connection
(:mod:`agora_client.handshake`) and waits for ``agent.registered``; a reader
task then hands every frame to ``_dispatch`` and a heartbeat task
(:mod:`agora_client.keepalive`) keeps the connection alive on the interval the
hub advertised. :meth:`Connection.close` is idempotent; ``async with`` does
both. Requests are matched to their answers by id (:mod:`agora_client.requests`).

With ``reconnect=True`` a lost connection (anything but a refusal that needs
a change on this side: close codes 4401, 4409, 4429, and 4403 — an operator
disconnected the agent) is reopened with jittered exponential backoff, and
what the client had set up on it is set up again (``_restore``: the last
``register()``, the spaces joined, from where the client was). Requests made
meanwhile wait for the connection up to their timeout; requests in flight
when it dropped fail with :class:`~agora_client.errors.ConnectionClosed` (they
may or may not have been carried out). Subscriptions carry on across
reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Self

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed as WsClosed

from agora_client.errors import (
    AgentExists,
    ConnectionClosed,
    ConnectionFailed,
    HubClientError,
    HubConnectionError,
    HubRejected,
    RateLimited,
    RequestTimeout,
    Unauthorized,
    Unavailable,
    closed,
)
from agora_client.handshake import describe, handshake, ws_url
from agora_client.keepalive import TERMINAL_CLOSE_CODES, Backoff, Traffic, keep_alive
from agora_client.models import Registration
from agora_client.requests import PendingRequests
from agora_client.streams import OutgoingStream, OutgoingStreams
from agora_client.subscriptions import Router
from agora_client.wire import MessageType

log = logging.getLogger("agora_client")


class Connection:
    """One agent's connection to a hub, reopened when lost (``reconnect``).

    The base of :class:`~agora_client.Client`, which documents the arguments.
    It owns what lives and dies with the connection: the requests in flight,
    the streams being published, and the subscriptions (ended when the
    client stops for good).
    """

    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        token: str | None,
        token_provider: Callable[[], Awaitable[str]] | None,
        reconnect: bool,
        backoff: Backoff | None,
        request_timeout: float,
        open_timeout: float,
        queue_size: int,
        max_size: int | None,
        connect_kwargs: dict[str, Any],
    ):
        self.url = ws_url(url)
        self.agent_id = agent_id
        self.reconnect = reconnect
        self.backoff = backoff or Backoff()
        self.request_timeout = request_timeout
        self.open_timeout = open_timeout
        self.queue_size = queue_size
        self.registration: Registration | None = None
        self.reconnects = 0
        self._token = token
        self._token_provider = token_provider
        self._refresher: asyncio.Task[None] | None = None
        self._max_size = max_size
        self._connect_kwargs = connect_kwargs
        self._agent_info: dict[str, Any] | None = None  # declared on every connection

        self._ws: ClientConnection | None = None
        self._generation = 0
        self._router = Router(queue_size)
        self._requests = PendingRequests()
        self._streams = OutgoingStreams()
        self._last_error: dict[str, Any] | None = None
        self._connected = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._reconnector: asyncio.Task[None] | None = None
        self._traffic = Traffic()
        self._closing = False
        self._closed = False
        self._stopped = asyncio.Event()  # set once the client is closed for good
        self._opening = False
        self._final_error: HubClientError | None = None

    # ── lifecycle ────────────────────────────────────────────────────────

    @property
    def connected(self) -> bool:
        """True while the connection is open and registered."""
        return self._connected.is_set()

    @property
    def closed_error(self) -> HubClientError | None:
        """Why the client stopped, when it stopped for a reason of its own."""
        return self._final_error

    async def connect(self) -> Self:
        """Open the connection and wait for ``agent.registered``.

        Raises :class:`ConnectionFailed` when the hub can't be reached or
        answers the upgrade with an HTTP error, and a :class:`HubRejected`
        subclass when it refuses the agent (:class:`Unauthorized`,
        :class:`AgentExists`, :class:`Unavailable`). The first connection is
        not retried, even with ``reconnect=True``.
        """
        if self._closed or self._closing:
            raise ConnectionClosed("client is closed")
        if self.connected:
            return self
        await self._open()
        self._connected.set()
        return self

    async def close(self) -> None:
        """Close the connection (1000) and end every subscription. Idempotent."""
        if self._closed:
            return
        self._closing = True
        self._connected.clear()
        for task in (self._reconnector, self._heartbeat, self._refresher):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        # asyncio.wait() neither raises the tasks' exceptions nor swallows
        # our own cancellation.
        tasks = {
            t
            for t in (self._reader, self._reconnector, self._heartbeat, self._refresher)
            if t is not None and t is not asyncio.current_task()
        }
        if tasks:
            await asyncio.wait(tasks)
        self._closed = True
        self._stopped.set()
        self._requests.fail_all(ConnectionClosed("client closed"))
        self._streams.connection_lost()
        self._router.end(self._final_error)

    async def aclose(self) -> None:
        """The same as :meth:`close`: the name Python's async resources share
        (``contextlib.aclosing`` calls it), kept beside the SDKs' common one."""
        await self.close()

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the connection is (again) open and registered."""
        if self._connected.is_set():
            return
        connected = asyncio.ensure_future(self._connected.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait({connected, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
            stopped.cancel()
        if not self._connected.is_set():
            raise self._final_error or ConnectionClosed("client is closed")

    # ── the wire ─────────────────────────────────────────────────────────

    async def _ready_ws(self) -> ClientConnection:
        if not self._connected.is_set():
            if self._closed or self._closing:
                raise self._final_error or ConnectionClosed("client is closed")
            if self._ws is None and self._reconnector is None:
                raise ConnectionClosed("not connected: use `async with Client(...)` or connect()")
            await self.wait_connected()
        assert self._ws is not None
        return self._ws

    async def _send(self, msg: dict[str, Any], *, generation: int | None = None) -> None:
        """Send one message on the current connection (``generation``: or fail)."""
        ws = await self._ready_ws()
        if generation is not None and generation != self._generation:
            raise ConnectionClosed("the connection this belonged to was lost")
        await self._send_on(ws, msg)

    async def _send_on(self, ws: ClientConnection, msg: dict[str, Any]) -> None:
        try:
            await ws.send(orjson.dumps(msg), text=True)
        except WsClosed as exc:
            raise self._closed_error(exc) from None
        self._traffic.last_tx = asyncio.get_running_loop().time()

    async def _request(self, msg: dict[str, Any], *, ws: ClientConnection | None = None) -> Any:
        """Send ``msg`` with a fresh ``id``; return the frame that answers it."""
        rid, fut = self._requests.open()
        msg["id"] = rid
        try:
            async with asyncio.timeout(self.request_timeout):
                conn = ws if ws is not None else await self._ready_ws()
                await self._send_on(conn, msg)
                return await fut
        except TimeoutError:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                raise fut.exception() from None  # type: ignore[misc]
            what = "answer to" if self.connected else "connection for"
            raise RequestTimeout(
                f"no {what} {msg.get('type')} within {self.request_timeout:g} s",
                request_id=rid,
            ) from None
        finally:
            self._requests.forget(rid)

    async def _barrier(self) -> None:
        """A heartbeat round trip: the hub answers frames in order, so every
        error for what was sent before has arrived once this returns."""
        await self._request({"type": MessageType.AGENT_HEARTBEAT})

    def _closed_error(self, exc: WsClosed | None = None) -> ConnectionClosed:
        if exc is not None:
            rcvd = exc.rcvd
        else:
            rcvd = self._ws.protocol.close_rcvd if self._ws is not None else None
        code = rcvd.code if rcvd is not None else None
        reason = rcvd.reason if rcvd is not None else ""
        return closed(code, reason, self._last_error)

    # ── the streams this client publishes (their StreamOwner) ────────────

    def _new_stream_prefix(self) -> str:
        return self._streams.new_prefix()

    def _open_stream(self, stream: OutgoingStream) -> int:
        self._streams.add(stream)
        return self._generation

    def _close_stream(self, stream: OutgoingStream) -> None:
        self._streams.remove(stream)

    # ── opening ──────────────────────────────────────────────────────────

    async def _open(self) -> None:
        """One connection attempt up to ``agent.registered``, then the background tasks."""
        if self._token_provider is not None:
            try:
                self._token = await self._token_provider()
            except Exception as exc:
                raise ConnectionFailed(f"token provider failed: {describe(exc)}") from None
        opened = await handshake(
            self.url,
            self.agent_id,
            token=self._token,
            agent_info=self._agent_info,
            open_timeout=self.open_timeout,
            max_size=self._max_size,
            connect_kwargs=self._connect_kwargs,
        )
        ws, registration = opened.ws, opened.registration
        self._generation += 1
        self._ws = ws
        self._last_error = None
        self.registration = registration
        loop = asyncio.get_running_loop()
        self._traffic.last_rx = self._traffic.last_tx = loop.time()
        self._opening = True
        self._reader = loop.create_task(self._read(ws, self._generation))
        heartbeat = self._heartbeat = loop.create_task(keep_alive(ws, registration, self._traffic))
        try:
            await self._restore(ws, opened.details_sent)
        except BaseException:
            # Not a loss to recover from: whoever called _open() handles it.
            self._ws = None
            heartbeat.cancel()
            ws.transport.abort()
            raise
        finally:
            self._opening = False
        if self._ws is not ws:  # lost right after the last rejoin
            raise ConnectionClosed("connection lost while rejoining")

    # What the layers above fill in:

    async def _restore(self, ws: ClientConnection, details_sent: bool) -> None:
        """Tell a new connection, before it is used, what the client had set up."""

    def _dispatch(self, f: dict[str, Any]) -> None:
        """Handle one frame from the hub, in the reader, in arrival order."""
        raise NotImplementedError

    # ── background tasks ─────────────────────────────────────────────────

    async def _read(self, ws: ClientConnection, generation: int) -> None:
        loop = asyncio.get_running_loop()
        error: WsClosed | None = None
        try:
            while True:
                raw = await ws.recv()
                self._traffic.last_rx = loop.time()
                try:
                    frame = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    log.warning("ignoring a frame that is not JSON")
                    continue
                if isinstance(frame, dict):
                    try:
                        self._dispatch(frame)
                    except Exception:
                        log.exception("failed to handle %s", frame.get("type"))
        except WsClosed as exc:
            error = exc
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reader failed")
            ws.transport.abort()
        finally:
            self._connection_lost(generation, error)

    def _connection_lost(self, generation: int, exc: WsClosed | None) -> None:
        if generation != self._generation or self._ws is None:
            return
        self._connected.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        err = self._closed_error(exc)
        self._ws = None
        self._requests.fail_all(err)
        self._streams.connection_lost()
        if self._closing or self._opening:
            return  # close() or the opener takes it from here
        close_code = err.close_code
        if self.reconnect and close_code not in TERMINAL_CLOSE_CODES:
            # The hub's own advice ("hub shutting down; reconnect") is what happens next.
            why = str(err).replace(err.message, err.message.removesuffix("; reconnect"), 1)
            log.warning("%s; reconnecting", why)
            self._router.reset()
            self._reconnector = asyncio.get_running_loop().create_task(self._reconnect(err))
            return
        log.info("%s", err)  # raised to whoever uses the client next
        self._finish(err)

    def _finish(self, err: HubClientError) -> None:
        """The connection is gone for good: end everything with ``err``."""
        self._final_error = err
        self._closing = True
        self._closed = True
        self._stopped.set()
        self._router.end(err)

    async def _reconnect(self, cause: HubClientError) -> None:
        attempt = 0
        last: HubClientError = cause
        while not self._closing:
            if self.backoff.max_attempts is not None and attempt >= self.backoff.max_attempts:
                log.warning("giving up reconnecting after %d attempt(s)", attempt)
                self._finish(last)
                return
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1
            try:
                await self._open()
            except (HubConnectionError, Unavailable, RateLimited, RequestTimeout) as exc:
                last = exc
                log.info("reconnect attempt %d failed: %s", attempt, exc)
                continue
            except (Unauthorized, AgentExists, HubRejected) as exc:
                log.warning("reconnect refused: %s", exc)
                self._finish(exc)
                return
            except Exception as exc:
                log.exception("reconnecting failed")
                self._finish(ConnectionClosed(f"reconnecting failed: {exc!r}"))
                return
            self.reconnects += 1
            self._reconnector = None
            self._connected.set()
            log.warning("reconnected to %s (attempt %d)", self.url, attempt)
            return
