"""The node's handlers without sockets: a rig for their unit tests.

:class:`HandlerRig` wires the handlers of :mod:`hub.handlers` the way
:class:`hub.node.node.Node` does — real settings, the memory backplane and
presence, a real :class:`~hub.core.registry.Registry`, the node's delivery
path (``NodeDelivery`` → ``GapFiller`` → ``FanOut`` → the registry's loop),
the dispatcher — and connects :class:`~tests.support.peers.FakePeer` members
with real sessions. Frames go in through the dispatcher exactly as a
connection's would; what each member gets is recorded on it.

:class:`FlakyBackplane` and :class:`FlakyPresence` are the memory stores with
a switch per operation that makes it raise ``BackplaneUnavailable`` (Redis
down), and a gate that holds it until the test lets it go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from hub.cluster.backplane import Delivery, Draft, History, MemoryBackplane, Position
from hub.cluster.kvstore.memory import MemoryKeyValueStore
from hub.cluster.presence import AgentRecord, MemoryPresence
from hub.cluster.subscriptions import Subscriptions
from hub.config.settings import Settings, load_settings
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
from hub.core.authz import Grant, SpacePolicy
from hub.core.counters import Counters
from hub.core.ids import Ids
from hub.core.peer import PeerKind
from hub.core.registry import Registry
from hub.core.session import Session, SessionLimits
from hub.core.spaces import SpaceDirectory
from hub.core.stream_audiences import ReceiverStop
from hub.errors import BackplaneUnavailable
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
from hub.node.delivery import FanOut, NodeDelivery
from tests.support.peers import FakePeer


class Switches:
    """Operations to fail (``fail``, ``fail_from``) or hold until released (``gates``)."""

    def __init__(self) -> None:
        self.fail: set[str] = set()
        #: Fail an operation from its n-th call on (1: every call).
        self.fail_from: dict[str, int] = {}
        self.gates: dict[str, asyncio.Event] = {}
        #: Names of the operations called, in order.
        self.calls: list[str] = []
        self._called = asyncio.Event()

    def hold(self, op: str) -> asyncio.Event:
        """Hold ``op`` until the returned event is set."""
        gate = self.gates[op] = asyncio.Event()
        return gate

    def record(self, op: str) -> None:
        self.calls.append(op)
        self._called.set()

    async def reached(self, op: str, count: int = 1) -> None:
        """Wait until ``op`` has been called ``count`` times (bound it with a timeout)."""
        while self.calls.count(op) < count:
            self._called.clear()
            await self._called.wait()

    async def enter(self, op: str) -> None:
        self.record(op)
        gate = self.gates.get(op)
        if gate is not None:
            await gate.wait()
        if op in self.fail or self.calls.count(op) >= self.fail_from.get(op, 1 << 62):
            raise BackplaneUnavailable(f"{op}: redis down")


class FlakyBackplane(MemoryBackplane):
    """The memory backplane, with :class:`Switches` on its network operations."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.switches = Switches()

    def publish_nowait(self, space: str, draft: Draft) -> asyncio.Future[int]:
        if "publish" in self.switches.fail:
            self.switches.record("publish")
            future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            future.set_exception(BackplaneUnavailable("publish: redis down"))
            return future
        return super().publish_nowait(space, draft)

    async def publish(self, space: str, draft: Draft) -> int:
        await self.switches.enter("publish")
        return await super().publish(space, draft)

    async def send(self, message: Delivery) -> int:
        await self.switches.enter("send")
        return await super().send(message)

    async def subscribe(self, space: str) -> None:
        await self.switches.enter("subscribe")
        await super().subscribe(space)

    async def unsubscribe(self, space: str) -> None:
        await self.switches.enter("unsubscribe")
        await super().unsubscribe(space)

    async def position(self, space: str) -> Position:
        await self.switches.enter("position")
        return await super().position(space)

    async def history(self, space: str, **kwargs: Any) -> History:
        await self.switches.enter("history")
        return await super().history(space, **kwargs)


class FlakyPresence(MemoryPresence):
    """Memory presence, with :class:`Switches` on the calls handlers make."""

    def __init__(self) -> None:
        super().__init__()
        self.switches = Switches()

    async def join_space(self, space: str, agent_id: str, capacity: int) -> int:
        await self.switches.enter("join_space")
        return await super().join_space(space, agent_id, capacity)

    async def leave_space(self, space: str, agent_id: str) -> int:
        await self.switches.enter("leave_space")
        return await super().leave_space(space, agent_id)

    async def space_members(self, space: str, limit: int) -> tuple[list[str], int]:
        await self.switches.enter("space_members")
        listing = await super().space_members(space, limit)
        # Read, but not answered yet: as a Redis reply that other traffic
        # (another socket's) overtakes on its way to the node.
        await self.switches.enter("space_members:answered")
        return listing

    async def update_agent(self, record: AgentRecord) -> None:
        await self.switches.enter("update_agent")
        await super().update_agent(record)

    async def claim_agent(
        self, record: AgentRecord, *, replace: str | None = None
    ) -> AgentRecord | None:
        await self.switches.enter("claim_agent")
        return await super().claim_agent(record, replace=replace)


def session_limits(s: Settings) -> SessionLimits:
    """A WebSocket connection's session limits, as the node derives them."""
    return SessionLimits(
        heartbeat_timeout=s.heartbeat_timeout,
        rate_limit=s.rate_limit,
        rate_burst=s.rate_burst,
        rate_abuse_seconds=s.rate_abuse_seconds,
        max_streams=s.max_streams_per_agent,
        signed_spaces=frozenset(d.id for d in s.spaces if d.require_signed),
        policy=SpacePolicy.of(s.spaces),
        token_leeway=s.jwt_leeway if s.auth_mode == "jwt" else 0.0,
        token_refresh_grace=s.token_refresh_grace,
    )


class HandlerRig:
    """One node's handlers around memory stores; members are :class:`FakePeer`."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        auth: Any = None,
        grace: float = 0.0,
        views: bool = False,
        **overrides: Any,
    ):
        s = self.settings = settings or load_settings({"node_id": "node-a", **overrides})
        self.node_id = s.node_id
        self.backplane = FlakyBackplane(history_size=s.history_size, history_ttl=s.history_ttl)
        self.presence = FlakyPresence()
        self.kv = MemoryKeyValueStore(max_entries=s.kv_max_entries)
        self.registry: Registry[FakePeer] = Registry(on_stream_stop=self._stream_stopped)
        self.ids = Ids()
        self.counters = Counters()
        self.send_error = ErrorSender(self.counters)
        self.spaces = SpaceDirectory(s.declared, s.space_capacity, s.auto_create_spaces)
        self.subscriptions = Subscriptions(self.backplane, grace, self.registry.has_space)
        self.limits = session_limits(s)
        self._tasks: set[asyncio.Task[Any]] = set()
        fan_out = FanOut(self.registry, self.counters, preframe=True, lag=lambda: 0.0)
        self.gaps = GapFiller(self.backplane, self.registry, fan_out, self.spawn)
        self.recovery = Recovery(
            s,
            self.registry,
            self.backplane,
            self.subscriptions,
            filling=self.gaps.filling.__contains__,
        )
        self.envelopes = EnvelopeCheck(
            SeenIds(self.kv), signed_spaces=self.limits.signed_spaces, max_skew=s.envelope_max_skew
        )
        self.publishing = Publishing(
            s,
            self.backplane,
            self.presence,
            self.registry,
            self.ids,
            self.counters,
            self.send_error,
            self.envelopes,
        )
        self.membership = Membership(
            s,
            self.node_id,
            self.registry,
            self.spaces,
            self.presence,
            self.backplane,
            self.subscriptions,
            self.ids,
            self.publishing,
            self.recovery,
            SpacePolicy.of(s.spaces),
        )
        #: With ``views``: member views, as a node on Redis keeps them.
        self.views: MemberViews | None = None
        if views:
            self.views = MemberViews(
                self.registry, self.presence, self.gaps, fan_out, self.membership.limits
            )
            fan_out.on_members = self.views.seen
            self.membership.views = self.views
        self.stream_stops = StreamStops(
            self.node_id,
            self.registry,
            self.backplane,
            self.publishing,
            filling=self.gaps.filling.__contains__,
        )
        self.token_expiry = TokenExpiry(auth) if auth is not None else None
        self.dispatcher = Dispatcher(self.counters, self.send_error, self.handlers())
        self.delivery = NodeDelivery(
            self.registry,
            fan_out,
            self.gaps,
            on_ready=lambda ready: None,
            on_node_message=lambda payload: None,
            on_signal=self.stream_stops.on_signal,
        )

    def _stream_stopped(self, stop: ReceiverStop) -> None:
        self.stream_stops.stopped(stop)

    def handlers(self) -> dict[type, Handler]:
        """The node's table (hub/node/node.py ``Node._handlers``)."""
        p, m = self.publishing, self.membership
        first = m.held_changes_first
        table: dict[type, Handler] = {
            Publish: first(p.publish),
            StreamDelta: first(p.stream_delta),
            StreamDone: first(p.stream_done),
            StreamCancel: first(p.stream_cancel),
            ReceiverCancel: p.receiver_cancel,
            Send: _send,
            Reject: self._reject,
            Close: _close,
            Join: m.join,
            Leave: m.leave,
            ListSpaces: m.list_spaces,
            ListMembers: m.list_members,
            ListAgents: m.list_agents,
            Register: m.register,
            Denied: m.denied,
            ReadHistory: self.recovery.history,
        }
        if self.token_expiry is not None:
            table[Refresh] = self.token_expiry.refresh
        return table

    def _reject(self, peer: FakePeer, a: Reject) -> None:
        self.send_error(peer, a.error.code, a.error.message, a.error.request_id)

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self) -> HandlerRig:
        await self.backplane.start(self.delivery)
        return self

    async def aclose(self) -> None:
        await self.stream_stops.aclose()
        await self.subscriptions.aclose()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.backplane.aclose()

    def spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def background(self) -> None:
        """Wait for the background work spawned so far (gap fills)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ── members ──────────────────────────────────────────────────────────

    async def connect(
        self,
        agent_id: str,
        *,
        kind: PeerKind = PeerKind.SOCKET,
        grant: Grant = Grant.unrestricted,
        capabilities: tuple[str, ...] = (),
        alive: bool = True,
    ) -> FakePeer:
        """A member admitted as the connection lifecycle admits one (id claimed,
        bound, with a session); its agent.status ``online`` is not published."""
        conn_id = self.ids.connection_id("fake")
        now = asyncio.get_running_loop().time()
        record = AgentRecord(agent_id, self.node_id, conn_id, None, capabilities, {}, 1)
        peer = FakePeer(agent_id, conn_id, kind=kind, alive=alive)
        self.registry.add(conn_id, peer)
        if kind is not PeerKind.SHARED:
            assert await self.presence.claim_agent(record) is None, f"{agent_id} is taken"
        self.registry.bind_agent(peer)
        peer.session = Session(agent_id, conn_id, self.limits, now, grant=grant)
        peer.record = record
        return peer

    async def send(self, peer: FakePeer, msg: dict[str, Any] | str | bytes) -> None:
        """One inbound frame of ``peer``, through the dispatcher (a dict: a text frame)."""
        frame = msg if isinstance(msg, str | bytes) else orjson.dumps(msg).decode()
        await self.dispatcher.receive(peer, frame, asyncio.get_running_loop().time())

    async def join(self, peer: FakePeer, space: str, **extra: Any) -> dict[str, Any]:
        """Join ``space``; returns the ``space.joined`` reply (fails on an error)."""
        before = len(peer.frames)
        await self.send(peer, {"type": "space.join", "id": f"j-{space}", "space": space, **extra})
        got = [orjson.loads(f) for f in peer.frames[before:]]
        replies = [m for m in got if m.get("type") in ("space.joined", "error")]
        assert replies and replies[0]["type"] == "space.joined", got
        return replies[0]

    async def publish(self, peer: FakePeer, space: str, data: dict[str, Any], **extra: Any) -> None:
        await self.send(peer, {"type": "space.publish", "space": space, "data": data, **extra})

    async def members_of(self, space: str) -> list[str]:
        members, _ = await self.presence.space_members(space, 10_000)
        return members


def _send(peer: FakePeer, a: Send) -> None:
    peer.send_frame(a.frame)


def _close(peer: FakePeer, a: Close) -> None:
    peer.close_for(a.code, a.error, a.reason)


async def until(predicate: Callable[[], bool], turns: int = 100) -> None:
    """Let the event loop run (no clock) until ``predicate()`` holds."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    assert predicate(), "not reached after letting the loop run"
