"""Pydantic models of every hub message (seed 002 plus the contract).

Two families share the ``type`` discriminator: what a client sends
(:data:`ClientMessage`) and what the hub sends (:data:`HubMessage`).
Some types exist in both directions with different fields
(``agent.heartbeat``, ``space.list``, ``space.event.delta`` …).

The hub validates every inbound frame with these models. For the frames it
fans out it writes the bytes directly (see :mod:`protocol.codec`); the unit
tests check that those bytes parse back into the models below.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class MessageType(StrEnum):
    """Every ``type`` on the wire, both directions (some exist in both)."""

    AGENT_REGISTER = "agent.register"
    AGENT_REGISTERED = "agent.registered"
    AGENT_HEARTBEAT = "agent.heartbeat"
    SPACE_JOIN = "space.join"
    SPACE_JOINED = "space.joined"
    SPACE_LEAVE = "space.leave"
    SPACE_LEFT = "space.left"
    SPACE_MEMBERS = "space.members"
    SPACE_LIST = "space.list"
    SPACE_PUBLISH = "space.publish"
    SPACE_PUBLISHED = "space.published"
    SPACE_EVENT = "space.event"
    SPACE_EVENT_DELTA = "space.event.delta"
    SPACE_EVENT_DONE = "space.event.done"
    SPACE_EVENT_CANCEL = "space.event.cancel"
    SPACE_HISTORY = "space.history"
    AGENT_LIST = "agent.list"
    AGENT_REFRESH = "agent.refresh"
    AGENT_REFRESHED = "agent.refreshed"
    ERROR = "error"


RequestId = Annotated[str, Field(min_length=1, max_length=128)]
AgentId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
# Most agents one addressed publish may name.
MAX_RECIPIENTS = 100
Recipients = Annotated[list[AgentId], Field(min_length=1, max_length=MAX_RECIPIENTS)]
SpaceName = Annotated[str, Field(min_length=1, max_length=128)]
EventId = Annotated[str, Field(min_length=1, max_length=260)]
Reason = Annotated[str, Field(max_length=256)]
#: A space's history epoch: changes whenever its history may have been lost.
Epoch = Annotated[str, Field(min_length=1, max_length=64)]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128)]
#: Most events one ``space.history`` reply carries.
MAX_HISTORY_LIMIT = 100
# Paged requests (space.members, agent.list): page size and opaque cursor.
DEFAULT_PAGE = 100
MAX_PAGE = 1000
PageLimit = Annotated[int, Field(ge=1, le=MAX_PAGE)]
Cursor = Annotated[str, Field(min_length=1, max_length=512)]
MAX_CAPABILITY = 128
# An exact capability, or a prefix ending in "*".
CapabilityFilter = Annotated[str, Field(min_length=1, max_length=MAX_CAPABILITY + 1)]
# A credential sent in agent.refresh (the handshake bounds header lines at 8 KiB too).
MAX_TOKEN = 8192
Token = Annotated[str, Field(min_length=1, max_length=MAX_TOKEN)]


class _Message(BaseModel):
    # Strict: "space": 1 is an error, not "1". Unknown fields are ignored so
    # newer clients keep working against an older hub.
    model_config = ConfigDict(strict=True, extra="ignore", populate_by_name=True)


class _HubMessage(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ── shared parts ────────────────────────────────────────────────────────────


class AgentInfo(_Message):
    id: str
    type: str | None = Field(default=None, max_length=64)
    capabilities: list[Annotated[str, Field(max_length=MAX_CAPABILITY)]] = Field(
        default_factory=list, max_length=256
    )
    metadata: dict[str, Any] = Field(default_factory=dict)


class AgentRef(_HubMessage):
    id: str
    connection_id: str


class SpaceInfo(_HubMessage):
    id: str
    type: Literal["public", "system"]
    member_count: int


# ── client → hub ────────────────────────────────────────────────────────────


class AgentRegister(_Message):
    type: Literal["agent.register"]
    id: RequestId | None = None
    agent: AgentInfo


class ClientHeartbeat(_Message):
    type: Literal["agent.heartbeat"]
    id: RequestId | None = None
    timestamp: int | float | None = None


class Since(_Message):
    """Where a client left off in a space: resume after ``seq`` of ``epoch``."""

    seq: int = Field(ge=0, le=2**63 - 1)
    epoch: Epoch


class SpaceJoin(_Message):
    type: Literal["space.join"]
    id: RequestId | None = None
    space: SpaceName
    #: Resume: replay what was published after this position, then go live.
    since: Since | None = None


class SpaceLeave(_Message):
    type: Literal["space.leave"]
    id: RequestId | None = None
    space: SpaceName


class SpacePublish(_Message):
    type: Literal["space.publish"]
    id: RequestId | None = None
    space: SpaceName
    data: dict[str, Any]
    echo: bool = True
    #: Addressed publish: only these members (and the sender's echo) receive it.
    to: AgentId | Recipients | None = None
    #: A retry with the same key (same agent, same space) within history_ttl is
    #: answered with the original event's ids and not published again.
    idempotency_key: IdempotencyKey | None = None


class SpaceListRequest(_Message):
    type: Literal["space.list"]
    id: RequestId | None = None


class SpaceHistoryRequest(_Message):
    """The newest events of a space (before ``before_seq`` when given), oldest first."""

    type: Literal["space.history"]
    id: RequestId | None = None
    space: SpaceName
    limit: int = Field(default=50, ge=1, le=MAX_HISTORY_LIMIT)
    before_seq: int | None = Field(default=None, ge=1, le=2**63 - 1)


class SpaceMembersRequest(_Message):
    """Page through a space's current members (oldest first), cluster-wide."""

    type: Literal["space.members"]
    id: RequestId | None = None
    space: SpaceName
    cursor: Cursor | None = None
    limit: PageLimit | None = None  # DEFAULT_PAGE


class AgentListRequest(_Message):
    """The agent directory: online agents, by capability or space membership."""

    type: Literal["agent.list"]
    id: RequestId | None = None
    capability: CapabilityFilter | None = None
    space: SpaceName | None = None
    cursor: Cursor | None = None
    limit: PageLimit | None = None  # DEFAULT_PAGE


class AgentRefresh(_Message):
    """A new token for this connection's agent id, before or after the old one expires."""

    type: Literal["agent.refresh"]
    id: RequestId | None = None
    token: Token = Field(repr=False)


class ClientDelta(_Message):
    """One chunk of a stream the client publishes; the first one opens it."""

    type: Literal["space.event.delta"]
    id: RequestId | None = None
    space: SpaceName
    event_id: EventId
    data: dict[str, Any]
    echo: bool = True
    #: On the first delta only: the stream goes to these members (and the
    #: publisher's echo), as an addressed publish does.
    to: AgentId | Recipients | None = None


class ClientDone(_Message):
    type: Literal["space.event.done"]
    id: RequestId | None = None
    space: SpaceName
    event_id: EventId


class ClientCancel(_Message):
    """Cancel a stream: one's own (publisher) or one being received."""

    type: Literal["space.event.cancel"]
    id: RequestId | None = None
    space: SpaceName
    event_id: EventId
    reason: Reason | None = None


ClientMessage = Annotated[
    AgentRegister
    | ClientHeartbeat
    | SpaceJoin
    | SpaceLeave
    | SpacePublish
    | SpaceListRequest
    | SpaceMembersRequest
    | AgentListRequest
    | AgentRefresh
    | ClientDelta
    | ClientDone
    | ClientCancel
    | SpaceHistoryRequest,
    Field(discriminator="type"),
]

CLIENT_MODELS: dict[str, type[_Message]] = {
    m.model_fields["type"].annotation.__args__[0]: m  # type: ignore[union-attr]
    for m in (
        AgentRegister,
        ClientHeartbeat,
        SpaceJoin,
        SpaceLeave,
        SpacePublish,
        SpaceListRequest,
        SpaceMembersRequest,
        AgentListRequest,
        AgentRefresh,
        ClientDelta,
        ClientDone,
        ClientCancel,
        SpaceHistoryRequest,
    )
}


# ── hub → client ────────────────────────────────────────────────────────────


class AgentRegistered(_HubMessage):
    type: Literal["agent.registered"] = "agent.registered"
    id: str | None = None
    agent: AgentRef
    heartbeat_interval: int
    heartbeat_timeout: int


class AgentRefreshed(_HubMessage):
    """Answers ``agent.refresh``: the new token is in force.

    ``expires_at``: the token's expiry (Unix epoch ms), null when it has none."""

    type: Literal["agent.refreshed"] = "agent.refreshed"
    id: str | None = None
    expires_at: int | None = None


class HubHeartbeat(_HubMessage):
    type: Literal["agent.heartbeat"] = "agent.heartbeat"
    id: str | None = None
    timestamp: int


class SpaceJoined(_HubMessage):
    type: Literal["space.joined"] = "space.joined"
    id: str | None = None
    space: str
    members: list[str]
    member_count: int
    #: The space's history epoch and its seq when the join took effect.
    epoch: str | None = None
    seq: int | None = None
    #: Only when the join carried ``since``: was everything after it replayed?
    recovered: bool | None = None


class SpaceLeft(_HubMessage):
    type: Literal["space.left"] = "space.left"
    id: str | None = None
    space: str


class SpaceMembers(_HubMessage):
    """A join or leave (``joined``/``left``; ``members`` only while the space
    is small), or the reply to a ``space.members`` request (``id``,
    ``members``, ``next_cursor``)."""

    type: Literal["space.members"] = "space.members"
    id: str | None = None
    space: str
    members: list[str] | None = None
    member_count: int
    #: An agent id for one change (the seed's shape), lists when several
    #: changes of one interval are coalesced (``member_events_interval``).
    joined: str | list[str] | None = None
    left: str | list[str] | None = None
    next_cursor: str | None = None


class SpaceEvent(_HubMessage):
    type: Literal["space.event"] = "space.event"
    space: str
    event_id: str
    seq: int
    from_: str = Field(alias="from")
    timestamp: int
    data: dict[str, Any]
    request_id: str | None = None
    to: str | list[str] | None = None
    #: Signed envelopes (``data.protocol`` agora/1.0 or agentprotocol/0.1):
    #: whether the hub verified its signature, and the signer's key id.
    verified: bool | None = None
    signer: str | None = None


class SpacePublished(_HubMessage):
    """Acknowledges a ``space.publish`` sent with ``"echo": false``."""

    type: Literal["space.published"] = "space.published"
    id: str | None = None
    space: str
    event_id: str
    seq: int
    timestamp: int
    #: True when this answers a retry (same idempotency_key): nothing was published.
    duplicate: bool | None = None


class SpaceHistory(_HubMessage):
    """Answers ``space.history``: events as they were delivered, oldest first."""

    type: Literal["space.history"] = "space.history"
    id: str | None = None
    space: str
    epoch: str
    seq: int
    events: list[dict[str, Any]]
    #: Pass as ``before_seq`` for the page before this one; null: nothing older.
    next_before_seq: int | None = None


class HubDelta(_HubMessage):
    type: Literal["space.event.delta"] = "space.event.delta"
    space: str
    event_id: str
    seq: int
    from_: str = Field(alias="from")
    timestamp: int
    data: dict[str, Any]


class HubDone(_HubMessage):
    type: Literal["space.event.done"] = "space.event.done"
    space: str
    event_id: str
    seq: int
    from_: str = Field(alias="from")
    timestamp: int


class HubCancel(_HubMessage):
    type: Literal["space.event.cancel"] = "space.event.cancel"
    id: str | None = None
    space: str
    event_id: str
    seq: int | None = None
    from_: str | None = Field(default=None, alias="from")
    timestamp: int | None = None
    reason: str | None = None


class SpaceList(_HubMessage):
    type: Literal["space.list"] = "space.list"
    id: str | None = None
    spaces: list[SpaceInfo]


class AgentEntry(_HubMessage):
    id: str
    type: str | None = None
    capabilities: list[str]
    metadata: dict[str, Any]
    node: str
    connected_at: int | None = None


class AgentList(_HubMessage):
    type: Literal["agent.list"] = "agent.list"
    id: str | None = None
    agents: list[AgentEntry]
    next_cursor: str | None = None


class Error(_HubMessage):
    type: Literal["error"] = "error"
    code: str
    message: str
    request_id: str | int | None = None


HubMessage = Annotated[
    AgentRegistered
    | AgentRefreshed
    | HubHeartbeat
    | SpaceJoined
    | SpaceLeft
    | SpaceMembers
    | SpaceEvent
    | SpacePublished
    | HubDelta
    | HubDone
    | HubCancel
    | SpaceList
    | SpaceHistory
    | AgentList
    | Error,
    Field(discriminator="type"),
]

client_message_adapter: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)
hub_message_adapter: TypeAdapter[HubMessage] = TypeAdapter(HubMessage)
