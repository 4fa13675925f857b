"""The client SDK's face: :class:`Client`, one agent's connection to a hub.

``async with Client(url, agent_id) as c`` opens the connection, waits for
``agent.registered`` and closes it at the end; in between any number of
tasks may make requests (matched to their answers by id) and read
subscriptions.

With ``reconnect=True`` a lost connection (anything but a refusal that needs
a change on this side: close codes 4401, 4409, 4429, and 4403 — an operator
disconnected the agent) is reopened with
jittered exponential backoff, the last ``register()`` is repeated and the
spaces joined before are joined again *from where the client was* (its last
``seq`` and the space's ``epoch``): the hub replays what was published
meanwhile, then live events follow, no gap and no duplicate. When it cannot
(its history no longer reaches back that far, or was lost) the application
hears of it — a :class:`~agora_client.models.Resumed` item with
``recovered=False`` and the ``on_resume`` callback — never silently.
Requests made meanwhile wait for the connection up to their timeout;
requests in flight when it dropped fail with
:class:`~agora_client.errors.ConnectionClosed` (they may or may not have been
carried out) — except a ``publish()`` with an ``idempotency_key``, which is
sent again after the reconnect: the hub publishes it at most once.
Subscriptions carry on across reconnects.

:class:`Client` is built in layers: :class:`~agora_client.connection.Connection`
keeps the WebSocket open and reopens it, :class:`~agora_client.receiving.Receiver`
routes what arrives, and this module adds the requests and what a new
connection must be told again (``_restore``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from websockets.asyncio.client import ClientConnection

from agora_client.deprecated import MembersCall, renamed
from agora_client.errors import (
    ConnectionClosed,
    ConnectionFailed,
    HubClientError,
    HubRejected,
    RateLimited,
    ReplyTimeout,
    RequestTimeout,
    Unavailable,
)
from agora_client.handshake import agent_info
from agora_client.keepalive import HEARTBEAT as _HEARTBEAT  # noqa: F401 (its old home)
from agora_client.keepalive import Backoff
from agora_client.models import (
    AgentEntry,
    AgentPage,
    AssembledEvent,
    Event,
    JoinResult,
    MembersPage,
    Position,
    Registration,
    Resumed,
    SpaceInfo,
    parse_agent_page,
    parse_event,
    parse_members_page,
    parse_registration,
    parse_spaces,
)
from agora_client.positions import join_message
from agora_client.receiving import Receiver
from agora_client.requests import every_page
from agora_client.serving import Answerer, Handler
from agora_client.streams import COALESCE_SECONDS, OutgoingStream
from agora_client.wire import MessageType, is_valid_agent_id, recipients

log = logging.getLogger("agora_client")

# How often publish() sends an idempotent publish again after lost connections.
MAX_PUBLISH_RETRIES = 5


class _Sender:
    """``to=SENDER``: a reply goes to the sender of the event it answers."""

    def __repr__(self) -> str:
        return "SENDER"


SENDER = _Sender()


class Client(Receiver):
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
    :mod:`agora_client.subscriptions`). ``request_timeout`` bounds each request
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
        super().__init__(
            url,
            agent_id,
            on_resume=on_resume,
            token=token,
            token_provider=token_provider,
            reconnect=reconnect,
            backoff=backoff,
            request_timeout=request_timeout,
            open_timeout=open_timeout,
            queue_size=queue_size,
            max_size=max_size,
            connect_kwargs=connect_kwargs,
        )
        if agent_type is not None or capabilities or metadata:
            self._agent_info = agent_info(agent_id, agent_type, capabilities, metadata)
        #: Asked agents being told that an answer is no longer awaited.
        self._telling: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed" if self._closed else "disconnected"
        return f"<Client {self.agent_id} {self.url} {state}>"

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

    async def join(self, space: str, *, since: Position | None = None) -> JoinResult:
        """Join ``space`` (created on first join); returns its members.

        ``since`` (a :meth:`position` kept from earlier, even by another
        process) resumes: the hub first replays what was published after it,
        and ``recovered`` in the result says whether it could.
        """
        reply = await self._request(join_message(space, since))
        return self._joined_reply(space, reply, since is not None)

    async def leave(self, space: str) -> None:
        """Leave ``space``. Streams this client publishes there are cancelled by the hub."""
        await self._request({"type": MessageType.SPACE_LEAVE, "space": space})
        self._spaces.left(space)

    async def publish(
        self,
        space: str,
        data: Mapping[str, Any] | str,
        *,
        to: str | Iterable[str] | None = None,
        echo: bool = True,
        idempotency_key: str | None = None,
    ) -> Event:
        """Publish ``data`` (a dict, or a str meaning ``{"text": str}``) to ``space``.

        ``to`` (an agent id, or a list of up to 100) addresses it: only those
        members (and this client's echo) receive it; every one of them must
        be a member of the space (``InvalidRequest`` otherwise).

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
        if to is not None:
            msg["to"] = recipients(to)
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
        if reply.get("type") == MessageType.SPACE_EVENT:
            event = parse_event(reply)
            if event is not None:
                return event
        return _acknowledged(space, self.agent_id, payload, reply)

    async def spaces(self) -> list[SpaceInfo]:
        """Every space in the hub (cluster-wide) with its member count."""
        reply = await self._request({"type": MessageType.SPACE_LIST})
        return parse_spaces(reply)

    def members(
        self, space: str, *, cursor: str | None = None, limit: int | None = None
    ) -> MembersCall:
        """``await c.members(space)``: one page of ``space``'s current members,
        cluster-wide, oldest first (a :class:`MembersPage`).

        Pass the page's ``next_cursor`` to get the next one (``None``: done).
        ``limit`` is 1–1000 (the hub's default 100). The way to know who is in
        a big space, whose join/leave events carry no list; the list the
        client has cached, without a round trip, is :meth:`known_members`.
        (Used as a list without ``await``, the way ``members(space)`` returned
        that cached list before, it still does so for one release, with a
        DeprecationWarning: see :mod:`agora_client.deprecated`.)
        """
        return MembersCall(
            space,
            lambda: self._members_page(space, cursor, limit),
            lambda: self.known_members(space),
        )

    async def space_members(
        self, space: str, *, cursor: str | None = None, limit: int | None = None
    ) -> MembersPage:
        """Deprecated: ``await c.members(space, …)``."""
        renamed("space_members()", "members()")
        return await self._members_page(space, cursor, limit)

    async def _members_page(self, space: str, cursor: str | None, limit: int | None) -> MembersPage:
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
        """Every current member of ``space``, paging through :meth:`members`."""
        return await every_page(
            lambda cursor: self._members_page(space, cursor, page_size),
            lambda page: page.members,
        )

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
        return await every_page(
            lambda cursor: self.list_agents(
                capability=capability, space=space, cursor=cursor, limit=1000
            ),
            lambda page: page.agents,
        )

    async def ping(self) -> int | None:
        """One heartbeat round trip; returns the hub's timestamp (Unix ms)."""
        reply = await self._request({"type": MessageType.AGENT_HEARTBEAT})
        ts = reply.get("timestamp")
        return ts if isinstance(ts, int) else None

    # ── streams ──────────────────────────────────────────────────────────

    def stream(
        self,
        space: str,
        *,
        event_id: str | None = None,
        data: Mapping[str, Any] | None = None,
        to: str | Iterable[str] | None = None,
        echo: bool = True,
        coalesce: float = COALESCE_SECONDS,
        on_cancel: Callable[[str], object] | None = None,
    ) -> OutgoingStream:
        """A stream to publish to ``space``: ``async with c.stream(space) as s``.

        ``event_id`` (``[A-Za-z0-9._:-]{1,128}``, unique per agent) defaults to
        a random one; receivers see it as ``"<agent_id>/<event_id>"``.
        ``data`` are extra fields sent with the first delta; ``to`` addresses
        the stream like :meth:`publish`. What is sent within ``coalesce``
        seconds goes out as one delta (0: one delta per ``send``).
        ``on_cancel`` is called with the reason as soon as others end the
        stream — its receivers all cancelled or left, the hub, a lost
        connection — so a producer can stop generating before its next ``send``.
        """
        return OutgoingStream(
            self,
            space,
            event_id or f"st-{secrets.token_hex(6)}",
            dict(data or {}),
            echo,
            to=None if to is None else recipients(to),
            coalesce=coalesce,
            on_cancel=on_cancel,
        )

    # ── request and reply ────────────────────────────────────────────────

    async def request(
        self,
        space: str,
        data: Mapping[str, Any] | str,
        *,
        to: str | Iterable[str] | None = None,
        timeout: float = 30.0,
    ) -> Event | AssembledEvent:
        """Publish ``data`` to ``space`` and return its first reply.

        The reply is the first event of the space whose ``data.in_reply_to``
        is this request's ``event_id`` (what :meth:`reply` sends): an
        :class:`Event`, or an :class:`AssembledEvent` when it was streamed
        (:meth:`stream_reply`; check ``complete``). ``to`` addresses the
        request (an agent, a bridge's agent id …); only a reply sent by one
        of them answers it (unaddressed: by any member of the space). No reply
        within ``timeout`` seconds (publishing included) raises
        :class:`ReplyTimeout`; the client closing for good raises its error.
        An ask that stops waiting (no reply in time, or its task cancelled)
        tells the answering agent, as the hub's faces do (contract §19):
        ``{"cancel": true, "in_reply_to": …, "reason": "timeout" | "cancelled"}``,
        addressed as the request was — ``serve()`` cancels its handler.
        """
        answered: str | None = None
        replied = False
        reason = "cancelled"
        addressed = None if to is None else recipients(to)
        asked = self._replies.sending(space, addressed)
        try:
            async with asyncio.timeout(timeout):
                try:
                    answered = (await self.publish(space, data, to=addressed)).event_id
                finally:
                    fut = self._replies.sent(asked, answered)
                assert fut is not None
                stopped = asyncio.ensure_future(self._stopped.wait())
                try:
                    await asyncio.wait({fut, stopped}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()
                if not fut.done():
                    raise self._final_error or ConnectionClosed("client closed")
                replied = True
                return fut.result()
        except TimeoutError as exc:
            reason = "timeout"
            if answered is None:
                if isinstance(exc, RequestTimeout):
                    raise
                raise RequestTimeout(
                    f"request to {space!r} not acknowledged within {timeout:g} s"
                ) from None
            raise ReplyTimeout(
                f"no reply to {answered} in {space!r} within {timeout:g} s", event_id=answered
            ) from None
        finally:
            if answered is not None:
                self._replies.forget(answered)
                if not replied and not self._stopped.is_set():
                    self._stop_asking(space, answered, addressed, reason)

    def _stop_asking(self, space: str, answered: str, to: list[str] | None, reason: str) -> None:
        """Tell the agents asked that nobody waits for the answer to
        ``answered`` any more. In the background, best effort: the asker has
        moved on, and whoever cannot be told has left."""

        async def tell() -> None:
            data = {"cancel": True, "in_reply_to": answered, "reason": reason}
            try:
                await self.publish(space, data, to=to, echo=False)
            except (HubClientError, TimeoutError) as exc:
                log.debug(
                    "could not tell %s that %s is no longer awaited: %s", space, answered, exc
                )

        task = asyncio.get_running_loop().create_task(tell())
        self._telling.add(task)
        task.add_done_callback(self._telling.discard)

    async def reply(
        self,
        event: Event | AssembledEvent,
        data: Mapping[str, Any] | str,
        *,
        to: str | Iterable[str] | _Sender | None = SENDER,
        echo: bool = True,
    ) -> Event:
        """Answer ``event``: publish ``data`` with ``in_reply_to`` = its
        ``event_id`` in its space, addressed to its sender (``to=None``: to
        every member; or other agents)."""
        payload = {"text": data} if isinstance(data, str) else dict(data)
        payload["in_reply_to"] = event.event_id
        return await self.publish(event.space, payload, to=self._reply_to(event, to), echo=echo)

    def stream_reply(
        self,
        event: Event | AssembledEvent,
        *,
        data: Mapping[str, Any] | None = None,
        to: str | Iterable[str] | _Sender | None = SENDER,
        echo: bool = True,
        coalesce: float = COALESCE_SECONDS,
        on_cancel: Callable[[str], object] | None = None,
    ) -> OutgoingStream:
        """Answer ``event`` with a stream (``async with c.stream_reply(event) as s``):
        its first delta carries ``in_reply_to``, addressed as :meth:`reply`."""
        return self.stream(
            event.space,
            data={**(data or {}), "in_reply_to": event.event_id},
            to=self._reply_to(event, to),
            echo=echo,
            coalesce=coalesce,
            on_cancel=on_cancel,
        )

    async def serve(
        self,
        space: str,
        handler: Handler,
        *,
        concurrency: int = 16,
        addressed_only: bool = False,
    ) -> None:
        """Answer every request in ``space`` with ``handler``, until the client closes.

        ``space`` is joined first when it is not yet. A request is an event of
        the space that is not a reply and not this agent's own (a streamed one
        comes whole); with ``addressed_only``, only those addressed to this
        agent (``to``). ``handler(event)`` — a function or a coroutine
        function — returns the reply: a ``str`` or a ``dict`` (one reply,
        addressed to the asker), ``None`` (no reply), or an iterator of ``str``
        (an ``async def`` with ``yield``, or a generator: a streamed reply).
        An exception becomes a failure reply ``{"status": "failure", "error":
        str(exc)}``. The handler is cancelled (``asyncio.CancelledError``) when
        the asker stops waiting: it left, it cancelled the request or the
        streamed reply. At most ``concurrency`` requests are handled at once.
        A reply that cannot be delivered (the asker left …) is logged, never
        raised. Raises the client's error when the connection is lost for good;
        cancelling ``serve`` cancels the handlers and waits for them.
        See :mod:`agora_client.serving`.
        """
        answerer = Answerer(
            self, space, handler, concurrency=concurrency, addressed_only=addressed_only
        )
        await answerer.run()

    @staticmethod
    def _reply_to(
        event: Event | AssembledEvent, to: str | Iterable[str] | _Sender | None
    ) -> str | Iterable[str] | None:
        if not isinstance(to, _Sender):
            return to
        # The hub's own events ("@hub") have no sender to answer to.
        return event.sender if event.sender and is_valid_agent_id(event.sender) else None

    # ── on every connection ──────────────────────────────────────────────

    async def _restore(self, ws: ClientConnection, details_sent: bool) -> None:
        """What a new connection is told before it is used: the agent's
        details when they did not fit in the handshake, and every space
        joined before, rejoined from where the client was."""
        try:
            if self._agent_info is not None and not details_sent:
                # Too long for the query: registered now (watchers see
                # `online` without the details, then `updated`).
                self._registered(
                    await self._request(
                        {"type": MessageType.AGENT_REGISTER, "agent": self._agent_info}, ws=ws
                    )
                )
            for space in self._spaces.names():
                since = self._spaces.rejoining(space)
                try:
                    reply = await self._request(join_message(space, since), ws=ws)
                    self._joined_reply(space, reply, since is not None)
                except (Unavailable, RateLimited):
                    raise  # passing: this reconnect attempt failed, the next one rejoins
                except HubRejected as exc:
                    log.warning("could not rejoin %s after reconnecting: %s", space, exc)
                    self._spaces.rejoin_refused(space)
        except BaseException:
            self._spaces.resuming.clear()  # the next connection rejoins them all again
            raise

    def _registered(self, reply: dict[str, Any]) -> Registration:
        reg = parse_registration(reply)
        if reg is None:
            raise ConnectionFailed(f"malformed agent.registered: {reply!r}")
        self.registration = reg
        return reg

    def _joined_reply(
        self, space: str, reply: dict[str, Any], resuming: bool = False
    ) -> JoinResult:
        return self._spaces.joined(space, reply, resuming)


def _acknowledged(space: str, sender: str, payload: dict[str, Any], reply: dict[str, Any]) -> Event:
    """The published event, from the reply that acknowledges it without
    carrying it: ``space.published`` (``echo=False``, or a repeated
    ``idempotency_key``: ``duplicate``) or ``space.event.done`` (a text big
    enough for the hub to stream it to the others)."""
    kind, event_id, seq = reply.get("type"), reply.get("event_id"), reply.get("seq")
    timestamp = reply.get("timestamp")
    duplicate = kind == MessageType.SPACE_PUBLISHED and reply.get("duplicate") is True
    streamed = kind == MessageType.SPACE_EVENT_DONE
    return Event(
        space=space,
        event_id=str(event_id),
        seq=seq if isinstance(seq, int) and not isinstance(seq, bool) else 0,
        sender=sender,
        timestamp=timestamp if isinstance(timestamp, int) else None,
        data={"from": sender, **payload},
        request_id=reply.get("request_id") if streamed else reply.get("id"),
        streamed=streamed or (not duplicate and isinstance(event_id, str) and "/" in event_id),
        duplicate=duplicate,
    )
