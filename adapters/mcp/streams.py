"""Notification streams: where ``notifications/tools/list_changed`` goes.

A client that can hear of changes holds an open ``text/event-stream``
response: on a session, ``GET /mcp`` (handshake revisions); on the stateless
revision, a ``subscriptions/listen`` request, whose stream opens with an
acknowledgement. When the agent tools change (the catalog's
``version``), every open stream on this node gets one notification — a
level trigger, "list again if you care", so a client whose own list did
not change loses nothing by it.

Bounded: at most ``max_streams`` open per node (one more → 503). A
keep-alive comment every ``keepalive`` seconds lets a stream notice that
its client went away or its session ended (on any node) and close.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from hub.adapter_host import client_gone

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}
KEEPALIVE = b": keep-alive\n\n"


class _Stream:
    __slots__ = ("session_id", "wake")

    def __init__(self, session_id: str | None):
        self.session_id = session_id
        self.wake = asyncio.Event()


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
        alive: Callable[[], Awaitable[bool]] | None = None,
    ) -> web.StreamResponse:
        """Hold ``request`` open as an event stream until the client goes, the
        session ends (``alive()`` says no) or the port closes; ``farewell`` is
        the last frame when the hub ends it. The caller has checked :attr:`full`."""
        stream = _Stream(session_id)
        self._open.add(stream)
        response = web.StreamResponse(headers={**SSE_HEADERS, **headers})
        try:
            await response.prepare(request)
            if first is not None:
                await response.write(first)
            seen = self._version()
            while not self._closing:
                try:
                    async with asyncio.timeout(self.keepalive):
                        await stream.wake.wait()
                except TimeoutError:
                    if client_gone(request) or (alive is not None and not await alive()):
                        break
                    await response.write(KEEPALIVE)
                    continue
                stream.wake.clear()
                if session_id is not None and stream.session_id is None:
                    break
                if self._version() != seen and not self._closing:
                    seen = self._version()
                    await response.write(notice())
            if self._closing and farewell is not None:
                await response.write(farewell)
            return response
        except ConnectionError:
            return response  # the client went away while we wrote: nobody to answer
        finally:
            self._open.discard(stream)
