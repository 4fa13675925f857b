"""Interest-based backplane subscriptions, reference-counted by local members.

The first local member of a space subscribes the node to the space's channel;
when the last one leaves the node unsubscribes after a grace period (a quick
leave/join doesn't churn subscriptions), re-checking that nobody came back.
Concurrent first joins share one subscribe call; a failed subscribe raises to
every one of them so each join is rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from hub.cluster.backplane import Channels
from hub.errors import BackplaneUnavailable


class Subscriptions:
    def __init__(self, backplane: Channels, grace: float, wanted: Callable[[str], bool]):
        self._backplane = backplane
        self._grace = grace
        self._wanted = wanted
        self.active: set[str] = set()
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def ensure(self, space: str) -> None:
        """Be subscribed to ``space``; raises BackplaneUnavailable."""
        timer = self._timers.pop(space, None)
        if timer is not None:
            timer.cancel()
        if space in self.active:
            return
        task = self._inflight.get(space)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._subscribe(space))
            self._inflight[space] = task
        await asyncio.shield(task)

    async def _subscribe(self, space: str) -> None:
        try:
            await self._backplane.subscribe(space)
            self.active.add(space)
        except BackplaneUnavailable:
            raise
        except Exception as exc:
            raise BackplaneUnavailable(f"subscribe failed: {exc}") from exc
        finally:
            self._inflight.pop(space, None)

    def release(self, space: str) -> None:
        """The last local member left ``space``."""
        if space in self._timers:
            return
        loop = asyncio.get_running_loop()
        if self._grace <= 0:
            self._maybe_unsubscribe(space)
        else:
            self._timers[space] = loop.call_later(self._grace, self._maybe_unsubscribe, space)

    def _maybe_unsubscribe(self, space: str) -> None:
        self._timers.pop(space, None)
        if self._wanted(space) or space not in self.active:
            return
        self.active.discard(space)
        task = asyncio.get_running_loop().create_task(self._unsubscribe(space))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _unsubscribe(self, space: str) -> None:
        # Failure is harmless: a stale subscription only costs traffic, and a
        # reconnecting backplane resubscribes only what is active.
        with contextlib.suppress(Exception):
            await self._backplane.unsubscribe(space)

    async def aclose(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
