"""An outbound bridge, once: a remote agent as a member of a space here.

Every outbound bridge (``[[bridges.a2a]]``, ``[[bridges.agora_http]]``,
``[[bridges.envelope]]``) lives the same life, and :class:`OutboundBridge`
lives it; a bridge is only its protocol mapping (what to send the remote for
an event, what to publish back).

- **Its agent id**, claimed when the bridge starts (:mod:`adapters.kit.claim`):
  exactly one node of a cluster holds it; the others stand by and retry the
  claim every ``retry_interval`` (default ``heartbeat_interval``), so the
  bridge moves when its holder's node dies or shuts down.
- **Its requests**: events addressed to it, from others, that answer nothing,
  assembled when streamed and served by bounded tasks (:mod:`adapters.kit.intake`);
  one too many is refused ("Bridge busy"), never dropped in silence.
- **A sender's cancel**: an addressed event ``{"cancel": true, "in_reply_to":
  <request id>}`` (what the inbound faces send when their caller stops
  waiting, :mod:`adapters.kit.asking`) stops the sender's request being
  served (:meth:`OutboundBridge.cancel_request`; the task is cancelled and
  nothing is answered — the asker no longer waits).
- **A takeover**: the new holder answers with a failure what the lost one
  left unanswered in the space's history (:mod:`adapters.kit.takeover`).
- **Its answers**: one the hub refuses for what it carries (nested deeper than
  frames may be, an integer beyond 64 bits…) is replaced by a failure saying
  why (:meth:`OutboundBridge.unpublishable`): the asker is told, not left waiting.
- **Closing**: background tasks stop, requests being served are answered
  "Bridge shutting down", the id is let go, then the bridge's own resources.

A bridge subclasses it and writes :meth:`~OutboundBridge.serve` and
:meth:`~OutboundBridge.refuse`; the other hooks have defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import structlog

from adapters.kit.claim import AgentIdClaim
from adapters.kit.intake import RequestIntake
from adapters.kit.replies import in_reply_to
from adapters.kit.takeover import answer_unanswered
from hub.adapter_host import AdapterHost, AdapterMember

log = structlog.get_logger("adapters")

#: What an answer the hub refused is replaced by says, before the hub's reason.
ANSWER_REFUSED = "The remote's answer cannot be delivered: "
#: What a lost holder's unanswered requests are told (a bridge may say it its way).
MOVED = "Bridge moved to another hub node while this request was in flight: try again"


class OutboundBridge:
    """The lifecycle every outbound bridge shares (see the module)."""

    system_spaces: tuple[str, ...] = ()
    #: The member's ``type`` (``"a2a-bridge"``) and the bridge kind in the log.
    member_type = "bridge"
    label = "bridge"
    #: The fields of an answer a failure in its place keeps, so that the sender
    #: can still name the conversation or task (:meth:`unpublishable`).
    answer_ids: tuple[str, ...] = ("conversation_id", "task_id", "context_id")

    def __init__(
        self,
        space: str,
        agent_id: str,
        *,
        max_request_bytes: int,
        max_concurrency: int,
        max_queued: int,
        retry_interval: float | None = None,
    ):
        self.space = space
        self.agent_id = agent_id
        self.retry_interval = retry_interval
        self.intake = RequestIntake(
            agent_id, space, serve=self.serve, refuse=self.refuse,
            max_request_bytes=max_request_bytes, max_concurrency=max_concurrency,
            max_queued=max_queued,
        )  # fmt: skip
        self.claim = AgentIdClaim(
            agent_id, space, self.on_message, type=self.member_type,
            registration=self.registration, on_claimed=self._claimed, label=self.label,
        )  # fmt: skip
        self._background: set[asyncio.Task[Any]] = set()

    # ── what a bridge writes ────────────────────────────────────────────

    async def serve(self, event: dict[str, Any]) -> None:
        """Serve one request (an event addressed to the bridge) and answer it."""
        raise NotImplementedError

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        """Answer ``event`` with a failure saying ``why`` (busy, lost, closing)."""
        raise NotImplementedError

    async def open(self, host: AdapterHost) -> None:
        """The bridge's own resources (its client for the remote), before the
        claim: what it keeps of ``host`` is the parts it calls."""

    async def shut(self) -> None:
        """Close what :meth:`open` made; the id is already let go."""

    def registration(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        """The capabilities and metadata registered at each claim."""
        return (), {}

    async def claimed(self, member: AdapterMember) -> None:
        """This node just took the id (before a lost holder's requests are answered)."""

    def request_keys(self, event: dict[str, Any]) -> tuple[str, ...]:
        """The ids an answer may name ``event`` by when it is a request (none: not one)."""
        event_id = event.get("event_id")
        if not isinstance(event_id, str) or in_reply_to(event) is not None or _is_cancel(event):
            return ()
        return (event_id,)

    def answer_key(self, event: dict[str, Any]) -> str | None:
        """Which request an event the bridge published answers."""
        return in_reply_to(event)

    def unpublishable(
        self, event: dict[str, Any], answer: dict[str, Any], why: str
    ) -> dict[str, Any]:
        """What is published instead of ``answer`` when the hub refuses it (``why``)."""
        kept = {key: answer[key] for key in self.answer_ids if key in answer}
        return {
            "in_reply_to": answer.get("in_reply_to", event.get("event_id")),
            "status": "failure",
            "error": f"{ANSWER_REFUSED}{why}",
            **kept,
        }

    async def moved(self, event: dict[str, Any]) -> None:
        """Answer a request a lost holder left unanswered."""
        await self.refuse(event, MOVED)

    async def on_message(self, msg: dict[str, Any]) -> None:
        """Everything the bridge's member receives (override to see more, and
        call this for the rest)."""
        if msg.get("type") == "space.event" and _is_cancel(msg) and in_reply_to(msg) is not None:
            if self.intake.to_me(msg):
                await self.cancel_request(msg)
            return
        await self.intake.feed(msg)

    async def cancel_request(self, cancel: dict[str, Any]) -> None:
        """``cancel`` (``{cancel: true, in_reply_to}``) from a sender: its request
        stops being served, unanswered."""
        self.intake.cancel(cancel.get("from"), in_reply_to(cancel))

    # ── the lifecycle ───────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        await self.open(host)
        await self.claim.claim(host.hosting)  # held from the start, or standing by
        retry = self.retry_interval or host.settings.heartbeat_interval
        self.spawn(self.claim.keep(host.hosting, retry))

    async def aclose(self) -> None:
        """Stop; requests still being served get a failure answer, not silence."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.intake.aclose()
        await self.claim.release()
        await self.shut()

    def spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` in the background until the bridge closes."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    @property
    def member(self) -> AdapterMember | None:
        """The bridge's member while this node holds its agent id."""
        return self.claim.member

    @property
    def held(self) -> asyncio.Event:
        """Set while this node holds the bridge's agent id."""
        return self.claim.held

    async def answer(self, event: dict[str, Any], data: dict[str, Any]) -> None:
        """Publish ``data`` addressed to ``event``'s sender: a failure instead
        when the hub refuses ``data`` (:meth:`unpublishable`); logged, never
        raised, when nothing can be published."""
        await self.claim.answer(
            event, data, failure=lambda why: self.unpublishable(event, data, why)
        )

    async def _claimed(self, member: AdapterMember, seq: int) -> None:
        await self.claimed(member)
        if seq:
            orphans = answer_unanswered(
                member, self.space, seq, request_keys=self.request_keys,
                answer_key=self.answer_key, answer=self.moved, label=self.label,
            )  # fmt: skip
            self.spawn(orphans)


def _is_cancel(event: dict[str, Any]) -> bool:
    data = event.get("data")
    return isinstance(data, dict) and data.get("cancel") is True
