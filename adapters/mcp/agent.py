"""The shared virtual agent ``mcp``: what MCP callers do in spaces, it does.

Every node hosts a copy (``attach(..., shared=True)``), so any node serves
any call. It is a member of each ``mcp = true`` space from the start (it
hears their membership changes, which refresh the tool catalog) and joins
other spaces when a caller first publishes or asks there; it stays, so the
next call costs no join, up to ``max_joined`` spaces per node, past which
the least recently used one is left on this node (the membership of a
shared agent is cluster-wide and outlives one node's copy: the space keeps
``mcp`` among its members).

Replies reach every node's copy; :class:`~adapters.replies.ReplyWaiters`
resolves the one request this node is waiting for, a streamed reply
assembled first (bounded by ``max_answer_bytes``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from adapters.replies import Assembled, ReplyWaiters
from hub.adapter_host import AdapterHost, RequestFailed, VirtualMember

#: The shared virtual agent MCP calls come from.
MCP_AGENT = "mcp"

log = structlog.get_logger("adapters.mcp")


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
    ):
        self.pinned = frozenset(pinned)
        self.max_joined = max_joined
        self.waiters = ReplyWaiters(max_answer_bytes)
        self.member: VirtualMember | None = None
        self._host: AdapterHost | None = None
        self._on_members_changed = on_members_changed
        self._joined: OrderedDict[str, None] = OrderedDict()
        self._asking: Counter[str] = Counter()
        self._joiner: asyncio.Task[None] | None = None

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        self._host = host
        self.member = await host.attach(
            MCP_AGENT, self._on_message, shared=True, type="bridge", capabilities=("mcp",)
        )
        # Joining needs the backplane (a Redis node is ready once subscribed):
        # what cannot be joined now is retried in the background.
        if not await self._join_pinned():
            interval = min(1.0, host.settings.heartbeat_interval)
            self._joiner = asyncio.get_running_loop().create_task(self._keep_joining(interval))

    async def aclose(self) -> None:
        if self._joiner is not None:
            self._joiner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._joiner
        if self.member is not None:
            await self.member.aclose()

    def fail_waiting(self, reason: str) -> None:
        self.waiters.fail_all(ToolFailure(reason))

    async def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "space.members":
            space = str(msg.get("space"))
            if space in self.pinned:
                self._on_members_changed(space)
            return
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
        """Publish ``data`` from ``mcp``; returns the ``space.published`` reply."""
        return await self._publish(space, data, to)

    async def ask(
        self, space: str, data: dict[str, Any], to: list[str] | None, timeout: float
    ) -> tuple[dict[str, Any], Assembled]:
        """Publish a request and wait for the first reply to it: the request's
        ``space.published`` and the reply (:class:`ToolFailure` on timeout)."""
        self._asking[space] += 1
        try:
            with self.waiters.publishing():
                published = await self._publish(space, data, to)
                event_id = str(published["event_id"])
                future = self.waiters.expect(event_id)
            try:
                async with asyncio.timeout(timeout):
                    whole = await future
            except TimeoutError:
                raise ToolFailure("Timeout") from None
            finally:
                self.waiters.forget(event_id)
            return published, whole
        finally:
            self._asking[space] -= 1
            if not self._asking[space]:
                del self._asking[space]

    async def _publish(
        self, space: str, data: dict[str, Any], to: list[str] | None
    ) -> dict[str, Any]:
        assert self.member is not None
        await self._ensure_joined(space)
        for attempt in (1, 2):
            try:
                return await self.member.publish(space, data, to=to, echo=False)
            except RequestFailed as exc:
                # Membership lost (Redis flushed, space re-created): join again, once.
                if attempt == 1 and exc.code in ("UNAUTHORIZED", "SPACE_NOT_FOUND"):
                    self._joined.pop(space, None)
                    await self._ensure_joined(space)
                    continue
                if exc.code == "INVALID_REQUEST":
                    raise ToolFailure(f"refused: {exc.error.get('message')}"[:512]) from None
                raise refusal(exc) from None
            except TimeoutError:
                raise ToolFailure("the hub did not answer in time: try again") from None
        raise AssertionError("unreachable")

    async def _ensure_joined(self, space: str) -> None:
        if space in self._joined:
            self._joined.move_to_end(space)
            return
        assert self.member is not None and self._host is not None
        if not self._host.ready:  # would fail, and roll back the others' membership
            raise ToolFailure("the hub is unavailable: try again")
        try:
            await self.member.join(space)
        except RequestFailed as exc:
            raise refusal(exc) from None
        except TimeoutError:
            raise ToolFailure("the hub did not answer in time: try again") from None
        self._joined[space] = None
        await self._leave_surplus()

    async def _leave_surplus(self) -> None:
        assert self.member is not None
        surplus = len(self._joined) - self.max_joined
        for space in list(self._joined):
            if surplus <= 0:
                return
            if space in self.pinned or space in self._asking:
                continue
            del self._joined[space]
            surplus -= 1
            with contextlib.suppress(RequestFailed, TimeoutError):
                await self.member.leave(space)

    async def _join_pinned(self) -> bool:
        if self._host is None or not self._host.ready:
            return False
        for space in sorted(self.pinned):
            try:
                await self._ensure_joined(space)
            except ToolFailure as exc:
                log.warning("mcp could not join yet", space=space, reason=str(exc))
        return self.pinned.issubset(self._joined)

    async def _keep_joining(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if await self._join_pinned():
                return
