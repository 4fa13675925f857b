"""The node's side of hosting adapters: :class:`NodeHost`, an ``AdapterHost``.

The host is a bundle of parts, each implementing one small protocol of
:mod:`hub.adapter_host` over what the node already has:

- :class:`NodeAgents` (``AgentHosting``): :meth:`NodeAgents.attach` gives an
  adapter a :class:`~hub.node.virtual.VirtualMember` registered like a
  connection — a session, an agent id (claimed cluster-wide, or *shared*: one
  per node under a reserved id), an ``online`` status — whose requests go
  through the node's dispatcher; :meth:`~hub.node.virtual.VirtualMember.aclose`
  detaches it again.
- :class:`NodeHttp` (``HttpFaces``): the HTTP routes, the authenticator and the
  hub's one authorization policy (callers are judged by it, never by an
  adapter's own reading of their claims).
- :class:`NodeReads` (``SpaceReads``): presence, the directory and history.
- :class:`NodeSystem` (``SystemSpaces``): hub-generated events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from random import getrandbits
from typing import Any

import orjson
from aiohttp import web

from hub.adapter_host import ANONYMOUS, Caller, MessageHandler, Take
from hub.auth import Authenticator
from hub.cluster.backplane import Delivery
from hub.cluster.kvstore import KeyValueStore
from hub.cluster.presence import AgentRecord, Presence
from hub.config.hub_identity import HubIdentity
from hub.config.settings import Settings
from hub.core.authz import Grant, SpacePolicy
from hub.core.frames import OutFrame
from hub.core.ids import Ids
from hub.core.registry import Registry
from hub.core.session import Session, SessionLimits
from hub.core.stream_audiences import StreamOp
from hub.errors import AgentIdTaken, BackplaneUnavailable
from hub.handlers.agent_ids import AgentIds
from hub.handlers.dispatch import Dispatcher
from hub.handlers.envelope_check import EnvelopeCheck
from hub.handlers.membership import Membership
from hub.handlers.recovery import visible
from hub.net.proxies import TrustedProxies
from hub.node.virtual import VirtualMember
from protocol import codec
from protocol.names import is_valid_agent_id


class NodeAgents:
    """The adapters' agents (an ``AgentHosting``): virtual members of this node."""

    def __init__(
        self,
        settings: Settings,
        *,
        ids: Ids,
        registry: Registry[Any],
        agent_ids: AgentIds,
        membership: Membership,
        dispatcher: Dispatcher,
        limits: SessionLimits,
        reserved_ids: set[str],
        ready: Callable[[], bool],
    ):
        self._settings = settings
        self._ids = ids
        self._registry = registry
        self._agent_ids = agent_ids
        self._membership = membership
        self._dispatcher = dispatcher
        self._limits = limits
        self._reserved_ids = reserved_ids
        self._ready = ready
        #: Virtual members attached now: in the registry, but not connections.
        self.attached = 0

    @property
    def ready(self) -> bool:
        return self._ready()

    async def attach(
        self,
        agent_id: str,
        handler: MessageHandler | None = None,
        *,
        shared: bool = False,
        type: str | None = None,
        capabilities: tuple[str, ...] = (),
        metadata: dict[str, Any] | None = None,
        take: Take | None = None,
        own_events: bool = False,
    ) -> VirtualMember:
        conn_id = self._ids.connection_id("vm")
        record = AgentRecord(
            agent_id, self._settings.node_id, conn_id, type, tuple(capabilities), metadata or {},
            codec.now_ms(),
        )  # fmt: skip
        # The hub's own agent: what it does for a caller, the policy decided
        # for that caller first.
        now = asyncio.get_running_loop().time()
        session = Session(agent_id, conn_id, self._limits, now, grant=Grant.hub)
        member = VirtualMember(
            agent_id, conn_id, self._dispatcher.receive, handler,
            session=session, record=record, detach=self._detach, shared=shared,
            queue_bytes=self._settings.outbox_max_bytes, request_prefix=f"{self._ids.tag}-",
            take=take, own_events=own_events,
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


class NodeHttp:
    """The HTTP port and its callers (an ``HttpFaces``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        http_app: web.Application,
        auth: Authenticator,
        policy: SpacePolicy,
        reserved_ids: set[str],
    ):
        self.auth_required = settings.auth_mode != "none"
        self.policy = policy
        self._http_app = http_app
        self._auth = auth
        self._reserved_ids = reserved_ids
        self._proxies = TrustedProxies(settings.trusted_proxies)
        self._signers = {
            s.did: Caller(
                s.agent_id,
                Grant(
                    join=None if s.join is None else tuple(s.join),
                    publish=None if s.publish is None else tuple(s.publish),
                ),
                key=s.agent_id,
            )
            for s in settings.signers
        }

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

    async def caller(
        self, request: web.Request, *, public: bool = False, prefix: str = "caller"
    ) -> Caller:
        token = bearer_token(request.headers.get("Authorization"))
        if self.auth_required:
            if token is None and public:
                return Caller(ANONYMOUS, key=self._address_key(request), anonymous=True)
            found, grant = await self._auth.identify(token)
            self._not_reserved(found)
            return Caller(found, grant, key=found)
        key = self._address_key(request)
        agent_id = request.query.get("agent_id")
        if agent_id is not None and is_valid_agent_id(agent_id):
            self._not_reserved(agent_id)
            return Caller(agent_id, key=key, anonymous=True)
        # A label, not a secret (without auth anyone may name itself): no
        # system call per request for it.
        return Caller(f"{prefix}-{getrandbits(64):016x}", key=key, anonymous=True)

    def _address_key(self, request: web.Request) -> str:
        """What a caller without credentials is counted as: its address."""
        return f"ip:{self.client_address(request)}"

    def client_address(self, request: web.Request) -> str:
        """The client's IP (behind ``trusted_proxies``: the one they name)."""
        peer = request.transport.get_extra_info("peername") if request.transport else None
        return self._proxies.client_address(peer, request.headers).ip

    def _not_reserved(self, agent_id: str) -> None:
        """A caller may not act as one of the hub's own agents (``mcp``, a
        bridge's virtual agents, the API sender), as a WebSocket may not."""
        if agent_id in self._reserved_ids:
            raise AgentIdTaken(agent_id, f"agent id {agent_id!r} is the hub's own")

    def signer(self, did: str) -> Caller | None:
        return self._signers.get(did)


class NodeReads:
    """Cluster-wide reads of spaces and agents (a ``SpaceReads``)."""

    def __init__(self, settings: Settings, *, membership: Membership, presence: Presence):
        self._max_frame_bytes = settings.max_frame_bytes
        self._membership = membership
        self._presence = presence

    async def agents(
        self, caller: Caller, *, capability: str | None, space: str | None, limit: int
    ) -> tuple[list[AgentRecord], bool]:
        page = await self._membership.agents_page(caller, capability, space, None, limit)
        return page.agents, page.next_cursor is not None

    async def space_exists(self, space: str) -> bool:
        return await self._membership.space_exists(space)

    async def is_member(self, space: str, agent_id: str) -> bool:
        return not await self._presence.missing_members(space, (agent_id,))

    async def member_records(self, space: str, limit: int) -> list[AgentRecord]:
        ids, _count = await self._presence.space_members(space, limit)
        records = await asyncio.gather(*(self._presence.get_agent(i) for i in ids))
        return [r for r in records if r is not None]

    async def history(self, space: str, limit: int, viewer: str) -> list[dict[str, Any]]:
        # Newest first, paging back through at most HISTORY_SCAN frames: past the
        # events ``viewer`` may not see (addressed to others), and back to the
        # first delta of every stream that ended with a done.
        budget = self._max_frame_bytes  # as space.history: about one largest frame
        backplane = self._membership.backplane
        events: list[dict[str, Any]] = []
        size = 0
        ended: dict[str, _Ended | None] = {}  # streams seen from their done backwards
        scanned = 0
        before: int | None = None
        while len(events) < limit and scanned < HISTORY_SCAN:
            want = min(2 * limit + 50, HISTORY_SCAN - scanned)
            page = await backplane.history(space, before=before, limit=want)
            for env in reversed(page.events):
                scanned += 1
                # A stream's frames share its audience: an invisible one is skipped whole.
                if not visible(env, viewer):
                    continue
                whole = _whole_event(env, ended, budget)
                if whole is None:
                    continue
                event, bytes_ = whole
                if events and size + bytes_ > budget:
                    return events[::-1]
                events.append(event)
                size += bytes_
                if len(events) == limit:
                    break
            if len(page.events) < want or page.events[0].seq is None:
                break  # the oldest recorded frame was read
            before = page.events[0].seq
        return events[::-1]


class NodeSystem:
    """Hub-generated events in the adapters' system spaces (a ``SystemSpaces``)."""

    def __init__(
        self, settings: Settings, *, membership: Membership, registry: Registry[Any],
        policy: SpacePolicy,
    ):  # fmt: skip
        self._membership = membership
        self._registry = registry
        self._policy = policy
        self._preframe = settings.compression == "none"

    async def publish_system(
        self, space: str, data: dict[str, Any], *, to: tuple[str, ...] | None = None
    ) -> None:
        await self._membership.system_event(space, data, to=to)

    def local_members(self, space: str) -> int:
        return self._registry.member_count(space)

    def show_readers(
        self, space: str, event: dict[str, Any], readers_of: str | None, *, relay: str
    ) -> int:
        audience = tuple(
            member.agent_id
            for member in self._registry.members(space)
            if member.agent_id != relay
            and member.session is not None
            and self._shown(member.session, readers_of)
        )
        if not audience:
            return 0
        shown = {key: value for key, value in event.items() if key != "to"}
        frame = OutFrame(orjson.dumps(shown), self._preframe)
        return self._registry.deliver(space, frame, to=audience)

    def _shown(self, observer: Session, readers_of: str | None) -> bool:
        """May ``observer`` see an event about ``readers_of`` (about no space:
        ``spaces_list``, ``agents_list`` without one)?"""
        if readers_of is None:
            return self._policy.may_read_spaceless(observer)
        return self._policy.may_read(observer, readers_of)


class NodeHost:
    """What the node hands every adapter it hosts (an ``AdapterHost``): its
    parts, built once by the node."""

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
        policy: SpacePolicy,
        http_app: web.Application,
        ready: Callable[[], bool],
    ):
        self.settings = settings
        self.identity = identity
        self.kv = kv
        self.envelopes = envelopes
        self.hosting = NodeAgents(
            settings, ids=ids, registry=registry, agent_ids=agent_ids, membership=membership,
            dispatcher=dispatcher, limits=limits, reserved_ids=reserved_ids, ready=ready,
        )  # fmt: skip
        self.http = NodeHttp(
            settings, http_app=http_app, auth=auth, policy=policy, reserved_ids=reserved_ids
        )
        self.spaces = NodeReads(settings, membership=membership, presence=presence)
        self.system = NodeSystem(settings, membership=membership, registry=registry, policy=policy)

    @property
    def attached(self) -> int:
        """Virtual members attached now: in the registry, but not connections."""
        return self.hosting.attached


#: The most recorded frames one ``history`` read looks at.
HISTORY_SCAN = 1000


@dataclass(slots=True)
class _Ended:
    """A stream seen from its done backwards: its later frames, newest first."""

    frames: list[bytes] = field(default_factory=list)
    size: int = 0


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _whole_event(
    env: Delivery, ended: dict[str, _Ended | None], budget: int
) -> tuple[dict[str, Any], int] | None:
    """A recorded frame read newest first, as a whole event and its size in
    bytes: an event as it is; a stream — seen from its end back to its first
    delta, its frames kept in ``ended`` meanwhile — as one ``space.event``
    with the whole text, in its first delta's place. A stream that was
    cancelled, is not finished, began before the history or is larger than
    ``budget`` is None (a stream over the budget stops being kept at once)."""
    stream = env.stream
    if stream is None:
        return orjson.loads(env.frame), len(env.frame)
    if env.op is StreamOp.END:
        if orjson.loads(env.frame).get("type") == "space.event.done":
            ended[stream] = _Ended()
        return None
    parts = ended.get(stream)
    if parts is None:
        return None  # no done after it in the history (cancelled, unfinished), or too big
    if env.op is not StreamOp.OPEN:
        parts.frames.append(env.frame)
        parts.size += len(env.frame)
        if parts.size > budget:
            ended[stream] = None
        return None
    del ended[stream]
    first = orjson.loads(env.frame)
    data = first.get("data") if isinstance(first.get("data"), dict) else {}
    texts = [data.get("text", "")]
    for frame in reversed(parts.frames):
        more = orjson.loads(frame).get("data")
        texts.append(more.get("text", "") if isinstance(more, dict) else "")
    whole = {**first, "type": "space.event", "data": {**data, "text": "".join(map(str, texts))}}
    return whole, len(env.frame) + parts.size
