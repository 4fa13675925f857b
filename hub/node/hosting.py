"""The node's side of hosting adapters: :class:`NodeHost`, an ``AdapterHost``.

:meth:`NodeHost.attach` gives an adapter a
:class:`~hub.node.virtual.VirtualMember` registered like a connection — a
session, an agent id (claimed cluster-wide, or *shared*: one per node under a
reserved id), an ``online`` status — whose requests go through the node's
dispatcher. :meth:`~hub.node.virtual.VirtualMember.aclose` detaches it again.
The rest of the host is reads and small services the node already has:
the HTTP routes, the key-value store, presence, the authenticator.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import orjson
from aiohttp import web

from hub.adapter_host import Caller
from hub.auth import Authenticator
from hub.cluster.kvstore import KeyValueStore
from hub.cluster.presence import AgentRecord, Presence
from hub.config.hub_identity import HubIdentity
from hub.config.settings import Settings
from hub.core.authz import SpaceRules, may_join, may_publish
from hub.core.ids import Ids
from hub.core.registry import Registry
from hub.core.session import Session, SessionLimits
from hub.errors import AgentIdTaken, BackplaneUnavailable
from hub.handlers.agent_ids import AgentIds
from hub.handlers.dispatch import Dispatcher
from hub.handlers.envelope_check import EnvelopeCheck
from hub.handlers.membership import Membership
from hub.handlers.recovery import visible
from hub.net.proxies import TrustedProxies
from hub.node.virtual import MessageHandler, VirtualMember
from protocol import codec
from protocol.names import is_valid_agent_id


class NodeHost:
    """What the node hands every adapter it hosts; built once by the node."""

    def __init__(
        self,
        settings: Settings,
        *,
        ids: Ids,
        registry: Registry[Any],
        agent_ids: AgentIds,
        membership: Membership,
        presence: Presence,
        dispatcher: Dispatcher,
        limits: SessionLimits,
        reserved_ids: set[str],
        identity: HubIdentity,
        kv: KeyValueStore,
        envelopes: EnvelopeCheck,
        auth: Authenticator,
        space_rules: Mapping[str, SpaceRules],
        http_app: web.Application,
        ready: Callable[[], bool],
    ):
        self.settings = settings
        self.identity = identity
        self.kv = kv
        self.envelopes = envelopes
        self.auth_required = settings.auth_mode != "none"
        self._ids = ids
        self._registry = registry
        self._agent_ids = agent_ids
        self._membership = membership
        self._presence = presence
        self._dispatcher = dispatcher
        self._limits = limits
        self._reserved_ids = reserved_ids
        self._auth = auth
        self._rules = space_rules
        self._http_app = http_app
        self._proxies = TrustedProxies(settings.trusted_proxies)
        self._ready = ready
        #: Virtual members attached now: in the registry, but not connections.
        self.attached = 0

    @property
    def ready(self) -> bool:
        return self._ready()

    # ── virtual members ─────────────────────────────────────────────────

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
        conn_id = self._ids.connection_id("vm")
        record = AgentRecord(
            agent_id, self.settings.node_id, conn_id, type, tuple(capabilities), metadata or {},
            codec.now_ms(),
        )  # fmt: skip
        session = Session(agent_id, conn_id, self._limits, asyncio.get_running_loop().time())
        member = VirtualMember(
            agent_id, conn_id, self._dispatcher.receive, handler,
            session=session, record=record, detach=self._detach, shared=shared,
            queue_bytes=self.settings.outbox_max_bytes, request_prefix=f"{self._ids.tag}-",
        )  # fmt: skip
        self._registry.add(conn_id, member)
        self.attached += 1
        if shared:
            self._reserved_ids.add(agent_id)
        else:
            try:
                claimed = await self._agent_ids.claim(record)
            except BaseException:
                self._registry.evict(conn_id, member)
                self.attached -= 1
                raise
            if not claimed:
                self._registry.evict(conn_id, member)
                self.attached -= 1
                raise AgentIdTaken(agent_id)
        self._registry.bind_agent(member)
        if not shared:
            with contextlib.suppress(BackplaneUnavailable):
                await self._membership.agent_status("online", record)
        member.start()
        return member

    async def _detach(self, member: VirtualMember) -> None:
        record = None if member.shared else member.record
        try:
            await self._membership.detach(member, record)
        finally:
            self.attached -= 1
            member.cleaned_up.set()

    # ── the HTTP port ───────────────────────────────────────────────────

    def mount(
        self,
        routes: Iterable[web.AbstractRouteDef],
        *,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._http_app.add_routes(routes)
        if on_shutdown is not None:

            async def shutdown(app: web.Application) -> None:
                await on_shutdown()

            self._http_app.on_shutdown.append(shutdown)

    def public_url(self, request: web.Request) -> str:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return self._proxies.origin(peer, request.headers, request.scheme, request.host)

    # ── callers and permissions ─────────────────────────────────────────

    async def identify(
        self, token: str | None, agent_id: str | None = None, *, prefix: str = "caller"
    ) -> Caller:
        if self.auth_required:
            found, grant = await self._auth.identify(token)
            self._not_reserved(found)
            return Caller(found, grant)
        if agent_id is not None and is_valid_agent_id(agent_id):
            self._not_reserved(agent_id)
            return Caller(agent_id)
        return Caller(f"{prefix}-{secrets.token_hex(8)}")

    def _not_reserved(self, agent_id: str) -> None:
        """A caller may not act as one of the hub's own agents (``mcp``, a
        bridge's virtual agents, the API sender), as a WebSocket may not."""
        if agent_id in self._reserved_ids:
            raise AgentIdTaken(agent_id, f"agent id {agent_id!r} is the hub's own")

    def may_join(self, caller: Caller, space: str) -> bool:
        return may_join(caller.grant, space, caller.agent_id, self._rules)

    def may_publish(self, caller: Caller, space: str) -> bool:
        return may_publish(caller.grant, space, caller.agent_id, self._rules)

    # ── reads ───────────────────────────────────────────────────────────

    async def space_exists(self, space: str) -> bool:
        return await self._membership.space_exists(space)

    async def member_records(self, space: str, limit: int) -> list[AgentRecord]:
        ids, _count = await self._presence.space_members(space, limit)
        records = await asyncio.gather(*(self._presence.get_agent(i) for i in ids))
        return [r for r in records if r is not None]

    async def history(self, space: str, limit: int, viewer: str) -> list[dict[str, Any]]:
        # Read past the events ``viewer`` may not see (addressed to others).
        window = min(2 * limit + 50, 1000)
        found = await self._membership.backplane.history(space, limit=window)
        budget = self.settings.max_frame_bytes  # as space.history: about one largest frame
        frames: list[bytes] = []
        size = 0
        for env in reversed(found.events):
            if len(frames) == limit or (frames and size + len(env.frame) > budget):
                break
            if visible(env, viewer):
                frames.append(env.frame)
                size += len(env.frame)
        return [orjson.loads(frame) for frame in reversed(frames)]

    async def publish_system(self, space: str, data: dict[str, Any]) -> None:
        await self._membership.system_event(space, data)
