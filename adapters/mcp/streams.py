"""Notification streams: where ``notifications/tools/list_changed`` goes, and a
session's ``notifications/resources/…``.

A client that can hear of changes holds an open ``text/event-stream``
response: on a session, ``GET /mcp`` (handshake revisions); on the stateless
revision, a ``subscriptions/listen`` request, whose stream opens with an
acknowledgement. When the agent tools change (the catalog's
``version``), every open stream on this node gets one notification — a
level trigger, "list again if you care", so a client whose own list did
not change loses nothing by it.

A session's stream also carries what is meant for that session alone
(:meth:`NotificationStreams.push`: a followed space was updated, the spaces
its caller may see changed). Those wait in the stream, keyed so that a
second notification of the same kind (the same resource) before the client
read the first is one notification: a slow client holds at most one per key.

Bounded: at most ``max_streams`` open per node (one more → 503). A
keep-alive comment every ``keepalive`` seconds lets a stream notice that
its client went away or its session ended (on any node) and close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from hub.adapter_host import Caller, client_gone

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}
KEEPALIVE = b": keep-alive\n\n"


class _Stream:
    __slots__ = ("caller", "pending", "resources_changed", "session_id", "wake")

    def __init__(
        self, session_id: str | None, caller: Caller | None, resources_changed: bytes | None
    ):
        self.session_id = session_id
        self.caller = caller
        #: Its ``notifications/resources/list_changed`` frame (None: not wanted).
        self.resources_changed = resources_changed
        self.wake = asyncio.Event()
        #: Notifications for this stream alone, by key (one per key waits).
        self.pending: dict[str, bytes] = {}


class NotificationStreams:
    def __init__(self, max_streams: int, keepalive: float, version: Callable[[], int]):
        self.max_streams = max_streams
        self.keepalive = keepalive
        self._version = version
        self._open: set[_Stream] = set()
        self._closing = False

    def __len__(self) -> int:
        return len(self._open)

    @property
    def full(self) -> bool:
        return len(self._open) >= self.max_streams

    def changed(self) -> None:
        """The agent tools changed: wake every stream."""
        for stream in self._open:
            stream.wake.set()

    def push(self, session_id: str, key: str, frame: bytes) -> None:
        """Send ``frame`` on the streams of ``session_id`` on this node (one
        waiting per ``key``)."""
        for stream in self._open:
            if stream.session_id == session_id:
                stream.pending[key] = frame
                stream.wake.set()

    def resources_changed(self, concerned: Callable[[Caller], bool], key: str) -> None:
        """Tell every stream that wants to hear of resource list changes and whose
        caller it ``concerned`` (its own ``list_changed`` frame)."""
        for stream in self._open:
            frame = stream.resources_changed
            if frame is not None and stream.caller is not None and concerned(stream.caller):
                stream.pending[key] = frame
                stream.wake.set()

    @property
    def callers(self) -> bool:
        """Is a stream that wants resource list changes open on this node?"""
        return any(stream.resources_changed is not None for stream in self._open)

    def end_session(self, session_id: str) -> None:
        """The session ended: its streams on this node close now."""
        for stream in self._open:
            if stream.session_id == session_id:
                stream.session_id = None
                stream.wake.set()

    def close_all(self) -> None:
        """The HTTP port is closing: every stream ends (its client reconnects)."""
        self._closing = True
        for stream in self._open:
            stream.wake.set()

    async def serve(
        self,
        request: web.Request,
        *,
        headers: dict[str, str],
        first: bytes | None,
        notice: Callable[[], bytes],
        farewell: bytes | None = None,
        session_id: str | None = None,
        caller: Caller | None = None,
        resources_changed: bytes | None = None,
        alive: Callable[[], Awaitable[bool]] | None = None,
        on_open: Callable[[], Awaitable[None]] | None = None,
        on_close: Callable[[], None] | None = None,
        on_tick: Callable[[], Awaitable[None]] | None = None,
    ) -> web.StreamResponse:
        """Hold ``request`` open as an event stream until the client goes, the
        session ends (``alive()`` says no) or the port closes; ``farewell`` is
        the last frame when the hub ends it. ``on_open`` runs once the stream
        is open, ``on_close`` when it closes, ``on_tick`` at each keep-alive.
        The caller has checked :attr:`full`."""
        stream = _Stream(session_id, caller, resources_changed)
        self._open.add(stream)
        response = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        try:
            await response.prepare(request)
            if first is not None:
                await response.write(first)
            if on_open is not None:
                await on_open()
            seen = self._version()
            while not self._closing:
                try:
                    async with asyncio.timeout(self.keepalive):
                        await stream.wake.wait()
                except TimeoutError:
                    if client_gone(request) or (alive is not None and not await alive()):
                        break
                    await response.write(KEEPALIVE)
                    if on_tick is not None:
                        await on_tick()
                    continue
                stream.wake.clear()
                if session_id is not None and stream.session_id is None:
                    break
                if self._version() != seen and not self._closing:
                    seen = self._version()
                    await response.write(notice())
                while stream.pending and not self._closing:
                    key = next(iter(stream.pending))
                    await response.write(stream.pending.pop(key))
            if self._closing and farewell is not None:
                await response.write(farewell)
            return response
        except ConnectionError:
            return response  # the client went away while we wrote: nobody to answer
        finally:
            self._open.discard(stream)
            if on_close is not None:
                on_close()
