"""The node: composition root of a hub process.

A :class:`Node` builds and owns the parts — settings, authenticator,
backplane and presence (in memory by default, Redis for a cluster), the local
:class:`~hub.registry.Registry`, membership, publishing, the cluster link, the
dispatcher, the HTTP application and the hosted adapters — and hands each
part only what it uses. It also drives one agent connection from accepted to
cleaned up (:meth:`handle`), hosts virtual members for adapters
(:meth:`attach`), and is the backplane's delivery handler (:meth:`deliver`).
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
from websockets.exceptions import ConnectionClosed

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
from hub.errors import AgentIdTaken, AuthError, BackplaneUnavailable
from hub.frames import OutFrame
from hub.gaps import GapFiller
from hub.handshake import HandshakeSlots
from hub.http import health_routes, request_metrics
from hub.identity import HubIdentity
from hub.ids import Ids
from hub.kvstore import create_kv_store
from hub.membership import Membership
from hub.metrics import Counters, Gauges, HubCollector, build_registry
from hub.outbox import Flusher
from hub.peer import Peer
from hub.presence import AgentRecord, Presence, create_presence
from hub.publishing import Publishing
from hub.registry import Registry
from hub.replay import ReplayCache
from hub.session import (
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
    Session,
    SessionLimits,
    StreamCancel,
    StreamDelta,
    StreamDone,
)
from hub.settings import Settings
from hub.spaces import SpaceDirectory
from hub.subscriptions import Subscriptions
from hub.virtual import Adapter, MessageHandler, VirtualMember
from protocol import codec
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
        self.spaces = SpaceDirectory(s.declared, s.space_capacity, s.auto_create_spaces)
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
                    connections=lambda: len(self.registry),
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
                connections=lambda: len(self.registry),
                spaces=lambda: len(self.registry.spaces),
                backplane_ready=lambda: self.ready,
                backplane_lag=lambda: getattr(self.backplane, "lag", 0.0),
                take_space_events=self._take_space_events,
            ),
            disconnect_local=self._disconnect_local,
            disconnect_remote=self.cluster.disconnect_remote,
        )  # fmt: skip
        self.operator.mount(self.http_app)
        self.adapters: list[Adapter] = list(adapters)
        #: Agent ids of shared virtual members (one per node) and of the server
        #: API's senders: never a connection's.
        self.reserved_ids: set[str] = set()
        if s.api_key is not None:
            self.reserved_ids.update((API_SENDER, *s.api_services))
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

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.presence.start()
        await self.backplane.start(self)
        await self._settle()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        await self.operator.start()
        for adapter in self.adapters:
            await adapter.start(self)

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

    # ── one WebSocket connection ────────────────────────────────────────

    async def handle(self, conn: HubConnection) -> None:
        """Run one agent connection from accepted to cleaned up."""
        loop = asyncio.get_running_loop()
        conn.start_outbox()
        agent_id = conn.agent_id
        conn_id = conn.connection_id = self.ids.connection_id()
        log = self.log.bind(agent_id=agent_id, connection_id=conn_id)
        try:
            conn.grant = await self.auth.authenticate(agent_id, conn.token)
        except AuthError as exc:
            await self._refuse(conn, CloseCode.UNAUTHORIZED, ErrorCode.UNAUTHORIZED, str(exc))
            log.info("connection refused", reason="unauthorized")
            return
        if agent_id in self.reserved_ids:
            await self._refuse(
                conn, CloseCode.AGENT_EXISTS, ErrorCode.AGENT_EXISTS,
                f"agent id {agent_id!r} is the hub's own",
            )  # fmt: skip
            log.info("connection refused", reason="reserved agent id")
            return
        # Declared in the handshake query, so the first `online` shows them.
        info = conn.declared
        record = AgentRecord(
            agent_id, self.node_id, conn_id,
            info.type if info else None,
            tuple(info.capabilities) if info else (),
            info.metadata if info else {},
            codec.now_ms(),
        )  # fmt: skip
        self.registry.add(conn_id, conn)
        try:
            claimed = await self.agent_ids.claim(record)
        except BackplaneUnavailable as exc:
            self.registry.evict(conn_id, conn)
            await self._refuse(conn, CloseCode.TRY_AGAIN_LATER, ErrorCode.UNAVAILABLE, str(exc))
            log.info("connection refused", reason="backplane unavailable")
            return
        if not claimed:
            self.registry.evict(conn_id, conn)
            await self._refuse(
                conn,
                CloseCode.AGENT_EXISTS,
                ErrorCode.AGENT_EXISTS,
                f"agent {agent_id!r} is already connected",
            )
            log.info("connection refused", reason="agent exists")
            return
        if conn.closing:
            # The client gave up while the id was being claimed: never announce it.
            self.registry.evict(conn_id, conn)
            with contextlib.suppress(BackplaneUnavailable):
                await self.presence.release_agent(agent_id, conn_id)
            conn.cleaned_up.set()
            log.info("connection refused", reason="client gone during the claim")
            return

        conn.record = record
        self.registry.bind_agent(conn)
        session = conn.session = Session(
            agent_id, conn_id, self.limits, loop.time(), grant=conn.grant
        )
        self.counters.connections_opened += 1
        conn.send_frame(self._registered(agent_id, conn_id))
        log.info("connection opened", **_remote(conn))
        try:
            with contextlib.suppress(BackplaneUnavailable):
                await self.membership.agent_status("online", record)
            receive = self.dispatcher.receive
            with contextlib.suppress(ConnectionClosed):
                async for frame in conn:
                    await receive(conn, frame, loop.time())
        finally:
            await self.membership.detach(conn, record)
            conn.cleaned_up.set()
            log.info(
                "connection closed",
                duration=round(time.monotonic() - conn.opened_at, 3),
                messages_in=session.messages_in,
                messages_out=conn.frames_out,
                close_code=conn.hub_close_code
                if conn.hub_close_code is not None
                else _close_code(conn),
            )

    def _registered(self, agent_id: str, conn_id: str, request_id: str | None = None) -> bytes:
        s = self.settings
        return codec.registered(
            request_id,
            agent_id,
            conn_id,
            round(s.heartbeat_interval * 1000),
            round(s.heartbeat_timeout * 1000),
        )

    async def _refuse(
        self, conn: HubConnection, code: CloseCode, error: ErrorCode, reason: str
    ) -> None:
        conn.close_for(code, error, reason)
        conn.cleaned_up.set()
        with contextlib.suppress(Exception):
            await conn.wait_closed()

    # ── virtual members (adapters) ──────────────────────────────────────

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
        """A virtual member for an adapter: an agent living inside the hub.

        ``shared``: every node hosts one under the same id (inbound bridges);
        the id is reserved (connections with it are refused), not claimed,
        and the member's space memberships outlive one node's copy. Otherwise
        the id is claimed cluster-wide like a connection's (raises
        :class:`~hub.errors.AgentIdTaken` while a live holder has it).
        """
        conn_id = self.ids.connection_id("vm")
        member = VirtualMember(
            agent_id, conn_id, self.dispatcher.receive, handler,
            shared=shared, queue_bytes=self.settings.outbox_max_bytes,
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
        member.session = Session(
            agent_id, conn_id, self.virtual_limits, asyncio.get_running_loop().time()
        )
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

    # ── housekeeping ────────────────────────────────────────────────────

    async def _sweep(self) -> None:
        """Heartbeat timeouts, idle streams and expired tokens, for every
        connection at once."""
        s = self.settings
        interval = max(0.02, min(s.heartbeat_timeout / 4, s.stream_idle_timeout / 4, 5.0))
        if s.auth_mode == "jwt":  # the only credentials that expire
            interval = max(0.02, min(interval, s.token_refresh_grace / 4))
        loop = asyncio.get_running_loop()
        next_tick = loop.time() + s.heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            try:
                await self._sweep_once(now)
                if now >= next_tick:
                    next_tick = now + s.heartbeat_interval
                    await self._settle()
            except Exception:
                self.log.exception("sweep failed")

    async def _sweep_once(self, now: float) -> None:
        idle = self.settings.stream_idle_timeout
        wall = time.time()  # token expiry is wall-clock time (a JWT's exp)
        expiry = self.expiry
        for peer in self.registry:
            session = peer.session
            if session is None or peer.closing:
                continue
            close = session.check_liveness(now)
            if close is not None:
                peer.close_for(close.code, close.error, close.reason)
                continue
            if session.grant.expires_at is not None and expiry.sweep(peer, wall):
                continue
            if session.open_streams:
                for cancel in session.expire_streams(now, idle):
                    with contextlib.suppress(BackplaneUnavailable):
                        await self.publishing.stream_cancel(peer, cancel)
        # Streams whose publisher's node went away without a last frame.
        for record in self.registry.expire_streams(now, idle * 2):
            frame = codec.cancel_notice(
                record.space, record.stream_id, record.publisher, "idle_timeout"
            )
            out = OutFrame(frame, self.preframe)
            for member in record.audience:
                member.push(out)


def _send(peer: Peer, a: Send) -> None:
    peer.send_frame(a.frame)


def _close(peer: Peer, a: Close) -> None:
    peer.close_for(a.code, a.error, a.reason)


def _remote(conn: HubConnection) -> dict[str, str | None]:
    client = conn.client  # set at the handshake, with trusted proxies resolved
    if client is not None:
        return {"remote": str(client), "via": client.via} if client.via else {"remote": str(client)}
    try:
        host, port = conn.remote_address[:2]
        return {"remote": f"{host}:{port}"}
    except Exception:
        return {"remote": None}


def _close_code(conn: HubConnection) -> int | None:
    try:
        return conn.protocol.close_code
    except Exception:
        return None
