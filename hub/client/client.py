"""The async client: one WebSocket connection to a hub, shared by every caller.

Lifecycle: :meth:`Client.connect` opens the connection and waits for
``agent.registered``; a reader task then dispatches every frame (replies to
the waiting requests, everything else to subscriptions) and a heartbeat task
keeps the connection alive on the interval the hub advertised.
:meth:`Client.aclose` is idempotent; ``async with Client(...)`` does both.

Requests carry a fresh ``id`` and are matched by it: the hub echoes it as
``id`` on a reply and as ``request_id`` on an ``error`` or on the
``space.event`` that acknowledges a publish. Any number of requests may be in
flight from any number of tasks.

With ``reconnect=True`` a lost connection (anything but a refusal that needs
a change on this side: close codes 4401, 4409, 4429, and 4403 — an operator
disconnected the agent) is reopened with
jittered exponential backoff, the last ``register()`` is repeated and the
spaces joined before are joined again *from where the client was* (its last
``seq`` and the space's ``epoch``): the hub replays what was published
meanwhile, then live events follow, no gap and no duplicate. When it cannot
(its history no longer reaches back that far, or was lost) the application
hears of it — a :class:`~hub.client.models.Resumed` item with
``recovered=False`` and the ``on_resume`` callback — never silently.
Requests made meanwhile wait for the connection up to their timeout;
requests in flight when it dropped fail with
:class:`~hub.client.errors.ConnectionClosed` (they may or may not have been
carried out) — except a ``publish()`` with an ``idempotency_key``, which is
sent again after the reconnect: the hub publishes it at most once.
Subscriptions carry on across reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, overload
from urllib.parse import urlencode, urlsplit, urlunsplit

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsClosed
from websockets.exceptions import InvalidStatus, WebSocketException

from hub import __version__
from hub.client.errors import (
    AgentExists,
    ConnectionClosed,
    ConnectionFailed,
    HubClientError,
    HubConnectionError,
    HubRejected,
    InvalidRequest,
    RateLimited,
    RequestTimeout,
    Unauthorized,
    Unavailable,
    rejected,
)
from hub.client.models import (
    AgentEntry,
    AgentPage,
    Event,
    HistoryPage,
    JoinResult,
    MembersChanged,
    MembersPage,
    Message,
    Position,
    Registration,
    Resumed,
    SpaceInfo,
    StreamChunk,
    parse_agent_page,
    parse_chunk,
    parse_event,
    parse_members,
    parse_members_page,
    parse_registration,
    parse_spaces,
)
from hub.client.streams import AssembledEvents, OutgoingStream, StreamAssembler
from hub.client.subscriptions import (
    ALL_KINDS,
    EVENT_KINDS,
    STREAM_KINDS,
    Router,
    Subscription,
)
from protocol.errors import CloseCode
from protocol.messages import MessageType
from protocol.names import is_valid_agent_id

log = logging.getLogger("hub.client")

# Close codes after which reconnecting cannot help (contract §2).
TERMINAL_CLOSE_CODES = frozenset(
    {
        CloseCode.UNAUTHORIZED,
        CloseCode.AGENT_EXISTS,
        CloseCode.RATE_LIMIT_ABUSE,
        # An operator disconnected the agent: coming straight back would undo it.
        CloseCode.DISCONNECTED,
    }
)

_HEARTBEAT = b'{"type":"agent.heartbeat"}'
# How often publish() sends an idempotent publish again after lost connections.
MAX_PUBLISH_RETRIES = 5
# Agent details ride in the handshake query (so the hub's first ``online``
# shows them) while the query stays this short; longer ones are registered
# right after connecting instead.
MAX_DETAILS_QUERY = 4096


@dataclass(frozen=True, slots=True)
class Backoff:
    """Reconnect delays: ``initial * factor**attempt`` capped at ``maximum``,
    each multiplied by a random factor in [0.5, 1] so that many clients
    dropped at once do not come back at once. ``max_attempts=None`` retries
    forever."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    max_attempts: int | None = None

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return base * random.uniform(0.5, 1.0)


class Client:
    """An agent's connection to an Agora hub.

    ``url`` is the hub's WebSocket URL (``ws://host:8765/ws``; a URL without
    a path gets ``/ws``). ``token`` is sent as ``Authorization: Bearer``.
    ``token_provider``, an async function returning a fresh token, is called
    before every connection attempt (reconnects included; it then takes the
    place of ``token``) and when the hub says the token expired, whose answer
    is sent with :meth:`refresh_token` — so a connection outlives its tokens.
    ``agent_type``, ``capabilities`` and ``metadata``, when given, are
    declared in the handshake (on every reconnect too), so the agent's first
    ``online`` on ``agent.status`` and the directory already show them.

    ``queue_size`` bounds every subscription and the backlog of unread items:
    when full, the oldest item is dropped and counted (see
    :mod:`hub.client.subscriptions`). ``request_timeout`` bounds each request
    (seconds). ``max_size`` is the largest frame accepted from the hub.
    ``on_resume`` is called with a :class:`Resumed` for every space rejoined
    after a reconnect (a coroutine function is run as a task).
    Extra keyword arguments go to :func:`websockets.asyncio.client.connect`
    (``ssl``, ``proxy`` …).
    """

    def __init__(
        self,
        url: str,
        agent_id: str,
        *,
        token: str | None = None,
        token_provider: Callable[[], Awaitable[str]] | None = None,
        reconnect: bool = False,
        backoff: Backoff | None = None,
        request_timeout: float = 10.0,
        open_timeout: float = 10.0,
        queue_size: int = 1000,
        max_size: int | None = 16 * 1024 * 1024,
        agent_type: str | None = None,
        capabilities: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        on_resume: Callable[[Resumed], Any] | None = None,
        **connect_kwargs: Any,
    ):
        if not is_valid_agent_id(agent_id):
            raise ValueError(
                f"invalid agent_id {agent_id!r}: 1-128 characters of [A-Za-z0-9._:-], "
                "starting with a letter or digit"
            )
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        self.url = _ws_url(url)
        self.agent_id = agent_id
        self.reconnect = reconnect
        self.backoff = backoff or Backoff()
        self.request_timeout = request_timeout
        self.open_timeout = open_timeout
        self.queue_size = queue_size
        self.registration: Registration | None = None
        self.reconnects = 0
        self._token = token
        self._token_provider = token_provider
        self._refresher: asyncio.Task[None] | None = None
        self._max_size = max_size
        self._connect_kwargs = connect_kwargs
        self._agent_info: dict[str, Any] | None = None
        if agent_type is not None or capabilities or metadata:
            self._agent_info = _agent_info(agent_id, agent_type, capabilities, metadata)

        self._ws: ClientConnection | None = None
        self._generation = 0
        self._router = Router(queue_size)
        self._pending: dict[str, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._stream_ids = itertools.count(1)
        self._out_streams: dict[str, OutgoingStream] = {}
        self._stream_prefixes: dict[str, OutgoingStream] = {}
        self._joined: dict[str, None] = {}  # insertion-ordered set
        self._members: dict[str, list[str]] = {}
        self._last_seq: dict[str, int] = {}
        self._epochs: dict[str, str] = {}
        self._resuming: dict[str, Position] = {}  # rejoins in flight, by space
        self.on_resume = on_resume
        self._callbacks: set[asyncio.Task[Any]] = set()
        self._last_error: dict[str, Any] | None = None
        self._connected = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._reconnector: asyncio.Task[None] | None = None
        self._last_rx = 0.0
        self._last_tx = 0.0
        self._closing = False
        self._closed = False
        self._stopped = asyncio.Event()  # set once the client is closed for good
        self._opening = False
        self._final_error: HubClientError | None = None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "disconnected"
        return f"<Client {self.agent_id} {self.url} {state}>"

    # ── lifecycle ────────────────────────────────────────────────────────

    @property
    def connected(self) -> bool:
        """True while the connection is open and registered."""
        return self._connected.is_set()

    @property
    def joined_spaces(self) -> frozenset[str]:
        """Spaces this client has joined (and will rejoin after a reconnect)."""
        return frozenset(self._joined)

    @property
    def closed_error(self) -> HubClientError | None:
        """Why the client stopped, when it stopped for a reason of its own."""
        return self._final_error

    async def connect(self) -> Client:
        """Open the connection and wait for ``agent.registered``.

        Raises :class:`ConnectionFailed` when the hub can't be reached or
        answers the upgrade with an HTTP error, and a :class:`HubRejected`
        subclass when it refuses the agent (:class:`Unauthorized`,
        :class:`AgentExists`, :class:`Unavailable`). The first connection is
        not retried, even with ``reconnect=True``.
        """
        if self._closed or self._closing:
            raise ConnectionClosed("client is closed")
        if self.connected:
            return self
        await self._open()
        self._connected.set()
        return self

    async def aclose(self) -> None:
        """Close the connection (1000) and end every subscription. Idempotent."""
        if self._closed:
            return
        self._closing = True
        self._connected.clear()
        for task in (self._reconnector, self._heartbeat, self._refresher):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        # asyncio.wait() neither raises the tasks' exceptions nor swallows
        # our own cancellation.
        tasks = {
            t
            for t in (self._reader, self._reconnector, self._heartbeat, self._refresher)
            if t is not None and t is not asyncio.current_task()
        }
        if tasks:
            await asyncio.wait(tasks)
        self._closed = True
        self._stopped.set()
        self._fail_pending(ConnectionClosed("client closed"))
        for stream in list(self._out_streams.values()):
            stream._mark_cancelled("connection_lost")
        self._router.end(self._final_error)

    async def __aenter__(self) -> Client:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the connection is (again) open and registered."""
        if self._connected.is_set():
            return
        connected = asyncio.ensure_future(self._connected.wait())
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            async with asyncio.timeout(timeout):
                await asyncio.wait({connected, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
            stopped.cancel()
        if not self._connected.is_set():
            raise self._final_error or ConnectionClosed("client is closed")

    # ── requests ─────────────────────────────────────────────────────────

    async def register(
        self,
        type: str | None = None,
        capabilities: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Registration:
        """Tell the hub what this agent is; others see it on ``agent.status``.

        Only the details given are sent, and the hub keeps the others (a
        field left out of ``agent.register`` keeps its value). Remembered and
        declared again on every reconnect.
        """
        sent: dict[str, Any] = {"id": self.agent_id}
        if type is not None:
            sent["type"] = type
        if capabilities is not None:
            sent["capabilities"] = list(capabilities)
        if metadata is not None:
            sent["metadata"] = dict(metadata)
        reply = await self._request({"type": MessageType.AGENT_REGISTER, "agent": sent})
        self._agent_info = {**(self._agent_info or {}), **sent}
        return self._registered(reply)

    async def refresh_token(self, token: str) -> int | None:
        """Give the hub a new token for this agent (``agent.refresh``).

        Its ``join`` / ``publish`` claims apply from now on, and it is the one
        sent on reconnects. Returns the token's expiry (Unix epoch ms) or None
        when it has none; raises :class:`Unauthorized` when the hub refuses it
        (the old token stays in force until it expires)."""
        reply = await self._request({"type": MessageType.AGENT_REFRESH, "token": token})
        self._token = token
        if self._last_error is not None and _token_expired(self._last_error):
            self._last_error = None  # the notice is answered: not why a later close happens
        expires_at = reply.get("expires_at")
        return expires_at if isinstance(expires_at, int) else None

    async def _refresh_from_provider(self, provider: Callable[[], Awaitable[str]]) -> None:
        try:
            await self.refresh_token(await provider())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("refreshing the expired token failed: %s", exc)
        finally:
            self._refresher = None

    async def join(self, space: str, *, since: Position | None = None) -> JoinResult:
        """Join ``space`` (created on first join); returns its members.

        ``since`` (a :meth:`position` kept from earlier, even by another
        process) resumes: the hub first replays what was published after it,
        and ``recovered`` in the result says whether it could.
        """
        msg: dict[str, Any] = {"type": MessageType.SPACE_JOIN, "space": space}
        if since is not None:
            msg["since"] = {"seq": since.seq, "epoch": since.epoch}
        reply = await self._request(msg)
        return self._joined_reply(space, reply, since is not None)

    async def leave(self, space: str) -> None:
        """Leave ``space``. Streams this client publishes there are cancelled by the hub."""
        await self._request({"type": MessageType.SPACE_LEAVE, "space": space})
        self._joined.pop(space, None)
        self._members.pop(space, None)
        self._epochs.pop(space, None)
        self._last_seq.pop(space, None)

    async def publish(
        self,
        space: str,
        data: Mapping[str, Any] | str,
        *,
        echo: bool = True,
        idempotency_key: str | None = None,
    ) -> Event:
        """Publish ``data`` (a dict, or a str meaning ``{"text": str}``) to ``space``.

        Resolves when the hub acknowledges it: with ``echo=True`` that is the
        event's own delivery back to this client (so it has ``seq`` and
        ``timestamp``), with ``echo=False`` the hub's ``space.published``.
        The returned event is also delivered to matching ``events()``
        iterators, like everyone else's.

        ``idempotency_key`` (1–128 characters, unique per publish of this
        agent in this space) makes the publish safe to repeat: within the
        hub's ``history_ttl`` a publish with a key already used is not
        published again and resolves to the original (``duplicate=True``).
        With ``reconnect=True`` such a publish is repeated by the client
        itself when the connection drops before the acknowledgement.
        """
        payload = {"text": data} if isinstance(data, str) else dict(data)
        msg: dict[str, Any] = {
            "type": MessageType.SPACE_PUBLISH,
            "space": space,
            "data": payload,
            "echo": echo,
        }
        if idempotency_key is not None:
            msg["idempotency_key"] = idempotency_key
        attempt = 0
        while True:
            try:
                reply = await self._request(dict(msg))
                break
            except ConnectionClosed:
                attempt += 1
                if idempotency_key is None or not self.reconnect or attempt > MAX_PUBLISH_RETRIES:
                    raise
                log.info("publish interrupted by a lost connection: sending it again")
        if reply.get("type") == MessageType.SPACE_PUBLISHED and reply.get("duplicate") is True:
            return Event(
                space=space,
                event_id=str(reply.get("event_id")),
                seq=_int(reply.get("seq")),
                sender=self.agent_id,
                timestamp=reply.get("timestamp")
                if isinstance(reply.get("timestamp"), int)
                else None,
                data={"from": self.agent_id, **payload},
                request_id=reply.get("id"),
                duplicate=True,
            )
        if reply.get("type") == MessageType.SPACE_EVENT:
            event = parse_event(reply)
            if event is not None:
                return event
        sent = {"from": self.agent_id, **payload}
        if reply.get("type") == MessageType.SPACE_EVENT_DONE:  # text big enough to be streamed
            return Event(
                space=space,
                event_id=str(reply.get("event_id")),
                seq=_int(reply.get("seq")),
                sender=self.agent_id,
                timestamp=reply.get("timestamp")
                if isinstance(reply.get("timestamp"), int)
                else None,
                data=sent,
                request_id=reply.get("request_id"),
                streamed=True,
            )
        # space.published (echo=False)
        return Event(
            space=space,
            event_id=str(reply.get("event_id")),
            seq=_int(reply.get("seq")),
            sender=self.agent_id,
            timestamp=reply.get("timestamp") if isinstance(reply.get("timestamp"), int) else None,
            data=sent,
            request_id=reply.get("id"),
            streamed=isinstance(reply.get("event_id"), str) and "/" in reply["event_id"],
        )

    async def spaces(self) -> list[SpaceInfo]:
        """Every space in the hub (cluster-wide) with its member count."""
        reply = await self._request({"type": MessageType.SPACE_LIST})
        return parse_spaces(reply)

    async def space_members(
        self, space: str, *, cursor: str | None = None, limit: int | None = None
    ) -> MembersPage:
        """One page of ``space``'s current members, cluster-wide, oldest first.

        Pass the page's ``next_cursor`` to get the next one (``None``: done).
        ``limit`` is 1–1000 (the hub's default 100). The way to know who is in
        a big space, whose join/leave events carry no list.
        """
        msg: dict[str, Any] = {"type": MessageType.SPACE_MEMBERS, "space": space}
        if cursor is not None:
            msg["cursor"] = cursor
        if limit is not None:
            msg["limit"] = limit
        page = parse_members_page(await self._request(msg))
        if page is None:
            raise HubClientError("malformed space.members reply")
        return page

    async def all_members(self, space: str, *, page_size: int = 1000) -> list[str]:
        """Every current member of ``space``, paging through :meth:`space_members`."""
        out: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.space_members(space, cursor=cursor, limit=page_size)
            out.extend(page.members)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    async def list_agents(
        self,
        *,
        capability: str | None = None,
        space: str | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> AgentPage:
        """One page of the agent directory: agents online cluster-wide.

        ``capability`` is an exact capability or a prefix ending in ``*``;
        ``space`` keeps the members of that space (in join order; otherwise
        the order is by agent id). Pass ``next_cursor`` for the next page.
        """
        msg: dict[str, Any] = {"type": MessageType.AGENT_LIST}
        for key, value in (
            ("capability", capability),
            ("space", space),
            ("cursor", cursor),
            ("limit", limit),
        ):
            if value is not None:
                msg[key] = value
        page = parse_agent_page(await self._request(msg))
        if page is None:
            raise HubClientError("malformed agent.list reply")
        return page

    async def find_agents(
        self, *, capability: str | None = None, space: str | None = None
    ) -> list[AgentEntry]:
        """Every agent :meth:`list_agents` matches, paging through them all."""
        out: list[AgentEntry] = []
        cursor: str | None = None
        while True:
            page = await self.list_agents(
                capability=capability, space=space, cursor=cursor, limit=1000
            )
            out.extend(page.agents)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    async def ping(self) -> int | None:
        """One heartbeat round trip; returns the hub's timestamp (Unix ms)."""
        reply = await self._request({"type": MessageType.AGENT_HEARTBEAT})
        ts = reply.get("timestamp")
        return ts if isinstance(ts, int) else None

    async def cancel_stream(self, space: str, event_id: str) -> None:
        """Stop receiving someone else's stream (``event_id`` as received,
        ``"<publisher>/<id>"``); the publisher and other receivers are not affected."""
        await self._request(
            {"type": MessageType.SPACE_EVENT_CANCEL, "space": space, "event_id": event_id}
        )

    def members(self, space: str) -> list[str] | None:
        """The last member list seen for a joined space (from join and ``space.members``)."""
        members = self._members.get(space)
        return list(members) if members is not None else None

    def last_seq(self, space: str) -> int | None:
        """The highest ``seq`` received in ``space``."""
        return self._last_seq.get(space)

    def position(self, space: str) -> Position | None:
        """Where this client is in ``space`` (``epoch`` and last ``seq``), for
        ``join(space, since=…)`` later — after a restart of this process, say."""
        epoch, seq = self._epochs.get(space), self._last_seq.get(space)
        return Position(epoch, seq) if epoch is not None and seq is not None else None

    async def history(
        self, space: str, *, limit: int = 50, before_seq: int | None = None
    ) -> HistoryPage:
        """The newest recorded events of ``space`` (a member only), oldest first;
        ``before_seq`` pages back (``page.next_before_seq``). At most 100 a page;
        addressed events appear only to their recipients."""
        msg: dict[str, Any] = {"type": MessageType.SPACE_HISTORY, "space": space, "limit": limit}
        if before_seq is not None:
            msg["before_seq"] = before_seq
        reply = await self._request(msg)
        events: list[Event | StreamChunk] = []
        for f in reply.get("events") or ():
            if not isinstance(f, dict):
                continue
            item = parse_event(f) if f.get("type") == MessageType.SPACE_EVENT else parse_chunk(f)
            if item is not None:
                events.append(item)
        nxt = reply.get("next_before_seq")
        return HistoryPage(
            space,
            str(reply.get("epoch") or ""),
            _int(reply.get("seq")),
            events,
            nxt if isinstance(nxt, int) and not isinstance(nxt, bool) else None,
        )

    # ── receiving ────────────────────────────────────────────────────────

    @overload
    def events(
        self, space: str | None = None, *, members: Literal[False] = False
    ) -> Subscription[Event]: ...

    @overload
    def events(
        self, space: str | None = None, *, members: Literal[True]
    ) -> Subscription[Event | MembersChanged]: ...

    def events(
        self, space: str | None = None, *, members: bool = False
    ) -> Subscription[Event] | Subscription[Event | MembersChanged]:
        """Iterate ``space.event`` deliveries (of one space, or all).

        With ``members=True`` it also yields :class:`MembersChanged`. Streams
        are not included: see :meth:`stream_events` and
        :meth:`assembled_events`. The subscription starts now, and first takes
        matching items that arrived while nobody was reading.
        """
        kinds = EVENT_KINDS | {"members"} if members else EVENT_KINDS
        return self._subscribe(space, kinds)

    def stream_events(self, space: str | None = None) -> Subscription[StreamChunk]:
        """Iterate stream frames (deltas, dones, cancels) as they arrive."""
        return self._subscribe(space, STREAM_KINDS)

    def assembled_events(
        self,
        space: str | None = None,
        *,
        incomplete_timeout: float | None = 30.0,
        events: bool = False,
        max_chars: int = 64 * 1024 * 1024,
    ) -> AssembledEvents:
        """Iterate whole streamed events, put back together from their deltas.

        Yields an :class:`AssembledEvent` per stream once it is done, was
        cancelled (``status="cancelled"``), or had no frame for
        ``incomplete_timeout`` seconds (``status="incomplete"``). With
        ``events=True`` plain events are yielded too, in arrival order, so one
        loop sees every message of a space whatever its size.
        """
        kinds = STREAM_KINDS | EVENT_KINDS if events else STREAM_KINDS
        sub: Subscription[Any] = Subscription(space, kinds, self.queue_size, wants_reset=True)
        self._router.subscribe(sub)
        loop = asyncio.get_running_loop()
        asm = StreamAssembler(
            incomplete_timeout=incomplete_timeout, max_chars=max_chars, clock=loop.time
        )
        return AssembledEvents(sub, asm)

    def subscribe(
        self, space: str | None = None, kinds: frozenset[str] = ALL_KINDS
    ) -> Subscription[Message]:
        """The general form of :meth:`events`: any of ``event``, ``members``,
        ``delta``, ``done``, ``cancel``, ``resumed`` (:class:`Resumed`, after
        a reconnect)."""
        unknown = set(kinds) - ALL_KINDS
        if unknown:
            raise ValueError(f"unknown kinds {sorted(unknown)}")
        return self._subscribe(space, frozenset(kinds))

    def _subscribe(self, space: str | None, kinds: frozenset[str]) -> Subscription[Any]:
        sub: Subscription[Any] = Subscription(space, kinds, self.queue_size)
        self._router.subscribe(sub)
        return sub

    # ── streams ──────────────────────────────────────────────────────────

    def stream(
        self,
        space: str,
        *,
        event_id: str | None = None,
        data: Mapping[str, Any] | None = None,
        echo: bool = True,
    ) -> OutgoingStream:
        """A stream to publish to ``space``: ``async with c.stream(space) as s``.

        ``event_id`` (``[A-Za-z0-9._:-]{1,128}``, unique per agent) defaults to
        a random one; receivers see it as ``"<agent_id>/<event_id>"``.
        ``data`` are extra fields sent with the first delta.
        """
        return OutgoingStream(
            self, space, event_id or f"st-{secrets.token_hex(6)}", dict(data or {}), echo
        )

    def _new_stream_prefix(self) -> str:
        return f"s{next(self._stream_ids)}."

    def _open_stream(self, stream: OutgoingStream) -> int:
        self._out_streams[stream.hub_event_id] = stream
        self._stream_prefixes[stream.request_prefix] = stream
        return self._generation

    def _close_stream(self, stream: OutgoingStream) -> None:
        if self._out_streams.get(stream.hub_event_id) is stream:
            del self._out_streams[stream.hub_event_id]
        self._stream_prefixes.pop(stream.request_prefix, None)

    # ── the wire ─────────────────────────────────────────────────────────

    async def _ready_ws(self) -> ClientConnection:
        if not self._connected.is_set():
            if self._closed or self._closing:
                raise self._final_error or ConnectionClosed("client is closed")
            if self._ws is None and self._reconnector is None:
                raise ConnectionClosed("not connected: use `async with Client(...)` or connect()")
            await self.wait_connected()
        assert self._ws is not None
        return self._ws

    async def _send(self, msg: dict[str, Any], *, generation: int | None = None) -> None:
        """Send one message on the current connection (``generation``: or fail)."""
        ws = await self._ready_ws()
        if generation is not None and generation != self._generation:
            raise ConnectionClosed("the connection this belonged to was lost")
        await self._send_on(ws, msg)

    async def _send_on(self, ws: ClientConnection, msg: dict[str, Any]) -> None:
        try:
            await ws.send(orjson.dumps(msg), text=True)
        except WsClosed as exc:
            raise self._closed_error(exc) from None
        self._last_tx = asyncio.get_running_loop().time()

    async def _request(self, msg: dict[str, Any], *, ws: ClientConnection | None = None) -> Any:
        """Send ``msg`` with a fresh ``id``; return the frame that answers it."""
        loop = asyncio.get_running_loop()
        rid = f"c{next(self._ids)}"
        msg["id"] = rid
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending[rid] = fut
        try:
            async with asyncio.timeout(self.request_timeout):
                conn = ws if ws is not None else await self._ready_ws()
                await self._send_on(conn, msg)
                return await fut
        except TimeoutError:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                raise fut.exception() from None  # type: ignore[misc]
            what = "answer to" if self.connected else "connection for"
            raise RequestTimeout(
                f"no {what} {msg.get('type')} within {self.request_timeout:g} s",
                request_id=rid,
            ) from None
        finally:
            self._pending.pop(rid, None)

    async def _barrier(self) -> None:
        """A heartbeat round trip: the hub answers frames in order, so every
        error for what was sent before has arrived once this returns."""
        await self._request({"type": MessageType.AGENT_HEARTBEAT})

    def _closed_error(self, exc: WsClosed | None = None) -> ConnectionClosed:
        if exc is not None:
            rcvd = exc.rcvd
        else:
            rcvd = self._ws.protocol.close_rcvd if self._ws is not None else None
        code = rcvd.code if rcvd is not None else None
        reason = rcvd.reason if rcvd is not None else ""
        err = self._last_error
        if err is not None:
            return ConnectionClosed(
                str(err.get("message") or "connection closed by the hub"),
                code=str(err.get("code") or "CONNECTION_CLOSED"),
                close_code=code,
                close_reason=reason,
            )
        what = f"connection closed by the hub: {reason}" if reason else "connection lost"
        return ConnectionClosed(what, close_code=code, close_reason=reason)

    # ── opening ──────────────────────────────────────────────────────────

    async def _open(self) -> None:
        """One connection attempt up to ``agent.registered``, then the background tasks."""
        headers = {}
        if self._token_provider is not None:
            try:
                self._token = await self._token_provider()
            except Exception as exc:
                raise ConnectionFailed(f"token provider failed: {_describe(exc)}") from None
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        sep = "&" if urlsplit(self.url).query else "?"
        query = [("agent_id", self.agent_id)]
        details = _details_query(self._agent_info)
        if details is not None:
            query += details
        uri = f"{self.url}{sep}{urlencode(query)}"
        kwargs: dict[str, Any] = {
            "open_timeout": self.open_timeout,
            "max_size": self._max_size,
            "ping_interval": None,  # the protocol's own heartbeat does this
            "compression": None,
            "user_agent_header": f"agora-hub-client/{__version__}",
            "close_timeout": 5.0,
            **self._connect_kwargs,
        }
        try:
            ws = await ws_connect(uri, additional_headers=headers, **kwargs)
        except InvalidStatus as exc:
            status = exc.response.status_code
            body = (exc.response.body or b"").decode(errors="replace").strip()
            if status == 400 and details:
                # The agent id is checked here already: the hub refused the details.
                raise InvalidRequest(f"agent details refused: {body[:200]}") from None
            raise ConnectionFailed(
                f"hub at {self.url} refused the connection: HTTP {status}"
                + (f": {body[:200]}" if body else ""),
                status=status,
            ) from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectionFailed(f"cannot connect to {self.url}: {_describe(exc)}") from None
        try:
            async with asyncio.timeout(self.open_timeout):
                first = orjson.loads(await ws.recv())
        except WsClosed as exc:
            raise ConnectionFailed(f"hub at {self.url} closed the connection: {exc}") from None
        except (TimeoutError, orjson.JSONDecodeError) as exc:
            await ws.close()
            raise ConnectionFailed(
                f"hub at {self.url} did not register the connection: {_describe(exc)}"
            ) from None
        if isinstance(first, dict) and first.get("type") == MessageType.ERROR:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await ws.wait_closed()
            raise rejected(first)
        registration = parse_registration(first) if isinstance(first, dict) else None
        if registration is None:
            await ws.close()
            raise ConnectionFailed(f"hub at {self.url} sent {first!r} instead of agent.registered")

        self._generation += 1
        self._ws = ws
        self._last_error = None
        self.registration = registration
        loop = asyncio.get_running_loop()
        self._last_rx = self._last_tx = loop.time()
        self._opening = True
        self._reader = loop.create_task(self._read(ws, self._generation))
        heartbeat = self._heartbeat = loop.create_task(self._heartbeats(ws, registration))
        try:
            if self._agent_info is not None and details is None:
                # Too long for the query: registered now (watchers see
                # `online` without the details, then `updated`).
                self._registered(
                    await self._request(
                        {"type": MessageType.AGENT_REGISTER, "agent": self._agent_info}, ws=ws
                    )
                )
            for space in list(self._joined):
                since = self.position(space)
                msg: dict[str, Any] = {"type": MessageType.SPACE_JOIN, "space": space}
                if since is not None:
                    msg["since"] = {"seq": since.seq, "epoch": since.epoch}
                    self._resuming[space] = since
                try:
                    reply = await self._request(msg, ws=ws)
                    self._joined_reply(space, reply, since is not None)
                except (Unavailable, RateLimited):
                    raise  # passing: this reconnect attempt failed, the next one rejoins
                except HubRejected as exc:
                    log.warning("could not rejoin %s after reconnecting: %s", space, exc)
                    self._joined.pop(space, None)
                    self._resuming.pop(space, None)
        except BaseException:
            # Not a loss to recover from: whoever called _open() handles it.
            self._resuming.clear()
            self._ws = None
            heartbeat.cancel()
            ws.transport.abort()
            raise
        finally:
            self._opening = False
        if self._ws is not ws:  # lost right after the last rejoin
            raise ConnectionClosed("connection lost while rejoining")

    def _registered(self, reply: dict[str, Any]) -> Registration:
        reg = parse_registration(reply)
        if reg is None:
            raise ConnectionFailed(f"malformed agent.registered: {reply!r}")
        self.registration = reg
        return reg

    def _joined_reply(
        self, space: str, reply: dict[str, Any], resuming: bool = False
    ) -> JoinResult:
        members = [m for m in reply.get("members") or () if isinstance(m, str)]
        count = _int(reply.get("member_count"))
        self._joined[space] = None
        self._members[space] = members
        self._resuming.pop(space, None)
        epoch, seq = reply.get("epoch"), reply.get("seq")
        recovered = reply.get("recovered") if resuming else None
        if not isinstance(epoch, str) or not isinstance(seq, int) or isinstance(seq, bool):
            epoch = seq = None  # a hub without history
        return JoinResult(
            space,
            members,
            count,
            epoch,
            seq,
            recovered if isinstance(recovered, bool) else None,
        )

    def _on_joined(self, f: dict[str, Any]) -> None:
        """``space.joined``, in the reader, before anything of the space that
        follows it: where this client now is in the space."""
        space, epoch, seq = f.get("space"), f.get("epoch"), f.get("seq")
        if not isinstance(space, str) or not isinstance(epoch, str):
            return
        if not isinstance(seq, int) or isinstance(seq, bool):
            return
        recovered = f.get("recovered") is True
        if not recovered:
            # A fresh start from here (a recovered join's replay moves the
            # position itself, event by event, as it arrives).
            self._epochs[space] = epoch
            self._last_seq[space] = seq
        since = self._resuming.pop(space, None)
        if since is not None:
            self._resumed(Resumed(space, recovered, since, epoch, seq))

    def _resumed(self, note: Resumed) -> None:
        """Tell the application how a rejoin after a reconnect went."""
        space, since = note.space, note.since
        if not note.recovered:
            log.warning(
                "rejoined %s: events after seq %d could not be recovered (history %s)",
                space,
                since.seq,
                "lost: new epoch" if note.epoch != since.epoch else "no longer reaches back",
            )
        self._router.dispatch(space, "resumed", note)
        callback = self.on_resume
        if callback is None:
            return
        try:
            result = callback(note)
            if asyncio.iscoroutine(result):
                task = asyncio.get_running_loop().create_task(result)
                self._callbacks.add(task)
                task.add_done_callback(self._callbacks.discard)
        except Exception:
            log.exception("on_resume callback failed")

    # ── background tasks ─────────────────────────────────────────────────

    async def _heartbeats(self, ws: ClientConnection, reg: Registration) -> None:
        """Heartbeat when nothing else was sent for an interval; drop a silent hub.

        The hub answers every heartbeat, so hearing nothing for its
        ``heartbeat_timeout`` means the connection is dead even if TCP has
        not noticed.
        """
        loop = asyncio.get_running_loop()
        interval = max(0.01, reg.heartbeat_interval)
        tick = interval / 2
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            if now - self._last_rx > reg.heartbeat_timeout:
                log.warning(
                    "no frame from the hub for %.1f s: dropping the connection",
                    now - self._last_rx,
                )
                ws.transport.abort()
                return
            if now - self._last_tx >= interval - tick / 2:
                try:
                    await ws.send(_HEARTBEAT, text=True)
                except WsClosed:
                    return
                self._last_tx = loop.time()

    async def _read(self, ws: ClientConnection, generation: int) -> None:
        loop = asyncio.get_running_loop()
        error: WsClosed | None = None
        try:
            while True:
                raw = await ws.recv()
                self._last_rx = loop.time()
                try:
                    frame = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    log.warning("ignoring a frame that is not JSON")
                    continue
                if isinstance(frame, dict):
                    try:
                        self._dispatch(frame)
                    except Exception:
                        log.exception("failed to handle %s", frame.get("type"))
        except WsClosed as exc:
            error = exc
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reader failed")
            ws.transport.abort()
        finally:
            self._connection_lost(generation, error)

    def _dispatch(self, f: dict[str, Any]) -> None:
        kind = f.get("type")
        rid = f.get("id")
        if rid is not None and isinstance(rid, str):
            fut = self._pending.get(rid)
            if fut is not None and not fut.done():
                fut.set_result(f)
        if kind == MessageType.SPACE_EVENT:
            event = parse_event(f)
            if event is None:
                log.warning("ignoring a malformed space.event")
                return
            self._seen(event.space, event.seq)
            if event.sender == self.agent_id:
                self._resolve_ack(event.request_id, f)
            self._router.dispatch(event.space, "event", event)
        elif kind in (
            MessageType.SPACE_EVENT_DELTA,
            MessageType.SPACE_EVENT_DONE,
            MessageType.SPACE_EVENT_CANCEL,
        ):
            chunk = parse_chunk(f)
            if chunk is None:
                log.warning("ignoring a malformed %s", kind)
                return
            if chunk.seq is not None:
                self._seen(chunk.space, chunk.seq)
            if chunk.sender == self.agent_id:
                self._resolve_ack(chunk.request_id, f)
                if chunk.kind == "cancel":
                    stream = self._out_streams.get(chunk.event_id)
                    if stream is not None:
                        stream._mark_cancelled(chunk.reason or "cancelled")
            self._router.dispatch(chunk.space, chunk.kind, chunk)
        elif kind == MessageType.SPACE_MEMBERS and rid is None:  # (a reply has an id)
            change = parse_members(f)
            if change is None:
                return
            if change.space in self._joined and change.members is not None:
                self._members[change.space] = change.members
            self._router.dispatch(change.space, "members", change)
        elif kind == MessageType.SPACE_JOINED:
            self._on_joined(f)
        elif kind == MessageType.ERROR:
            self._on_error(f)
        elif kind == MessageType.AGENT_REGISTERED and rid is None:
            reg = parse_registration(f)
            if reg is not None:
                self.registration = reg

    def _resolve_ack(self, request_id: object, frame: dict[str, Any]) -> None:
        if isinstance(request_id, str):
            fut = self._pending.get(request_id)
            if fut is not None and not fut.done():
                fut.set_result(frame)

    def _seen(self, space: str, seq: int) -> None:
        if seq > self._last_seq.get(space, -1):
            self._last_seq[space] = seq

    def _on_error(self, f: dict[str, Any]) -> None:
        exc = rejected(f)
        rid = exc.request_id
        if isinstance(rid, str):
            fut = self._pending.get(rid)
            if fut is not None:
                if not fut.done():
                    fut.set_exception(exc)
                return
            prefix, dot, _ = rid.partition(".")
            stream = self._stream_prefixes.get(prefix + dot) if dot else None
            if stream is not None:
                stream._failed(rid, exc)
                return
        if rid is None:
            # Sent before the hub closes the connection: it becomes the
            # ConnectionClosed error's code and message.
            self._last_error = f
            provider = self._token_provider
            if _token_expired(f) and provider is not None and self._refresher is None:
                self._refresher = asyncio.get_running_loop().create_task(
                    self._refresh_from_provider(provider)
                )
            log.info("hub error: %s", exc)
            return
        log.warning("hub error for an unknown request: %s", exc)

    def _connection_lost(self, generation: int, exc: WsClosed | None) -> None:
        if generation != self._generation or self._ws is None:
            return
        self._connected.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        err = self._closed_error(exc)
        self._ws = None
        self._fail_pending(err)
        for stream in list(self._out_streams.values()):
            stream._mark_cancelled("connection_lost")
        if self._closing or self._opening:
            return  # aclose() or the opener takes it from here
        close_code = err.close_code
        if self.reconnect and close_code not in TERMINAL_CLOSE_CODES:
            log.warning("%s; reconnecting", err)
            self._router.reset()
            self._reconnector = asyncio.get_running_loop().create_task(self._reconnect(err))
            return
        log.info("%s", err)  # raised to whoever uses the client next
        self._finish(err)

    def _finish(self, err: HubClientError) -> None:
        """The connection is gone for good: end everything with ``err``."""
        self._final_error = err
        self._closing = True
        self._closed = True
        self._stopped.set()
        self._router.end(err)

    async def _reconnect(self, cause: HubClientError) -> None:
        attempt = 0
        last: HubClientError = cause
        while not self._closing:
            if self.backoff.max_attempts is not None and attempt >= self.backoff.max_attempts:
                log.warning("giving up reconnecting after %d attempt(s)", attempt)
                self._finish(last)
                return
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1
            try:
                await self._open()
            except (HubConnectionError, Unavailable, RateLimited, RequestTimeout) as exc:
                last = exc
                log.info("reconnect attempt %d failed: %s", attempt, exc)
                continue
            except (Unauthorized, AgentExists, HubRejected) as exc:
                log.warning("reconnect refused: %s", exc)
                self._finish(exc)
                return
            except Exception as exc:
                log.exception("reconnecting failed")
                self._finish(ConnectionClosed(f"reconnecting failed: {exc!r}"))
                return
            self.reconnects += 1
            self._reconnector = None
            self._connected.set()
            log.warning("reconnected to %s (attempt %d)", self.url, attempt)
            return

    def _fail_pending(self, err: BaseException) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)


# ── helpers ─────────────────────────────────────────────────────────────────


def _ws_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"hub URL must start with ws:// or wss://, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/ws"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _agent_info(
    agent_id: str,
    type: str | None,
    capabilities: list[str] | None,
    metadata: dict[str, Any] | None,
) -> dict[str, Any]:
    info: dict[str, Any] = {"id": agent_id}
    if type is not None:
        info["type"] = type
    info["capabilities"] = list(capabilities or [])
    info["metadata"] = dict(metadata or {})
    return info


def _details_query(info: dict[str, Any] | None) -> list[tuple[str, str]] | None:
    """``type``, ``capability`` (one each) and ``metadata`` (JSON) for the
    handshake query; None when there are none or they are too long for it."""
    if info is None:
        return None
    query: list[tuple[str, str]] = []
    if info.get("type") is not None:
        query.append(("type", info["type"]))
    query += [("capability", c) for c in info.get("capabilities") or ()]
    if info.get("metadata"):
        query.append(("metadata", orjson.dumps(info["metadata"]).decode()))
    if len(urlencode(query)) > MAX_DETAILS_QUERY:
        return None
    return query


def _token_expired(error: dict[str, Any]) -> bool:
    """The hub's notice that this connection's token expired (``agent.refresh`` is due)."""
    message = error.get("message")
    return (
        error.get("code") == "UNAUTHORIZED"
        and isinstance(message, str)
        and message.startswith("token expired:")
    )


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
