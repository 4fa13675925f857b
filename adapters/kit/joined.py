"""An inbound gateway's shared virtual member, joined to spaces as it needs them.

The HTTP Agora, A2A and MCP gateways each publish for their callers from one
shared agent id (every node hosts a copy, ``attach(..., shared=True)``).
:class:`JoiningMember` is that member: it joins the spaces the gateway serves
from the start, and any other space when a caller first publishes there.

Joining needs the backplane (a Redis node is ready only once subscribed), and
a join that fails half-way is rolled back in presence for the shared id —
undoing the other nodes' membership too — so nothing is joined while the node
is not ready (:class:`NodeNotReady`): the served spaces are joined in the
background, retried until each one is, and a caller's publish is refused.
A publish refused because the membership was lost (Redis flushed, the space
re-created) joins again, once.

Errors are the gateway's to word: :meth:`JoiningMember.publish` raises
:class:`JoinRefused` (the hub refused the join), :class:`RequestFailed` (it
refused the publish), :class:`TimeoutError` or :class:`NodeNotReady`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from hub.adapter_host import AdapterMember, AgentHosting, MessageHandler, RequestFailed, Take

log = structlog.get_logger("adapters")

#: Refusals of a publish that mean the member is no longer in the space.
_MEMBERSHIP_LOST = ("UNAUTHORIZED", "SPACE_NOT_FOUND")


class NodeNotReady(Exception):
    """The node is not ready: joining now would fail, and roll back the
    other nodes' membership of the shared id."""


class JoinRefused(RequestFailed):
    """The hub refused to let the member join the space."""


class JoiningMember:
    def __init__(
        self,
        agent_id: str,
        served: Iterable[str],
        *,
        capabilities: tuple[str, ...],
        label: str,
        max_joined: int | None = None,
        busy: Callable[[str], bool] = lambda space: False,
    ):
        """``served``: the spaces joined from the start, in this order, and
        never left. Past ``max_joined`` other spaces (joined when a caller
        needs them) the least recently used one that is not ``busy`` is left
        on this node. ``label`` names the gateway in the log."""
        self.agent_id = agent_id
        self.served = tuple(served)
        self.capabilities = capabilities
        self.max_joined = max_joined
        self.member: AdapterMember | None = None
        self._label = label
        self._busy = busy
        self._hosting: AgentHosting | None = None
        self._joined: OrderedDict[str, None] = OrderedDict()
        self._joiner: asyncio.Task[None] | None = None

    async def start(
        self,
        hosting: AgentHosting,
        handler: MessageHandler,
        take: Take | None = None,
        *,
        retry: float = 1.0,
        own_events: bool = False,
    ) -> None:
        """Attach the member and join the served spaces; what cannot be
        joined yet is retried every ``retry`` seconds (the gateways pass
        ``min(1.0, heartbeat_interval)``). ``take``: the member's synchronous
        first try on each message (see :meth:`~hub.adapter_host.AgentHosting.attach`)."""
        self.member = await hosting.attach(
            self.agent_id, handler, shared=True, type="bridge", capabilities=self.capabilities,
            take=take, own_events=own_events,
        )  # fmt: skip
        self._hosting = hosting
        if not await self._join_served():
            self._joiner = asyncio.get_running_loop().create_task(self._keep_joining(retry))

    async def aclose(self) -> None:
        if self._joiner is not None:
            self._joiner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._joiner
        if self.member is not None:
            await self.member.aclose()

    async def publish(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | list[str] | None = None,
        echo: bool = False,
    ) -> dict[str, Any]:
        """Publish ``data`` in ``space`` (joined first), without echo unless
        asked; the ``space.published`` reply (with echo: the event, which the
        member's copies on the other nodes get too)."""
        assert self.member is not None
        await self.join(space)
        try:
            return await self.member.publish(space, data, to=to, echo=echo)
        except RequestFailed as exc:
            if exc.code not in _MEMBERSHIP_LOST:
                raise
        self._joined.pop(space, None)
        await self.join(space)
        return await self.member.publish(space, data, to=to, echo=echo)

    async def join(self, space: str) -> None:
        """Be a member of ``space`` on this node (a no-op when it is)."""
        if space in self._joined:
            self._joined.move_to_end(space)
            return
        if self._hosting is None or not self._hosting.ready:
            raise NodeNotReady(space)
        assert self.member is not None
        try:
            await self.member.join(space)
        except RequestFailed as exc:
            raise JoinRefused(exc.error) from None
        self._joined[space] = None
        await self._leave_surplus()

    async def _leave_surplus(self) -> None:
        assert self.member is not None
        if self.max_joined is None:
            return
        surplus = sum(1 for s in self._joined if s not in self.served) - self.max_joined
        for space in list(self._joined)[:-1]:  # never the one just joined
            if surplus <= 0:
                return
            if space in self.served or self._busy(space):
                continue
            del self._joined[space]
            surplus -= 1
            with contextlib.suppress(RequestFailed, TimeoutError):
                await self.member.leave(space)

    async def _join_served(self) -> bool:
        """Join every served space not joined yet, if the node is ready; True when done."""
        if self._hosting is None or not self._hosting.ready:
            return False
        for space in self.served:
            try:
                await self.join(space)
            except (RequestFailed, TimeoutError, NodeNotReady) as exc:
                log.warning(f"{self._label} could not join yet", space=space, reason=repr(exc))
        return all(space in self._joined for space in self.served)

    async def _keep_joining(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if await self._join_served():
                return
