"""What the SDK hands to its user: small immutable records built from hub frames.

The hub is trusted but not blindly: a frame that lacks a field this module
needs is dropped (``parse_*`` return ``None``) and logged by the caller,
never allowed to crash the client's reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agora_client.wire import MessageType

ChunkKind = Literal["delta", "done", "cancel"]


@dataclass(frozen=True, slots=True)
class Event:
    """One ``space.event``: something published to a space.

    ``sender`` is the wire's ``from`` (the authenticated publisher, or
    ``"@hub"`` for hub-generated events such as ``agent.status``).
    ``timestamp`` is the hub's, in Unix milliseconds (``None`` only when an
    older hub acknowledged ``publish(..., echo=False)`` without one).
    ``streamed`` is true when ``publish()`` resolved on the
    ``space.event.done`` of a text too big for one frame (the hub sent
    it to the others as deltas); ``data`` is then what was published.
    """

    space: str
    event_id: str
    seq: int
    sender: str
    timestamp: int | None
    data: dict[str, Any]
    request_id: str | int | None = None
    streamed: bool = False
    #: The hub answered a retried publish (same ``idempotency_key``) with the
    #: original event's ids: nothing was published the second time.
    duplicate: bool = False
    #: For a signed envelope (``data.protocol`` agora/1.0 or
    #: agentprotocol/0.1): True when the hub verified its signature, False
    #: for an unsigned one, None for ordinary data. ``signer`` is the key id.
    verified: bool | None = None
    signer: str | None = None
    #: An addressed event's recipients (``to`` of the publish), else None.
    to: str | list[str] | None = None

    @property
    def text(self) -> str | None:
        """``data["text"]`` when it is a string."""
        text = self.data.get("text")
        return text if isinstance(text, str) else None

    @property
    def in_reply_to(self) -> str | None:
        """``data["in_reply_to"]``: the ``event_id`` of the event this one answers."""
        answered = self.data.get("in_reply_to")
        return answered if isinstance(answered, str) else None

    @property
    def status(self) -> Literal["complete"]:
        """Always ``"complete"``: a plain event arrived whole (an
        :class:`AssembledEvent` may not have), so one loop reads both alike."""
        return "complete"

    @property
    def complete(self) -> bool:
        """Always true (see :attr:`status`)."""
        return True


@dataclass(frozen=True, slots=True)
class MembersChanged:
    """``space.members``: others joined or left a space this client is in.

    ``joined_ids`` / ``left_ids`` are everyone who joined / left, in order:
    one agent, or several when the hub coalesced the changes of one short
    interval (``member_events_interval``) into one event. ``joined`` /
    ``left`` keep the seed's single-change shape: the agent id when the event
    is about one agent, else ``None`` — read the lists to miss nobody.

    ``members`` is the whole list only while the space is small (the hub's
    ``members_list_limit``, 100 by default); above it ``None`` — page the
    list with :meth:`Client.members`. Above ``member_events_limit``
    the hub sends no join/leave events at all.
    """

    space: str
    members: list[str] | None
    member_count: int
    joined: str | None = None
    left: str | None = None
    joined_ids: list[str] = field(default_factory=list)
    left_ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Built with the single-change fields only: the lists say the same.
        if self.joined is not None and not self.joined_ids:
            object.__setattr__(self, "joined_ids", [self.joined])
        if self.left is not None and not self.left_ids:
            object.__setattr__(self, "left_ids", [self.left])


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One frame of a stream: a ``delta``, its ``done``, or a ``cancel``.

    ``event_id`` is the hub-side id (``"<publisher>/<id>"``), the same on
    every frame of a stream. ``reason`` is set on cancels (``cancelled``,
    ``publisher_disconnected``, ``idle_timeout``, ``publisher_left_space``,
    ``receiver_cancelled`` …). The acknowledgement of a receiver-side cancel
    has no ``seq`` and no ``sender``.
    """

    kind: ChunkKind
    space: str
    event_id: str
    seq: int | None
    sender: str | None
    timestamp: int | None
    data: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    request_id: str | int | None = None
    #: An addressed stream's recipients (``to`` of its first delta), else None.
    to: str | list[str] | None = None

    @property
    def text(self) -> str:
        """The delta's ``data["text"]`` (``""`` for done and cancel)."""
        text = self.data.get("text")
        return text if isinstance(text, str) else ""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a client is in a space: the history ``epoch`` and the last ``seq`` seen.

    Pass it to ``join(space, since=…)`` to resume from it (the client does so
    by itself after a reconnect).
    """

    epoch: str
    seq: int


@dataclass(frozen=True, slots=True)
class JoinResult:
    """The answer to ``join()``: the space's members (capped by the hub) and their exact count.

    ``epoch`` and ``seq`` are the space's position when the join took effect.
    ``recovered`` is set when the join resumed from a position (``since``):
    true when everything after it was replayed, false when the hub could not
    (see :class:`Resumed`).
    """

    space: str
    members: list[str]
    member_count: int
    epoch: str | None = None
    seq: int | None = None
    recovered: bool | None = None


@dataclass(frozen=True, slots=True)
class Resumed:
    """A space rejoined after a reconnect, from the position the client had.

    ``recovered`` true: every event published meanwhile was replayed (in
    order, before live ones). False: the hub no longer had them all (its
    history was trimmed, expired or lost — ``epoch`` then differs from
    ``since.epoch``), so events between ``since.seq`` and ``seq`` may be
    missing: reload what you need (``history()``, your own store).
    """

    space: str
    recovered: bool
    since: Position
    epoch: str
    seq: int


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """``history()``: recorded events (and stream frames), oldest first.

    ``next_before_seq`` is what to pass as ``before_seq`` for the page
    before this one (``None``: the hub holds nothing older).
    """

    space: str
    epoch: str
    seq: int
    events: list[Event | StreamChunk]
    next_before_seq: int | None


@dataclass(frozen=True, slots=True)
class MembersPage:
    """One page of :meth:`Client.members`: members oldest first, the
    exact count, and the cursor of the next page (``None``: the last one)."""

    space: str
    members: list[str]
    member_count: int
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """One entry of the agent directory (:meth:`Client.list_agents`)."""

    id: str
    type: str | None
    capabilities: list[str]
    metadata: dict[str, Any]
    node: str
    connected_at: int | None  # Unix ms


@dataclass(frozen=True, slots=True)
class AgentPage:
    """One page of :meth:`Client.list_agents`; a page may hold fewer agents
    than asked for: only ``next_cursor is None`` says the listing is done."""

    agents: list[AgentEntry]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SpaceInfo:
    """One entry of ``spaces()``."""

    id: str
    type: str
    member_count: int


@dataclass(frozen=True, slots=True)
class Registration:
    """``agent.registered``: who the hub says this connection is.

    Heartbeat values are in seconds (the wire carries milliseconds).
    """

    agent_id: str
    connection_id: str
    heartbeat_interval: float
    heartbeat_timeout: float


Message = Event | MembersChanged | StreamChunk | Resumed


# ── parsing ─────────────────────────────────────────────────────────────────


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _rid(v: Any) -> str | int | None:
    return v if isinstance(v, str | int) and not isinstance(v, bool) else None


def parse_event(f: dict[str, Any]) -> Event | None:
    space, event_id, seq = _str(f.get("space")), _str(f.get("event_id")), _int(f.get("seq"))
    sender, data = f.get("from"), f.get("data")
    if space is None or event_id is None or seq is None or not isinstance(data, dict):
        return None
    return Event(
        space=space,
        event_id=event_id,
        seq=seq,
        sender=sender if isinstance(sender, str) else "",
        timestamp=_int(f.get("timestamp")),
        data=data,
        request_id=_rid(f.get("request_id")),
        verified=f.get("verified") if isinstance(f.get("verified"), bool) else None,
        signer=_str(f.get("signer")),
        to=_recipients(f.get("to")),
    )


def _recipients(v: Any) -> str | list[str] | None:
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return [a for a in v if isinstance(a, str)]
    return None


def parse_members(f: dict[str, Any]) -> MembersChanged | None:
    space, members, count = _str(f.get("space")), f.get("members"), _int(f.get("member_count"))
    if space is None or not isinstance(members, list | None) or count is None:
        return None
    joined, left = f.get("joined"), f.get("left")
    return MembersChanged(
        space=space,
        members=None if members is None else [m for m in members if isinstance(m, str)],
        member_count=count,
        joined=_str(joined),
        left=_str(left),
        joined_ids=_ids(joined),
        left_ids=_ids(left),
    )


def _ids(v: Any) -> list[str]:
    """``joined``/``left``: an id (one change) or a list (coalesced changes)."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        return [a for a in v if isinstance(a, str)]
    return []


def parse_members_page(f: dict[str, Any]) -> MembersPage | None:
    space, members, count = _str(f.get("space")), f.get("members"), _int(f.get("member_count"))
    if space is None or not isinstance(members, list) or count is None:
        return None
    return MembersPage(
        space, [m for m in members if isinstance(m, str)], count, _str(f.get("next_cursor"))
    )


def parse_agent_page(f: dict[str, Any]) -> AgentPage | None:
    agents = f.get("agents")
    if not isinstance(agents, list):
        return None
    out = []
    for a in agents:
        if not isinstance(a, dict) or _str(a.get("id")) is None:
            continue
        caps = a.get("capabilities")
        out.append(
            AgentEntry(
                id=a["id"],
                type=_str(a.get("type")),
                capabilities=[c for c in caps if isinstance(c, str)]
                if isinstance(caps, list)
                else [],
                metadata=a["metadata"] if isinstance(a.get("metadata"), dict) else {},
                node=_str(a.get("node")) or "",
                connected_at=_int(a.get("connected_at")),
            )
        )
    return AgentPage(out, _str(f.get("next_cursor")))


_KINDS: dict[str, ChunkKind] = {
    MessageType.SPACE_EVENT_DELTA: "delta",
    MessageType.SPACE_EVENT_DONE: "done",
    MessageType.SPACE_EVENT_CANCEL: "cancel",
}


def parse_chunk(f: dict[str, Any]) -> StreamChunk | None:
    kind = _KINDS.get(f.get("type"))  # type: ignore[arg-type]
    space, event_id = _str(f.get("space")), _str(f.get("event_id"))
    if kind is None or space is None or event_id is None:
        return None
    data = f.get("data")
    if kind == "delta" and not isinstance(data, dict):
        return None
    return StreamChunk(
        kind=kind,
        space=space,
        event_id=event_id,
        seq=_int(f.get("seq")),
        sender=_str(f.get("from")),
        timestamp=_int(f.get("timestamp")),
        data=data if isinstance(data, dict) else {},
        reason=_str(f.get("reason")),
        request_id=_rid(f.get("request_id")),
        to=_recipients(f.get("to")),
    )


def parse_registration(f: dict[str, Any]) -> Registration | None:
    agent = f.get("agent")
    if not isinstance(agent, dict):
        return None
    agent_id, conn_id = _str(agent.get("id")), _str(agent.get("connection_id"))
    interval, timeout = f.get("heartbeat_interval"), f.get("heartbeat_timeout")
    if (
        agent_id is None
        or conn_id is None
        or not isinstance(interval, int | float)
        or not isinstance(timeout, int | float)
    ):
        return None
    return Registration(agent_id, conn_id, interval / 1000.0, timeout / 1000.0)


def parse_spaces(f: dict[str, Any]) -> list[SpaceInfo]:
    out = []
    for s in f.get("spaces") or ():
        if isinstance(s, dict) and isinstance(s.get("id"), str):
            out.append(SpaceInfo(s["id"], str(s.get("type", "")), _int(s.get("member_count")) or 0))
    return out


StreamStatus = Literal["complete", "cancelled", "incomplete"]


@dataclass(frozen=True, slots=True)
class AssembledEvent:
    """A stream put back together by :class:`~agora_client.assembly.StreamAssembler`.

    ``data`` is the first delta's fields with ``text`` replaced by the
    concatenation of every delta's text. ``status`` says how it ended:

    - ``complete``: its ``space.event.done`` arrived; ``seq`` is the done's.
    - ``cancelled``: a ``space.event.cancel`` ended it; ``reason`` is the
      publisher's or the hub's (``publisher_disconnected``, ``idle_timeout``,
      ``receiver_cancelled`` …) and ``text`` holds what arrived before.
    - ``incomplete``: this client gave up on it; ``reason`` is
      ``incomplete_timeout`` (no frame for too long), ``missed_start`` (its
      first delta never reached this consumer), ``dropped`` (the consumer's
      queue overflowed), ``too_large`` or ``connection_lost``.
    """

    space: str
    event_id: str
    sender: str | None
    timestamp: int | None
    seq: int | None
    data: dict[str, Any]
    status: StreamStatus
    reason: str | None = None
    request_id: str | int | None = None
    chunks: int = 0
    #: An addressed stream's recipients (``to`` of its first delta), else None.
    to: str | list[str] | None = None

    @property
    def streamed(self) -> bool:
        """Always true: it arrived as a stream (as :attr:`Event.streamed` says of a
        publish the hub streamed)."""
        return True

    @property
    def text(self) -> str:
        text = self.data.get("text")
        return text if isinstance(text, str) else ""

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def in_reply_to(self) -> str | None:
        """``data["in_reply_to"]`` of the stream's first delta: the event it answers."""
        answered = self.data.get("in_reply_to")
        return answered if isinstance(answered, str) else None
