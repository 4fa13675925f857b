"""``notifications/progress`` while a streamed reply arrives, and the calls a client may cancel.

A ``tools/call`` whose params carry ``_meta.progressToken`` from a client
that accepts ``text/event-stream`` is answered as an event stream as soon as
the reply starts streaming: each delta of the reply is one
``notifications/progress`` (``progress`` counts the deltas so far, ``message``
is the delta's text), and the result is the stream's last event. A reply that
does not stream is answered as any other call (one JSON or SSE body).

:class:`RunningCalls` holds the ``tools/call`` requests running on this node
by who sent them (caller, session, JSON-RPC id), so that the same client's
``notifications/cancelled`` can cancel one: its request's task is cancelled
(:class:`RunningCall`), and the ask under it tells the answering agent to
stop (``adapters.kit.asking``). A cancel for a call not running on the node
that got it is passed to every node (:meth:`~adapters.mcp.calllog.CallLog.cancel`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from adapters.mcp import http
from adapters.mcp.calllog import call_digest
from adapters.mcp.streams import SSE_HEADERS
from protocol.mcp import jsonrpc

PROGRESS = "notifications/progress"
#: Longest delta text put into a progress notification's ``message``.
MAX_MESSAGE = 4096


def progress_token(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token if not isinstance(token, str) or len(token) <= jsonrpc.MAX_ID else None


class Progress:
    """The progress of one call, sent on its response once the reply streams."""

    def __init__(self, request: web.Request, token: str | int, headers: dict[str, str] | None):
        self.request = request
        self.token = token
        self.headers = headers or {}
        self.sent = 0
        self.response: web.StreamResponse | None = None

    async def delta(self, text: str) -> None:
        """One delta of the reply arrived."""
        if self.response is None:
            self.response = web.StreamResponse(headers={**SSE_HEADERS, **self.headers})
            await self.response.prepare(self.request)
        self.sent += 1
        params = {"progressToken": self.token, "progress": self.sent, "message": text[:MAX_MESSAGE]}
        await self.response.write(jsonrpc.sse_event(jsonrpc.notification(PROGRESS, params)))

    async def answer(self, message: dict[str, Any]) -> web.StreamResponse:
        """The call's answer: the last event of the stream, when one was opened."""
        if self.response is None:
            return http.answer(self.request, message, headers=self.headers)
        try:
            await self.response.write(jsonrpc.sse_event(message))
            await self.response.write_eof()
        except ConnectionError:
            pass  # the client went away: nobody to answer
        return self.response


def wants_progress(request: web.Request, params: dict[str, Any]) -> str | int | None:
    """The call's progress token, when its client can hear progress (it
    accepts an event stream)."""
    token = progress_token(params)
    if token is None or "text/event-stream" not in request.headers.get("Accept", ""):
        return None
    return token


CallKey = tuple[str, str, str | int]


class RunningCall:
    """One ``tools/call`` running in its request's own task, which only the
    client may stop: by ``notifications/cancelled`` or by going away. The stop
    cancels the task once, and is told apart from any other cancellation (the
    hub shutting down), which is never taken back."""

    __slots__ = ("_over", "_stopping", "task")

    def __init__(self, task: asyncio.Task[Any]):
        self.task = task
        self._stopping = False  # our cancellation, not taken back yet
        self._over = False

    def stop(self, reason: str) -> None:
        if not (self._stopping or self._over):
            self._stopping = True
            self.task.cancel(reason)

    def client_gone(self, _gone: asyncio.Future[None]) -> None:
        """The done callback of the client's connection going away."""
        self.stop("the client went away")

    def stopped(self) -> bool:
        """In the task, which caught ``CancelledError``: was that this stop
        alone? (It is then taken back; one from elsewhere stands.)"""
        return self._take_back() and not self.task.cancelling()

    def done(self) -> None:
        """The call is over: nothing stops it any more, and a stop it
        swallowed is taken back."""
        self._over = True
        self._take_back()

    def _take_back(self) -> bool:
        if not self._stopping:
            return False
        self._stopping = False
        self.task.uncancel()
        return True


class RunningCalls:
    """The ``tools/call`` requests running on this node, by the digest of their
    (caller, session, id) key: a cancel from another node names the digest."""

    def __init__(self) -> None:
        self._calls: dict[str, RunningCall] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, key: CallKey, call: RunningCall) -> str:
        """Register ``call``; its digest, for :meth:`remove`."""
        digest = call_digest(*key)
        self._calls[digest] = call
        return digest

    def remove(self, digest: str, call: RunningCall) -> None:
        if self._calls.get(digest) is call:
            del self._calls[digest]

    def cancel(self, digest: str) -> bool:
        """Stop the call whose key has this digest; whether one was running here."""
        call = self._calls.get(digest)
        if call is None:
            return False
        call.stop("the client cancelled the call")
        return True
