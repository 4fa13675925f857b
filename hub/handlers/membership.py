"""Agents and spaces: registration, status, joining, leaving, listing.

Cluster state (who holds an agent id, who is in a space) lives in presence;
this node's own membership (who gets fan-out here) in the space directory.
Joining and leaving keep both in step, cluster first: when the cluster can't
be reached the request fails with UNAVAILABLE and nothing changes.

Membership at scale: a join or leave is told to the other members as
``space.members`` with the whole member list only while the space has at most
``members_list_limit`` members, then without the list, and not at all above
``member_events_limit`` — so forming a space of N costs O(N × min(N,
member_events_limit)) small frames, not O(N³) member ids. Each join reads at
most ``members_list_limit`` ids from presence, whatever the space's size.
And changes arriving together (a storm, a mass departure) are coalesced, never
dropped: a space announces about one ``space.members`` per
``member_events_interval`` (hub/handlers/member_events.py), a lone change
still in the seed's shape, and a held join goes out before its agent's events.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hub.cluster.backplane import Backplane, Delivery, Draft
from hub.cluster.presence import (
    AgentRecord,
    AgentsPage,
    CapabilityFilter,
    InvalidQuery,
    Presence,
)
from hub.cluster.subscriptions import Subscriptions
from hub.config.settings import Settings
from hub.core.actions import Denied, Join, Leave, ListAgents, ListMembers, ListSpaces, Register
from hub.core.authz import Principal, SpacePolicy
from hub.core.ids import Ids
from hub.core.peer import Peer, PeerKind
from hub.core.registry import Registry
from hub.core.spaces import SpaceDirectory
from hub.errors import BackplaneUnavailable, SpaceFull
from hub.handlers.member_events import Batch, HeldChangesFirst, MemberEvents
from hub.handlers.member_views import MemberViews
from hub.handlers.publishing import Publishing
from hub.handlers.recovery import Recovery
from protocol import codec
from protocol.errors import ErrorCode, ProtocolError
from protocol.messages import AgentInfo
from protocol.names import AGENT_STATUS_SPACE, SpaceKind, space_kind

# ``from`` of events the hub itself generates; not a valid agent id.
HUB_SENDER = "@hub"
#: Spaces looked through, per page of ``agent.list``, for the agents a caller
#: whose join claims limit it shares a space with (the first, by name).
MAX_DISCOVERY_SPACES = 100


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
        recovery: Recovery,
        policy: SpacePolicy | None = None,
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
        self.recovery = recovery
        self.policy = policy or SpacePolicy()
        # Departures the cluster has not heard of yet (backplane was down).
        self.pending_departures: list[tuple[AgentRecord, list[str]]] = []
        # Leaves answered UNAVAILABLE whose command may still have run (Redis
        # stalled past the timeout): the agent stays a member, so presence is
        # put back in step with that once the cluster answers.
        # (A dict for its order: a client retrying its leave is one entry.)
        self.unsure_leaves: dict[tuple[Peer, str], None] = {}
        self._declared = settings.declared
        #: What this node's members were told of each space's members (a node
        #: on Redis: hub/handlers/member_views.py); started at a first join here.
        self.views: MemberViews | None = None
        self.member_events = MemberEvents(settings.member_events_interval, self._announce)

    async def aclose(self) -> None:
        """Send the membership changes still held and stop their timers."""
        await self.member_events.aclose()

    def held_changes_first(self, handler: Any) -> HeldChangesFirst:
        """A publishing action's ``handler``, run after this node sent the
        held membership changes of the publisher (contract §21: nobody gets
        an agent's event before its join)."""
        return HeldChangesFirst(lambda: self.member_events, handler)

    def limits(self, space: str) -> tuple[int, int]:
        """``members_list_limit`` and ``member_events_limit`` of ``space``."""
        s, declared = self.settings, self._declared.get(space)
        if declared is None:
            return s.members_list_limit, s.member_events_limit
        return (
            s.members_list_limit
            if declared.members_list_limit is None
            else declared.members_list_limit,
            s.member_events_limit
            if declared.member_events_limit is None
            else declared.member_events_limit,
        )

    async def register(self, conn: Peer, a: Register) -> None:
        """All or nothing: refused (UNAVAILABLE) with nothing changed, or
        stored, announced and acknowledged."""
        session = conn.session
        assert session is not None
        record = merged(conn.record, a.info, self.node_id, session.connection_id)
        s = self.settings
        # Encode everything before changing anything.
        status = self._system_draft(
            AGENT_STATUS_SPACE, {"event": "updated", "agent": record.public()}
        )
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
        limit, events_limit = self.limits(space)
        if space in session.spaces:  # joining twice just answers again
            members, count = await self.presence.space_members(space, limit)
            position = await self.recovery.position(space)
            conn.send_frame(codec.joined(rid, space, members, count, **position))
            return
        self.spaces.check_joinable(space, rid)
        await self.presence.join_space(space, conn.agent_id, self.spaces.capacity(space))
        try:
            await self.subscriptions.ensure(space)
        except BaseException:
            await self._undo_join(conn, space)
            raise
        if conn.closing and conn.kind is not PeerKind.SOCKET:
            # A virtual member closed meanwhile: its cleanup, which runs beside
            # its requests, does not know of this space. A socket's frames are
            # carried out in order before its cleanup starts, so a join that
            # arrived before its client closed still happens (its departure
            # follows): what the client published next is not lost.
            await self._undo_join(conn, space)
            return
        # From here the joiner receives the space's messages; the reply goes
        # out first so nothing of the space overtakes space.joined, and a
        # resume (since) replays what was missed first (hub/handlers/recovery.py).
        # The members are read once the joiner is in the fan-out: another's
        # join is in the list, or its announcement reaches the joiner after
        # the reply — never neither (contract §21). And before the position:
        # an agent whose events come after it was in the list or joined
        # later, never left before the list was read (its event would come
        # from an agent the joiner was never told of).
        listing: tuple[list[str], int] = ([], 0)
        views = self.views if not self.registry.has_space(space) else None
        partial = False  # the node's first member of a big space: read the rest

        async def listed() -> None:
            nonlocal listing, partial
            listing = await self.presence.space_members(space, limit)
            if views is not None:  # this node's first member: its members' view starts
                partial = not views.started(space, *listing)

        async def reply(**position: Any) -> bytes:
            return codec.joined(rid, space, *listing, **position)

        try:
            await self.recovery.join(conn, space, a.since, reply, listed)
        except BaseException:
            await self._undo_join(conn, space)
            raise
        members, count = listing
        if partial and views is not None:
            with contextlib.suppress(BackplaneUnavailable):
                await views.complete(space)
        if count <= events_limit:
            with contextlib.suppress(BackplaneUnavailable):
                await self.member_events.changed(space, conn.agent_id, True, (members, count))

    async def _undo_join(self, conn: Peer, space: str) -> None:
        if _shared(conn):
            return  # the other nodes' copies rely on that membership
        with contextlib.suppress(Exception):
            await self.presence.leave_space(space, conn.agent_id)

    async def leave(self, conn: Peer, a: Leave) -> None:
        for cancel in a.cancelled:
            with contextlib.suppress(BackplaneUnavailable):
                await self.publishing.stream_cancel(conn, cancel)
        if _shared(conn):
            # One node's copy of a shared member leaving: the others stay members.
            self.drop_local(conn, a.space)
            conn.send_frame(codec.left(a.request_id, a.space))
            return
        # Its last publish there comes back first, its echo before space.left.
        await self.publishing.settled(conn, a.space)
        # Cluster first: when it is unreachable the agent stays a member.
        try:
            noted = await self._note_if_held(a.space, conn.agent_id)
            remaining = await self.presence.leave_space(a.space, conn.agent_id)
        except BackplaneUnavailable:
            self.unsure_leaves[conn, a.space] = None
            raise
        self.drop_local(conn, a.space)
        conn.send_frame(codec.left(a.request_id, a.space))
        with contextlib.suppress(BackplaneUnavailable):
            await self._after_departure(a.space, conn.agent_id, remaining, noted)

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

    async def _note_if_held(self, space: str, agent_id: str) -> bool:
        """Before ``agent_id`` leaves ``space`` in presence: when this node's
        window of the space is open (the leave will be held), note the leave
        in presence first, so that it is announced even if this node dies
        holding it — by its reaper (contract §21, §8). Nothing while no
        window is open (the leave then goes out at once)."""
        if not self.member_events.holding(space):
            return False
        await self.presence.note_departures(space, (agent_id,))
        return True

    async def _after_departure(
        self, space: str, agent_id: str, remaining: int, noted: bool = False
    ) -> None:
        if remaining:
            if not noted and self.member_events.holding(space):
                # Its window opened meanwhile: noted now (late, not never).
                with contextlib.suppress(BackplaneUnavailable):
                    await self.presence.note_departures(space, (agent_id,))
                    noted = True
            await self.member_events.changed(space, agent_id, False, noted=noted)
            return
        if noted:  # nobody left to tell
            with contextlib.suppress(BackplaneUnavailable):
                await self.presence.forget_departures(space, (agent_id,))
        if not self.spaces.persistent(space):
            await self.backplane.forget(space)

    async def announce_departure(self, space: str, agent_id: str) -> None:
        await self.member_events.changed(space, agent_id, False)

    async def _announce(self, space: str, batch: Batch) -> None:
        """Tell a space's other members who joined or left: one change in the
        seed's shape (``joined``/``left`` an id, the joiner excluded), several
        coalesced ones as lists (nobody excluded). Encoded once.

        A batch a window held may name a leave that another node's join has
        overtaken (the agent reconnected there and rejoined, announced at
        once): one presence read finds the agents that left here and are
        members again, and lists them in ``joined`` too — in both lists,
        recipients keep (or page) what they had, never drop a member
        (contract §21). Once told, the batch's notes (its held leaves,
        noted for a reaper should this node die) are dropped: one command."""
        limit, events_limit = self.limits(space)
        if batch.listing is None:
            members, count = await self.presence.space_members(space, limit)
        else:
            members, count = batch.listing
        if count and count <= events_limit:
            leavers = batch.lone_leavers if batch.held else []
            if leavers:
                gone = set(await self.presence.missing_members(space, tuple(leavers)))
                back = [agent for agent in leavers if agent not in gone]
                if back:
                    batch = batch.rejoined(back)
            listed = members if count <= limit else None
            frame = batch.frame(space, listed, count)
            await self.backplane.send(Delivery(space, frame, exclude=batch.lone_joiner))
        if batch.noted:
            # Best effort: a note left behind is only a `left` told twice
            # (by this node's reaper, should it die).
            with contextlib.suppress(BackplaneUnavailable):
                await self.presence.forget_departures(space, batch.noted)

    async def list_spaces(self, conn: Peer, a: ListSpaces) -> None:
        """The spaces cluster-wide, as the caller may see them: only those it
        may join (contract §18: discovery shows what the caller may join)."""
        sizes = await self.presence.space_sizes()
        for space in (*self.spaces.declared, *self.spaces.system):
            sizes.setdefault(space, 0)
        names = sorted(sizes)
        who = conn.session
        if who is not None and self.policy.restricts(who.grant):
            names = self.policy.readable(who, names)
        spaces = [
            {"id": space, "type": str(space_kind(space)), "member_count": sizes[space]}
            for space in names
        ]
        conn.send_frame(codec.space_list(a.request_id, spaces))

    async def list_members(self, conn: Peer, a: ListMembers) -> None:
        """A page of a space's members, cluster-wide, in join order."""
        if not await self.space_exists(a.space):
            raise ProtocolError(
                ErrorCode.SPACE_NOT_FOUND, f"space {a.space!r} does not exist", a.request_id
            )
        try:
            page = await self.presence.members_page(a.space, a.cursor, a.limit)
        except InvalidQuery as exc:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, str(exc), a.request_id) from None
        conn.send_frame(
            codec.members_page(a.request_id, a.space, page.members, page.count, page.next_cursor)
        )

    async def list_agents(self, conn: Peer, a: ListAgents) -> None:
        """A page of the agent directory, cluster-wide, as the caller may see it."""
        try:
            page = await self.agents_page(conn.session, a.capability, a.space, a.cursor, a.limit)
        except InvalidQuery as exc:
            raise ProtocolError(ErrorCode.INVALID_REQUEST, str(exc), a.request_id) from None
        agents = [record.directory() for record in page.agents]
        conn.send_frame(codec.agent_list(a.request_id, agents, page.next_cursor))

    async def agents_page(
        self,
        who: Principal | None,
        capability: str | None,
        space: str | None,
        cursor: str | None,
        limit: int,
    ) -> AgentsPage:
        """A page of the directory as ``who`` may see it (None: the operator).

        Discovery shows only what the caller may join (contract §18): with
        ``space`` (a space it may read, checked by its face) every member of
        it; without, an agent is left out when it is in a space whose rules
        keep ``who`` out, and — when ``who``'s join claims limit it — unless
        it is in a space ``who`` may read (one of the first
        :data:`MAX_DISCOVERY_SPACES` with members, by name). A page may so
        hold fewer than ``limit``; only ``next_cursor`` None ends the listing.
        Raises :class:`InvalidQuery`."""
        found = None if capability is None else CapabilityFilter.parse(capability)
        page = await self.presence.list_agents(
            capability=found, space=space, cursor=cursor, limit=limit
        )
        if who is None or space is not None or not self.policy.restricts(who.grant):
            return page
        hidden = await self._hidden(who, [record.agent_id for record in page.agents])
        shown = [record for record in page.agents if record.agent_id not in hidden]
        return AgentsPage(shown, page.next_cursor)

    async def _hidden(self, who: Principal, ids: list[str]) -> set[str]:
        hidden: set[str] = set()
        for space in self.policy.ruled_out(who):
            if ids:
                missing = set(await self.presence.missing_members(space, tuple(ids)))
                hidden.update(i for i in ids if i not in missing)
        if who.grant.join is None:
            return hidden
        sizes = await self.presence.space_sizes()
        readable = self.policy.readable(who, sorted(sizes))[:MAX_DISCOVERY_SPACES]
        rest = tuple(i for i in ids if i not in hidden)
        for space in readable:
            if not rest:
                break
            rest = tuple(await self.presence.missing_members(space, rest))
        hidden.update(rest)
        return hidden

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
        await self.system_event(AGENT_STATUS_SPACE, {"event": event, "agent": record.public()})

    async def system_event(
        self, space: str, data: dict[str, Any], *, to: tuple[str, ...] | None = None
    ) -> None:
        """Publish a hub-generated event (``from`` the hub) into a system space,
        to every member or only to those in ``to``."""
        await self.backplane.publish(space, self._system_draft(space, data, to))

    def _system_draft(
        self, space: str, data: dict[str, Any], to: tuple[str, ...] | None = None
    ) -> Draft:
        head, tail = codec.sequenced(
            "space.event",
            space,
            self.ids.event_id(),
            {"from": HUB_SENDER, "timestamp": codec.now_ms(), "data": {**data, "from": HUB_SENDER}},
        )
        return Draft(head, tail, to=to)

    async def depart(self, record: AgentRecord, spaces: list[str], retry: bool = False) -> None:
        """Tell the cluster an agent's connection is gone. Safe to retry."""
        if retry:
            holder = await self.presence.get_agent(record.agent_id)
            if holder is not None and holder.connection_id != record.connection_id:
                # The agent came back meanwhile: its memberships are the new ones.
                spaces.clear()
        while spaces:
            noted = await self._note_if_held(spaces[0], record.agent_id)
            remaining = await self.presence.leave_space(spaces[0], record.agent_id)
            await self._after_departure(spaces.pop(0), record.agent_id, remaining, noted)
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
        await self._still_members()

    async def _still_members(self) -> None:
        """A leave answered UNAVAILABLE was not carried out: an agent still a
        member here is a member in presence again (joining twice is harmless),
        whatever the timed-out command did."""
        unsure, self.unsure_leaves = list(self.unsure_leaves), {}
        while unsure:
            conn, space = unsure[0]
            session = conn.session
            if session is not None and not conn.closing and space in session.spaces:
                try:
                    await self.presence.join_space(
                        space, conn.agent_id, self.spaces.capacity(space)
                    )
                except BackplaneUnavailable:
                    self.unsure_leaves = dict.fromkeys(unsure) | self.unsure_leaves
                    raise
                except SpaceFull:
                    # Its place was taken meanwhile: the leave stands after all,
                    # and the agent hears so (a space.left without an id).
                    self.drop_local(conn, space)
                    conn.send_frame(codec.left(None, space))
                    with contextlib.suppress(BackplaneUnavailable):
                        await self.announce_departure(space, conn.agent_id)
            unsure.pop(0)


def merged(
    previous: AgentRecord | None, info: AgentInfo, node_id: str, connection_id: str
) -> AgentRecord:
    """The record after an ``agent.register``: a field the message leaves
    out keeps its value; a field it sends replaces it (``null`` clears
    ``type``; ``capabilities`` and ``metadata`` are replaced whole)."""
    sent = info.model_fields_set
    base = previous or AgentRecord(info.id, node_id, connection_id)
    return AgentRecord(
        base.agent_id,
        node_id,
        connection_id,
        info.type if "type" in sent else base.type,
        tuple(info.capabilities) if "capabilities" in sent else base.capabilities,
        info.metadata if "metadata" in sent else base.metadata,
        base.connected_at,
    )


def _shared(conn: Peer) -> bool:
    """A shared virtual member: every node hosts one under the same agent id."""
    return conn.kind is PeerKind.SHARED
