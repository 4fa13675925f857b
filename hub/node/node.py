"""The node: composition root of a hub process.

:class:`Node` builds the parts in the order they depend on each other and
hands each only what it uses — settings and credentials; the cluster stores
(backplane, presence, key-value store: in memory by default, Redis for a
cluster); the local registry and the handlers of the session's actions; the
dispatcher that runs them; where the backplane delivers (:mod:`hub.node.delivery`);
the cluster link; the WebSocket connection lifecycle; the HTTP application
with its operator faces; the host its adapters get; the sweep. When
``__init__`` returns the wiring is done: nothing is replaced or poked in
afterwards. The node itself only runs the whole: start, beat its liveness
in the cluster every ``node_heartbeat_interval`` (the cluster link's tick),
settle after a backplane outage, close in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import structlog
from aiohttp import web

from hub.adapter_host import Adapter
from hub.auth import build_authenticator
from hub.cluster.backplane import Backplane, create_backplane
from hub.cluster.kvstore import create_kv_store
from hub.cluster.nodestats import create_node_stats
from hub.cluster.presence import Presence, create_presence
from hub.cluster.redis_connection import open_redis
from hub.cluster.subscriptions import Subscriptions
from hub.config.hub_identity import HubIdentity
from hub.config.settings import Settings
from hub.core.actions import (
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
from hub.core.authz import SpacePolicy
from hub.core.counters import Counters
from hub.core.ids import Ids
from hub.core.peer import Peer, PeerKind
from hub.core.registry import Registry
from hub.core.session import SessionLimits
from hub.core.spaces import SpaceDirectory
from hub.core.stream_audiences import ReceiverStop
from hub.errors import BackplaneUnavailable
from hub.handlers.agent_ids import AgentIds, LocalHolders
from hub.handlers.dispatch import Dispatcher, ErrorSender, Handler
from hub.handlers.envelope_check import EnvelopeCheck
from hub.handlers.gaps import GapFiller
from hub.handlers.member_views import MemberViews
from hub.handlers.membership import Membership
from hub.handlers.publishing import Publishing
from hub.handlers.recovery import Recovery
from hub.handlers.seen_ids import SeenIds
from hub.handlers.stream_stops import StreamStops
from hub.handlers.token_expiry import TokenExpiry
from hub.net.http import request_metrics
from hub.node.cluster_link import ClusterLink
from hub.node.delivery import CountingDelivery, FanOut, NodeDelivery
from hub.node.hosting import NodeHost
from hub.node.lifecycle import ConnectionLifecycle
from hub.node.sweep import Sweeper
from hub.ops.api import NodeReadings, OperatorFaces
from hub.ops.api.operations import API_SENDER
from hub.ops.health import health_routes
from hub.ops.metrics import Gauges, HubCollector, ViewFactory, build_registry
from protocol.errors import CloseCode, ErrorCode


class Node:
    """One hub process's worth of state and behaviour."""

    def __init__(
        self,
        settings: Settings,
        *,
        backplane: Backplane | None = None,
        presence: Presence | None = None,
        adapters: Iterable[Adapter] = (),
        workers_view: ViewFactory | None = None,
        worker: int | None = None,
    ):
        s = self.settings = settings
        self.node_id = s.node_id
        self.log = structlog.get_logger("hub").bind(node=self.node_id)
        self.adapters: list[Adapter] = list(adapters)
        self.counters = Counters()
        self.auth = build_authenticator(s)
        self.identity = HubIdentity.load(s.identity_file)
        self.ids = Ids()
        self.accepting = True

        # ── the cluster's state: in memory on one node, in Redis in a cluster
        #: The node's Redis connections (one command client, the backplane's
        #: subscribers): every Redis store uses it, the node closes it last.
        self.redis = open_redis(s.redis_url)
        self.backplane = backplane or create_backplane(
            self.redis, prefix=s.redis_prefix, node_id=s.node_id,
            history_size=s.history_size, history_ttl=s.history_ttl,
        )  # fmt: skip
        self.presence = presence or create_presence(
            self.redis, prefix=s.redis_prefix, node_id=s.node_id, ttl=s.node_dead_after
        )
        #: Small shared state with expiry (seen envelope ids, bridge conversations).
        self.kv = create_kv_store(self.redis, prefix=s.redis_prefix, max_entries=s.kv_max_entries)
        signed_spaces = frozenset(d.id for d in s.spaces if d.require_signed)
        self.envelopes = EnvelopeCheck(
            SeenIds(self.kv), signed_spaces=signed_spaces, max_skew=s.envelope_max_skew
        )

        # ── this node's members and the rules of their sessions
        self.registry: Registry[Peer] = Registry(on_stream_stop=self._stream_stopped)
        self.spaces = SpaceDirectory(
            s.declared, s.space_capacity, s.auto_create_spaces,
            system=[space for adapter in self.adapters for space in adapter.system_spaces],
        )  # fmt: skip
        grace = 0.0 if not s.redis_url else min(5.0, s.heartbeat_interval)
        self.subscriptions = Subscriptions(self.backplane, grace, self.registry.has_space)
        #: Who may read or publish where, for every face (hub/core/authz.py).
        self.policy = SpacePolicy.of(s.spaces)
        self.limits = _session_limits(s, signed_spaces, self.policy)
        self.virtual_limits = _virtual_limits(s, signed_spaces, self.policy)
        #: Agent ids of shared virtual members (one per node) and of the server
        #: API's senders: never a connection's.
        self.reserved_ids: set[str] = set()
        if s.api_key is not None:
            self.reserved_ids.update((API_SENDER, *s.api_services))

        # ── the handlers of the sessions' actions, and where messages arrive
        self.send_error = ErrorSender(self.counters)
        preframe = s.compression == "none"
        fan_out = FanOut(
            self.registry, self.counters, preframe=preframe, lag=self._lag,
            delivered=self.backplane.delivered if self.redis is not None else None,
        )  # fmt: skip
        self.gaps = GapFiller(self.backplane, self.registry, fan_out, self._spawn)
        #: What this node's members were told of each space's members, to tell
        #: them what they missed while the link to Redis was down.
        self.member_views: MemberViews | None = None
        recovery = Recovery(
            s, self.registry, self.backplane, self.subscriptions,
            filling=self.gaps.filling.__contains__,
        )  # fmt: skip
        self.publishing = Publishing(
            s, self.backplane, self.presence, self.registry, self.ids, self.counters,
            self.send_error, self.envelopes,
            reached=fan_out.reached if self.redis is not None else None,
        )  # fmt: skip
        self.membership = Membership(
            s, self.node_id, self.registry, self.spaces, self.presence, self.backplane,
            self.subscriptions, self.ids, self.publishing, recovery, self.policy,
        )  # fmt: skip
        if self.redis is not None:
            self.member_views = MemberViews(
                self.registry, self.presence, self.gaps, fan_out, self.membership.limits
            )
            fan_out.on_members = self.member_views.seen
            self.membership.views = self.member_views
        #: Producers hear when nobody receives their stream any more.
        self.stream_stops = StreamStops(
            self.node_id, self.registry, self.backplane, self.publishing,
            filling=self.gaps.filling.__contains__,
        )  # fmt: skip
        holders = LocalHolders(s, self.registry)
        self.cluster = ClusterLink(
            s, self.node_id, self.registry, self.presence, self.backplane, self.membership,
            self.stream_stops, probe_local=holders.probe_local, evict_local=holders.evict_local,
            disconnect_local=self._disconnect_local,
        )  # fmt: skip
        self.agent_ids = AgentIds(
            s, self.node_id, self.registry, self.presence, holders, self.cluster
        )
        self.dispatcher = Dispatcher(
            self.counters, self.send_error, self._handlers(TokenExpiry(self.auth), recovery)
        )
        #: Where the backplane hands what it carries (events per space counted
        #: only while the status page is on).
        delivery = CountingDelivery if s.admin_token is not None else NodeDelivery
        self.delivery = delivery(
            self.registry, fan_out, self.gaps,
            on_ready=self._backplane_ready, on_node_message=self.cluster.on_message,
            on_signal=self.stream_stops.on_signal,
        )  # fmt: skip

        # ── the faces: WebSocket connections, the HTTP port, adapters
        self.lifecycle = ConnectionLifecycle(
            s, self.node_id, auth=self.auth, ids=self.ids, registry=self.registry,
            agent_ids=self.agent_ids, claims=self.presence, membership=self.membership,
            dispatcher=self.dispatcher, limits=self.limits, counters=self.counters,
            reserved_ids=self.reserved_ids, log=self.log,
        )  # fmt: skip
        self.metrics_registry = build_registry(
            HubCollector(
                self.counters,
                Gauges(
                    connections=self._connections,
                    spaces=lambda: len(self.registry.spaces),
                    streams=lambda: len(self.registry.streams),
                    backplane_ready=lambda: self.ready,
                    backplane_lag=self._lag,
                ),
                self.node_id,
            ),
            workers_view,
            worker,
        )
        #: The HTTP port's application; adapters mount their routes while starting.
        self.http_app = web.Application(
            client_max_size=s.max_frame_bytes, middlewares=[request_metrics(self.counters.http)]
        )
        self.http_app.add_routes(
            health_routes(
                lambda: self.ready and self.accepting, self.metrics_registry, self.identity
            )
        )
        #: The server API (/api) and the status page (/admin), when enabled.
        self.operator = OperatorFaces(
            s, self.node_id, self.dispatcher.run, self.presence, self.membership.space_exists,
            self.counters,
            NodeReadings(
                connections=self._connections,
                spaces=lambda: len(self.registry.spaces),
                backplane_ready=lambda: self.ready,
                backplane_lag=self._lag,
                take_space_events=self.delivery.take_space_events,
            ),
            disconnect_local=self._disconnect_local,
            disconnect_remote=self.cluster.disconnect_remote,
            node_stats=create_node_stats(self.redis, prefix=s.redis_prefix), policy=self.policy,
            reserved_ids=self.reserved_ids,
        )  # fmt: skip
        self.operator.mount(self.http_app)
        #: What the hosted adapters get (:class:`~hub.adapter_host.AdapterHost`).
        self.host = NodeHost(
            s, ids=self.ids, registry=self.registry, agent_ids=self.agent_ids,
            membership=self.membership, presence=self.presence, dispatcher=self.dispatcher,
            limits=self.virtual_limits, reserved_ids=self.reserved_ids, identity=self.identity,
            kv=self.kv, envelopes=self.envelopes, auth=self.auth,
            policy=self.policy, http_app=self.http_app, ready=lambda: self.ready,
        )  # fmt: skip
        self.sweeper = Sweeper(
            s, self.registry, self.dispatcher, preframe=preframe, log=self.log,
            claims=self.presence,
        )  # fmt: skip
        # A stream id opened again ends the stream that had it first.
        self.registry.on_reopened = lambda record, now: self.sweeper.end(
            record, "publisher_disconnected", now
        )
        self._sweeper: asyncio.Task[None] | None = None
        self._beat: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._adapters_closed = False
        self._settled = False
        self._background: set[asyncio.Task[None]] = set()

    def _handlers(self, expiry: TokenExpiry, recovery: Recovery) -> dict[type, Handler]:
        """Which handler carries out each action a session returns."""
        publishing, membership = self.publishing, self.membership
        first = membership.held_changes_first  # a publisher's held join goes out first
        return {
            Publish: first(publishing.publish),
            StreamDelta: first(publishing.stream_delta),
            StreamDone: first(publishing.stream_done),
            StreamCancel: first(publishing.stream_cancel),
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
            ReadHistory: recovery.history,
            Refresh: expiry.refresh,
        }

    def _stream_stopped(self, stop: ReceiverStop) -> None:
        """A receiver of a relayed stream stopped (the registry's report)."""
        self.stream_stops.stopped(stop)

    def _reject(self, peer: Peer, a: Reject) -> None:
        self.send_error(peer, a.error.code, a.error.message, a.error.request_id)

    def _lag(self) -> float:
        return self.backplane.lag

    # ── lifecycle ────────────────────────────────────────────────────────

    def _connections(self) -> int:
        """Open agent connections: the registry without the adapters' virtual members."""
        return len(self.registry) - self.host.attached

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.presence.start()
        await self.backplane.start(self.delivery)
        await self._settle()
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self.sweeper.run())
        self._beat = loop.create_task(self._beat_forever())
        await self.operator.start()
        for adapter in self.adapters:
            await adapter.start(self.host)

    async def aclose(self) -> None:
        """Stop adapters (last started, first closed), background work and the
        backplane. Idempotent. A part that fails to close is logged and the
        others are closed all the same."""
        if self._closed:
            return
        self.accepting = False
        await self.close_adapters()
        self._closed = True
        for task in (self._sweeper, self._beat):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for task in list(self._background):
            task.cancel()
        await self._close_part("operator faces", self.operator.aclose)
        # Departures of the connections just closed, still held: the cluster hears of them.
        await self.membership.aclose()
        await self.subscriptions.aclose()
        await self.cluster.aclose()
        await self.stream_stops.aclose()
        await self._close_part("presence (leaving the cluster)", self.presence.leave_cluster)
        await self._close_part("backplane", self.backplane.aclose)
        await self._close_part("presence", self.presence.aclose)
        await self._close_part("authenticator", self.auth.aclose)
        await self._close_part("envelope checks", self.envelopes.aclose)
        await self._close_part("key-value store", self.kv.aclose)
        if self.redis is not None:
            await self.redis.aclose()

    async def close_adapters(self) -> None:
        """Stop the adapters, last started first closed; idempotent. The server
        does it before it closes the agents' connections, so that what a bridge
        answers as it stops ("Bridge shutting down") still reaches its sender."""
        if self._adapters_closed:
            return
        self._adapters_closed = True
        for adapter in reversed(self.adapters):
            await self._close_part(f"adapter {type(adapter).__name__}", adapter.aclose)

    async def _close_part(self, part: str, close: Callable[[], Awaitable[object]]) -> None:
        try:
            await close()
        except Exception:
            self.log.exception("failed to close", part=part)

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def ready(self) -> bool:
        """Backplane connected and subscribed, and presence in step with it."""
        return self.backplane.ready and self._settled and not self._closed

    def _backplane_ready(self, ready: bool) -> None:
        self.log.info("backplane ready" if ready else "backplane not ready")
        self._settled = False
        if ready and self._sweeper is not None and not self._closed:
            # Back from an outage: re-register (Redis may have lost everything)
            # before reporting ready again, and tell the members what changed
            # in their spaces meanwhile — their messages wait until then.
            views = self.member_views
            held = views.hold() if views is not None else []
            self._spawn(self._settle(held))

    async def _settle(self, held: list[str] | None = None) -> None:
        try:
            with contextlib.suppress(BackplaneUnavailable):
                await self.cluster.tick()
                await self.membership.retry_departures()
                if held and self.member_views is not None:
                    spaces, held = held, None
                    await self.member_views.reconcile(spaces)
                self._settled = True
        finally:
            if held and self.member_views is not None:
                self.member_views.release(held)

    async def _beat_forever(self) -> None:
        """The node's liveness beat, far more often than agents heartbeat
        (``node_heartbeat_interval``): touch, restore, reap dead nodes, retry
        departures that could not be announced."""
        every = self.settings.node_beat_every
        while True:
            await asyncio.sleep(every)
            if self.member_views is not None:
                self.member_views.forget_elsewhere()
            try:
                await self._settle()
            except Exception:
                self.log.exception("cluster beat failed")

    def _disconnect_local(self, connection_id: str, reason: str) -> bool:
        """An operator disconnects this node's connection (API, status page,
        or another node's API by a node message). Virtual members are the
        hub's own: never."""
        peer = self.registry.connections.get(connection_id)
        if peer is None or peer.kind is not PeerKind.SOCKET or peer.closing:
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


def _session_limits(
    s: Settings, signed_spaces: frozenset[str], policy: SpacePolicy | None = None
) -> SessionLimits:
    return SessionLimits(
        heartbeat_timeout=s.heartbeat_timeout,
        rate_limit=s.rate_limit,
        rate_burst=s.rate_burst,
        rate_abuse_seconds=s.rate_abuse_seconds,
        stream_rate_limit=s.stream_rate_limit,
        stream_rate_burst=s.stream_rate_burst,
        max_streams=s.max_streams_per_agent,
        signed_spaces=signed_spaces,
        policy=policy or SpacePolicy.of(s.spaces),
        token_leeway=s.jwt_leeway if s.auth_mode == "jwt" else 0.0,
        token_refresh_grace=s.token_refresh_grace,
    )


def _virtual_limits(
    s: Settings, signed_spaces: frozenset[str], policy: SpacePolicy | None = None
) -> SessionLimits:
    """Virtual members send no heartbeats and are never closed for abuse; a
    rate limit and the stream limit hold for them as for anyone — their own
    (``bridge_rate_limit``), since one gateway member publishes for all the
    HTTP callers a node serves. Their sessions hold the trusted grant
    (``Grant.hub``): declared spaces' allow_join/allow_publish are for agents,
    the operator's own bridges are not restricted by them — what a gateway
    does for a caller, the policy decides for that caller first."""
    return SessionLimits(
        heartbeat_timeout=math.inf,
        rate_limit=s.bridge_rate_limit,
        rate_burst=s.bridge_rate_burst,
        stream_rate_limit=s.stream_rate_limit,
        stream_rate_burst=s.stream_rate_burst,
        rate_abuse_seconds=math.inf,
        max_streams=s.max_streams_per_agent,
        signed_spaces=signed_spaces,
        policy=policy or SpacePolicy.of(s.spaces),
    )


def _send(peer: Peer, a: Send) -> None:
    peer.send_frame(a.frame)


def _close(peer: Peer, a: Close) -> None:
    peer.close_for(a.code, a.error, a.reason)
