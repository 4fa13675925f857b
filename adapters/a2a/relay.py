"""A remote's streamed answer relayed into a space as a hub client stream.

:class:`ReplyStream` publishes ``space.event.delta`` frames under an
``event_id`` of the bridge's own (receivers see ``{agent_id}/{event_id}``),
the first one carrying ``data = {in_reply_to, task_id, context_id, text}``,
then ``space.event.done`` — or ``space.event.cancel`` with a reason when the
answer fails half-way.

Chunks are coalesced: a delta goes out at most every ``flush_interval``
seconds (and whenever 16 KiB are waiting), so a remote that streams token by
token cannot push the bridge's virtual member over the hub's per-connection
rate limit. The first one waits too: an answer that is complete within
``flush_interval`` never opens a stream (:meth:`ReplyStream.discard`) and is
published as one plain event instead.

Every frame carries a request id under :attr:`ReplyStream.prefix`, so a
refusal from the hub (``RATE_LIMITED``, say) finds its stream
(:meth:`ReplyStream.refused`), which then counts as failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any, Protocol

FLUSH_BYTES = 16 * 1024


class Sender(Protocol):
    async def send(self, msg: dict[str, Any]) -> None: ...


class ReplyStream:
    def __init__(
        self,
        member: Sender,
        space: str,
        first: dict[str, Any],
        *,
        flush_interval: float,
        to: str | None = None,
    ):
        self.event_id = f"a2a-{secrets.token_hex(8)}"
        #: Who gets the stream (addressed on its first delta); None: every member.
        self.to = to
        self.prefix = f"{self.event_id}."
        self.space = space
        self.flush_interval = flush_interval
        #: Why the hub refused a frame of this stream, if it did.
        self.failure: str | None = None
        self._member = member
        self._first: dict[str, Any] | None = dict(first)
        self._buffer: list[str] = []
        self._buffered = 0
        self._frames = 0
        self._last = 0.0
        self._opened_at = asyncio.get_running_loop().time()
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._ended = False

    @property
    def opened(self) -> bool:
        return self._first is None

    def refused(self, error: dict[str, Any]) -> None:
        self.failure = f"{error.get('code')}: {str(error.get('message'))[:200]}"

    async def write(self, text: str) -> None:
        if self._ended or not text:
            return
        self._buffer.append(text)
        self._buffered += len(text)
        loop = asyncio.get_running_loop()
        due = self._last + self.flush_interval - loop.time()
        if not self.opened:
            due = max(due, self._opened_at + self.flush_interval - loop.time())
        if due <= 0 or self._buffered >= FLUSH_BYTES:
            await self.flush()
        elif self._timer is None:
            self._timer = loop.call_later(due, self._flush_later)

    def _flush_later(self) -> None:
        self._timer = None
        self._flusher = asyncio.get_running_loop().create_task(self.flush())

    async def flush(self) -> None:
        async with self._lock:
            if not self._buffer or self._ended:
                return
            text = "".join(self._buffer)
            self._buffer.clear()
            self._buffered = 0
            frame: dict[str, Any] = {
                "type": "space.event.delta", "space": self.space, "event_id": self.event_id,
                "data": {"text": text}, "echo": False,
            }  # fmt: skip
            if self._first is not None:
                frame["data"] = {**self._first, "text": text}
                if self.to is not None:
                    frame["to"] = self.to
                self._first = None
            await self._send(frame)
            self._last = asyncio.get_running_loop().time()

    async def done(self) -> None:
        self._stop_timer()
        await self.flush()
        async with self._lock:
            if not self._ended and self.opened:
                self._ended = True
                await self._send(
                    {"type": "space.event.done", "space": self.space, "event_id": self.event_id}
                )

    async def cancel(self, reason: str) -> None:
        self._stop_timer()
        async with self._lock:
            if not self._ended and self.opened:
                self._ended = True
                await self._send(
                    {"type": "space.event.cancel", "space": self.space,
                     "event_id": self.event_id, "reason": reason[:256]}
                )  # fmt: skip
            self._ended = True

    def discard(self) -> bool:
        """Drop what is buffered, if no delta went out yet; whether it was so
        (the answer is then published as a plain event instead)."""
        if self.opened:
            return False
        self._stop_timer()
        self._buffer.clear()
        self._ended = True
        return True

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def aclose(self) -> None:
        self._stop_timer()
        if self._flusher is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher

    async def _send(self, msg: dict[str, Any]) -> None:
        self._frames += 1
        await self._member.send({**msg, "id": f"{self.prefix}{self._frames}"})
