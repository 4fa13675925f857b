"""One WebSocket connection, from accepted to cleaned up.

After the handshake (:mod:`hub.net.handshake`) the connection is authenticated,
its agent id claimed cluster-wide (:class:`~hub.handlers.agent_ids.AgentIds`), announced
``online``, and every frame fed to the dispatcher until it closes; then its
streams end, it leaves its spaces and the cluster hears of it
(:meth:`~hub.handlers.membership.Membership.detach`). A refusal is an ``error`` event
and a close code, never half a registration. One log line when a connection
opens (or is refused) and one when it closes — never per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from hub.auth import Authenticator
from hub.cluster.presence import AgentClaims, AgentRecord
from hub.config.settings import Settings
from hub.core.counters import Counters
from hub.core.ids import Ids
from hub.core.registry import Registry
from hub.core.session import Session, SessionLimits
from hub.errors import AuthError, BackplaneUnavailable
from hub.handlers.agent_ids import AgentIds
from hub.handlers.dispatch import Dispatcher
from hub.handlers.membership import Membership
from hub.net.connection import HubConnection
from protocol import codec
from protocol.errors import CloseCode, ErrorCode


class ConnectionLifecycle:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        *,
        auth: Authenticator,
        ids: Ids,
        registry: Registry[Any],
        agent_ids: AgentIds,
        claims: AgentClaims,
        membership: Membership,
        dispatcher: Dispatcher,
        limits: SessionLimits,
        counters: Counters,
        reserved_ids: set[str],
        log: Any,
    ):
        self.settings = settings
        self.node_id = node_id
        self.auth = auth
        self.ids = ids
        self.registry = registry
        self.agent_ids = agent_ids
        self.claims = claims
        self.membership = membership
        self.dispatcher = dispatcher
        self.limits = limits
        self.counters = counters
        #: Agent ids no connection may take (shared bridges, the API's senders).
        self.reserved_ids = reserved_ids
        self.log = log

    async def handle(self, conn: HubConnection) -> None:
        """Run one agent connection from accepted to cleaned up."""
        loop = asyncio.get_running_loop()
        conn.start_outbox()
        agent_id = conn.agent_id
        conn_id = conn.connection_id = self.ids.connection_id()
        # Not a logger bound per connection: it would live as long as the
        # connection (some 700 bytes each); the two ids are passed per line.
        log = self.log
        refused = await self._admit(conn)
        if refused is not None:
            log.info("connection refused", agent_id=agent_id, connection_id=conn_id, reason=refused)
            return
        record = conn.record
        assert record is not None
        self.registry.bind_agent(conn)
        session = conn.session = Session(
            agent_id, conn_id, self.limits, loop.time(), grant=conn.grant
        )
        self.counters.connections_opened += 1
        conn.send_frame(self._registered(agent_id, conn_id))
        log.info("connection opened", agent_id=agent_id, connection_id=conn_id, **_remote(conn))
        try:
            with contextlib.suppress(BackplaneUnavailable):
                await self.membership.agent_status("online", record)
            # No bound methods kept in locals: they would live (and be walked
            # by the cycle collector) as long as the connection.
            dispatcher = self.dispatcher
            while (frame := await conn.receive()) is not None:  # None once closed
                await dispatcher.receive(conn, frame, loop.time())
        finally:
            await self.membership.detach(conn, record)
            conn.cleaned_up.set()
            log.info(
                "connection closed",
                agent_id=agent_id,
                connection_id=conn_id,
                duration=round(time.monotonic() - conn.opened_at, 3),
                messages_in=session.messages_in,
                messages_out=conn.frames_out,
                close_code=conn.hub_close_code
                if conn.hub_close_code is not None
                else _close_code(conn),
            )

    async def _admit(self, conn: HubConnection) -> str | None:
        """Authenticate and claim the agent id; the reason when refused (the
        connection is then closed and cleaned up), None when admitted."""
        agent_id, conn_id = conn.agent_id, conn.connection_id
        try:
            conn.grant = await self.auth.authenticate(agent_id, conn.token)
        except AuthError as exc:
            await _refuse(conn, CloseCode.UNAUTHORIZED, ErrorCode.UNAUTHORIZED, str(exc))
            return "unauthorized"
        if agent_id in self.reserved_ids:
            await _refuse(
                conn, CloseCode.AGENT_EXISTS, ErrorCode.AGENT_EXISTS,
                f"agent id {agent_id!r} is the hub's own",
            )  # fmt: skip
            return "reserved agent id"
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
            await _refuse(conn, CloseCode.TRY_AGAIN_LATER, ErrorCode.UNAVAILABLE, str(exc))
            return "backplane unavailable"
        if not claimed:
            self.registry.evict(conn_id, conn)
            await _refuse(
                conn,
                CloseCode.AGENT_EXISTS,
                ErrorCode.AGENT_EXISTS,
                f"agent {agent_id!r} is already connected",
            )
            return "agent exists"
        if conn.closing:
            # The client gave up while the id was being claimed: never announce it.
            self.registry.evict(conn_id, conn)
            with contextlib.suppress(BackplaneUnavailable):
                await self.claims.release_agent(agent_id, conn_id)
            conn.cleaned_up.set()
            return "client gone during the claim"
        conn.record = record
        return None

    def _registered(self, agent_id: str, conn_id: str) -> bytes:
        s = self.settings
        return codec.registered(
            None,
            agent_id,
            conn_id,
            round(s.heartbeat_interval * 1000),
            round(s.heartbeat_timeout * 1000),
        )


async def _refuse(conn: HubConnection, code: CloseCode, error: ErrorCode, reason: str) -> None:
    conn.close_for(code, error, reason)
    conn.cleaned_up.set()
    with contextlib.suppress(Exception):
        await conn.wait_closed()


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
    """The close code as a number (websockets gives an enum for the codes it
    names, such as 1006, which a console log would print as its repr)."""
    try:
        code = conn.close_code
    except Exception:
        return None
    return None if code is None else int(code)
