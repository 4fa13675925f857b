"""The node: composition root of a hub process.

A :class:`Node` owns the settings, the authenticator, the backplane and
presence (in-memory by default, Redis for a cluster), this node's spaces,
streams and connections, and the counters. :meth:`Node.handle` runs one
connection: it authenticates, claims the agent id, then feeds every frame to
the connection's :class:`~hub.session.Session` and carries out the actions it
returns. :meth:`Node.deliver` is the fan-out: the backplane pushes every space
message here and it is handed, already encoded, to each local member.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from websockets.exceptions import ConnectionClosed

from hub.auth import build_authenticator
from hub.backplane import Backplane, Envelope, create_backplane
from hub.cluster import ClusterLink
from hub.connection import HubConnection
from hub.errors import AuthError, BackplaneUnavailable, SpaceFull
from hub.membership import Membership
from hub.metrics import Counters, Gauges, HubCollector, build_registry
from hub.outbox import Flusher, OutFrame
from hub.presence import AgentRecord, Presence, create_presence
from hub.publishing import Publishing
from hub.session import (
    Action,
    Close,
    Denied,
    Join,
    Leave,
    ListSpaces,
    Publish,
    ReceiverCancel,
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
from hub.streams import StreamRouter
from hub.subscriptions import Subscriptions
from protocol import codec
from protocol.errors import CloseCode, ErrorCode, ProtocolError


class Node:
    """One hub process's worth of state and behaviour."""

    def __init__(
        self,
        settings: Settings,
        *,
        backplane: Backplane | None = None,
        presence: Presence | None = None,
    ):
        s = self.settings = settings
        self.node_id = s.node_id
        self.log = structlog.get_logger("hub").bind(node=self.node_id)
        self.counters = Counters()
        self.auth = build_authenticator(s)
        self.backplane = backplane or create_backplane(
            s.redis_url, prefix=s.redis_prefix, node_id=s.node_id
        )
        self.presence = presence or create_presence(
            s.redis_url, prefix=s.redis_prefix, node_id=s.node_id, ttl=s.heartbeat_timeout
        )
        self.spaces = SpaceDirectory(s.declared, s.space_capacity, s.auto_create_spaces)
        self.streams = StreamRouter()
        grace = 0.0 if not s.redis_url else min(5.0, s.heartbeat_interval)
        self.subscriptions = Subscriptions(self.backplane, grace, self.spaces.has_local)
        self.limits = SessionLimits(
            heartbeat_timeout=s.heartbeat_timeout,
            rate_limit=s.rate_limit,
            rate_burst=s.rate_burst,
            rate_abuse_seconds=s.rate_abuse_seconds,
            max_streams=s.max_streams_per_agent,
        )
        # Every local connection by connection id, registered before its
        # agent id is claimed so a concurrent duplicate can probe it.
        self.connections: dict[str, HubConnection] = {}
        self.flusher = Flusher()
        self.preframe = s.compression == "none"
        self.connection_class: type[HubConnection] = type(
            "NodeConnection",
            (HubConnection,),
            {
                "flusher": self.flusher,
                "counters": self.counters,
                "outbox_limit": s.outbox_max_bytes,
                "preframed": self.preframe,
                "hub_close_timeout": s.close_timeout,
            },
        )
        self.metrics_registry = build_registry(
            HubCollector(
                self.counters,
                Gauges(
                    connections=lambda: len(self.connections),
                    spaces=lambda: len(self.spaces.local),
                    streams=lambda: len(self.streams),
                    backplane_ready=lambda: self.ready,
                    backplane_lag=lambda: getattr(self.backplane, "lag", 0.0),
                ),
                self.node_id,
            )
        )
        self.cluster = ClusterLink(self)
        self.publishing = Publishing(self)
        self.membership = Membership(self)
        self.accepting = True
        self._tag = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._settled = False
        self._background: set[asyncio.Task[None]] = set()
        self._handlers: dict[type, Callable[[HubConnection, Any], Awaitable[None] | None]] = {
            Publish: self.publishing.publish,
            StreamDelta: self.publishing.stream_delta,
            Send: self._send,
            Reject: self._reject,
            StreamDone: self.publishing.stream_done,
            StreamCancel: self.publishing.stream_cancel,
            ReceiverCancel: self.publishing.receiver_cancel,
            Join: self.membership.join,
            Leave: self.membership.leave,
            ListSpaces: self.membership.list_spaces,
            Register: self.membership.register,
            Denied: self.publishing.denied,
            Close: self._close,
        }

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self.presence.start()
        await self.backplane.start(self)
        await self._settle()
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def aclose(self) -> None:
        """Stop background work and release the backplane. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.accepting = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for task in list(self._background):
            task.cancel()
        await self.subscriptions.aclose()
        await self.cluster.aclose()
        with contextlib.suppress(Exception):
            await self.presence.leave_cluster()
        with contextlib.suppress(Exception):
            await self.backplane.aclose()
        with contextlib.suppress(Exception):
            await self.presence.aclose()

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
        members = self.spaces.local.get(env.space)
        if not members:
            return
        out = OutFrame(env.frame, self.preframe)
        if env.stream is not None:
            self.counters.deliveries += self.streams.route(
                env, members, out, asyncio.get_running_loop().time()
            )
            return
        exclude = env.exclude
        if exclude is None:
            for conn in members:
                conn.push(out)
            self.counters.deliveries += len(members)
        else:
            n = 0
            for conn in members:
                if conn.agent_id != exclude:
                    conn.push(out)
                    n += 1
            self.counters.deliveries += n

    def backplane_ready(self, ready: bool) -> None:
        self.log.info("backplane ready" if ready else "backplane not ready")
        self._settled = False
        if ready and self._sweeper is not None and not self._closed:
            # Back from an outage: re-register (Redis may have lost everything)
            # before reporting ready again.
            task = asyncio.get_running_loop().create_task(self._settle())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _settle(self) -> None:
        with contextlib.suppress(BackplaneUnavailable):
            await self.cluster.tick()
            await self.membership.retry_departures()
            self._settled = True

    def node_message(self, payload: bytes) -> None:
        self.cluster.on_message(payload)

    # ── one connection ──────────────────────────────────────────────────

    def new_connection_id(self) -> str:
        return f"ws-{self._tag}-{next(self._ids):x}"

    def new_event_id(self) -> str:
        return f"evt-{self._tag}-{next(self._ids):x}"

    async def handle(self, conn: HubConnection) -> None:
        """Run one agent connection from accepted to cleaned up."""
        loop = asyncio.get_running_loop()
        conn.start_outbox()
        agent_id = conn.agent_id
        conn_id = self.new_connection_id()
        log = self.log.bind(agent_id=agent_id, connection_id=conn_id)
        try:
            self.auth.authenticate(agent_id, conn.token)
        except AuthError as exc:
            await self._refuse(conn, CloseCode.UNAUTHORIZED, ErrorCode.UNAUTHORIZED, str(exc))
            log.info("connection refused", reason="unauthorized")
            return
        record = AgentRecord(agent_id, self.node_id, conn_id)
        self.connections[conn_id] = conn
        try:
            claimed = await self._claim(record)
        except BackplaneUnavailable as exc:
            self.connections.pop(conn_id, None)
            await self._refuse(conn, CloseCode.TRY_AGAIN_LATER, ErrorCode.UNAVAILABLE, str(exc))
            log.info("connection refused", reason="backplane unavailable")
            return
        if not claimed:
            self.connections.pop(conn_id, None)
            await self._refuse(
                conn,
                CloseCode.AGENT_EXISTS,
                ErrorCode.AGENT_EXISTS,
                f"agent {agent_id!r} is already connected",
            )
            log.info("connection refused", reason="agent exists")
            return

        conn.record = record
        session = conn.session = Session(agent_id, conn_id, self.limits, loop.time())
        self.counters.connections_opened += 1
        s = self.settings
        conn.send_frame(
            codec.registered(
                None,
                agent_id,
                conn_id,
                round(s.heartbeat_interval * 1000),
                round(s.heartbeat_timeout * 1000),
            )
        )
        log.info("connection opened", remote=_remote(conn))
        try:
            with contextlib.suppress(BackplaneUnavailable):
                await self.membership.agent_status("online", record)
            await self._serve(conn, session)
        finally:
            await self._cleanup(conn, session, record)
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

    async def _serve(self, conn: HubConnection, session: Session) -> None:
        loop = asyncio.get_running_loop()
        receive = session.receive
        handlers = self._handlers
        counters = self.counters
        try:
            async for frame in conn:
                counters.messages_in += 1
                for action in receive(frame, loop.time()):
                    try:
                        result = handlers[type(action)](conn, action)
                        if result is not None:
                            await result
                    except ProtocolError as exc:
                        self.send_error(conn, exc.code, exc.message, exc.request_id)
                    except SpaceFull as exc:
                        self.send_error(conn, ErrorCode.SPACE_FULL, str(exc), _rid(action))
                    except BackplaneUnavailable as exc:
                        counters.backplane_errors += 1
                        self.send_error(
                            conn,
                            ErrorCode.UNAVAILABLE,
                            f"{exc}: request not carried out",
                            _rid(action),
                        )
                    except ConnectionClosed:
                        raise
                    except Exception:
                        self.log.exception("action failed", action=type(action).__name__)
                        self.send_error(
                            conn, ErrorCode.INTERNAL_ERROR, "internal error", _rid(action)
                        )
        except ConnectionClosed:
            pass

    async def _refuse(
        self, conn: HubConnection, code: CloseCode, error: ErrorCode, reason: str
    ) -> None:
        conn.close_for(code, error, reason)
        await conn.close_gracefully(code, reason)

    async def _cleanup(self, conn: HubConnection, session: Session, record: AgentRecord) -> None:
        for cancel in session.closed():
            with contextlib.suppress(BackplaneUnavailable, ConnectionClosed):
                await self.publishing.stream_cancel(conn, cancel)
        self.connections.pop(session.connection_id, None)
        spaces = list(session.spaces)
        for space in spaces:
            self.membership.drop_local(conn, space)
        departure = (conn.record or record, spaces)
        try:
            await self.membership.depart(*departure)
        except BackplaneUnavailable:
            # The cluster must still learn of it: retried until the backplane is back.
            self.membership.pending_departures.append(departure)

    # ── agent ids ───────────────────────────────────────────────────────

    async def _claim(self, record: AgentRecord) -> bool:
        holder = await self.presence.claim_agent(record)
        if holder is None:
            return True
        remote = holder.node_id != self.node_id
        if remote:
            if await self.cluster.holder_alive(holder):
                return False
        else:
            conn = self.connections.get(holder.connection_id)
            # No local connection with that id: a record left behind.
            if conn is not None:
                if await self.local_alive(conn):
                    return False
                self.evict(conn)
                await conn.wait_cleaned_up(self.settings.close_timeout + 1)
        if await self.presence.claim_agent(record, replace=holder.connection_id) is not None:
            return False
        if remote:
            await self.cluster.evict_remote(holder)
        return True

    async def local_alive(self, conn: HubConnection) -> bool:
        """Does this node's connection still answer? (Silent too long = no.)"""
        session = conn.session
        now = asyncio.get_running_loop().time()
        if session is not None and now - session.last_seen > self.settings.heartbeat_timeout:
            return False
        return await conn.probe(self.settings.liveness_probe_timeout)

    def evict(self, conn: HubConnection) -> None:
        """Drop a connection that failed a liveness probe: its id goes to a newcomer."""
        self.close_connection(
            conn,
            CloseCode.HEARTBEAT_TIMEOUT,
            ErrorCode.HEARTBEAT_TIMEOUT,
            "failed a liveness probe: replaced by a new connection",
        )
        # It did not answer a ping: no closing handshake to wait for.
        conn.transport.abort()

    def close_connection(
        self, conn: HubConnection, code: CloseCode, error: ErrorCode, reason: str
    ) -> None:
        """Close a connection for a reason: error event, then close code."""
        conn.close_for(code, error, reason)

    # ── actions ─────────────────────────────────────────────────────────

    def _send(self, conn: HubConnection, a: Send) -> None:
        conn.send_frame(a.frame)

    def _reject(self, conn: HubConnection, a: Reject) -> None:
        e = a.error
        self.send_error(conn, e.code, e.message, e.request_id)

    def send_error(
        self, conn: HubConnection, code: ErrorCode, message: str, request_id: str | int | None
    ) -> None:
        self.counters.errors[code] += 1
        conn.send_frame(codec.error(code, message, request_id))

    def _close(self, conn: HubConnection, a: Close) -> None:
        self.close_connection(conn, a.code, a.error, a.reason)

    # ── streams ─────────────────────────────────────────────────────────

    # ── spaces ──────────────────────────────────────────────────────────

    # ── housekeeping ────────────────────────────────────────────────────

    async def _sweep(self) -> None:
        """Heartbeat timeouts and idle streams, for every connection at once."""
        s = self.settings
        interval = max(0.02, min(s.heartbeat_timeout / 4, s.stream_idle_timeout / 4, 5.0))
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
        for conn in list(self.connections.values()):
            session = conn.session
            if session is None or conn.closing:
                continue
            close = session.check_liveness(now)
            if close is not None:
                self._close(conn, close)
                continue
            if session.open_streams:
                for cancel in session.expire_streams(now, idle):
                    with contextlib.suppress(BackplaneUnavailable):
                        await self.publishing.stream_cancel(conn, cancel)
        # Streams whose publisher's node went away without a last frame.
        for record in self.streams.expire(now, idle * 2):
            frame = codec.cancel_notice(
                record.space, record.stream_id, record.publisher, "idle_timeout"
            )
            out = OutFrame(frame, self.preframe)
            for member in record.audience:
                member.push(out)


def _rid(action: Action) -> str | int | None:
    return getattr(action, "request_id", None)


def _remote(conn: HubConnection) -> str | None:
    try:
        host, port = conn.remote_address[:2]
        return f"{host}:{port}"
    except Exception:
        return None


def _close_code(conn: HubConnection) -> int | None:
    try:
        return conn.hub_close_code if conn.hub_close_code is not None else conn.protocol.close_code
    except Exception:
        return None
