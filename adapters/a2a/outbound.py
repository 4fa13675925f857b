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
task that asked for input; ``data.context_id`` names a conversation (one remote
``contextId`` per space, sender and name, :mod:`adapters.a2a.contexts`).
An addressed event ``{"cancel": true, "task_id" | "event_id": …}`` cancels a
call in progress (or a task waiting for input): ``CancelTask`` on the remote,
the reply stream cancelled, the request answered ``"Cancelled"``; the cancel
itself is answered ``{status, task_id, state: "canceled"}``. A sender that
stops waiting (``{"cancel": true, "in_reply_to": …}``, or a receiver cancel
of the reply stream) has its call stopped the same way, the cancel unanswered.

Exactly one node of a cluster holds ``agent_id`` (claimed at start); the
others stand by and retry the claim, and the node that takes over answers
with a failure what the lost holder left unanswered (:mod:`adapters.kit.bridge`). Calls per bridge,
events waiting for one, bodies and stream events are bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.a2a.calls import Answer, Call, CallTable, Request
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

log = structlog.get_logger("adapters.a2a")


@dataclass(frozen=True, slots=True)
class OutboundOptions:
    #: Calls to the remote in progress at once, per bridge.
    max_concurrency: int = 8
    #: Events waiting for a call slot; one more is answered "Bridge busy".
    max_queued: int = 64
    #: Largest body read from the remote (a card, an answer, one stream event).
    max_body_bytes: int = 1024 * 1024
    #: Streamed answer relayed per call; more cancels the remote task.
    max_reply_bytes: int = 8 * 1024 * 1024
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
        if kind == "space.event.cancel" and msg.get("reason") == "receiver_cancelled":
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
        receiver cancel of its reply stream."""
        call = self._calls.find(cancel.get("from"), None, in_reply_to(cancel))
        if call is not None:
            await self._interrupt(call)

    async def serve(self, event: dict[str, Any]) -> None:
        # A cancel takes no call slot: it must overtake the call it cancels.
        cancel = _data(event).get("cancel") is True
        try:
            if cancel:
                await self._cancel(event)
                return
            async with self._slots:
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
        resolved = await self.memory.resolve(self.space, sender, task_id, name)
        if resolved is None:
            return _failed(f"No task {task_id!r} of yours is waiting for input")
        context, name = resolved
        event_id = str(event.get("event_id"))
        return Request(event_id, sender, self.space, parts, context, task_id, name)

    async def _call(self, event: dict[str, Any], request: Request) -> None:
        assert self.remote is not None and self.card is not None and self.member is not None
        call = Call(
            request, self.remote, self.member,
            streaming=self.card.streaming, flush_interval=self.options.flush_interval,
            max_reply_bytes=self.options.max_reply_bytes, on_stream=self._calls.track,
        )  # fmt: skip
        self._calls.add(call)
        try:
            answer = await call.outcome()
        finally:
            self._calls.remove(call)
        if call.unreachable:
            self.cards.want()  # read the card again until the remote is back
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
            task_id=answer.task_id, continued=request.task_id,
        )  # fmt: skip
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
        task_id = _name(data.get("task_id"))
        call = self._calls.find(sender, task_id, _name(data.get("event_id")))
        if call is not None:
            task_id = call.task_id
            call.interrupt()
        elif task_id is not None:
            if await self.memory.resolve(self.space, str(sender), task_id, None) is None:
                task_id = None
        if call is None and task_id is None:
            await self._reply(event, _failed("Nothing of yours to cancel"))
            return
        answer: dict[str, Any] = {"in_reply_to": event.get("event_id"), "status": "success"}
        if task_id is not None:
            try:
                await self.remote.cancel(task_id)
            except RemoteFailure as exc:
                answer = {**answer, "status": "failure", "error": exc.reason}
            with contextlib.suppress(BackplaneUnavailable):
                await self.memory.forget_waiting(task_id)
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
        await self._interrupt(call)

    async def _interrupt(self, call: Call) -> None:
        assert self.remote is not None
        call.interrupt()
        if call.task_id is not None:
            try:
                await self.remote.cancel(call.task_id)
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
