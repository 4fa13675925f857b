"""What this node's members were told of each space's membership, and telling
them what they missed while the node was cut off from the cluster (contract §21).

Why: ``space.members`` events carry no seq. A node whose link to Redis is down
while another node announces a join or a leave (after a Redis restart every
node reconnects on its own backoff, so one comes back later than another)
never receives that event, and the history cannot fill it in: the gap filler
(:mod:`hub.handlers.gaps`) restores sequenced events only. The node's members
would keep a departed agent in their lists, and could see a newcomer's events
without ever having heard of its join.

How: the node keeps, per space it has members of, the members they were told
of — read when its first member joins, then changed by every ``space.members``
event it fans out (:meth:`MemberViews.seen`). When its link to the cluster is
back (the backplane is ready again), each such space's messages are held back
(:meth:`GapFiller.hold <hub.handlers.gaps.GapFiller.hold>`), presence is read,
and what differs — in presence but not in the view: joined; the reverse: left
— goes to the node's own members as one ``space.members`` event, before
anything of the space that arrived meanwhile. Only this node's members hear
it: every node reconciles its own. A change that reached both the view and
presence needs nothing; one announced late, after the reconciliation told it,
is heard twice — never not at all.

Spaces above ``member_events_limit`` keep no view (no changes are told there).
A node on the memory backplane has no link to lose and keeps no views.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

import orjson
import structlog

from hub.cluster.backplane import Delivery
from hub.cluster.presence import Presence
from hub.core.registry import Registry
from hub.handlers.gaps import GapFiller
from hub.handlers.member_events import Batch

#: Spaces whose presence is read at once while reconciling.
CONCURRENCY = 32

#: ``members_list_limit`` and ``member_events_limit`` of a space.
Limits = Callable[[str], tuple[int, int]]

_MEMBERS = b'{"type":"space.members"'


def is_members_event(message: Delivery) -> bool:
    """A ``space.members`` event (never sequenced, never part of a stream)."""
    return message.seq is None and message.frame.startswith(_MEMBERS)


class MemberViews:
    """Per space with members on this node: the members they were told of."""

    def __init__(
        self,
        registry: Registry[Any],
        presence: Presence,
        gaps: GapFiller,
        fan_out: Callable[[Delivery], None],
        limits: Limits,
    ):
        self._registry = registry
        self._presence = presence
        self._gaps = gaps
        self._fan_out = fan_out
        self._limits = limits
        self._views: dict[str, set[str]] = {}
        #: Spaces being reconciled, and those of them the link came back for
        #: again meanwhile (read once more before they are released).
        self._reconciling: set[str] = set()
        self._again: set[str] = set()
        self._log = structlog.get_logger("hub.handlers.member_views")
        #: ``space.members`` events sent by reconciling (tests read it).
        self.told = 0

    def __contains__(self, space: str) -> bool:
        return space in self._views

    def started(self, space: str, members: list[str], count: int) -> bool:
        """The node's first member of ``space`` joined and read its members:
        the view starts from them. False when they are not all of them (more
        than were read): :meth:`complete` reads the rest."""
        if count > self._limits(space)[1]:
            self._views.pop(space, None)
            return True
        if count > len(members):
            return False
        self._views[space] = set(members)
        return True

    async def complete(self, space: str) -> None:
        """Start ``space``'s view from presence (every member, up to
        ``member_events_limit``)."""
        events_limit = self._limits(space)[1]
        members, count = await self._presence.space_members(space, events_limit)
        if count <= events_limit:
            self._views[space] = set(members)

    def seen(self, message: Delivery) -> None:
        """A ``space.members`` event is being fanned out to this node's members."""
        view = self._views.get(message.space)
        if view is None:
            return
        try:
            event = orjson.loads(message.frame)
        except orjson.JSONDecodeError:
            return
        joined, left = _ids(event.get("joined")), _ids(event.get("left"))
        # In both: joined and left within one window, in either order — its
        # membership is what it was before (hub/handlers/member_events.py).
        both = joined & left
        view |= joined - both
        view -= left - both

    def forget_elsewhere(self) -> None:
        """Drop the views of spaces that have no member here any more."""
        for space in [s for s in self._views if not self._registry.has_space(s)]:
            del self._views[space]

    def hold(self) -> list[str]:
        """Hold back the messages of every space with a view (the link is
        back): the spaces to :meth:`reconcile`, or to :meth:`release`."""
        self.forget_elsewhere()
        held = []
        for space in self._views:
            if self._gaps.hold(space):
                held.append(space)
            elif space in self._reconciling:
                self._again.add(space)  # its reading may predate this outage
        return held

    def release(self, spaces: Iterable[str]) -> None:
        for space in spaces:
            self._gaps.release(space)

    async def reconcile(self, spaces: list[str]) -> None:
        """Tell this node's members of each held space what changed while the
        link was down, then release the space. Never raises: a space whose
        presence cannot be read keeps its view and is released as it was."""
        for start in range(0, len(spaces), CONCURRENCY):
            await asyncio.gather(
                *(self._reconcile(space) for space in spaces[start : start + CONCURRENCY]),
                return_exceptions=True,
            )

    async def _reconcile(self, space: str) -> None:
        self._reconciling.add(space)
        try:
            while True:
                self._again.discard(space)
                try:
                    await self._tell(space)
                except Exception:
                    if space not in self._again:
                        raise
                if space not in self._again:
                    return
        finally:
            self._reconciling.discard(space)
            self._again.discard(space)
            self._gaps.release(space)

    async def _tell(self, space: str) -> None:
        """Read ``space``'s members; tell this node's members what differs."""
        view = self._views.get(space)
        if view is None:
            return
        list_limit, events_limit = self._limits(space)
        members, count = await self._presence.space_members(space, events_limit)
        if count > events_limit:
            self._views.pop(space, None)  # too big to be told of changes
            return
        now = set(members)
        joined = [agent for agent in members if agent not in view]
        left = sorted(view - now)
        self._views[space] = now
        if not joined and not left:
            return
        listed = members if count <= list_limit else None
        missed = Batch((*((a, True) for a in joined), *((a, False) for a in left)))
        self._fan_out(Delivery(space, missed.frame(space, listed, count)))
        self.told += 1
        self._log.info(
            "membership changes missed while cut off: told",
            space=space,
            joined=len(joined),
            left=len(left),
        )


def _ids(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()
