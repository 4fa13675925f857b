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
itself is answered ``{status, task_id, state: "canceled"}``.

Exactly one node of a cluster holds ``agent_id``; the others stand by and
retry the claim, and the node that takes over answers with a failure what the
lost holder left unanswered (:mod:`adapters.kit.takeover`). Calls per bridge,
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
from adapters.kit.holding import Holding
from adapters.kit.intake import RequestIntake
from adapters.kit.replies import in_reply_to
from adapters.kit.takeover import answer_unanswered
from hub.adapter_host import (
    AdapterHost,
    BackplaneUnavailable,
    RequestFailed,
    VirtualMember,
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


class A2aOutbound:
    """One ``[[bridges.a2a]]`` entry."""

    system_spaces: tuple[str, ...] = ()

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
        self.space = space
        self.agent_id = agent_id
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.options = options or OutboundOptions()
        self.held = Holding(
            agent_id, space, self._on_message, type="a2a-bridge",
            registration=self._registration, on_claimed=self._claimed, label="a2a bridge",
        )  # fmt: skip
        o = self.options
        self.cards = CardWatch(
            self._read_card, self._card_changed, retry=o.card_retry,
            retry_max=o.card_retry_max, refresh=o.card_refresh, name=agent_id,
        )  # fmt: skip
        self.remote: RemoteAgent | None = None
        self.memory: BridgeMemory | None = None
        self._slots = asyncio.Semaphore(self.options.max_concurrency)
        self.intake = RequestIntake(
            agent_id, space, serve=self._serve,
            refuse=lambda event, why: self._reply(event, _failed(why)),
            max_request_bytes=o.max_body_bytes, max_concurrency=o.max_concurrency,
            max_queued=o.max_queued,
        )  # fmt: skip
        self._calls = CallTable()
        self._background: list[asyncio.Task[None]] = []

    # ── lifecycle, the claim and the card ────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        s = host.settings
        self.timeout = self.timeout or s.bridge_timeout
        retry = self.options.retry_interval or s.heartbeat_interval
        self.memory = BridgeMemory(host.kv, self.agent_id, self.options.context_ttl)
        self.remote = RemoteAgent(
            self.url, headers=self.headers, timeout=self.timeout,
            max_connections=self.options.max_concurrency,
            max_body_bytes=self.options.max_body_bytes,
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        self._background += [
            loop.create_task(self.cards.run()),
            loop.create_task(self.held.keep(host, retry)),
        ]

    async def aclose(self) -> None:
        """Stop; events still being served get a failure answer, not silence."""
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.intake.aclose()
        await self.held.release()
        if self.remote is not None:
            await self.remote.aclose()

    @property
    def member(self) -> VirtualMember | None:
        """The bridge's member while this node holds its agent id."""
        return self.held.member

    @property
    def holding(self) -> asyncio.Event:
        """Set while this node holds the bridge's agent id."""
        return self.held.holding

    @property
    def card(self) -> RemoteCard | None:
        return self.cards.card

    @property
    def card_read(self) -> asyncio.Event:
        """Set whenever the card was read and the hub told of it."""
        return self.cards.read

    def _registration(self) -> tuple[tuple[str, ...], dict[str, Any]]:
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
        capabilities, metadata = self._registration()
        agent = {"id": self.agent_id, "capabilities": list(capabilities), "metadata": metadata}
        try:
            await member.request({"type": "agent.register", "agent": agent})
        except (RequestFailed, TimeoutError) as exc:
            log.warning("a2a bridge not registered", agent_id=self.agent_id, reason=str(exc))

    async def _claimed(self, member: VirtualMember, seq: int) -> None:
        if self.card is not None and self._registration()[0] != member.record.capabilities:
            await self._card_changed(self.card)  # the card came while claiming
        moved = RemoteOutcome(
            "failure",
            error="Bridge moved to another hub node while this request was in flight: try again",
        )
        orphans = answer_unanswered(
            member, self.space, seq, request_keys=_request_keys, answer_key=in_reply_to,
            answer=lambda event: self._reply(event, moved), label="a2a bridge",
        )  # fmt: skip
        task = asyncio.get_running_loop().create_task(orphans)
        self._background = [t for t in self._background if not t.done()] + [task]

    # ── events addressed to the bridge ──────────────────────────────────

    async def _on_message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "space.event.cancel" and msg.get("reason") == "receiver_cancelled":
            await self._receiver_cancelled(msg)
        elif kind == "error":
            self._calls.refused(msg)
        else:
            await self.intake.feed(msg)

    async def _serve(self, event: dict[str, Any]) -> None:
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
        await self.held.answer(event, {**answer, "task_id": task_id})

    async def _receiver_cancelled(self, notice: dict[str, Any]) -> None:
        """The sender cancelled its copy of a reply stream (``space.event.cancel``
        as a receiver; the hub tells the bridge): the remote task is cancelled
        (``CancelTask``) and the stream ends."""
        assert self.remote is not None
        stream_id = str(notice.get("event_id"))
        call = self._calls.streaming(stream_id.partition("/")[2] + ".")
        if call is None or call.request.sender != notice.get("from"):
            return
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
        await self.held.answer(event, data)


def _data(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data")
    return data if isinstance(data, dict) else {}


def _failed(error: str) -> RemoteOutcome:
    return RemoteOutcome("failure", error=error)


def _name(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_NAME else None


def _request_keys(event: dict[str, Any]) -> tuple[str, ...]:
    """A request to the remote agent is any event that answers nothing and
    cancels nothing."""
    event_id = event.get("event_id")
    data = event.get("data")
    cancel = isinstance(data, dict) and data.get("cancel") is True
    if not isinstance(event_id, str) or in_reply_to(event) is not None or cancel:
        return ()
    return (event_id,)
