"""The shared virtual agent ``mcp``: what MCP callers do in spaces, it does.

Every node hosts a copy (``attach(..., shared=True)``), so any node serves
any call. It is a member of each ``mcp = true`` space from the start (it
hears their membership changes, which refresh the tool catalog) and joins
other spaces when a caller first publishes or asks there; it stays, so the
next call costs no join, up to ``max_joined`` spaces per node, past which
the least recently used one is left on this node (the membership of a
shared agent is cluster-wide and outlives one node's copy: the space keeps
``mcp`` among its members). The joining is :mod:`adapters.kit.joined`'s.

Replies reach every node's copy; :class:`~adapters.kit.replies.ReplyWaiters`
resolves the one request this node is waiting for — only with a reply from
the space it asked in, by the agents it asked (contract §18) — a streamed
reply assembled first (bounded by ``max_answer_bytes``).

It is also a member of ``mcp.calls`` on every node: the call log's events
are addressed to it, and it hands each to the observers of its node who may
see it (:mod:`adapters.mcp.calllog`).

Callers may have it publish into any user space their claims let them
publish to, including one they made themselves: it joins that space (on
this node, up to ``max_joined``). That gives nobody anything — an answer
counts only from the space a request was published in and from its
addressees — and it is documented (docs/mcp.md).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from adapters.kit.asking import AskCancelled, Asker, Asking, AskTimeout
from adapters.kit.joined import JoiningMember, JoinRefused, NodeNotReady
from adapters.kit.replies import Assembled, Piece, RelayStopped, ReplyWaiters
from adapters.mcp.calllog import CALLS_SPACE
from hub.adapter_host import AdapterMember, AgentHosting, RequestFailed

#: The shared virtual agent MCP calls come from.
MCP_AGENT = "mcp"

T = TypeVar("T")


class ToolFailure(Exception):
    """The call fails: answered as a tool result with ``isError: true``."""


_REFUSALS = {
    "UNAUTHORIZED": "the hub refused it (not allowed)",
    "SPACE_NOT_FOUND": "the space does not exist",
    "SPACE_FULL": "the space is full",
    "RATE_LIMITED": "too many MCP calls on this hub node right now: try again",
    "UNAVAILABLE": "the hub is unavailable: try again",
}


def refusal(exc: RequestFailed) -> ToolFailure:
    reason = _REFUSALS.get(exc.code) or f"{exc.code}: {exc.error.get('message')}"
    return ToolFailure(str(reason)[:512])


class McpAgent:
    def __init__(
        self,
        pinned: Iterable[str],
        *,
        max_answer_bytes: int,
        max_joined: int,
        on_members_changed: Callable[[str], None],
        on_call_event: Callable[[dict[str, Any]], None],
        on_space_message: Callable[[dict[str, Any]], None] = lambda msg: None,
        followed: Callable[[str], bool] = lambda space: False,
    ):
        """``on_space_message`` hears every message of a user space (resource
        subscriptions); ``followed`` says whether a space is followed on this
        node, and so not to be left."""
        self.pinned = frozenset(pinned)
        self.max_joined = max_joined
        self.max_answer_bytes = max_answer_bytes
        self.waiters = ReplyWaiters(max_answer_bytes, own=MCP_AGENT)
        self._on_members_changed = on_members_changed
        self._on_call_event = on_call_event
        self._on_space_message = on_space_message
        self._followed = followed
        self._asking: Counter[str] = Counter()
        self.joining = JoiningMember(
            MCP_AGENT, [*sorted(self.pinned), CALLS_SPACE], capabilities=("mcp",), label="mcp",
            max_joined=max_joined, busy=self._busy,
        )  # fmt: skip
        self.asker = Asker(self.joining, self.waiters)
        #: The replies being relayed piece by piece (:meth:`ask_streaming`).
        self._relayed: set[Asking] = set()
        self._closing: str | None = None

    def _busy(self, space: str) -> bool:
        return space in self._asking or self._followed(space)

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, hosting: AgentHosting, *, retry: float) -> None:
        """Attach ``mcp`` and join its spaces; what cannot be joined now is
        retried every ``retry`` seconds in the background."""
        # Answers go to their waiting call in the delivery itself (_take).
        # Its own events too: what another node's copy published (space_publish)
        # is told to the sessions following the space here.
        await self.joining.start(
            hosting, self._on_message, self._take, retry=retry, own_events=True
        )

    async def aclose(self) -> None:
        await self.asker.aclose()
        await self.joining.aclose()

    @property
    def member(self) -> AdapterMember | None:
        """The shared ``mcp`` member (on this node)."""
        return self.joining.member

    def fail_waiting(self, reason: str) -> None:
        self._closing = reason
        self.waiters.fail_all(ToolFailure(reason))
        for asking in self._relayed:
            if asking.relay is not None:
                asking.relay.stop()

    def _take(self, msg: dict[str, Any]) -> bool:
        """An answer to a waiting call, handed over in its delivery. The rest
        goes to :meth:`_on_message`: the call log's events, membership
        changes, and whatever a session following the space should hear."""
        space = msg.get("space")
        if space == CALLS_SPACE or msg.get("type") == "space.members":
            return False
        if "to" not in msg and isinstance(space, str) and self._followed(space):
            return False
        return self.waiters.take(msg)

    async def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("space") == CALLS_SPACE:
            self._on_call_event(msg)
            return
        if msg.get("type") == "space.members":
            space = str(msg.get("space"))
            if space in self.pinned:
                self._on_members_changed(space)
            return
        self._on_space_message(msg)
        self.waiters.feed(msg)

    # ── acting in spaces ─────────────────────────────────────────────────

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A request of the ``mcp`` agent's own (``space.list``, ``agent.list``)."""
        assert self.member is not None
        try:
            return await self.member.request(msg)
        except RequestFailed as exc:
            raise refusal(exc) from None
        except TimeoutError:
            raise ToolFailure("the hub did not answer in time: try again") from None

    async def publish(
        self, space: str, data: dict[str, Any], to: list[str] | None
    ) -> dict[str, Any]:
        """Publish ``data`` from ``mcp``; returns the ``space.published`` reply
        (an unaddressed one: the event as delivered).

        An unaddressed event is one that sessions following the space hear of
        (``resources/subscribe``): it is published with echo, so the ``mcp``
        member's copy on every node gets it like any member's event, and this
        node's copy — whose echo answers the publish — tells its own sessions."""
        if to is not None:
            return await self._publish(space, data, to)
        event = await self._call(self.joining.publish(space, data, echo=True))
        self._on_space_message(event)
        return event

    async def ask(
        self, space: str, data: dict[str, Any], to: list[str] | None, timeout: float
    ) -> tuple[dict[str, Any], Assembled]:
        """Publish a request and wait for the first reply to it: the request's
        ``space.published`` and the reply (:class:`ToolFailure` on timeout).
        Cancelling the task that waits tells the agent to stop
        (:mod:`adapters.kit.asking`)."""
        asking = await self._send(space, data, to)
        try:
            whole = await asking.answer(timeout)
        except AskTimeout:
            raise ToolFailure("Timeout") from None
        except AskCancelled as exc:
            raise ToolFailure(f"Cancelled ({exc.reason})") from None
        finally:
            asking.close()
            self._done_asking(space)
        return asking.published, whole

    async def ask_streaming(
        self,
        space: str,
        data: dict[str, Any],
        to: list[str] | None,
        timeout: float,
        on_delta: Callable[[str], Awaitable[None]],
    ) -> tuple[dict[str, Any], Assembled]:
        """As :meth:`ask`, hearing a streamed reply as it comes: ``on_delta``
        gets each delta's text (``notifications/progress``); the reply is
        assembled too (bounded by ``max_answer_bytes``: past it the agent is
        told to stop and the reply is lost)."""
        asking = await self._send(space, data, to, relay=True)
        relay = asking.relay
        assert relay is not None
        stream = _Streamed(self.max_answer_bytes)
        self._relayed.add(asking)
        try:
            async with asyncio.timeout(timeout):
                while (whole := stream.take(await relay.next())) is None:
                    if stream.delta is not None:
                        await on_delta(stream.delta)
                if whole.failure is not None and stream.too_large:
                    await asking.cancel("too_large")
        except TimeoutError:
            await asking.cancel("timeout")
            raise ToolFailure("Timeout") from None
        except RelayStopped:
            raise ToolFailure(self._closing or "Cancelled") from None
        except ConnectionError:  # the caller went away while we told it
            await asking.cancel("caller_gone")
            raise ToolFailure("Cancelled (caller_gone)") from None
        except asyncio.CancelledError:
            await self.asker.finish(asking.cancel("cancelled"))
            raise
        finally:
            self._relayed.discard(asking)
            asking.close()
            self._done_asking(space)
        return asking.published, whole

    async def _send(
        self, space: str, data: dict[str, Any], to: list[str] | None, *, relay: bool = False
    ) -> Asking:
        """Publish a request; its :class:`~adapters.kit.asking.Asking`. The
        space stays joined until :meth:`_done_asking`."""
        self._asking[space] += 1
        try:
            return await self._call(self.asker.send(space, data, to=to, relay=relay))
        except BaseException:
            self._done_asking(space)
            raise

    def _done_asking(self, space: str) -> None:
        self._asking[space] -= 1
        if not self._asking[space]:
            del self._asking[space]

    async def _publish(
        self, space: str, data: dict[str, Any], to: list[str] | None
    ) -> dict[str, Any]:
        return await self._call(self.joining.publish(space, data, to=to))

    async def _call(self, publishing: Awaitable[T]) -> T:
        """Publish, the hub's refusals worded as tool failures."""
        try:
            return await publishing
        except JoinRefused as exc:
            raise refusal(exc) from None
        except RequestFailed as exc:
            if exc.code == "INVALID_REQUEST":
                raise ToolFailure(f"refused: {exc.error.get('message')}"[:512]) from None
            raise refusal(exc) from None
        except NodeNotReady:
            raise ToolFailure("the hub is unavailable: try again") from None
        except TimeoutError:
            raise ToolFailure("the hub did not answer in time: try again") from None


class _Streamed:
    """A reply taken piece by piece (:meth:`McpAgent.ask_streaming`): the
    latest delta's text, and the whole reply once it ends."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.first: dict[str, Any] | None = None
        self.parts: list[str] = []
        self.size = 0
        self.delta: str | None = None
        self.too_large = False

    def take(self, piece: Piece) -> Assembled | None:
        """The whole reply when ``piece`` ends it, else None (:attr:`delta`
        is then the piece's text, if it had one)."""
        self.delta = None
        match piece.kind:
            case "event":
                return Assembled(piece.msg)
            case "delta":
                self.first = self.first or piece.msg
                text = piece.data.get("text")
                if isinstance(text, str):
                    self.size += len(text.encode("utf-8", "surrogatepass"))
                    if self.size > self.max_bytes:
                        self.too_large = True
                        return Assembled(self.first, f"stream larger than {self.max_bytes} bytes")
                    self.parts.append(text)
                    self.delta = text
                return None
            case "done":
                first = self.first or piece.msg
                data = {**(first.get("data") or {}), "text": "".join(self.parts)}
                return Assembled({**first, "type": "space.event", "data": data})
        reason = str(piece.msg.get("reason"))[:128]
        return Assembled(self.first or piece.msg, f"stream cancelled ({reason})")
