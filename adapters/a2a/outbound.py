"""A2A, outbound: agents of a space call an A2A agent elsewhere (contract §13).

``[[bridges.a2a]]`` (``space``, ``agent_id``, ``url``, optional ``timeout``
and ``headers``) makes ``agent_id`` a member of ``space``. The remote's card
(``{url}/.well-known/agent-card.json``) is read at start and again while it
cannot be (the remote is down), after a call could not reach the remote, and
every ``card_refresh`` seconds; the bridge's ``capabilities`` are the card's
skill ids and its ``metadata.a2a`` the card's ``{name, description}``, so
agents find it with ``agent.list``.

An event addressed to the bridge (``to``) becomes a call (:mod:`adapters.a2a.calls`);
its answer is published back from ``agent_id``. ``data.task_id`` continues a
task that asked for input (any other ``task_id`` — the hub's A2A gateway sends
its own — names the new remote task, which it continues when that asks for
input: a name of that sender's own, as context names are); ``data.context_id``
names a conversation (one remote ``contextId`` per space, sender and name,
:mod:`adapters.a2a.contexts`). No sender makes the bridge forget or replace
another's waiting task.
An addressed event ``{"cancel": true, "task_id" | "event_id": …}`` cancels a
call in progress, a request waiting for a call slot (dropped) or a task
waiting for input: ``CancelTask`` on the remote, the reply stream cancelled,
the request answered ``"Cancelled"``; the cancel itself is answered
``{status, task_id, state: "canceled"}``. A sender that stops waiting
(``{"cancel": true, "in_reply_to": …}``, a receiver cancel of the reply
stream, or leaving the space while it streams: ``receivers_left``) has its
call stopped the same way (``CancelTask`` in the background), and nothing is
answered; an ``in_reply_to`` cancel of a request already answered cancels the
sender's waiting task its ``task_id`` names.

Exactly one node of a cluster holds ``agent_id`` (claimed at start); the
others stand by and retry the claim, and the node that takes over answers
with a failure what the lost holder left unanswered (:mod:`adapters.kit.bridge`). Calls per bridge,
events waiting for one, bodies and stream events are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.a2a.calls import CANCELLED, Answer, Call, CallTable, Request
from adapters.a2a.cardwatch import CardWatch
from adapters.a2a.contexts import BridgeMemory
from adapters.a2a.remote import RemoteAgent, RemoteFailure
from adapters.kit.bridge import OutboundBridge
from adapters.kit.replies import in_reply_to
from hub.adapter_host import (
    AdapterHost,
    AdapterMember,
    BackplaneUnavailable,
    RequestFailed,
)
from protocol.a2a.card import RemoteCard
from protocol.a2a.mapping import (
    RemoteOutcome,
    outbound_parts,
    reply_data,
)

MAX_NAME = 256
#: The reasons of a ``space.event.cancel`` telling the bridge that nobody
#: receives a reply stream any more (contract §19): its sender cancelled it,
#: or left the space (or disconnected).
STOPPED_RECEIVING = ("receiver_cancelled", "receivers_left")

log = structlog.get_logger("adapters.a2a")


@dataclass(frozen=True, slots=True)
class OutboundOptions:
    #: Calls to the remote in progress at once, per bridge.
    max_concurrency: int = 8
    #: Events waiting for a call slot; one more is answered "Bridge busy".
    max_queued: int = 64
    #: Largest body read from the remote (a card, an answer, one stream event).
    max_body_bytes: int = 1024 * 1024
    #: Streamed answer relayed per call (every part, at its JSON size); more
    #: cancels the remote task.
    max_reply_bytes: int = 8 * 1024 * 1024
    #: Longest a call may take in all, however lively the remote's stream
    #: (``timeout`` bounds only the silence between its events); past it the
    #: call fails "Timeout" and the remote task is cancelled.
    max_call_time: float = 600.0
    #: Coalescing of streamed chunks into deltas (see adapters.a2a.relay).
    flush_interval: float = 0.1
    #: Idle time after which a context or a waiting task is forgotten.
    context_ttl: float = 3600.0
    #: First wait before reading the card again while it cannot be read (doubles).
    card_retry: float = 1.0
    card_retry_max: float = 30.0
    #: How often a card that could be read is read again.
    card_refresh: float = 300.0
    #: How often a standby node retries the claim; ``None``: heartbeat_interval.
    retry_interval: float | None = None


class A2aOutbound(OutboundBridge):
    """One ``[[bridges.a2a]]`` entry: the A2A mapping of an
    :class:`~adapters.kit.bridge.OutboundBridge`."""

    member_type = "a2a-bridge"
    label = "a2a bridge"

    def __init__(
        self,
        space: str,
        agent_id: str,
        url: str,
        *,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
        options: OutboundOptions | None = None,
    ):
        o = self.options = options or OutboundOptions()
        super().__init__(
            space, agent_id, max_request_bytes=o.max_body_bytes,
            max_concurrency=o.max_concurrency, max_queued=o.max_queued,
            retry_interval=o.retry_interval,
        )  # fmt: skip
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.cards = CardWatch(
            self._read_card, self._card_changed, retry=o.card_retry,
            retry_max=o.card_retry_max, refresh=o.card_refresh, name=agent_id,
        )  # fmt: skip
        self.remote: RemoteAgent | None = None
        self.memory: BridgeMemory | None = None
        self._slots = asyncio.Semaphore(self.options.max_concurrency)
        self._calls = CallTable()
        #: Requests waiting for a call slot, by event id: (the event, its task).
        self._queued: dict[str, tuple[dict[str, Any], asyncio.Task[Any]]] = {}

    # ── lifecycle, the claim and the card ────────────────────────────────

    async def open(self, host: AdapterHost) -> None:
        self.timeout = self.timeout or host.settings.bridge_timeout
        self.memory = BridgeMemory(host.kv, self.agent_id, self.options.context_ttl)
        self.remote = RemoteAgent(
            self.url, headers=self.headers, timeout=self.timeout,
            max_connections=self.options.max_concurrency,
            max_body_bytes=self.options.max_body_bytes,
        )  # fmt: skip
        self.spawn(self.cards.run())

    async def shut(self) -> None:
        if self.remote is not None:
            await self.remote.aclose()

    @property
    def card(self) -> RemoteCard | None:
        return self.cards.card

    @property
    def card_read(self) -> asyncio.Event:
        """Set whenever the card was read and the hub told of it."""
        return self.cards.read

    def registration(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        card = self.card
        if card is None:
            return (), {"a2a": {"url": self.url}}
        info = {"name": card.name, "description": card.description, "url": self.url}
        return card.skills, {"a2a": info}

    async def _read_card(self) -> RemoteCard:
        assert self.remote is not None
        return await self.remote.read_card()

    async def _card_changed(self, card: RemoteCard) -> None:
        """Tell the hub what the card says (capabilities, metadata.a2a)."""
        member = self.member
        if member is None:
            return  # the claim registers it
        capabilities, metadata = self.registration()
        agent = {"id": self.agent_id, "capabilities": list(capabilities), "metadata": metadata}
        try:
            await member.request({"type": "agent.register", "agent": agent})
        except (RequestFailed, TimeoutError) as exc:
            log.warning("a2a bridge not registered", agent_id=self.agent_id, reason=str(exc))

    async def claimed(self, member: AdapterMember) -> None:
        if self.card is not None and self.registration()[0] != member.record.capabilities:
            await self._card_changed(self.card)  # the card came while claiming

    # ── events addressed to the bridge ──────────────────────────────────

    async def on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "space.event.cancel" and msg.get("reason") in STOPPED_RECEIVING:
            await self._receiver_cancelled(msg)
        elif kind == "error":
            self._calls.refused(msg)
        else:
            await super().on_message(msg)

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        await self._reply(event, _failed(why))

    async def cancel_request(self, cancel: dict[str, Any]) -> None:
        """``{cancel: true, in_reply_to}`` (the sender stopped waiting): the call
        stops and the remote task is cancelled (``CancelTask``), as for a
        receiver cancel of its reply stream; a request still waiting for a
        call slot is dropped; else a ``task_id`` naming the sender's task
        waiting for input cancels that task. Nothing is answered, and
        ``CancelTask`` goes in the background (a remote slow to answer it
        never holds up the bridge's messages)."""
        sender, request_id = cancel.get("from"), in_reply_to(cancel)
        call = self._calls.find(sender, None, request_id)
        if call is not None:
            await self._interrupt(call, quiet=True)
        elif self._drop_queued(sender, request_id) is None:
            # The request was answered already (the task then asked for input,
            # as the hub's A2A gateway's CancelTask of such a task says): the
            # sender's waiting task its data.task_id names is cancelled.
            task_id = _name(_data(cancel).get("task_id"))
            if task_id is not None and self.memory is not None:
                waiting = await self.memory.forget_waiting(self.space, str(sender), task_id)
                if waiting is not None:
                    self.spawn(self._cancel_remote(waiting.task_id))

    async def serve(self, event: dict[str, Any]) -> None:
        # A cancel takes no call slot: it must overtake the call it cancels.
        cancel = _data(event).get("cancel") is True
        try:
            if cancel:
                await self._cancel(event)
                return
            async with self._slot(event):
                request = await self._request(event)
                if isinstance(request, RemoteOutcome):
                    await self._reply(event, request)
                    return
                await self._call(event, request)
        except BackplaneUnavailable:
            await self._reply(event, _failed("Hub unavailable: try again"))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a2a bridge call failed", agent_id=self.agent_id)
            await self._reply(event, _failed("Bridge error"))

    @contextlib.asynccontextmanager
    async def _slot(self, event: dict[str, Any]) -> AsyncIterator[None]:
        """A call slot for ``event``; while it waits for one, its sender's
        cancel drops it (:meth:`_drop_queued`)."""
        key, task = str(event.get("event_id")), asyncio.current_task()
        assert task is not None
        self._queued[key] = (event, task)
        try:
            await self._slots.acquire()
        finally:
            self._queued.pop(key, None)
        try:
            yield
        finally:
            self._slots.release()

    def _drop_queued(self, sender: object, event_id: str | None) -> dict[str, Any] | None:
        """The sender's request ``event_id``, if it waits for a call slot: it
        is dropped (its task cancelled, unanswered). The request, if it was."""
        queued = self._queued.get(event_id) if event_id is not None else None
        if queued is None or queued[0].get("from") != sender:
            return None
        event, task = self._queued.pop(str(event_id))
        task.cancel()
        return event

    async def _request(self, event: dict[str, Any]) -> Request | RemoteOutcome:
        """What to send for ``event``; a failure outcome when it cannot be sent."""
        assert self.memory is not None
        data, sender = _data(event), str(event.get("from"))
        parts = outbound_parts(data)
        if not parts:
            return _failed("The event has nothing to send (text, body or data)")
        if self.card is None:
            self.cards.want()
            return _failed("Remote A2A agent unavailable: its agent card could not be read")
        task_id, name = _name(data.get("task_id")), _name(data.get("context_id"))
        alias, context = None, None
        waiting = None
        if task_id is not None:
            waiting = await self.memory.waiting(task_id, self.space, sender)
        if waiting is not None:  # it continues a task that asked for input
            if (waiting.space, waiting.sender) != (self.space, sender):
                return _failed(f"No task {task_id!r} of yours is waiting for input")
            alias = task_id if task_id != waiting.task_id else waiting.alias
            task_id, context, name = waiting.task_id, waiting.context_id, waiting.context_name
        else:  # none, or the sender's own id for a new task (the A2A gateway's)
            alias, task_id = task_id, None
            if name is not None:
                context = await self.memory.context(self.space, sender, name)
        event_id = str(event.get("event_id"))
        return Request(event_id, sender, self.space, parts, context, task_id, name, alias)

    async def _call(self, event: dict[str, Any], request: Request) -> None:
        assert self.remote is not None and self.card is not None and self.member is not None
        call = Call(
            request, self.remote, self.member,
            streaming=self.card.streaming, flush_interval=self.options.flush_interval,
            max_reply_bytes=self.options.max_reply_bytes,
            max_time=self.options.max_call_time, on_stream=self._calls.track,
        )  # fmt: skip
        self._calls.add(call)
        try:
            answer = await call.outcome()
        finally:
            self._calls.remove(call)
        if call.unreachable:
            self.cards.want()  # read the card again until the remote is back
        if call.abandoned and call.task_id is not None:
            self.spawn(self._cancel_remote(call.task_id))  # past a bound: stop it there too
        await self._finish(event, request, call, answer)

    async def _finish(
        self, event: dict[str, Any], request: Request, call: Call, answer: Answer
    ) -> None:
        """Publish the end of the answer and remember what a next message needs."""
        assert self.memory is not None
        outcome, stream, context = answer.outcome, answer.streamed, answer.context_id
        if call.stream is not None:
            await call.stream.aclose()
        name = request.context_name
        await self.memory.settle(
            self.space, request.sender, name, kind=outcome.kind, context_id=context,
            task_id=answer.task_id, continued=request.task_id, alias=request.alias,
        )  # fmt: skip
        if call.quiet:  # the sender stopped waiting: its stream ends, nothing is answered
            if stream is not None:
                await stream.cancel(CANCELLED)
            return
        if stream is not None:
            if stream.failure is not None and outcome.kind == "success":
                outcome = _failed(f"The answer could not be relayed ({stream.failure})")
            if outcome.kind == "failure":
                await stream.cancel(f"failed: {outcome.error}")
            else:
                await stream.done()
                if outcome.kind == "success":
                    return
        await self._reply(event, outcome, answer.task_id, name or context)

    # ── a sender's cancel ───────────────────────────────────────────────

    async def _cancel(self, event: dict[str, Any]) -> None:
        """``{"cancel": true, "task_id" | "event_id"}``: stop a call in progress
        or a task waiting for input, and tell the remote (``CancelTask``)."""
        assert self.remote is not None and self.memory is not None
        data, sender = _data(event), event.get("from")
        task_id, request_id = _name(data.get("task_id")), _name(data.get("event_id"))
        call = self._calls.find(sender, task_id, request_id)
        queued = self._drop_queued(sender, request_id) if call is None else None
        named = task_id
        if call is not None:
            task_id = call.task_id
            call.interrupt()
        elif queued is not None:  # never sent: nothing to tell the remote
            task_id = None
            await self._reply(queued, _failed(CANCELLED))
        elif task_id is not None:
            waiting = await self.memory.waiting(task_id, self.space, str(sender))
            mine = waiting is not None and (waiting.space, waiting.sender) == (self.space, sender)
            task_id = waiting.task_id if waiting is not None and mine else None
        if call is None and queued is None and task_id is None:
            await self._reply(event, _failed("Nothing of yours to cancel"))
            return
        answer: dict[str, Any] = {"in_reply_to": event.get("event_id"), "status": "success"}
        if task_id is not None:
            try:
                await self.remote.cancel(task_id)
            except RemoteFailure as exc:
                answer = {**answer, "status": "failure", "error": exc.reason}
            with contextlib.suppress(BackplaneUnavailable):  # the sender's own only
                for key in {task_id, named} - {None}:
                    await self.memory.forget_waiting(self.space, str(sender), str(key))
        if answer["status"] == "success":
            answer["state"] = "canceled"
        await self.answer(event, {**answer, "task_id": task_id})

    async def _receiver_cancelled(self, notice: dict[str, Any]) -> None:
        """The sender cancelled its copy of a reply stream (``space.event.cancel``
        as a receiver; the hub tells the bridge): the remote task is cancelled
        (``CancelTask``) and the stream ends."""
        stream_id = str(notice.get("event_id"))
        call = self._calls.streaming(stream_id.partition("/")[2] + ".")
        if call is None or call.request.sender != notice.get("from"):
            return
        await self._interrupt(call, quiet=True)

    async def _interrupt(self, call: Call, *, quiet: bool = False) -> None:
        """Stop ``call``; ``CancelTask`` goes in the background."""
        call.interrupt(quiet=quiet)
        if call.task_id is not None:
            self.spawn(self._cancel_remote(call.task_id))

    async def _cancel_remote(self, task_id: str) -> None:
        """``CancelTask`` for a task the bridge no longer follows (logged if refused)."""
        assert self.remote is not None
        try:
            await self.remote.cancel(task_id)
        except RemoteFailure as exc:
            log.info("a2a CancelTask failed", agent_id=self.agent_id, reason=exc.reason)

    # ── answers ─────────────────────────────────────────────────────────

    async def _reply(
        self,
        event: dict[str, Any],
        outcome: RemoteOutcome,
        task_id: str | None = None,
        context_id: str | None = None,
    ) -> None:
        data = reply_data(str(event.get("event_id")), outcome, task_id, context_id)
        await self.answer(event, data)


def _data(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _failed(error: str) -> RemoteOutcome:
    return RemoteOutcome("failure", error=error)


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_NAME else None
