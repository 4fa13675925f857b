"""What a bridge finds on taking over from a lost holder: requests nobody answered.

An outbound bridge's agent id is held by one node of a cluster. When that
node dies, events addressed to the bridge between its death and a standby's
claim reach nobody, and the calls it had in flight die with it. The space's
history still has them: :func:`unanswered` reads it back (the bridge sees
exactly what it would have received, and what it published itself) and
returns the requests addressed to the bridge that have no answer from it, so
the new holder answers each one with a failure instead of leaving its sender
waiting in silence (:func:`answer_unanswered`, what every outbound bridge does
once :class:`~adapters.kit.claim.AgentIdClaim` has claimed its id). Only events up to
``upto_seq`` (the space's ``seq`` when the new holder joined) are looked at:
later ones reach it live.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from hub.adapter_host import BackplaneUnavailable, RequestFailed

#: Most history read back on a takeover (the default ``history_size``).
MAX_EVENTS = 1000
_ANSWERS = frozenset({"space.event", "space.event.delta"})

log = structlog.get_logger("adapters")

RequestKeys = Callable[[dict[str, Any]], Sequence[str]]
AnswerKey = Callable[[dict[str, Any]], str | None]


class Reader(Protocol):
    agent_id: str

    async def request(self, msg: dict[str, Any], timeout: float = ...) -> dict[str, Any]: ...


async def unanswered(
    member: Reader,
    space: str,
    upto_seq: int,
    *,
    request_keys: RequestKeys,
    answer_key: AnswerKey,
    max_events: int = MAX_EVENTS,
) -> list[dict[str, Any]]:
    """Events (oldest first) addressed to ``member`` in ``space`` with
    ``seq <= upto_seq`` that ``request_keys`` calls requests (the keys an
    answer may refer to them by; none: not a request) and that no event
    published by ``member`` answers (``answer_key`` of an own event, or of
    the first delta of an own stream, is one of the request's keys)."""
    me = member.agent_id
    requests: list[tuple[Sequence[str], dict[str, Any]]] = []
    answered: set[str] = set()
    before: int | None = upto_seq + 1
    seen = 0
    while before is not None and seen < max_events:
        page = await member.request(
            {"type": "space.history", "space": space, "limit": 100, "before_seq": before}
        )
        events = page.get("events") or []
        seen += len(events) or max_events
        before = page.get("next_before_seq")
        for event in events:
            kind = event.get("type")
            if event.get("from") == me and kind in _ANSWERS:
                # An answer streamed as deltas names its request in its first delta.
                if (key := answer_key(event)) is not None:
                    answered.add(key)
            elif kind == "space.event" and _addressed_to(event, me):
                if keys := request_keys(event):
                    requests.append((keys, event))
    found = [e for keys, e in requests if answered.isdisjoint(keys)]
    found.sort(key=lambda e: e.get("seq", 0))
    return found


async def answer_unanswered(
    member: Reader,
    space: str,
    upto_seq: int,
    *,
    request_keys: RequestKeys,
    answer_key: AnswerKey,
    answer: Callable[[dict[str, Any]], Awaitable[None]],
    label: str,
) -> None:
    """``answer`` (with a failure) each event :func:`unanswered` finds; when
    the history cannot be read, say so in the log (``label`` names the bridge
    kind) and answer none. ``upto_seq`` 0: nothing came before the claim."""
    if not upto_seq:
        return
    try:
        orphans = await unanswered(
            member, space, upto_seq, request_keys=request_keys, answer_key=answer_key
        )
    except (RequestFailed, TimeoutError, BackplaneUnavailable) as exc:
        log.warning(f"{label} cannot read back history", agent_id=member.agent_id, reason=str(exc))
        return
    if orphans:
        log.warning(
            f"{label} answers requests its lost holder left",
            agent_id=member.agent_id,
            count=len(orphans),
        )
    for event in orphans:
        await answer(event)


def _addressed_to(event: dict[str, Any], agent_id: str) -> bool:
    to = event.get("to")
    return to == agent_id or (isinstance(to, list) and agent_id in to)
