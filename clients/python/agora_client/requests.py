"""Asking the hub: requests matched to their answers, and listings read to the end.

Every request carries a fresh ``id`` (``c1``, ``c2`` …) and waits on a
future kept under it. The hub echoes the id as ``id`` on a reply, and as
``request_id`` on an ``error`` or on the ``space.event`` (or
``space.event.done``) that acknowledges a publish — so any number of
requests may be in flight from any number of tasks, answered in any order.
A frame whose id matches nothing waiting is not an answer: the reader hands
it on like any other.

Listings the hub pages (``space.members``, ``agent.list``, and the server
API's) are read to the end by :func:`every_page`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

# How many requests given up on (cancelled, timed out) are remembered, so that
# the hub's late answer to one is known for what it is.
_ABANDONED_KEPT = 1024


class PendingRequests:
    """The requests sent on the connection and not answered yet, by id."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._abandoned: OrderedDict[str, None] = OrderedDict()
        self._ids = itertools.count(1)

    def open(self) -> tuple[str, asyncio.Future[Any]]:
        """A fresh request id and the future its answer will resolve."""
        rid = f"c{next(self._ids)}"
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        return rid, fut

    def forget(self, rid: str) -> None:
        """The request is over (answered, failed, timed out or cancelled)."""
        fut = self._waiting.pop(rid, None)
        # (A waiter's cancellation or timeout cancels the future it awaited.)
        if fut is not None and (fut.cancelled() or not fut.done()):
            self._abandoned[rid] = None
            if len(self._abandoned) > _ABANDONED_KEPT:
                self._abandoned.popitem(last=False)

    def answer(self, rid: object, frame: dict[str, Any]) -> None:
        """``frame`` answers request ``rid``, if one of ours still waits for it."""
        if isinstance(rid, str):
            fut = self._waiting.get(rid)
            if fut is not None and not fut.done():
                fut.set_result(frame)

    def refuse(self, rid: str, error: BaseException) -> bool:
        """The hub refused request ``rid``; False when it is none of ours (a
        request given up on before its answer came is still ours)."""
        fut = self._waiting.get(rid)
        if fut is None:
            if rid in self._abandoned:
                del self._abandoned[rid]
                return True
            return False
        if not fut.done():
            fut.set_exception(error)
        return True

    def fail_all(self, error: BaseException) -> None:
        """The connection is gone: no answer will come to any of them."""
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(error)


class Page(Protocol):
    @property
    def next_cursor(self) -> str | None: ...


P = TypeVar("P", bound=Page)
T = TypeVar("T")


async def every_page(
    fetch: Callable[[str | None], Awaitable[P]], items: Callable[[P], list[T]]
) -> list[T]:
    """Every item of a paged listing: ``fetch(cursor)`` gets one page (the
    first with ``None``), ``items(page)`` its items, until a page has no
    ``next_cursor``."""
    out: list[T] = []
    cursor: str | None = None
    while True:
        page = await fetch(cursor)
        out.extend(items(page))
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor
