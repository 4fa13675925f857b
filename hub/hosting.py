"""Virtual members for adapters: agents that live inside the hub.

:meth:`VirtualHosting.attach` gives an adapter a
:class:`~hub.virtual.VirtualMember` registered like a connection — a
session, an agent id (claimed cluster-wide, or *shared*: one per node under a
reserved id), an ``online`` status — whose requests go through the node's
dispatcher. :meth:`~hub.virtual.VirtualMember.aclose` detaches it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from hub.agents import AgentIds
from hub.dispatch import Dispatcher
from hub.errors import AgentIdTaken, BackplaneUnavailable
from hub.ids import Ids
from hub.membership import Membership
from hub.presence import AgentRecord
from hub.registry import Registry
from hub.session import Session, SessionLimits
from hub.virtual import MessageHandler, VirtualMember
from protocol import codec


class VirtualHosting:
    def __init__(
        self,
        node_id: str,
        *,
        ids: Ids,
        registry: Registry[Any],
        agent_ids: AgentIds,
        membership: Membership,
        dispatcher: Dispatcher,
        limits: SessionLimits,
        queue_bytes: int,
        reserved_ids: set[str],
    ):
        self.node_id = node_id
        self.ids = ids
        self.registry = registry
        self.agent_ids = agent_ids
        self.membership = membership
        self.dispatcher = dispatcher
        self.limits = limits
        self.queue_bytes = queue_bytes
        self.reserved_ids = reserved_ids

    async def attach(
        self,
        agent_id: str,
        handler: MessageHandler | None = None,
        *,
        shared: bool = False,
        type: str | None = None,
        capabilities: tuple[str, ...] = (),
        metadata: dict[str, Any] | None = None,
    ) -> VirtualMember:
        """A virtual member for an adapter.

        ``shared``: every node hosts one under the same id (inbound bridges);
        the id is reserved (connections with it are refused), not claimed,
        and the member's space memberships outlive one node's copy. Otherwise
        the id is claimed cluster-wide like a connection's (raises
        :class:`~hub.errors.AgentIdTaken` while a live holder has it).
        """
        conn_id = self.ids.connection_id("vm")
        member = VirtualMember(
            agent_id, conn_id, self.dispatcher.receive, handler,
            shared=shared, queue_bytes=self.queue_bytes,
            request_prefix=f"{self.ids.tag}-",
        )  # fmt: skip
        record = AgentRecord(
            agent_id, self.node_id, conn_id, type, tuple(capabilities), metadata or {},
            codec.now_ms(),
        )  # fmt: skip
        self.registry.add(conn_id, member)
        if shared:
            self.reserved_ids.add(agent_id)
        else:
            try:
                claimed = await self.agent_ids.claim(record)
            except BaseException:
                self.registry.evict(conn_id, member)
                raise
            if not claimed:
                self.registry.evict(conn_id, member)
                raise AgentIdTaken(agent_id)
        member.record = record
        member.session = Session(agent_id, conn_id, self.limits, asyncio.get_running_loop().time())
        member.detach = self._detach
        self.registry.bind_agent(member)
        if not shared:
            with contextlib.suppress(BackplaneUnavailable):
                await self.membership.agent_status("online", record)
        member.start()
        return member

    async def _detach(self, member: VirtualMember) -> None:
        record = None if member.shared else member.record
        try:
            await self.membership.detach(member, record)
        finally:
            member.cleaned_up.set()
