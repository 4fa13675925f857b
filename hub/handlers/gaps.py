"""A node that missed part of a space's messages fills the gap from history.

Redis pub/sub delivers a space's messages to a node in seq order, every seq
once, while the node's subscription stands. When the node's link drops and
comes back (or Redis restarts), messages published meanwhile never reach it:
the next one it receives skips seqs. The backplane reports that skip
(``missed``), and before delivering anything newer the node reads the
missing messages from the space's history and delivers them to its members
exactly as they would have arrived — so members that stayed connected lose
nothing either, and the skip costs them only latency.

While a gap is being filled, newer messages of that space are deferred (in
order) and delivered right after. When the history no longer has what was
missed (trimmed, or Redis lost it), the space's local connections are closed
with ``UNAVAILABLE`` / 1013: they reconnect and resume from their own
position, and learn ``recovered: false`` if it cannot be done — never a
silent gap. (Virtual members cannot reconnect; they just carry on.)

A space can also be *held* (:meth:`GapFiller.hold`): its messages are
deferred in the same way while the node catches up on something else it
missed — the membership changes of its time away
(:mod:`hub.handlers.member_views`) — and delivered at :meth:`GapFiller.release`.
A gap reported while a space is held is filled when it is released, before
what was deferred.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from hub.cluster.backplane import Delivery, SpaceHistory
from hub.core.peer import PeerKind
from hub.core.registry import Registry
from protocol.errors import CloseCode, ErrorCode

# Recorded messages read per round trip while filling a gap.
PAGE = 200
# Newer messages deferred for one space while its gap is filled; beyond it the
# gap is given up (members resume instead).
MAX_DEFERRED = 20_000


class _Lost(Exception):
    pass


class GapFiller:
    """Fills the gaps the backplane reports, one task per space."""

    def __init__(
        self,
        backplane: SpaceHistory,
        registry: Registry[Any],
        deliver: Callable[[Delivery], None],
        spawn: Callable[[Any], None],
    ):
        self.backplane = backplane
        self.registry = registry
        self._deliver = deliver
        self._spawn = spawn
        #: Spaces being filled, with the newer messages deferred meanwhile.
        self.filling: dict[str, list[Delivery]] = {}
        self._broken: set[str] = set()
        #: Spaces held (:meth:`hold`), with the gap reported meanwhile, if any.
        self._held: dict[str, tuple[int, int] | None] = {}
        self._log = structlog.get_logger("hub.handlers.gaps")
        self.filled = 0  # messages delivered from history (metrics, tests)

    def missed(self, space: str, after: int, upto: int) -> None:
        """Messages ``after < seq < upto`` of ``space`` never arrived."""
        if not self.registry.has_space(space):
            return
        if space in self.filling:
            if space in self._held and self._held[space] is None:
                self._held[space] = (after, upto)  # filled when the space is released
                return
            self._broken.add(space)  # a second gap while filling the first
            return
        self.filling[space] = []
        self._start_fill(space, after, upto)

    def lost(self, space: str) -> None:
        """The space's history may have lost what its members received (its
        epoch changed under them): they reconnect and resume, and learn
        ``recovered: false``."""
        if space in self.filling:
            self._broken.add(space)  # the fill gives up when it ends
        elif self.registry.has_space(space):
            self._give_up(
                space, 0, 0, f"the history of {space!r} may have been lost: reconnect and resume"
            )

    def defer(self, env: Delivery) -> bool:
        """Keep ``env`` back while its space's gap is filled."""
        deferred = self.filling.get(env.space)
        if deferred is None:
            return False
        deferred.append(env)
        if len(deferred) > MAX_DEFERRED:
            self._broken.add(env.space)
        return True

    def hold(self, space: str) -> bool:
        """Defer ``space``'s messages until :meth:`release`; False (nothing
        held) when it is being filled or held already, or has no member here."""
        if space in self.filling or not self.registry.has_space(space):
            return False
        self.filling[space] = []
        self._held[space] = None
        return True

    def release(self, space: str) -> None:
        """Deliver what :meth:`hold` deferred — after filling the gap reported
        meanwhile, if one was."""
        if space not in self._held:
            return
        gap = self._held.pop(space)
        if gap is not None:
            self._start_fill(space, *gap)  # what was deferred goes out after it
            return
        if space in self._broken:  # lost, or too much deferred, while held
            self._broken.discard(space)
            self._give_up(space, 0, 0)
        for env in self.filling.pop(space, ()):
            self._deliver(env)

    def _start_fill(self, space: str, after: int, upto: int) -> None:
        """Fill the gap of ``space`` (already in :attr:`filling`) in the background."""
        self._log.info("missed messages: filling from history", space=space, after=after, upto=upto)
        self._spawn(self._fill(space, after, upto))

    async def _fill(self, space: str, after: int, upto: int) -> None:
        ok = False
        try:
            next_seq = after + 1
            while next_seq < upto and space not in self._broken:
                page = await self.backplane.history(space, after=next_seq - 1, limit=PAGE)
                events = [e for e in page.events if e.seq is not None and e.seq < upto]
                if not events:
                    raise _Lost
                for env in events:
                    if env.seq != next_seq:
                        raise _Lost
                    self._deliver(env)
                    self.filled += 1
                    next_seq += 1
            ok = space not in self._broken
        except asyncio.CancelledError:
            raise
        except Exception:
            ok = False
        finally:
            self._broken.discard(space)
            if not ok:
                self._give_up(space, after, upto)
            # Still filling while the deferred ones go out (no await in between),
            # so "not filling" means everything received has been delivered.
            for env in self.filling.get(space, ()):
                self._deliver(env)
            self.filling.pop(space, None)

    def _give_up(self, space: str, after: int, upto: int, reason: str = "") -> None:
        closed = 0
        for member in self.registry.members(space):
            if member.kind is not PeerKind.SOCKET:
                continue  # a virtual member: it cannot reconnect
            member.close_for(
                CloseCode.TRY_AGAIN_LATER,
                ErrorCode.UNAVAILABLE,
                reason or f"this node missed events of {space!r}: reconnect and resume",
            )
            closed += 1
        self._log.warning(
            "missed events could not be filled from history",
            space=space,
            after=after,
            upto=upto,
            closed=closed,
        )
