"""Coalesced ``space.members`` announcements: a leading-edge throttle per space
that coalesces changes and never drops one (contract §21).

Why: every join and leave of a space used to be its own ``space.members``
event to every other member, each with a presence read and (in a small space)
the member list. In a reconnect storm or a mass departure a member of many
spaces received tens of thousands of such frames within seconds and was
closed 4008 as a slow consumer — for traffic it never asked for.

How: the first change of a space with no open window is announced at once,
exactly as before, and opens a window of ``interval`` seconds. Changes during
the window are held; when it ends, what is held goes out as ONE announcement
(one presence read, one encoded frame) and the window opens again; when
nothing is held it closes. ``interval`` 0 announces every change at once.

Never dropped: a batch names every change it holds. An agent that joined and
left within one window is in both ``joined`` and ``left`` (and one that left
and came back too): its membership is then what it was before the window,
and the recipients heard of both changes. A batch holds at most one join and
one leave per agent; an agent's third change in one window (joined, left,
joined) seals the batch and starts the next, so no batch ever hides an
order. The same change twice in a row (a rejoin on another node) counts once.

Joins before their agent's events: an agent's event must not reach a member
before the announcement of its join. :meth:`MemberEvents.announce_held` sends
what a space's window holds at once when it holds a change of the agent about
to publish (hub/node/node.py runs it before every publishing action). The
announcement is carried by the backplane before the event is queued on it, so
every node delivers it first: windows are per node, and an agent's events
go through the node that holds its changes.

One at a time: a space's announcements from this node go out in order — the
window's lock covers the leading announcement, each window's end and each
early send. Timers: one task per open window (not per member), all cancelled
by :meth:`MemberEvents.aclose`, which sends what they hold once. A batch the
cluster could not take (:class:`~hub.errors.BackplaneUnavailable`) is kept,
ahead of what arrived since, and retried at the window's next end, backing
off: nothing is lost.

Not even when the node dies (contract §8): a leave held by a window is also
noted in presence (the caller writes the note before the membership goes,
and passes ``noted``), and the batch carries the agents noted so that their
notes are dropped once it is announced; a dead node's reaper announces what
its notes still name. And not reordered across nodes: a batch the window
held is marked ``held`` — its leaves are checked when it is announced, and an
agent that is a member again (it reconnected elsewhere and rejoined, told at
once there) is listed in both ``joined`` and ``left`` (hub/handlers/membership.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hub.errors import BackplaneUnavailable
from protocol import codec

#: Longest wait between two attempts at a batch the backplane refused.
RETRY_MAX_DELAY = 5.0

#: A space's members (at most ``members_list_limit`` ids) and exact count.
Listing = tuple[list[str], int]


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes of one space to announce together, in order of arrival: each
    an agent id and whether it joined (``True``) or left; an agent at most
    once each way. ``listing`` is the space's members when the caller has
    just read them (a join), else ``None``: the announcer reads them."""

    changes: tuple[tuple[str, bool], ...]
    listing: Listing | None = None
    #: Agents whose leave here is noted in presence (dropped once announced).
    noted: tuple[str, ...] = ()
    #: Held in a window (not the leading change): its leaves are checked
    #: against presence when it is announced.
    held: bool = False

    @property
    def joined(self) -> list[str]:
        return [agent for agent, joined in self.changes if joined]

    @property
    def left(self) -> list[str]:
        return [agent for agent, joined in self.changes if not joined]

    @property
    def lone_leavers(self) -> list[str]:
        """The agents that only left in this batch."""
        joined = set(self.joined)
        return [agent for agent in self.left if agent not in joined]

    def rejoined(self, agents: list[str]) -> Batch:
        """The batch with ``agents`` (lone leavers that are members again)
        also in ``joined``: recipients settle them (contract §21)."""
        extra = tuple((agent, True) for agent in agents)
        return Batch(self.changes + extra, self.listing, self.noted, self.held)

    @property
    def lone_joiner(self) -> str | None:
        """The agent of a batch that is one join: it is not told of itself."""
        if len(self.changes) == 1 and self.changes[0][1]:
            return self.changes[0][0]
        return None

    def frame(self, space: str, members: list[str] | None, count: int) -> bytes:
        """The ``space.members`` event telling the batch: one change in the
        seed's shape (``joined``/``left`` an id), several as lists."""
        if len(self.changes) == 1:
            ((agent, joined),) = self.changes
            one = (agent, None) if joined else (None, agent)
            return codec.members(space, members, count, *one)
        return codec.members(space, members, count, self.joined, self.left)


class Announce(Protocol):
    """Sends one ``space.members`` event for a batch (hub/handlers/membership.py)."""

    def __call__(self, space: str, batch: Batch) -> Awaitable[None]: ...


class _Gathering:
    """The batch a window is filling: changes in arrival order and, per
    agent, its changes so far (one, or a join and a leave)."""

    __slots__ = ("changes", "noted", "of")

    def __init__(self) -> None:
        self.changes: list[tuple[str, bool]] = []
        self.of: dict[str, list[bool]] = {}
        self.noted: list[str] = []

    def batch(self) -> Batch:
        return Batch(tuple(self.changes), noted=tuple(self.noted), held=True)

    def add(self, agent_id: str, joined: bool) -> bool:
        """Hold the change; False when it would be the agent's third (the
        batch must be sealed first)."""
        seen = self.of.get(agent_id)
        if seen is None:
            self.of[agent_id] = [joined]
        elif seen[-1] is joined:
            return True  # the same change again counts once
        elif len(seen) == 2:
            return False
        else:
            seen.append(joined)
        self.changes.append((agent_id, joined))
        return True


class _Window:
    """A space's open window: the sealed batches and the one being gathered,
    the lock its announcements take, and its timer."""

    __slots__ = ("flying", "gathering", "sealed", "sending", "task")

    def __init__(self) -> None:
        self.sealed: deque[Batch] = deque()
        self.gathering = _Gathering()
        #: Batches taken and being announced (under ``sending``): still held
        #: for :meth:`holds`, until the cluster has them.
        self.flying: list[Batch] = []
        self.sending = asyncio.Lock()
        self.task: asyncio.Task[None] | None = None

    def hold(self, agent_id: str, joined: bool, noted: bool = False) -> None:
        if not self.gathering.add(agent_id, joined):
            self.sealed.append(self.gathering.batch())
            self.gathering = _Gathering()
            self.gathering.add(agent_id, joined)
        if noted:  # (even a repeated leave: its note goes with this batch)
            self.gathering.noted.append(agent_id)

    def holds(self, agent_id: str) -> bool:
        """Is a change of ``agent_id`` waiting here?"""
        if agent_id in self.gathering.of:
            return True
        return any(
            agent_id == a
            for batches in (self.sealed, self.flying)
            for batch in batches
            for a, _ in batch.changes
        )

    def take(self) -> list[Batch]:
        """Everything held, oldest batch first; the window is empty after."""
        batches = list(self.sealed)
        if self.gathering.changes:
            batches.append(self.gathering.batch())
        self.sealed.clear()
        self.gathering = _Gathering()
        # One note stands for an agent's held leaves of the space: it goes
        # with the last batch that tells one of them, not before.
        later: set[str] = set()
        for i in range(len(batches) - 1, -1, -1):
            noted = batches[i].noted
            keep = tuple(agent for agent in noted if agent not in later)
            later.update(noted)
            if keep != noted:
                batches[i] = replace(batches[i], noted=keep)
        return batches

    def restore(self, batches: list[Batch]) -> None:
        """Put batches that were not sent back, ahead of what arrived since."""
        self.sealed.extendleft(reversed(batches))


class MemberEvents:
    """Per-space, per-node leading-edge throttle of membership announcements."""

    def __init__(
        self,
        interval: float,
        announce: Announce,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self.interval = interval
        self._announce = announce
        self._sleep = sleep
        self._windows: dict[str, _Window] = {}
        self._closed = False

    @property
    def open_windows(self) -> int:
        return len(self._windows)

    def holding(self, space: str) -> bool:
        """Would a change of ``space`` be held now (its window is open)?"""
        return space in self._windows

    async def changed(
        self,
        space: str,
        agent_id: str,
        joined: bool,
        listing: Listing | None = None,
        *,
        noted: bool = False,
    ) -> None:
        """``agent_id`` joined or left ``space``: announced now when the space
        has no open window (raising what the announcement raises, so callers
        keep their retries), else held for the window's end. ``noted``: the
        leave is noted in presence (the announcement's batch names it)."""
        window = self._windows.get(space)
        if window is not None:
            window.hold(agent_id, joined, noted)
            return
        batch = Batch(((agent_id, joined),), listing, (agent_id,) if noted else ())
        if self.interval <= 0 or self._closed:
            await self._announce(space, batch)
            return
        # Opened before the announcement is awaited: changes arriving
        # meanwhile are held, and go out after it (the lock).
        window = self._windows[space] = _Window()
        async with window.sending:
            window.task = asyncio.get_running_loop().create_task(self._run(space, window))
            await self._announce(space, batch)

    async def announce_held(self, space: str, agent_id: str) -> None:
        """Before an event of ``agent_id`` in ``space`` goes out: if a change
        of that agent is held, send what the space's window holds now.
        Raises BackplaneUnavailable when the cluster refused it (kept for the
        window's end): the event must not overtake it."""
        window = self._windows.get(space)
        if window is None or not window.holds(agent_id):
            return
        async with window.sending:
            await self._send(space, window)

    async def _send(self, space: str, window: _Window) -> bool:
        """Announce what ``window`` holds, in order (its lock held). False when
        it held nothing; what the cluster refuses is put back and raised."""
        batches = window.take()
        if not batches:
            return False
        # An event of an agent in them waits for the lock (announce_held).
        window.flying = batches
        try:
            for i, batch in enumerate(batches):
                try:
                    await self._announce(space, batch)
                except BaseException:
                    window.restore(batches[i:])  # cancelled by aclose: it sends them
                    raise
        finally:
            window.flying = []
        return True

    async def _run(self, space: str, window: _Window) -> None:
        delay = self.interval
        try:
            while True:
                await self._sleep(delay)
                async with window.sending:
                    try:
                        if not await self._send(space, window):
                            return
                    except BackplaneUnavailable:
                        delay = min(delay * 2, max(self.interval, RETRY_MAX_DELAY))
                        continue
                delay = self.interval
        finally:
            if self._windows.get(space) is window:
                del self._windows[space]

    async def aclose(self) -> None:
        """Stop every window's timer and send what each holds, once, as far as
        the cluster takes it. Changes after this are announced at once.
        Idempotent."""
        self._closed = True
        windows, self._windows = self._windows, {}
        tasks = [w.task for w in windows.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(
            *(self._send_all(space, w) for space, w in windows.items()), return_exceptions=True
        )

    async def _send_all(self, space: str, window: _Window) -> None:
        async with window.sending:
            for batch in window.take():
                await self._announce(space, batch)


class HeldChangesFirst:
    """A publishing handler that first sends the held membership changes of
    the publishing agent in the action's space (:meth:`MemberEvents.announce_held`).

    ``events`` is read at each call: the handler serves whatever throttle
    the membership handler has."""

    __slots__ = ("_events", "_handler")

    def __init__(
        self,
        events: Callable[[], MemberEvents],
        handler: Callable[[Any, Any], Awaitable[None]],
    ):
        self._events = events
        self._handler = handler

    async def __call__(self, peer: Any, action: Any) -> None:
        events = self._events()
        if events.open_windows:  # none open anywhere: nothing can be held
            await events.announce_held(action.space, peer.agent_id)
        await self._handler(peer, action)
