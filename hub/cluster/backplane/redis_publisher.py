"""The Redis backplane's publisher: publishes pipelined in submission order.

:meth:`RedisPublisher.submit` queues a publish script's arguments and returns
a future; one drain task sends what is queued as pipelines of up to
:data:`MAX_BATCH` ``EVALSHA`` calls on one connection, with one pipeline in
flight, so a burst costs one round trip and reaches every node in one read.
A ``NOSCRIPT`` reply (Redis restarted) reloads the script and runs only those
calls again: a script that did not run cannot publish twice. Every other
failure is the caller's :class:`~hub.errors.BackplaneUnavailable`, never a
retry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from hub.cluster.backplane.base import Draft, Duplicate
from hub.cluster.backplane.idempotency import receipt
from hub.cluster.backplane.redis_pubsub import PubSubLink
from hub.cluster.backplane.redis_scripts import SpaceKeys, routing, stream_code
from hub.cluster.redis_store import run_scripts, unavailable

# Most publish scripts sent in one pipeline.
MAX_BATCH = 256

_Call = tuple[list[str], list[object]]
_Publish = tuple[str, _Call, asyncio.Future[int]]


class RedisPublisher:
    """Sends a node's publishes; acknowledged seqs go to the link as floors."""

    def __init__(
        self,
        client: Any,
        keys: SpaceKeys,
        script: Any,
        link: PubSubLink,
        *,
        history_size: int,
        history_ttl: int,
        seq_ttl: int,
        candidate: Callable[[], str],
    ):
        self._client = client
        self._keys = keys
        self._link = link
        self._history_size = history_size
        self._history_ttl = history_ttl
        self._seq_ttl = seq_ttl
        self._candidate = candidate
        self._script = script
        # Publishes not yet sent, in order, and the task that pipelines them.
        self._outgoing: deque[_Publish] = deque()
        self._in_flight = 0
        self._drainer: asyncio.Task[None] | None = None

    @property
    def backlog(self) -> int:
        """Publishes accepted but not yet answered by Redis."""
        return len(self._outgoing) + self._in_flight

    def submit(self, space: str, draft: Draft, future: asyncio.Future[int]) -> None:
        """Queue a publish; ``future`` gets its seq, a Duplicate or BackplaneUnavailable."""
        names = self._keys
        stream = draft.stream.encode() if draft.stream else b""
        keys = names.position(space)
        args: list[object] = [
            draft.head,
            draft.tail,
            names.channel(space),
            routing(draft),
            self._history_size,
            self._history_ttl,
            self._seq_ttl,
            self._candidate(),
            stream,
            stream_code(draft),
        ]
        once = draft.once
        if once is not None:
            keys.append(names.once(space, once.key))
            args += [receipt(once), b"1" if once.settle else b"0"]
        self._outgoing.append((space, (keys, args), future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    async def aclose(self) -> None:
        """Stop sending; what was not sent fails."""
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._drainer
        self._fail_batch(list(self._outgoing), ConnectionError("backplane closed"))
        self._outgoing.clear()

    async def _drain(self) -> None:
        outgoing = self._outgoing
        while outgoing:
            batch = [outgoing.popleft() for _ in range(min(len(outgoing), MAX_BATCH))]
            self._in_flight = len(batch)
            try:
                results = await run_scripts(
                    self._client, self._script, [call for _, call, _ in batch]
                )
            except asyncio.CancelledError:
                self._fail_batch(batch, asyncio.CancelledError())
                raise
            finally:
                self._in_flight = 0
            acknowledged = self._link.acknowledged
            for (space, _, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue  # the caller gave up waiting
                if isinstance(result, BaseException):
                    future.set_exception(unavailable("publish", result))
                    continue
                if isinstance(result, bytes):  # an idempotency key seen before
                    future.set_result(Duplicate.parse(result))
                    continue
                seq = int(result)  # type: ignore[call-overload]
                acknowledged(space, seq)
                future.set_result(seq)

    def _fail_batch(self, batch: list[_Publish], exc: BaseException) -> None:
        for _, _, future in batch:
            if not future.done():
                future.set_exception(unavailable("publish", exc))
                future.exception()
