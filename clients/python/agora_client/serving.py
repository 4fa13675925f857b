"""Answering requests with a handler: what :meth:`Client.serve` runs (contract §19).

Every agent that answers writes the same loop — read the space's events, skip
its own and the replies, answer, survive an asker who left — and the loops
people copy get the last part wrong. :class:`Answerer` is that loop, once:

* A **request** is an event of the space that is not a reply (no
  ``in_reply_to``) and not this agent's own (nor the hub's); streamed ones come
  whole. With ``addressed_only`` only those whose ``to`` names this agent.
* The handler gets it and returns a ``str`` or a ``dict`` (one reply), ``None``
  (no reply), or an iterator — ``async def … yield`` or a plain generator — of
  ``str`` (a reply streamed as it is produced). It may be a coroutine function.
* An exception in the handler becomes a failure reply ``{"status": "failure",
  "error": str(exc)}`` (a stream already under way is cancelled with reason
  ``error: <Type>``), and a warning with the traceback in the log.
* The handler's task is **cancelled** (``asyncio.CancelledError`` inside it)
  when the asker stops waiting: it left the space, it sent ``{cancel: true,
  in_reply_to}`` (what the hub's bridges send when their caller goes away), or
  every receiver of the streamed reply cancelled it or left (the hub's notice).
* Answering never raises out of the loop: a reply the hub refuses because the
  asker left (``to`` names a non-member), a stream cut short, a rate limit,
  a lost connection — each is one log line, at INFO for the asker that left.
* At most ``concurrency`` requests are handled at once; later ones wait, in
  order, at most ``queue_size`` of them (beyond, the oldest is dropped, with a
  warning, as subscriptions drop).

``serve`` returns when the client is closed and raises the client's error when
the connection is lost for good; cancelling it cancels every handler still
running, and it returns only once they have all ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

from agora_client.errors import ConnectionClosed, HubClientError, InvalidRequest, StreamCancelled
from agora_client.models import AssembledEvent, Event, JoinResult, MembersChanged
from agora_client.streams import OutgoingStream
from agora_client.wire import is_valid_agent_id

log = logging.getLogger("agora_client")

Request = Event | AssembledEvent
#: A request handler: the request in, the reply (or its chunks) out.
Handler = Callable[[Request], Any]

# How long a handler that was cancelled may take to tell its stream's receivers.
_CANCEL_TIMEOUT = 5.0
# Longest failure message sent back to the asker.
_MAX_ERROR = 1000


class Answering(Protocol):
    """What an :class:`Answerer` needs of its :class:`~agora_client.Client`."""

    agent_id: str
    queue_size: int

    @property
    def joined_spaces(self) -> frozenset[str]: ...

    async def join(self, space: str) -> JoinResult: ...

    def events(self, space: str, *, members: bool) -> Any: ...

    async def reply(self, event: Request, data: Mapping[str, Any], *, echo: bool) -> Event: ...

    def stream_reply(
        self, event: Request, *, echo: bool, on_cancel: Callable[[str], object]
    ) -> OutgoingStream: ...


class _Answer:
    """One request being answered: its task, and why it was given up on."""

    __slots__ = ("abandoned", "request", "task")

    def __init__(self, request: Request):
        self.request = request
        self.task: asyncio.Task[None] | None = None
        #: Why the asker no longer waits; None while it does.
        self.abandoned: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.request.sender or "", self.request.event_id)

    def abandon(self, reason: str) -> None:
        """The asker stopped waiting: cancel the handler."""
        if self.abandoned is None and self.task is not None and not self.task.done():
            self.abandoned = reason
            self.task.cancel(f"the asker stopped waiting: {reason}")


class Answerer:
    """Answers the requests of one space with a handler (see the module)."""

    def __init__(
        self,
        client: Answering,
        space: str,
        handler: Handler,
        *,
        concurrency: int,
        addressed_only: bool,
    ):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._client = client
        self._space = space
        self._handler = handler
        self._concurrency = concurrency
        self._addressed_only = addressed_only
        self._running: dict[tuple[str, str], _Answer] = {}
        self._waiting: deque[_Answer] = deque()
        self._dropped = 0
        self._stopping = False

    @property
    def running(self) -> int:
        """Requests being handled now."""
        return len(self._running)

    async def run(self) -> None:
        events = self._client.events(self._space, members=True)
        try:
            if self._space not in self._client.joined_spaces:
                await self._client.join(self._space)
            async for item in events:
                self._take(item)
        finally:
            events.close()
            await self._stop()

    # ── what arrives ─────────────────────────────────────────────────────

    def _take(self, item: Request | MembersChanged) -> None:
        if isinstance(item, MembersChanged):
            for agent_id in item.left_ids:
                self._stop_waiting(lambda key, gone=agent_id: key[0] == gone, "asker_left")
            return
        if item.data.get("cancel") is True and item.in_reply_to is not None:
            wanted = (item.sender, item.in_reply_to)
            self._stop_waiting(lambda key: key == wanted, "cancelled")
            return
        if not self._is_request(item):
            return
        answer = _Answer(item)
        if len(self._running) < self._concurrency:
            self._start(answer)
            return
        if len(self._waiting) >= self._client.queue_size:
            self._waiting.popleft()
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                log.warning(
                    "serve %s: %d request(s) dropped so far, more waited than queue_size; "
                    "raise concurrency or queue_size",
                    self._space,
                    self._dropped,
                )
        self._waiting.append(answer)

    def _is_request(self, item: Request) -> bool:
        sender = item.sender
        if sender is None or sender == self._client.agent_id or not is_valid_agent_id(sender):
            return False  # its own, or the hub's
        if item.in_reply_to is not None:
            return False
        if isinstance(item, AssembledEvent) and not item.complete:
            log.info(
                "serve %s: ignoring %s from %s, a request that arrived %s (%s)",
                self._space, item.event_id, sender, item.status, item.reason,
            )  # fmt: skip
            return False
        if self._addressed_only:
            to = item.to
            return to == self._client.agent_id or (
                isinstance(to, list) and self._client.agent_id in to
            )
        return True

    def _stop_waiting(self, asked: Callable[[tuple[str, str]], bool], reason: str) -> None:
        """The asker(s) ``asked`` matches stopped waiting: drop or cancel their answers."""
        if self._waiting:
            self._waiting = deque(a for a in self._waiting if not asked(a.key))
        for key, answer in list(self._running.items()):
            if asked(key):
                answer.abandon(reason)

    # ── one answer ───────────────────────────────────────────────────────

    def _start(self, answer: _Answer) -> None:
        self._running[answer.key] = answer
        task = asyncio.get_running_loop().create_task(
            self._answer(answer), name=f"serve {self._space} {answer.request.event_id}"
        )
        answer.task = task
        task.add_done_callback(lambda _: self._finished(answer))

    def _finished(self, answer: _Answer) -> None:
        if self._running.get(answer.key) is answer:
            del self._running[answer.key]
        while self._waiting and not self._stopping and len(self._running) < self._concurrency:
            self._start(self._waiting.popleft())

    async def _answer(self, answer: _Answer) -> None:
        request = answer.request
        try:
            try:
                result = self._handler(request)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                await self._fail(answer, exc)
                return
            if result is None:
                return
            if isinstance(result, AsyncIterator | Iterator):
                await self._stream(answer, result)
            elif isinstance(result, str | Mapping):
                try:
                    await self._reply(
                        answer, {"text": result} if isinstance(result, str) else result
                    )
                except TypeError as exc:  # not JSON (a set, an object): nothing was sent
                    await self._fail(answer, exc)
            else:
                what = type(result).__name__
                await self._fail(answer, TypeError(f"a handler returns str, dict, None or an "
                                                   f"iterator of str, not {what}"))  # fmt: skip
        except asyncio.CancelledError:
            if answer.abandoned is None:
                raise
            log.debug("stopped answering %s: %s", request.event_id, answer.abandoned)

    async def _stream(self, answer: _Answer, result: AsyncIterator[Any] | Iterator[Any]) -> None:
        chunks = result if isinstance(result, AsyncIterator) else _each(result)
        stream = self._client.stream_reply(answer.request, echo=False, on_cancel=answer.abandon)
        try:
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:  # the handler's
                    await self._fail(answer, exc, stream)
                    return
                if not isinstance(chunk, str):
                    what = type(chunk).__name__
                    await self._fail(answer, TypeError(f"a reply's chunks are str, not {what}"),
                                     stream)  # fmt: skip
                    return
                try:
                    await stream.send(chunk)
                except HubClientError as exc:
                    self._undelivered(answer, exc)
                    return
            try:
                if stream.state == "new":  # not one chunk: an empty answer
                    await self._reply(answer, {"text": ""})
                else:
                    await stream.close()
            except HubClientError as exc:
                self._undelivered(answer, exc)
        finally:
            if stream.state == "open":  # cancelled meanwhile: tell the receivers
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(_CANCEL_TIMEOUT):
                        await stream.cancel(answer.abandoned or "cancelled")
            with contextlib.suppress(Exception):
                await _close(chunks)

    async def _fail(
        self, answer: _Answer, exc: Exception, stream: OutgoingStream | None = None
    ) -> None:
        request = answer.request
        if answer.abandoned is not None:
            log.debug("the handler of %s ended with %r once abandoned", request.event_id, exc)
            return
        log.warning(
            "serve %s: the handler failed on %s from %s: %r",
            self._space, request.event_id, request.sender, exc, exc_info=exc,
        )  # fmt: skip
        if stream is not None and stream.state == "open":
            with contextlib.suppress(HubClientError):
                await stream.cancel(f"error: {type(exc).__name__}")
            return
        error = (str(exc) or type(exc).__name__)[:_MAX_ERROR]
        await self._reply(answer, {"status": "failure", "error": error})

    async def _reply(self, answer: _Answer, data: Mapping[str, Any]) -> None:
        try:
            await self._client.reply(answer.request, data, echo=False)
        except HubClientError as exc:
            self._undelivered(answer, exc)

    def _undelivered(self, answer: _Answer, exc: HubClientError) -> None:
        """A reply the hub did not take or deliver: never raised, never a crash."""
        request = answer.request
        gone = isinstance(exc, InvalidRequest | StreamCancelled | ConnectionClosed)
        log.log(
            logging.INFO if gone else logging.WARNING,
            "serve %s: could not answer %s from %s%s: %s",
            self._space, request.event_id, request.sender,
            " (the asker left or stopped waiting)" if gone else "", exc,
        )  # fmt: skip

    # ── the end ──────────────────────────────────────────────────────────

    async def _stop(self) -> None:
        """Cancel the handlers still running and wait until they have ended."""
        self._stopping = True
        self._waiting.clear()
        answers = list(self._running.values())
        for answer in answers:
            answer.abandon("serve stopped")
        tasks = [a.task for a in answers if a.task is not None]
        if tasks:
            await asyncio.wait(tasks)


async def _each(items: Iterator[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _close(chunks: AsyncIterator[Any]) -> None:
    aclose: Callable[[], Awaitable[Any]] | None = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
