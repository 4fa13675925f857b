"""Virtual members: agents that live inside the hub, for adapters.

An adapter (a bridge to another protocol) is hosted by the node
(:class:`Adapter`: ``start(host)`` / ``aclose()``, closed in reverse order)
and acts in spaces through a :class:`VirtualMember` the node gives it
(:meth:`hub.node.hosting.NodeHost.attach`); adapters see it as an
:class:`~hub.adapter_host.AdapterMember`, without the node's side of it
(``push``, ``close_for``, ``abort``…). A virtual member has a session like a
WebSocket connection and its requests go through the same dispatcher, so
seq, order, addressed delivery, membership events, limits and cluster fan-out
hold for it exactly as for any agent.

What the node sends it arrives in :meth:`VirtualMember.push`: replies to its
own requests resolve the waiting :meth:`VirtualMember.request`; everything
else (events, deltas, membership changes) is queued — bounded in bytes — for
the adapter's handler, called one message at a time in delivery order. The
member's own events (its echo, on any node) are not passed on.

A gateway's member mostly receives answers to requests its callers wait for.
Its adapter may give a ``take``: a synchronous function tried first, in the
delivery itself, that returns True when it has dealt with the message (an
answer handed to its waiting caller: a future resolved, nothing more) — one
task switch and one queue entry less on every gateway call. It is tried only
while nothing waits in the queue and the handler is not running, so delivery
order holds; what it does not take is queued as before. It must not block,
await or deliver anything itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from hub.adapter_host import MessageHandler, RequestFailed, Take
from hub.core.frames import OutFrame
from hub.core.peer import CleanedUp, PeerKind
from protocol.errors import CloseCode, ErrorCode

if TYPE_CHECKING:
    from hub.cluster.presence import AgentRecord
    from hub.core.peer import Peer
    from hub.core.session import Session

Receive = Callable[["Peer", str, float], Awaitable[None]]

# Replies that answer a request by their ``id``.
_ID_REPLIES = frozenset(
    {
        "agent.registered",
        "agent.heartbeat",
        "space.joined",
        "space.left",
        "space.list",
        "space.published",
        "space.members",
        "space.history",
        "agent.list",
        "space.event.cancel",
    }
)


class VirtualMember:
    """One adapter's agent inside the node. Created by the host's ``attach``."""

    #: Frames for it are read, never written to a socket: no wire bytes.
    preframed = False

    def __init__(
        self,
        agent_id: str,
        connection_id: str,
        receive: Receive,
        handler: MessageHandler | None,
        *,
        session: Session,
        record: AgentRecord,
        detach: Callable[[VirtualMember], Awaitable[None]],
        shared: bool = False,
        queue_bytes: int = 4 * 1024 * 1024,
        request_prefix: str = "",
        take: Take | None = None,
        own_events: bool = False,
    ):
        self.agent_id = agent_id
        self.connection_id = connection_id
        self.shared = shared
        self.kind = PeerKind.SHARED if shared else PeerKind.VIRTUAL
        self.session = session
        self.record = record
        self.cleaned_up = CleanedUp()
        #: The host's clean-up after the member (leaves, departures); once.
        self._detach: Callable[[VirtualMember], Awaitable[None]] | None = detach
        self.dropped = 0
        self._receive = receive
        self._handler = handler
        self._take = take
        #: Its own events (another node's copy published them) reach the handler.
        self._own_events = own_events
        self._handling = False  # the handler is running (it may be awaiting)
        self._closing = False
        self._ids = (f"{request_prefix}{connection_id}-{n}" for n in itertools.count(1))
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._queue: deque[tuple[dict[str, Any], int]] = deque()
        self._queued_bytes = 0
        self._queue_limit = queue_bytes
        self._wakeup = asyncio.Event()
        self._consumer: asyncio.Task[None] | None = None
        self._closer: asyncio.Task[None] | None = None
        self._log = structlog.get_logger("hub.node.virtual").bind(agent_id=agent_id)

    def start(self) -> None:
        if self._handler is not None and self._consumer is None:
            self._consumer = asyncio.get_running_loop().create_task(self._consume())

    # ── Member / Peer ───────────────────────────────────────────────────

    @property
    def closing(self) -> bool:
        return self._closing

    def push(self, frame: OutFrame) -> bool:
        if self._closing:
            return False
        try:
            msg = orjson.loads(frame.payload)
        except orjson.JSONDecodeError:
            return False
        if self._waiting and self._answer(msg):
            return True
        if self._handler is None or (msg.get("from") == self.agent_id and not self._own_events):
            return True
        if self._take is not None and not self._queue and not self._handling:
            try:
                if self._take(msg):
                    return True
            except Exception:
                self._log.exception("adapter take failed", type=msg.get("type"))
        size = len(frame.payload)
        if self._queued_bytes + size > self._queue_limit:
            # The adapter is not keeping up: drop, count, say so once.
            if not self.dropped:
                self._log.warning("virtual member queue full: dropping messages")
            self.dropped += 1
            return False
        self._queue.append((msg, size))
        self._queued_bytes += size
        self._wakeup.set()
        return True

    def send_frame(self, payload: bytes) -> bool:
        return self.push(OutFrame(payload, preframe=False))

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        if self._closing:
            return
        self._log.warning("virtual member closed by the hub", code=int(code), reason=reason)
        self._closing = True
        self._closer = asyncio.get_running_loop().create_task(self.aclose())

    def abort(self) -> None:
        self.close_for(CloseCode.HEARTBEAT_TIMEOUT, ErrorCode.HEARTBEAT_TIMEOUT, "aborted")

    async def probe(self, timeout: float) -> bool:
        return not self._closing

    def backlog(self) -> int:
        return 0  # its queue is bounded on its own (``queue_bytes``)

    async def drain(self) -> None:
        return None

    # ── requests ────────────────────────────────────────────────────────

    async def request(self, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Send ``msg`` (an ``id`` is set) and return its reply; an ``error``
        reply raises :class:`RequestFailed`."""
        rid = next(self._ids)
        msg = {**msg, "id": rid}
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        frame = _encode(msg)
        self._waiting[rid] = future
        # A timer that fails the future, not asyncio.timeout(): a request is on
        # every gateway call's path, and the context manager costs several
        # times more than the one timer it arms.
        timer: asyncio.TimerHandle | None = None
        try:
            await self._receive(self, frame, loop.time())
            if not future.done():
                timer = loop.call_later(timeout, _expire, future)
            reply = await future
        finally:
            if timer is not None:
                timer.cancel()
            self._waiting.pop(rid, None)
        if reply.get("type") == "error":
            raise RequestFailed(reply)
        return reply

    async def send(self, msg: dict[str, Any]) -> None:
        """Send ``msg`` without waiting for a reply (errors reach the handler)."""
        await self._receive(self, _encode(msg), _now())

    async def join(self, space: str) -> dict[str, Any]:
        return await self.request({"type": "space.join", "space": space})

    async def leave(self, space: str) -> dict[str, Any]:
        return await self.request({"type": "space.leave", "space": space})

    async def publish(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | list[str] | None = None,
        echo: bool = True,
    ) -> dict[str, Any]:
        """Publish; returns the event as delivered (or ``space.published``)."""
        msg: dict[str, Any] = {"type": "space.publish", "space": space, "data": data}
        if to is not None:
            msg["to"] = to
        if not echo:
            msg["echo"] = False
        return await self.request(msg)

    def _answer(self, msg: dict[str, Any]) -> bool:
        kind = msg.get("type")
        rid = msg.get("id") if kind in _ID_REPLIES else None
        if rid is None and (kind == "error" or msg.get("from") == self.agent_id):
            rid = msg.get("request_id")
        future = self._waiting.get(rid) if isinstance(rid, str) else None
        if future is None or future.done():
            return False
        future.set_result(msg)
        return True

    # ── delivery to the adapter ────────────────────────────────────────

    async def _consume(self) -> None:
        assert self._handler is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._queue:
                msg, size = self._queue.popleft()
                self._queued_bytes -= size
                self._handling = True
                try:
                    await self._handler(msg)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self._log.exception("adapter handler failed", type=msg.get("type"))
                finally:
                    self._handling = False

    async def aclose(self) -> None:
        """Leave every space and release the agent id. Idempotent."""
        self._closing = True
        detach, self._detach = self._detach, None
        if detach is None:
            return
        consumer = self._consumer
        if consumer is not None and consumer is not asyncio.current_task():
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
        await detach(self)


def _encode(msg: dict[str, Any]) -> str:
    """``msg`` as a frame, or :class:`RequestFailed` (``INVALID_REQUEST``) for what
    JSON cannot carry — nested past orjson's bound (254 levels), non-string keys
    — as the hub would refuse such a frame from an agent; never a ``TypeError``."""
    try:
        return orjson.dumps(msg).decode()
    except TypeError as exc:
        error = {"type": "error", "code": str(ErrorCode.INVALID_REQUEST), "message": str(exc)}
        raise RequestFailed(error) from None


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


def _now() -> float:
    return asyncio.get_running_loop().time()
