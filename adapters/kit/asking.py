"""Ask an agent in a space and wait for its answer — or tell it to stop (contract §18, §19).

Every inbound face (HTTP Agora, MCP, A2A) does the same: publish a request
from its shared member, wait for the reply **in that space from the agents
it was addressed to** (:class:`~adapters.kit.replies.Asked`), give up after a
timeout, and stop the answering agent when the caller stops waiting. An
:class:`Asker` does it for one face; each request is an :class:`Asking`.

The caller stops waiting when it goes away (an HTTP client that closed its
connection), cancels (MCP ``notifications/cancelled``, A2A ``CancelTask``),
when the task waiting is cancelled, or when the wait times out. The agent
is then told, once:

- when its reply has started streaming: a **receiver cancel** of that
  stream, so the hub sends the producer ``space.event.cancel`` (``reason:
  "receiver_cancelled"``, on whatever node it is: ``hub/handlers/stream_stops.py``).
  A stream others receive too (unaddressed, or addressed to more agents)
  goes on for them and the hub tells its producer only when the last of
  them stops: the producer also gets the event below, addressed to it;
- otherwise: an event ``{"cancel": true, "in_reply_to": <request id>,
  "reason": …}`` addressed to the request's addressees (to the space, for a
  request that was not addressed), which ``client.serve`` of both SDKs turns
  into cancelling the handler.

A reply that already came whole needs no cancel. Telling the agent is best
effort: a hub that refuses it (the agent left, the node is not ready) is
logged at INFO and the caller's answer is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

import structlog

from adapters import AdapterError
from adapters.kit.joined import NodeNotReady
from adapters.kit.replies import Asked, Assembled, ReplyRelay, ReplyWaiters
from hub.adapter_host import RequestFailed

log = structlog.get_logger("adapters.kit.asking")

#: Seconds the hub has to acknowledge a receiver cancel or take a cancel event.
CANCEL_TIMEOUT = 5.0


class AskTimeout(AdapterError):
    """No reply within the timeout (the agent was told to stop)."""


class AskCancelled(AdapterError):
    """The caller stopped waiting (:meth:`Asking.cancel`, or its connection
    went away); ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class CancelSender(Protocol):
    """What a cancel is sent through: the face's virtual member."""

    async def request(self, msg: dict[str, Any], timeout: float = ...) -> dict[str, Any]: ...


class Publisher(Protocol):
    """How a face publishes from its member (:class:`~adapters.kit.joined.JoiningMember`):
    joined to the space first, its own errors raised for the face to word."""

    @property
    def member(self) -> CancelSender | None: ...

    async def publish(
        self, space: str, data: dict[str, Any], *, to: str | list[str] | None = None
    ) -> dict[str, Any]: ...


class Asking:
    """One request in flight, from :meth:`Asker.send`: wait for its answer
    (:meth:`answer`, or piece by piece through :attr:`relay`) or stop it
    (:meth:`cancel`, from any task). :meth:`close` when done with it."""

    def __init__(
        self,
        asker: Asker,
        asked: Asked,
        published: dict[str, Any],
        reply: asyncio.Future[Assembled] | None,
        relay: ReplyRelay | None,
    ):
        self.asked = asked
        #: The hub's ``space.published`` for the request.
        self.published = published
        #: The reply piece by piece (``send(..., relay=True)``), else None.
        self.relay = relay
        #: Why the caller stopped waiting; None while it waits.
        self.cancelled: str | None = None
        self._asker = asker
        self._reply = reply
        self._stopped: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._closed = False

    @property
    def event_id(self) -> str:
        return self.asked.event_id

    @property
    def stream_id(self) -> str | None:
        """The id of the stream answering (as received), once it started."""
        return self._asker.waiters.stream_of(self.event_id)

    async def answer(self, timeout: float, *, gone: asyncio.Future[Any] | None = None) -> Assembled:
        """The whole reply (a streamed one assembled). Raises :class:`AskTimeout`
        after ``timeout`` seconds and :class:`AskCancelled` once :meth:`cancel`
        was called or ``gone`` (the caller's connection, say) is done — the
        agent told to stop either way; a cancelled waiting task tells it too."""
        assert self._reply is not None, "send(..., relay=True): read the relay"
        waits = (self._reply, self._stopped) if gone is None else (self._reply, self._stopped, gone)
        try:
            timed_out = not await first_of(waits, timeout)
        except asyncio.CancelledError:
            await self._asker.finish(self.cancel("cancelled"))
            raise
        if self._reply.done():
            self.close()
            return self._reply.result()
        if timed_out:
            await self.cancel("timeout")
            raise AskTimeout(f"no reply within {timeout:g} s")
        if gone is not None and gone.done():
            await self.cancel("caller_gone")
        raise AskCancelled(self.cancelled or "cancelled")

    async def cancel(self, reason: str = "cancelled") -> None:
        """The caller stops waiting: the agent is told (see the module), the
        wait ends with :class:`AskCancelled`. Once; a no-op after the answer."""
        if self.cancelled is not None or self._closed:
            return
        answered = self._reply is not None and self._reply.done()
        if self.relay is not None and self.relay.ended:
            answered = True
        self.cancelled = reason
        self._stopped.set_result(reason)
        stream_id = self.stream_id
        producer = self._asker.waiters.producer_to_tell(self.event_id)
        self.close()
        if self.relay is not None:
            self.relay.stop()
        if not answered:
            await self._asker.tell_stop(self.asked, stream_id, reason, producer)

    def close(self) -> None:
        """Stop waiting without telling anyone (answered, or given up on)."""
        if not self._closed:
            self._closed = True
            self._asker.waiters.forget(self.event_id)


async def first_of(futures: tuple[asyncio.Future[Any], ...], timeout: float) -> bool:
    """Wait until one of ``futures`` is done (True) or ``timeout`` seconds
    pass (False). What ``asyncio.wait(..., return_when=FIRST_COMPLETED)``
    does, for the few futures of one call: one callback each and one timer,
    without the set and the task wrapping (on every gateway call's path)."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bool] = loop.create_future()

    def wake(_: object = None, done: bool = True) -> None:
        if not waiter.done():
            waiter.set_result(done)

    if any(future.done() for future in futures):
        return True
    for future in futures:
        future.add_done_callback(wake)
    timer = loop.call_later(timeout, wake, None, False)
    try:
        return await waiter
    finally:
        timer.cancel()
        for future in futures:
            future.remove_done_callback(wake)


class Asker:
    """One face's asking: where it publishes from and where replies arrive."""

    def __init__(self, publisher: Publisher, waiters: ReplyWaiters):
        self.publisher = publisher
        self.waiters = waiters
        self._telling: set[asyncio.Task[None]] = set()

    async def send(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | Iterable[str] | None = None,
        relay: bool = False,
    ) -> Asking:
        """Publish the request; its :class:`Asking`. The publisher's errors
        (the hub refused, the node is not ready, no answer in time) propagate."""
        addressees = None if to is None else [to] if isinstance(to, str) else list(to)
        with self.waiters.publishing():
            published = await self.publisher.publish(space, data, to=addressees)
            asked = Asked.of(space, str(published["event_id"]), addressees)
            if relay:
                return Asking(self, asked, published, None, self.waiters.relay(asked))
            return Asking(self, asked, published, self.waiters.expect(asked), None)

    async def ask(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | Iterable[str] | None = None,
        timeout: float,
        gone: asyncio.Future[Any] | None = None,
    ) -> tuple[dict[str, Any], Assembled]:
        """:meth:`send` then :meth:`Asking.answer`: the request's
        ``space.published`` and its whole reply."""
        asking = await self.send(space, data, to=to)
        try:
            return asking.published, await asking.answer(timeout, gone=gone)
        finally:
            asking.close()

    async def tell_stop(
        self, asked: Asked, stream_id: str | None, reason: str, producer: str | None = None
    ) -> None:
        """Tell the agent answering ``asked`` to stop (see the module);
        ``producer``: the agent streaming a reply others may receive too."""
        member = self.publisher.member
        to = sorted(asked.to) if asked.to is not None else None
        try:
            if stream_id is not None:
                if member is None:
                    return
                msg = {"type": "space.event.cancel", "space": asked.space, "event_id": stream_id}
                await member.request(msg, timeout=CANCEL_TIMEOUT)
                if producer is None:
                    return  # addressed to this member alone: the hub tells its producer
                to = [producer]  # others may still receive it: told directly too
            data = {"cancel": True, "in_reply_to": asked.event_id, "reason": reason}
            async with asyncio.timeout(CANCEL_TIMEOUT):
                await self.publisher.publish(asked.space, data, to=to)
        except (RequestFailed, TimeoutError, NodeNotReady, AdapterError) as exc:
            log.info("agent not told to stop", space=asked.space, request=asked.event_id,
                     reason=str(exc)[:200])  # fmt: skip
        except Exception:
            log.warning("telling an agent to stop failed", request=asked.event_id, exc_info=True)

    async def finish(self, work: Any) -> None:
        """Run ``work`` (telling an agent to stop) to its end even though the
        task that started it is being cancelled: it is kept until :meth:`aclose`."""
        task = asyncio.ensure_future(work)
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)

    async def aclose(self) -> None:
        """Wait (briefly) for the cancels still being sent."""
        if self._telling:
            await asyncio.wait(self._telling, timeout=CANCEL_TIMEOUT)
