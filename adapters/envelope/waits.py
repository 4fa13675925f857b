"""HTTP requests waiting for the envelope that answers them.

Each waiting REQUEST (agentprotocol/0.1: ``request``) is a task in a
:class:`~protocol.envelope.TaskTable`, which bounds how many may wait at once
and gives each its deadline (the request's ``timeout``, else the default,
capped). Every verified envelope seen in a space is offered
(:meth:`Waits.offer`); the first one the task accepts as its next step —
agora/1.0: an OFFER, RESULT or ERROR whose ``payload.request_id`` is the
request's ``id``; agentprotocol/0.1: a ``response`` or ``error`` with the
same ``correlationId`` — resolves the wait with the envelope as delivered.
Only an envelope delivered in the request's own space counts (its
:class:`~adapters.kit.replies.Asked`, the same rule every gateway's answers obey).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.kit.replies import Asked
from protocol.envelope import EnvelopeError, Format, TaskTable, Verified, detect, parse


@dataclass(slots=True)
class Wait:
    asked: Asked  # the space, and the request's own envelope id its answer names
    format: Format
    deadline: float | None
    answer: asyncio.Future[dict[str, Any]]
    did: str = ""  # the did:key that signed the request


def answered_request(fmt: Format, data: Mapping[str, Any]) -> str | None:
    """The request an envelope claims to answer (unchecked), or None."""
    payload = data.get("payload")
    if not isinstance(payload, Mapping):
        return None
    ref = payload.get("request_id" if fmt is Format.AGORA else "correlationId")
    return ref if isinstance(ref, str) else None


class Waits:
    def __init__(self, *, default_timeout: float, max_timeout: float, max_waits: int):
        self.table = TaskTable(
            default_timeout=default_timeout, max_timeout=max_timeout, max_tasks=max_waits
        )
        self._waits: dict[str, Wait] = {}

    def __len__(self) -> int:
        return len(self._waits)

    def open(self, request: Verified, space: str, now: float) -> Wait:
        """Start waiting for ``request``'s answer; raises
        :class:`~protocol.envelope.LifecycleError` when the table is full
        (``too_many_tasks``) or the request id is already waiting."""
        request_id = request.task_id or request.id
        waiting = self._waits.get(request_id)
        if waiting is not None and waiting.did == request.did:
            # The same signer's request id, waiting already: a replay (401),
            # as it would be once the first has ended (the replay cache).
            raise request.replayed()
        task = self.table.start(request_id, request.payload, now, envelope_type=request.type)
        wait = Wait(
            Asked.of(space, request_id),
            request.format,
            task.deadline,
            asyncio.get_running_loop().create_future(),
            request.did,
        )
        self._waits[request_id] = wait
        return wait

    def close(self, wait: Wait) -> None:
        """Stop waiting (answered, timed out, or the caller went away)."""
        request_id = wait.asked.event_id
        if self._waits.get(request_id) is wait:
            del self._waits[request_id]
            self.table.forget(request_id)

    def fail_all(self, error: Exception) -> None:
        """End every wait with ``error`` (the hub is shutting down)."""
        for wait in list(self._waits.values()):
            if not wait.answer.done():
                wait.answer.set_exception(error)
            self.close(wait)

    def offer(self, msg: Mapping[str, Any], now: float) -> bool:
        """A verified envelope as delivered (``msg``, its ``data`` the
        envelope): does it answer a wait?"""
        data = msg.get("data")
        fmt = detect(data) if isinstance(data, Mapping) else None
        if fmt is None:
            return False
        assert isinstance(data, Mapping)
        wait = self._waits.get(answered_request(fmt, data) or "")
        if wait is None or not wait.asked.admits(msg) or wait.format is not fmt:
            return False
        if wait.answer.done():
            return False
        try:
            _, envelope, payload = parse(data)
            task = self.table.apply(
                str(data["type"]), payload, now, envelope_id=str(getattr(envelope, "id", ""))
            )
        except EnvelopeError:
            return False  # not a step this request can take (a second REQUEST, …)
        if task is None:
            return False  # STATUS, notify…: no answer
        wait.answer.set_result(dict(data))
        self.close(wait)
        return True
