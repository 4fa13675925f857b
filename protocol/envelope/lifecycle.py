"""The task lifecycle of seed 000: REQUEST → (OFFER → ACCEPT →) RESULT / ERROR.

::

    PENDING ──OFFER──▶ NEGOTIATING ──ACCEPT──▶ PROCESSING ──RESULT──▶ COMPLETED
       │                  │  ▲ OFFER               │
       ├──RESULT──────────┼──┴─────────────────────┼──────────────────▶ COMPLETED
       └──ERROR / timeout─┴──ERROR / timeout───────┴──ERROR / timeout─▶ FAILED

Every transition goes through :data:`TRANSITIONS`; anything else raises
:class:`LifecycleError`. agentprotocol/0.1 maps onto it: ``request`` →
REQUEST, ``response`` → RESULT, ``error`` → ERROR.

Time is an argument. A task's deadline is the REQUEST's ``timeout`` (ms; the
table's default and cap apply); while negotiating, also the last offer's
``ttl`` — once every offer has lapsed nothing can be accepted. Only
:meth:`expire` turns a lapsed task into FAILED with code 408, so the caller
learns of every timeout in one place; a message arriving after the deadline
is refused and left for :meth:`expire`.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ValidationError

from protocol.envelope.errors import LifecycleError, Reason, describe, malformed
from protocol.envelope.models import AGENTPROTOCOL_PAYLOADS, AGORA_PAYLOADS, AgentProtocolType
from protocol.envelope.models import AgoraType as _T
from protocol.envelope.verification import Verified

MAX_OFFERS_PER_TASK = 64
TIMEOUT_CODE = 408


class TaskState(StrEnum):
    PENDING = "PENDING"
    NEGOTIATING = "NEGOTIATING"
    PROCESSING = "PROCESSING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


TERMINAL = frozenset({TaskState.COMPLETED, TaskState.FAILED})

_S = TaskState
TRANSITIONS: dict[tuple[TaskState, _T], TaskState] = {
    (_S.PENDING, _T.OFFER): _S.NEGOTIATING,
    (_S.NEGOTIATING, _T.OFFER): _S.NEGOTIATING,
    (_S.NEGOTIATING, _T.ACCEPT): _S.PROCESSING,
    (_S.PENDING, _T.RESULT): _S.COMPLETED,
    (_S.PROCESSING, _T.RESULT): _S.COMPLETED,
    (_S.PENDING, _T.ERROR): _S.FAILED,
    (_S.NEGOTIATING, _T.ERROR): _S.FAILED,
    (_S.PROCESSING, _T.ERROR): _S.FAILED,
}

_AGENTPROTOCOL_EVENTS = {
    AgentProtocolType.REQUEST: _T.REQUEST,
    AgentProtocolType.RESPONSE: _T.RESULT,
    AgentProtocolType.ERROR: _T.ERROR,
}
TASK_TYPES = frozenset({_T.REQUEST, _T.OFFER, _T.ACCEPT, _T.RESULT, _T.ERROR})


def task_event(envelope_type: str) -> _T | None:
    """The lifecycle event of an envelope type of either format; None if it has none."""
    if envelope_type in _T.__members__:
        event = _T(envelope_type)
        return event if event in TASK_TYPES else None
    try:
        return _AGENTPROTOCOL_EVENTS.get(AgentProtocolType(envelope_type))
    except ValueError:
        return None


def typed_payload(envelope_type: str, payload: Mapping[str, Any] | BaseModel) -> BaseModel:
    """``payload`` as its model (already-typed payloads pass through)."""
    if isinstance(payload, BaseModel):
        return payload
    if envelope_type in _T.__members__:
        model = AGORA_PAYLOADS[_T(envelope_type)]
    else:
        model = AGENTPROTOCOL_PAYLOADS[AgentProtocolType(envelope_type)]
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise malformed(f"invalid {envelope_type} payload: {describe(exc)}") from None


def _ref(payload: BaseModel) -> str | None:
    ref = getattr(payload, "request_id", None) or getattr(payload, "correlationId", None)
    return ref if isinstance(ref, str) else None


@dataclass(slots=True)
class Task:
    """One request's progress. ``deadline`` is absolute (same clock as ``now``)."""

    request_id: str
    created_at: float
    deadline: float | None = None
    state: TaskState = TaskState.PENDING
    offers: dict[str, float | None] = field(default_factory=dict)  # offer id → expiry
    accepted_offer: str | None = None
    error_code: int | str | None = None
    error_message: str | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    @property
    def deadline_at(self) -> float | None:
        """When :meth:`expire` will fail the task, if nothing happens first."""
        if self.done:
            return None
        deadline = self.deadline
        if self.state is TaskState.NEGOTIATING and self.offers:
            expiries = list(self.offers.values())
            if None not in expiries:
                last = max(e for e in expiries if e is not None)
                deadline = last if deadline is None else min(deadline, last)
        return deadline

    def _refusal(self, event: str, why: str) -> LifecycleError:
        return LifecycleError(
            Reason.ILLEGAL_TRANSITION,
            f"{event} for request {self.request_id[:64]!r} ({self.state}): {why}",
            task_id=self.request_id,
            state=self.state.value,
            event=event,
        )

    def apply(
        self,
        envelope_type: str,
        payload: Mapping[str, Any] | BaseModel,
        now: float,
        *,
        envelope_id: str | None = None,
    ) -> TaskState:
        """Advance by one message; raise :class:`LifecycleError` when it does not fit.

        ``envelope_id`` is the message's own id; an OFFER needs it, since an
        ACCEPT names the offer it accepts.
        """
        event = task_event(envelope_type)
        if event is None or event is _T.REQUEST:
            raise self._refusal(envelope_type, "not a message that advances a task")
        typed = typed_payload(envelope_type, payload)
        ref = _ref(typed)
        if event is not _T.ACCEPT and ref != self.request_id:
            raise self._refusal(event, f"it answers request {str(ref)[:64]!r}")
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise self._refusal(event, "not allowed in this state")
        deadline = self.deadline_at
        if deadline is not None and now >= deadline:
            raise self._refusal(event, "the task has timed out")
        if event is _T.OFFER:
            self._offer(typed, now, envelope_id)
        elif event is _T.ACCEPT:
            self._accept(typed, now)
        elif event is _T.ERROR:
            self.error_code = getattr(typed, "code", None)
            self.error_message = getattr(typed, "message", None)
        self.state = nxt
        return self.state

    def _offer(self, payload: BaseModel, now: float, envelope_id: str | None) -> None:
        if not envelope_id:
            raise ValueError("an OFFER needs its envelope id")
        if envelope_id in self.offers:
            raise self._refusal(_T.OFFER, f"offer {envelope_id[:64]!r} was already made")
        if len(self.offers) >= MAX_OFFERS_PER_TASK:
            raise self._refusal(_T.OFFER, f"already {MAX_OFFERS_PER_TASK} offers")
        ttl = getattr(payload, "ttl", None)
        self.offers[envelope_id] = None if ttl is None else now + ttl / 1000.0

    def _accept(self, payload: BaseModel, now: float) -> None:
        offer_id = getattr(payload, "offer_id", None)
        if offer_id not in self.offers:
            raise self._refusal(_T.ACCEPT, f"no offer {str(offer_id)[:64]!r} on this request")
        expiry = self.offers[offer_id]
        if expiry is not None and now >= expiry:
            raise self._refusal(_T.ACCEPT, f"offer {offer_id[:64]!r} has expired")
        self.accepted_offer = offer_id

    def expire(self, now: float) -> bool:
        """Fail the task with 408 if its deadline has passed; True if it did."""
        deadline = self.deadline_at
        if deadline is None or now < deadline:
            return False
        self.state = TaskState.FAILED
        self.error_code = TIMEOUT_CODE
        self.error_message = "timed out"
        return True


class TaskTable:
    """The open tasks, by request id, bounded.

    A task leaves the table as soon as it completes or fails; :meth:`expire`
    hands back the ones that timed out (answer each with an ERROR 408).
    Durations given here are seconds; payload ``timeout`` / ``ttl`` are ms.
    """

    def __init__(
        self,
        *,
        default_timeout: float | None = None,
        max_timeout: float | None = None,
        max_tasks: int = 10_000,
    ):
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.max_tasks = max_tasks
        self._tasks: dict[str, Task] = {}
        self._offers: dict[str, str] = {}  # offer id → request id
        self._deadlines: list[tuple[float, str]] = []  # lazy heap; stale entries skipped

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._tasks

    def get(self, request_id: str) -> Task | None:
        return self._tasks.get(request_id)

    def _timeout(self, payload: BaseModel) -> float | None:
        ms = getattr(payload, "timeout", None)
        seconds = self.default_timeout if ms is None else ms / 1000.0
        if self.max_timeout is not None:
            seconds = self.max_timeout if seconds is None else min(seconds, self.max_timeout)
        return seconds

    def _schedule(self, task: Task) -> None:
        deadline = task.deadline_at
        if deadline is not None:
            heapq.heappush(self._deadlines, (deadline, task.request_id))

    def _forget(self, task: Task) -> None:
        self._tasks.pop(task.request_id, None)
        for offer_id in task.offers:
            self._offers.pop(offer_id, None)

    def forget(self, request_id: str) -> None:
        """Stop tracking a request (its asker went away)."""
        task = self._tasks.get(request_id)
        if task is not None:
            self._forget(task)

    def start(
        self,
        request_id: str,
        payload: Mapping[str, Any] | BaseModel,
        now: float,
        *,
        envelope_type: str = _T.REQUEST.value,
    ) -> Task:
        """Track a new REQUEST (agentprotocol: ``request``, keyed by ``correlationId``)."""
        if not request_id:
            raise malformed("a request needs an id")
        if request_id in self._tasks:
            raise LifecycleError(
                Reason.ILLEGAL_TRANSITION,
                f"request {request_id[:64]!r} is already open",
                task_id=request_id,
                event=_T.REQUEST.value,
            )
        if len(self._tasks) >= self.max_tasks:
            raise LifecycleError(
                Reason.TOO_MANY_TASKS,
                f"{self.max_tasks} requests are already open",
                task_id=request_id,
                event=_T.REQUEST.value,
            )
        typed = typed_payload(envelope_type, payload)
        timeout = self._timeout(typed)
        task = Task(request_id, now, None if timeout is None else now + timeout)
        self._tasks[request_id] = task
        self._schedule(task)
        return task

    def apply(
        self,
        envelope_type: str,
        payload: Mapping[str, Any] | BaseModel,
        now: float,
        *,
        envelope_id: str,
        task_id: str | None = None,
    ) -> Task | None:
        """Route one message to its task and advance it.

        A REQUEST opens a task (keyed by ``task_id``, default ``envelope_id``);
        an ACCEPT finds its task through the offer it names; the others through
        ``payload.request_id`` / ``payload.correlationId``. Returns the task,
        or None for types outside the lifecycle (HELLO, STATUS, notify …).
        """
        event = task_event(envelope_type)
        if event is None:
            return None
        typed = typed_payload(envelope_type, payload)
        if event is _T.REQUEST:
            return self.start(task_id or envelope_id, typed, now, envelope_type=envelope_type)
        if event is _T.ACCEPT:
            ref = self._offers.get(getattr(typed, "offer_id", ""))
        else:
            ref = _ref(typed)
        task = self._tasks.get(ref) if ref is not None else None
        if task is None:
            raise LifecycleError(
                Reason.UNKNOWN_TASK,
                f"{event} answers no open request",
                task_id=ref,
                event=event.value,
            )
        task.apply(envelope_type, typed, now, envelope_id=envelope_id)
        if event is _T.OFFER:
            self._offers[envelope_id] = task.request_id
        if task.done:
            self._forget(task)
        else:
            self._schedule(task)
        return task

    def apply_verified(self, envelope: Verified, now: float) -> Task | None:
        """:meth:`apply` for a verified envelope of either format."""
        return self.apply(
            envelope.type,
            envelope.payload,
            now,
            envelope_id=envelope.id,
            task_id=envelope.task_id,
        )

    def next_deadline(self) -> float | None:
        """The earliest moment :meth:`expire` may have something to report."""
        while self._deadlines:
            deadline, request_id = self._deadlines[0]
            task = self._tasks.get(request_id)
            if task is not None and task.deadline_at == deadline:
                return deadline
            heapq.heappop(self._deadlines)
        return None

    def expire(self, now: float) -> list[Task]:
        """Fail and remove every task whose deadline has passed (oldest first)."""
        expired = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, request_id = heapq.heappop(self._deadlines)
            task = self._tasks.get(request_id)
            if task is not None and task.expire(now):
                self._forget(task)
                expired.append(task)
        return expired
