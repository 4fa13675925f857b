"""Coalesced ``space.members`` announcements: a leading-edge throttle per space.

Why: every join and leave of a space used to be its own ``space.members``
event to every other member, each with a presence read and (in a small space)
the member list. In a reconnect storm or a mass departure a member of many
spaces received tens of thousands of such frames within seconds and was
closed 4008 as a slow consumer — for traffic it never asked for.

How: the first change of a space with no open window is announced at once,
exactly as before, and opens a window of ``interval`` seconds. Changes during
the window are held, netted per agent (joined then left, or left then joined,
is no change). When the window ends, whatever is held goes out as ONE
announcement (one presence read, one encoded frame) and the window opens
again; when nothing is held it closes. A space therefore costs at most one
announcement per interval however many agents come and go, and a lone join
still looks like the seed's event. ``interval`` 0 announces every change at
once (no windows).

Timers: one task per open window (not per member), all cancelled by
:meth:`MemberEvents.aclose`, which sends what they hold once. A held batch
the cluster could not take (:class:`~hub.errors.BackplaneUnavailable`) is kept
and retried at the window's next end, backing off: nothing is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from hub.errors import BackplaneUnavailable

#: Longest wait between two attempts at a batch the backplane refused.
RETRY_MAX_DELAY = 5.0

#: A space's members (at most ``members_list_limit`` ids) and exact count.
Listing = tuple[list[str], int]


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes of one space to announce together, in order of arrival: each
    an agent id and whether it joined (``True``) or left. ``listing`` is the
    space's members when the caller has just read them (a join), else
    ``None``: the announcer reads them."""

    changes: tuple[tuple[str, bool], ...]
    listing: Listing | None = None

    @property
    def joined(self) -> list[str]:
        return [agent for agent, joined in self.changes if joined]

    @property
    def left(self) -> list[str]:
        return [agent for agent, joined in self.changes if not joined]


class Announce(Protocol):
    """Sends one ``space.members`` event for a batch (hub/handlers/membership.py)."""

    def __call__(self, space: str, batch: Batch) -> Awaitable[None]: ...


class _Window:
    """A space's open window: the changes held for its end, and its timer."""

    __slots__ = ("held", "task")

    def __init__(self) -> None:
        #: agent id → joined; insertion order is arrival order.
        self.held: dict[str, bool] = {}
        self.task: asyncio.Task[None] | None = None

    def hold(self, agent_id: str, joined: bool) -> None:
        previous = self.held.get(agent_id)
        if previous is None:
            self.held[agent_id] = joined
        elif previous is not joined:
            del self.held[agent_id]  # joined and left (or back) within one batch
        # the same change twice (a rejoin elsewhere) counts once, where it came first

    def take(self) -> Batch | None:
        if not self.held:
            return None
        held, self.held = self.held, {}
        return Batch(tuple(held.items()))

    def restore(self, batch: Batch) -> None:
        """Put a batch that was not sent back before what arrived since."""
        newer, self.held = self.held, dict(batch.changes)
        for agent_id, joined in newer.items():
            self.hold(agent_id, joined)


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

    async def changed(
        self, space: str, agent_id: str, joined: bool, listing: Listing | None = None
    ) -> None:
        """``agent_id`` joined or left ``space``: announced now when the space
        has no open window (raising what the announcement raises, so callers
        keep their retries), else held for the window's end."""
        window = self._windows.get(space)
        if window is not None:
            window.hold(agent_id, joined)
            return
        if self.interval > 0 and not self._closed:
            # Opened before the announcement is awaited: changes arriving
            # meanwhile are held, not announced one by one.
            window = self._windows[space] = _Window()
            window.task = asyncio.get_running_loop().create_task(self._run(space, window))
        await self._announce(space, Batch(((agent_id, joined),), listing))

    async def _run(self, space: str, window: _Window) -> None:
        delay = self.interval
        try:
            while True:
                await self._sleep(delay)
                batch = window.take()
                if batch is None:
                    return
                try:
                    await self._announce(space, batch)
                except BackplaneUnavailable:
                    window.restore(batch)
                    delay = min(delay * 2, max(self.interval, RETRY_MAX_DELAY))
                    continue
                except BaseException:
                    window.restore(batch)  # cancelled by aclose: it sends them
                    raise
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
        batches = [(space, w.take()) for space, w in windows.items()]
        await asyncio.gather(
            *(self._announce(space, batch) for space, batch in batches if batch is not None),
            return_exceptions=True,
        )
