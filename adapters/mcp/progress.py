"""``notifications/progress`` while a streamed reply arrives, and the calls a client may cancel.

A ``tools/call`` whose params carry ``_meta.progressToken`` from a client
that accepts ``text/event-stream`` is answered as an event stream as soon as
the reply starts streaming: each delta of the reply is one
``notifications/progress`` (``progress`` counts the deltas so far, ``message``
is the delta's text), and the result is the stream's last event. A reply that
does not stream is answered as any other call (one JSON or SSE body).

:class:`RunningCalls` holds the ``tools/call`` requests running on this node
by who sent them (caller, session, JSON-RPC id), so that the same client's
``notifications/cancelled`` can cancel one: its task is cancelled, and the
ask under it tells the answering agent to stop (``adapters.kit.asking``). A
cancel for a call not running on the node that got it is passed to every node
(:meth:`~adapters.mcp.calllog.CallLog.cancel`).
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


class RunningCalls:
    """The ``tools/call`` tasks running on this node, by (caller, session, id)
    and by that key's digest (a cancel from another node names the digest)."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def add(self, key: CallKey, task: asyncio.Task[Any]) -> None:
        self._tasks[call_digest(*key)] = task

    def remove(self, key: CallKey, task: asyncio.Task[Any]) -> None:
        digest = call_digest(*key)
        if self._tasks.get(digest) is task:
            del self._tasks[digest]

    def cancel(self, digest: str) -> bool:
        """Cancel the call whose key has this digest; whether one was running here."""
        task = self._tasks.get(digest)
        if task is None or task.done():
            return False
        task.cancel("the client cancelled the call")
        return True
