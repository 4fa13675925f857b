"""The node's local registry: which local member is in which space.

This is the only place that knows the node's own members — WebSocket
connections and the virtual members adapters use — by connection id and by
agent id, which spaces each is in, and the audiences of streams being relayed
here. :meth:`Registry.deliver` is the one fan-out loop of the node: the
backplane pushes every message here, already encoded, and it is handed to each
member of its audience unchanged.

Pure state: no I/O, no websockets, Redis or backplane code. It is typed on
the small :class:`Member` protocol, not on a connection class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from hub.core.frames import OutFrame
from hub.core.stream_audiences import OnStop, RelayedStream, StreamAudiences, StreamOp


class Member(Protocol):
    """What the fan-out needs of a member."""

    agent_id: str

    @property
    def closing(self) -> bool: ...

    def push(self, frame: OutFrame) -> bool:
        """Queue ``frame``; never blocks. False if it was dropped."""
        ...


M = TypeVar("M", bound=Member)
Push = Callable[[OutFrame], bool]


class Registry(Generic[M]):
    """Local members by connection id and agent id, and local space membership."""

    def __init__(self, on_stream_stop: OnStop | None = None) -> None:
        #: Ends a relayed stream whose id is opened again before its last
        #: frame came (the node's sweep sets it: a hub cancel to its audience).
        self.on_reopened: Callable[[RelayedStream[M], float], None] | None = None
        #: Every local member by connection id, registered before its agent
        #: id is claimed so a concurrent duplicate can probe it.
        self.connections: dict[str, M] = {}
        #: Members whose agent id is claimed (or shared), by agent id.
        self.agents: dict[str, M] = {}
        # Insertion-ordered sets of this node's members, per space.
        self._spaces: dict[str, dict[M, None]] = {}
        #: Where the fan-out hands each member's frames: its own ``push``, or
        #: what :meth:`route` put there while its frames are held back.
        self._routes: dict[M, Push] = {}
        # The spaces of each member, so forgetting one looks at its own spaces
        # rather than at every space of the node (a storm of departures was
        # O(members × spaces)). A tuple: most members are in one or a few.
        self._joined: dict[M, tuple[str, ...]] = {}
        #: Relayed streams' audiences; ``on_stream_stop`` hears of receivers
        #: that stop (:mod:`hub.core.stream_audiences`).
        self.streams: StreamAudiences[M] = StreamAudiences(on_stream_stop)

    # ── members ─────────────────────────────────────────────────────────

    def add(self, connection_id: str, member: M) -> None:
        self.connections[connection_id] = member
        self._routes[member] = member.push

    def route_of(self, member: M) -> Push:
        """Where ``member``'s frames go now."""
        return self._routes.get(member, member.push)

    def route(self, member: M, push: Push | None) -> None:
        """Hand ``member``'s frames, from every space, to ``push`` instead of
        the member (a resume holds them back while it replays); ``None``:
        to the member again."""
        if member in self._routes:
            self._routes[member] = member.push if push is None else push

    def bind_agent(self, member: M) -> None:
        """``member`` now holds its agent id on this node (addressed delivery)."""
        self.agents[member.agent_id] = member

    def evict(self, connection_id: str, member: M) -> list[str]:
        """Forget ``member`` everywhere; returns the spaces it was in whose last
        local member it was (the node unsubscribes from those)."""
        if self.connections.get(connection_id) is member:
            del self.connections[connection_id]
        if self.agents.get(member.agent_id) is member:
            del self.agents[member.agent_id]
        emptied = []
        for space in self._joined.get(member, ()):
            if self.leave(space, member):
                emptied.append(space)
        self._routes.pop(member, None)
        return emptied

    def __len__(self) -> int:
        return len(self.connections)

    def __iter__(self) -> Iterator[M]:
        return iter(list(self.connections.values()))

    # ── local space membership ──────────────────────────────────────────

    def join(self, space: str, member: M) -> None:
        if member not in self._routes:
            self._routes[member] = member.push
        members = self._spaces.get(space)
        if members is None:
            members = self._spaces[space] = {}
        if member not in members:
            members[member] = None
            self._joined[member] = (*self._joined.get(member, ()), space)

    def leave(self, space: str, member: M) -> bool:
        """Remove; True when that was the node's last member of the space."""
        self.streams.forget_member(space, member)
        members = self._spaces.get(space)
        if members is None or member not in members:
            return False
        del members[member]
        rest = tuple(s for s in self._joined.get(member, ()) if s != space)
        if rest:
            self._joined[member] = rest
        else:
            self._joined.pop(member, None)
        if members:
            return False
        del self._spaces[space]
        return True

    def has_space(self, space: str) -> bool:
        return space in self._spaces

    def members(self, space: str) -> list[M]:
        return list(self._spaces.get(space, ()))

    def member_count(self, space: str) -> int:
        """Members of ``space`` on this node."""
        return len(self._spaces.get(space, ()))

    @property
    def spaces(self) -> list[str]:
        return list(self._spaces)

    # ── fan-out ─────────────────────────────────────────────────────────

    def deliver(
        self,
        space: str,
        frame: OutFrame,
        *,
        exclude: str | None = None,
        to: tuple[str, ...] | None = None,
        stream: str | None = None,
        op: StreamOp = StreamOp.NONE,
        now: float = 0.0,
    ) -> int:
        """Hand ``frame`` to its local audience; returns the number of deliveries.

        The audience is the space's local members, narrowed to the agents in
        ``to`` (addressed publish) and, for a stream, fixed by its first frame;
        ``exclude`` is the publisher that asked for no echo.
        """
        members = self._spaces.get(space)
        if not members:
            if op is StreamOp.END and stream is not None:
                # Nobody here any more, but a stream's last frame still ends
                # its record (else kept, and asked about by the sweep, forever).
                self.streams.audience(stream, op, now)
            return 0
        audience: dict[M, None] | list[M]
        if stream is not None:
            if op is StreamOp.OPEN:
                reopened = self.on_reopened
                if reopened is not None and stream in self.streams:
                    # Opened again before its last frame came here: a stream id
                    # is open once per connection, so the one that had it is
                    # gone (its node died). It ends first, never continued.
                    old = self.streams.record(stream)
                    assert old is not None
                    reopened(old, now)
                audience = {m: None for m in self._narrow(members, to) if m.agent_id != exclude}
                self.streams.open(stream, space, audience, now, to is not None)
                exclude = None
            else:
                found = self.streams.audience(stream, op, now)
                if found is None:
                    return 0
                audience = found
                if op is not StreamOp.END:
                    exclude = None  # who saw the first frame gets the rest
        elif to is not None:
            audience = self._narrow(members, to)
        else:
            audience = members
        n = 0
        routes = self._routes
        if exclude is None:
            for member in audience:
                routes[member](frame)
            return len(audience)
        for member in audience:
            if member.agent_id != exclude:
                routes[member](frame)
                n += 1
        return n

    def _narrow(self, members: dict[M, None], to: tuple[str, ...] | None) -> list[M]:
        if to is None:
            return list(members)
        agents = self.agents
        found = []
        for agent_id in to:
            member = agents.get(agent_id)
            if member is not None and member in members:
                found.append(member)
        return found

    def stop_receiving(self, member: M, stream_id: str, space: str, *, report: bool = True) -> bool:
        return self.streams.stop_receiving(member, stream_id, space, report=report)

    def idle_streams(self, now: float, idle: float) -> list[RelayedStream[M]]:
        """Relayed streams with no frame for ``idle`` seconds; the node ends each
        by delivering a cancel to its audience (``op=END``)."""
        return self.streams.idle(now, idle)
