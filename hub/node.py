"""The node: composition root of a hub process.

A :class:`Node` builds and owns the parts — settings, authenticator,
backplane and presence (in memory by default, Redis for a cluster), the local
:class:`~hub.registry.Registry`, membership, publishing, the cluster link, the
dispatcher, the HTTP application and the hosted adapters — and hands each
part only what it uses. ``handle`` (one WebSocket connection,
:mod:`hub.lifecycle`) and ``attach`` (a virtual member for an adapter,
:mod:`hub.hosting`) are its parts' methods; the node itself is the
backplane's delivery handler (:meth:`deliver`) and runs the lifecycle of the
whole (start, settle after an outage, close in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
from aiohttp import web

from hub.actions import (
    Close,
    Denied,
    Join,
    Leave,
    ListAgents,
    ListMembers,
    ListSpaces,
    Publish,
    ReadHistory,
    ReceiverCancel,
    Refresh,
    Register,
    Reject,
    Send,
    StreamCancel,
    StreamDelta,
    StreamDone,
)
from hub.adapter_host import Adapter
from hub.agents import AgentIds
from hub.api import NodeReadings, OperatorFaces
from hub.api.operations import API_SENDER
from hub.auth import build_authenticator
from hub.authz import space_rules
from hub.backplane import Backplane, Envelope, create_backplane
from hub.cluster import ClusterLink
from hub.connection import HubConnection
from hub.credentials import TokenExpiry
from hub.dispatch import Dispatcher, ErrorSender
from hub.envelopes import EnvelopeCheck
from hub.errors import BackplaneUnavailable
from hub.frames import OutFrame
from hub.gaps import GapFiller
from hub.handshake import HandshakeSlots
from hub.hosting import NodeHost
from hub.housekeeping import Sweeper
from hub.http import health_routes, request_metrics
from hub.identity import HubIdentity
from hub.ids import Ids
from hub.kvstore import create_kv_store
from hub.lifecycle import ConnectionLifecycle
from hub.membership import Membership
from hub.metrics import Counters, Gauges, HubCollector, build_registry
from hub.outbox import Flusher
from hub.peer import Peer
from hub.presence import Presence, create_presence
from hub.publishing import Publishing
from hub.registry import Registry
from hub.replay import ReplayCache
from hub.session import SessionLimits
from hub.settings import Settings
from hub.spaces import SpaceDirectory
from hub.subscriptions import Subscriptions
from hub.virtual import VirtualMember
from protocol.errors import CloseCode, ErrorCode

#: Sequenced messages whose seq is a multiple of this have their
#: publish-to-delivery latency measured (two clock reads): the histogram
#: costs nothing per delivery.
DELIVERY_SAMPLE = 16


class Node:
    """One hub process's worth of state and behaviour."""

    def __init__(
        self,
        settings: Settings,
        *,
        backplane: Backplane | None = None,
        presence: Presence | None = None,
        adapters: Iterable[Adapter] = (),
    ):
        s = self.settings = settings
        self.node_id = s.node_id
        self.log = structlog.get_logger("hub").bind(node=self.node_id)
        self.counters = Counters()
        self.auth = build_authenticator(s)
        self.identity = HubIdentity.load(s.identity_file)
        self.backplane = backplane or create_backplane(
            s.redis_url, prefix=s.redis_prefix, node_id=s.node_id,
            history_size=s.history_size, history_ttl=s.history_ttl,
        )  # fmt: skip
        self.presence = presence or create_presence(
            s.redis_url, prefix=s.redis_prefix, node_id=s.node_id, ttl=s.heartbeat_timeout
        )
        #: Signed envelopes in spaces: verification and the replay cache
        #: (in Redis when clustered, so a replay to another node is refused).
        signed_spaces = frozenset(d.id for d in s.spaces if d.require_signed)
        #: Small shared state with expiry (replay ids, bridge conversations):
        #: in memory on one node, in Redis when clustered.
        self.kv = create_kv_store(s.redis_url, prefix=s.redis_prefix, max_entries=s.kv_max_entries)
        self.envelopes = EnvelopeCheck(
            ReplayCache(self.kv),
            signed_spaces=signed_spaces,
            max_skew=s.envelope_max_skew,
        )
        self.ids = Ids()
        self.registry: Registry[Peer] = Registry()
        self.adapters: list[Adapter] = list(adapters)
        self.spaces = SpaceDirectory(
            s.declared, s.space_capacity, s.auto_create_spaces,
            system=[space for adapter in self.adapters for space in adapter.system_spaces],
        )  # fmt: skip
        grace = 0.0 if not s.redis_url else min(5.0, s.heartbeat_interval)
        self.subscriptions = Subscriptions(self.backplane, grace, self.registry.has_space)
        self.limits = SessionLimits(
            heartbeat_timeout=s.heartbeat_timeout,
            rate_limit=s.rate_limit,
            rate_burst=s.rate_burst,
            rate_abuse_seconds=s.rate_abuse_seconds,
            max_streams=s.max_streams_per_agent,
            signed_spaces=signed_spaces,
            space_rules=space_rules(s.spaces),
            token_leeway=s.jwt_leeway if s.auth_mode == "jwt" else 0.0,
            token_refresh_grace=s.token_refresh_grace,
        )
        # Virtual members send no heartbeats and are never closed for abuse;
        # the rate limit and the stream limit hold for them as for anyone.
        # Declared spaces' allow_join/allow_publish are for agents: the
        # operator's own bridges are not restricted by them.
        self.virtual_limits = SessionLimits(
            heartbeat_timeout=math.inf,
            rate_limit=s.rate_limit,
            rate_burst=s.rate_burst,
            rate_abuse_seconds=math.inf,
            max_streams=s.max_streams_per_agent,
            signed_spaces=signed_spaces,
        )
        self.flusher = Flusher()
        self.handshakes = HandshakeSlots(s.max_handshakes)
        self.preframe = s.compression == "none"
        self.connection_class: type[HubConnection] = type(
            "NodeConnection",
            (HubConnection,),
            {
                "flusher": self.flusher,
                "counters": self.counters,
                "handshakes": self.handshakes,
                "outbox_limit": s.outbox_max_bytes,
                "preframed": self.preframe,
                "hub_close_timeout": s.close_timeout,
            },
        )
        self.send_error = ErrorSender(self.counters)
        self.expiry = TokenExpiry(self.auth, self.send_error)
        self.publishing = Publishing(
            s, self.backplane, self.presence, self.registry, self.ids, self.counters,
            self.send_error, self.envelopes,
        )  # fmt: skip
        self.membership = Membership(
            s, self.node_id, self.registry, self.spaces, self.presence, self.backplane,
            self.subscriptions, self.ids, self.publishing,
        )  # fmt: skip
        self.agent_ids = AgentIds(s, self.node_id, self.registry, self.presence)
        self.cluster = ClusterLink(
            s, self.node_id, self.registry, self.presence, self.backplane, self.membership,
            probe_local=self.agent_ids.probe_local, evict_local=self.agent_ids.evict_local,
            disconnect_local=self._disconnect_local,
        )  # fmt: skip
        self.agent_ids.remote = self.cluster
        self.gaps = GapFiller(self.backplane, self.registry, self._fan_out, self._spawn)
        self.membership.recovery.filling = self.gaps.holding.__contains__
        self.dispatcher = self._dispatcher()
        self.metrics_registry = build_registry(
            HubCollector(
                self.counters,
                Gauges(
                    connections=self._connections,
                    spaces=lambda: len(self.registry.spaces),
                    streams=lambda: len(self.registry.streams),
                    backplane_ready=lambda: self.ready,
                    backplane_lag=lambda: getattr(self.backplane, "lag", 0.0),
                ),
                self.node_id,
            )
        )
        #: The HTTP port's application; adapters add their routes in ``start``.
        self.http_app = web.Application(
            client_max_size=s.max_frame_bytes, middlewares=[request_metrics(self.counters.http)]
        )
        self.http_app.add_routes(
            health_routes(
                lambda: self.ready and self.accepting, self.metrics_registry, self.identity
            )
        )
        #: Events per space since the last node-stats report (the status page
        #: shows event rates); None — nothing counted — while the page is off.
        self.space_events: dict[str, int] | None = None
        if s.admin_token is not None:
            self.space_events = {}
            # Counting costs only a node whose page is on: its backplane calls this.
            self.deliver = self._deliver_counting  # type: ignore[method-assign]
        #: The server API (/api) and the status page (/admin), when enabled.
        self.operator = OperatorFaces(
            s, self.node_id, self.dispatcher.run, self.presence, self.membership.space_exists,
            self.counters,
            NodeReadings(
                connections=self._connections,
                spaces=lambda: len(self.registry.spaces),
                backplane_ready=lambda: self.ready,
                backplane_lag=lambda: getattr(self.backplane, "lag", 0.0),
                take_space_events=self._take_space_events,
            ),
            disconnect_local=self._disconnect_local,
            disconnect_remote=self.cluster.disconnect_remote,
        )  # fmt: skip
        self.operator.mount(self.http_app)
        #: Agent ids of shared virtual members (one per node) and of the server
        #: API's senders: never a connection's.
        self.reserved_ids: set[str] = set()
        if s.api_key is not None:
            self.reserved_ids.update((API_SENDER, *s.api_services))
        self.lifecycle = ConnectionLifecycle(
            s, self.node_id, auth=self.auth, ids=self.ids, registry=self.registry,
            agent_ids=self.agent_ids, presence=self.presence, membership=self.membership,
            dispatcher=self.dispatcher, limits=self.limits, counters=self.counters,
            reserved_ids=self.reserved_ids, log=self.log,
        )  # fmt: skip
        #: Runs one WebSocket connection (the server's handler).
        self.handle = self.lifecycle.handle
        #: What the hosted adapters get (:class:`~hub.adapter_host.AdapterHost`).
        self.host = NodeHost(
            s, ids=self.ids, registry=self.registry, agent_ids=self.agent_ids,
            membership=self.membership, presence=self.presence, dispatcher=self.dispatcher,
            limits=self.virtual_limits, reserved_ids=self.reserved_ids, identity=self.identity,
            kv=self.kv, envelopes=self.envelopes, auth=self.auth,
            space_rules=self.limits.space_rules, http_app=self.http_app, ready=lambda: self.ready,
        )  # fmt: skip
        self.sweeper = Sweeper(
            s, self.registry, self.publishing, self.expiry,
            settle=self._settle, preframe=self.preframe, log=self.log,
        )  # fmt: skip
        self.accepting = True
        self._sweeper: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._settled = False
        self._background: set[asyncio.Task[None]] = set()

    def _dispatcher(self) -> Dispatcher:
        d = Dispatcher(self.counters, self.send_error)
        publishing, membership = self.publishing, self.membership
        handlers: dict[type, Callable[[Any, Any], Awaitable[None] | None]] = {
            Publish: publishing.publish,
            StreamDelta: publishing.stream_delta,
            StreamDone: publishing.stream_done,
            StreamCancel: publishing.stream_cancel,
            ReceiverCancel: publishing.receiver_cancel,
            Send: _send,
            Reject: self._reject,
            Close: _close,
            Join: membership.join,
            Leave: membership.leave,
            ListSpaces: membership.list_spaces,
            ListMembers: membership.list_members,
            ListAgents: membership.list_agents,
            Register: membership.register,
            Denied: membership.denied,
            ReadHistory: membership.recovery.history,
            Refresh: self.expiry.refresh,
        }
        for action, handler in handlers.items():
            d.on(action, handler)
        return d

    def _reject(self, peer: Peer, a: Reject) -> None:
        self.send_error(peer, a.error.code, a.error.message, a.error.request_id)

    # ── lifecycle ────────────────────────────────────────────────────────

    def _connections(self) -> int:
        """Open agent connections: the registry without the adapters' virtual members."""
        return len(self.registry) - self.host.attached

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.presence.start()
        await self.backplane.start(self)
        await self._settle()
        self._sweeper = asyncio.get_running_loop().create_task(self.sweeper.run())
        await self.operator.start()
        for adapter in self.adapters:
            await adapter.start(self.host)

    async def aclose(self) -> None:
        """Stop adapters (last started, first closed), background work and the
        backplane. Idempotent."""
        if self._closed:
            return
        self.accepting = False
        for adapter in reversed(self.adapters):
            try:
                await adapter.aclose()
            except Exception:
                self.log.exception("adapter failed to close", adapter=type(adapter).__name__)
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._background):
            task.cancel()
        with contextlib.suppress(Exception):
            await self.operator.aclose()
        await self.subscriptions.aclose()
        await self.cluster.aclose()
        with contextlib.suppress(Exception):
            await self.presence.leave_cluster()
        with contextlib.suppress(Exception):
            await self.backplane.aclose()
        with contextlib.suppress(Exception):
            await self.presence.aclose()
        with contextlib.suppress(Exception):
            await self.auth.aclose()
        with contextlib.suppress(Exception):
            await self.envelopes.aclose()
        with contextlib.suppress(Exception):
            await self.kv.aclose()

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def ready(self) -> bool:
        """Backplane connected and subscribed, and presence in step with it."""
        return self.backplane.ready and self._settled and not self._closed

    # ── backplane handler: the fan-out ──────────────────────────────────

    def deliver(self, env: Envelope) -> None:
        if not self.registry.has_space(env.space):
            return
        if self.gaps.holding and self.gaps.hold(env):
            return  # after the missed messages being filled in (hub/gaps.py)
        self._fan_out(env)

    def _fan_out(self, env: Envelope) -> None:
        seq = env.seq
        sampled = seq is not None and not seq % DELIVERY_SAMPLE
        if sampled:
            started = time.perf_counter()
        now = asyncio.get_running_loop().time() if env.stream is not None else 0.0
        self.counters.deliveries += self.registry.deliver(
            env.space,
            OutFrame(env.frame, self.preframe),
            exclude=env.exclude,
            to=env.to,
            stream=env.stream,
            op=env.op,
            now=now,
        )
        if sampled:
            # The backplane's lag is this message's publish-to-receipt time.
            self.counters.delivery_latency.observe(
                getattr(self.backplane, "lag", 0.0) + time.perf_counter() - started
            )

    def _deliver_counting(self, env: Envelope) -> None:
        """``deliver`` while the status page is on: events per space, counted."""
        events = self.space_events
        if events is not None and self.registry.has_space(env.space):
            try:
                events[env.space] += 1
            except KeyError:
                events[env.space] = 1
        Node.deliver(self, env)

    def _take_space_events(self) -> dict[str, int] | None:
        events = self.space_events
        if events is not None:
            self.space_events = {}
        return events

    def backplane_ready(self, ready: bool) -> None:
        self.log.info("backplane ready" if ready else "backplane not ready")
        self._settled = False
        if ready and self._sweeper is not None and not self._closed:
            # Back from an outage: re-register (Redis may have lost everything)
            # before reporting ready again.
            self._spawn(self._settle())

    async def _settle(self) -> None:
        with contextlib.suppress(BackplaneUnavailable):
            await self.cluster.tick()
            await self.membership.retry_departures()
            self._settled = True

    def node_message(self, payload: bytes) -> None:
        self.cluster.on_message(payload)

    def missed(self, space: str, after: int, upto: int) -> None:
        self.gaps.missed(space, after, upto)

    def _disconnect_local(self, connection_id: str, reason: str) -> bool:
        """An operator disconnects this node's connection (API, status page,
        or another node's API by a node message). Virtual members are the
        hub's own: never."""
        peer = self.registry.connections.get(connection_id)
        if peer is None or isinstance(peer, VirtualMember) or peer.closing:
            return False
        self.log.info(
            "agent disconnected by an operator",
            agent_id=peer.agent_id,
            connection_id=connection_id,
            reason=reason or None,
        )
        message = "disconnected by an operator" + (f": {reason}" if reason else "")
        peer.close_for(CloseCode.DISCONNECTED, ErrorCode.DISCONNECTED, message)
        return True

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _send(peer: Peer, a: Send) -> None:
    peer.send_frame(a.frame)


def _close(peer: Peer, a: Close) -> None:
    peer.close_for(a.code, a.error, a.reason)
