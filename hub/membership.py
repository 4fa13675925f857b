"""Agents and spaces: registration, status, joining, leaving, listing.

Cluster state (who holds an agent id, who is in a space) lives in presence;
this node's own membership (who gets fan-out here) in the space directory.
Joining and leaving keep both in step, cluster first: when the cluster can't
be reached the request fails with UNAVAILABLE and nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

from hub.backplane import Backplane, Draft, Envelope
from hub.errors import BackplaneUnavailable
from hub.ids import Ids
from hub.peer import Peer
from hub.presence import AgentRecord, Presence
from hub.publishing import Publishing
from hub.recovery import Recovery
from hub.registry import Registry
from hub.session import Denied, Join, Leave, ListSpaces, Register
from hub.settings import Settings
from hub.spaces import SpaceDirectory
from hub.subscriptions import Subscriptions
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.names import AGENT_STATUS_SPACE, SpaceKind, space_kind

# ``from`` of events the hub itself generates; not a valid agent id.
HUB_SENDER = "@hub"


class Membership:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        registry: Registry[Any],
        spaces: SpaceDirectory,
        presence: Presence,
        backplane: Backplane,
        subscriptions: Subscriptions,
        ids: Ids,
        publishing: Publishing,
    ):
        self.settings = settings
        self.node_id = node_id
        self.registry = registry
        self.spaces = spaces
        self.presence = presence
        self.backplane = backplane
        self.subscriptions = subscriptions
        self.ids = ids
        self.publishing = publishing
        self.recovery = Recovery(settings, registry, backplane, subscriptions)
        # Departures the cluster has not heard of yet (backplane was down).
        self.pending_departures: list[tuple[AgentRecord, list[str]]] = []

    async def register(self, conn: Peer, a: Register) -> None:
        """All or nothing: refused (UNAVAILABLE) with nothing changed, or
        stored, announced and acknowledged."""
        session = conn.session
        assert session is not None
        info = a.info
        record = AgentRecord(
            conn.agent_id,
            self.node_id,
            session.connection_id,
            info.type,
            tuple(info.capabilities),
            info.metadata,
        )
        s = self.settings
        # Encode everything before changing anything.
        status = self._status_draft("updated", record)
        reply = codec.registered(
            a.request_id,
            conn.agent_id,
            session.connection_id,
            round(s.heartbeat_interval * 1000),
            round(s.heartbeat_timeout * 1000),
        )
        previous = conn.record
        await self.presence.update_agent(record)
        try:
            await self.backplane.publish(AGENT_STATUS_SPACE, status)
        except BaseException:
            if previous is not None:
                with contextlib.suppress(Exception):
                    await self.presence.update_agent(previous)
            raise
        conn.record = record
        conn.send_frame(reply)

    async def join(self, conn: Peer, a: Join) -> None:
        session = conn.session
        assert session is not None
        space, rid = a.space, a.request_id
        limit = self.settings.members_list_limit
        if space in session.spaces:  # joining twice just answers again
            members, count = await self.presence.space_members(space, limit)
            position = await self.recovery.position(space)
            conn.send_frame(codec.joined(rid, space, members, count, **position))
            return
        self.spaces.check_joinable(space, rid)
        await self.presence.join_space(space, conn.agent_id, self.spaces.capacity(space))
        try:
            await self.subscriptions.ensure(space)
            members, count = await self.presence.space_members(space, limit)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.presence.leave_space(space, conn.agent_id)
            raise
        if conn.closing:
            # Closed meanwhile: its cleanup does not know of this space.
            with contextlib.suppress(Exception):
                await self.presence.leave_space(space, conn.agent_id)
            return
        # From here the joiner receives the space's messages; the reply goes
        # out first so nothing of the space overtakes space.joined, and a
        # resume (since) replays what was missed first (hub/recovery.py).
        reply = functools.partial(codec.joined, rid, space, members, count)
        try:
            await self.recovery.join(conn, space, a.since, reply)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.presence.leave_space(space, conn.agent_id)
            raise
        with contextlib.suppress(BackplaneUnavailable):
            await self._announce(space, members, count, joined=conn.agent_id)

    async def leave(self, conn: Peer, a: Leave) -> None:
        for cancel in a.cancelled:
            with contextlib.suppress(BackplaneUnavailable):
                await self.publishing.stream_cancel(conn, cancel)
        # Cluster first: when it is unreachable the agent stays a member.
        remaining = await self.presence.leave_space(a.space, conn.agent_id)
        self.drop_local(conn, a.space)
        conn.send_frame(codec.left(a.request_id, a.space))
        with contextlib.suppress(BackplaneUnavailable):
            await self._after_departure(a.space, conn.agent_id, remaining)

    def drop_local(self, conn: Peer, space: str) -> None:
        """This node stops delivering ``space`` to ``conn``."""
        if conn.session is not None:
            conn.session.on_left(space)
        if self.registry.leave(space, conn):
            self.subscriptions.release(space)

    async def detach(self, conn: Peer, record: AgentRecord | None) -> None:
        """``conn`` is gone: its streams end, it leaves every space, and the
        cluster hears of it (retried until the backplane is back)."""
        session = conn.session
        spaces: list[str] = []
        if session is not None:
            for cancel in session.closed():
                with contextlib.suppress(BackplaneUnavailable, ConnectionError):
                    await self.publishing.stream_cancel(conn, cancel)
            spaces = list(session.spaces)
        for space in self.registry.evict(conn.connection_id, conn):
            self.subscriptions.release(space)
        if session is not None:
            for space in spaces:
                session.on_left(space)
        if record is None:
            return
        departure = (conn.record or record, spaces)
        try:
            await self.depart(*departure)
        except BackplaneUnavailable:
            self.pending_departures.append(departure)

    async def _after_departure(self, space: str, agent_id: str, remaining: int) -> None:
        if remaining:
            await self.announce_departure(space, agent_id)
        elif not self.spaces.persistent(space):
            await self.backplane.forget(space)

    async def announce_departure(self, space: str, agent_id: str) -> None:
        members, count = await self.presence.space_members(space, self.settings.members_list_limit)
        if count:
            await self._announce(space, members, count, left=agent_id)

    async def _announce(
        self,
        space: str,
        members: list[str],
        count: int,
        joined: str | None = None,
        left: str | None = None,
    ) -> None:
        """Tell a space's other members who joined or left."""
        frame = codec.members(space, members, count, joined, left)
        await self.backplane.send(Envelope(space, frame, exclude=joined))

    async def list_spaces(self, conn: Peer, a: ListSpaces) -> None:
        sizes = await self.presence.space_sizes()
        for space in (*self.spaces.declared, *self.spaces.system):
            sizes.setdefault(space, 0)
        spaces = [
            {"id": space, "type": str(space_kind(space)), "member_count": n}
            for space, n in sorted(sizes.items())
        ]
        conn.send_frame(codec.space_list(a.request_id, spaces))

    async def denied(self, conn: Peer, a: Denied) -> None:
        """Publish/stream to a space the agent is not in: which refusal?"""
        if await self.space_exists(a.space):
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED, f"not a member of space {a.space!r}", a.request_id
            )
        raise ProtocolError(
            ErrorCode.SPACE_NOT_FOUND, f"space {a.space!r} does not exist", a.request_id
        )

    async def space_exists(self, space: str) -> bool:
        if self.spaces.persistent(space) or self.registry.has_space(space):
            return True
        if space_kind(space) is SpaceKind.SYSTEM:
            return False
        _, count = await self.presence.space_members(space, 0)
        return count > 0

    async def agent_status(self, event: str, record: AgentRecord) -> None:
        """Publish an ``agent.status`` event (online, offline, updated)."""
        await self.backplane.publish(AGENT_STATUS_SPACE, self._status_draft(event, record))

    def _status_draft(self, event: str, record: AgentRecord) -> Draft:
        data = {"event": event, "agent": record.public(), "from": HUB_SENDER}
        head, tail = codec.sequenced(
            "space.event",
            AGENT_STATUS_SPACE,
            self.ids.event_id(),
            {"from": HUB_SENDER, "timestamp": codec.now_ms(), "data": data},
        )
        return Draft(head, tail)

    async def depart(self, record: AgentRecord, spaces: list[str], retry: bool = False) -> None:
        """Tell the cluster an agent's connection is gone. Safe to retry."""
        if retry:
            holder = await self.presence.get_agent(record.agent_id)
            if holder is not None and holder.connection_id != record.connection_id:
                # The agent came back meanwhile: its memberships are the new ones.
                spaces.clear()
        while spaces:
            remaining = await self.presence.leave_space(spaces[0], record.agent_id)
            await self._after_departure(spaces.pop(0), record.agent_id, remaining)
        await self.presence.release_agent(record.agent_id, record.connection_id)
        await self.agent_status("offline", record)

    async def retry_departures(self) -> None:
        pending, self.pending_departures = self.pending_departures, []
        while pending:
            try:
                await self.depart(*pending[0], retry=True)
            except BackplaneUnavailable:
                self.pending_departures.extend(pending)
                raise
            pending.pop(0)
