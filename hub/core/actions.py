"""What a session asks the node to do: one frozen dataclass per action.

:meth:`hub.core.session.Session.receive` turns an inbound frame into a list of
these; :class:`hub.handlers.dispatch.Dispatcher` runs each with the handler the node
registered for its type. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.messages import AgentInfo, Since

RequestId = str | int | None


@dataclass(frozen=True, slots=True)
class Send:
    """Send these bytes to this connection."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class Reject:
    """Answer with an ``error`` event; the connection stays open."""

    error: ProtocolError


@dataclass(frozen=True, slots=True)
class Close:
    """Send the error event, then close with ``code``."""

    code: CloseCode
    error: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class Register:
    info: AgentInfo
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class Refresh:
    """``agent.refresh``: authenticate ``token`` for this agent id and, if it
    is good, make its grant the connection's."""

    token: str = field(repr=False)
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class Join:
    space: str
    request_id: RequestId
    #: Resume: replay what was published after this position (hub/handlers/recovery.py).
    since: Since | None = None


@dataclass(frozen=True, slots=True)
class Leave:
    space: str
    request_id: RequestId
    cancelled: tuple[StreamCancel, ...] = ()


@dataclass(frozen=True, slots=True)
class Publish:
    space: str
    data: dict[str, Any]
    echo: bool
    request_id: RequestId
    #: Addressed publish: the recipients (deduplicated) and ``to`` as sent,
    #: which the event carries unchanged.
    to: tuple[str, ...] | None = None
    to_field: str | list[str] | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Denied:
    """Publish/stream to a space this agent is not a member of.

    The node answers ``SPACE_NOT_FOUND`` or ``UNAUTHORIZED`` depending on
    whether the space exists, which only it can tell.
    """

    space: str
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class ListSpaces:
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class ListMembers:
    """A page of a space's members (``space.members`` request)."""

    space: str
    cursor: str | None
    limit: int
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class ListAgents:
    """A page of the agent directory (``agent.list``)."""

    capability: str | None
    space: str | None
    cursor: str | None
    limit: int
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class StreamDelta:
    space: str
    stream_id: str
    data: dict[str, Any]
    echo: bool
    first: bool
    request_id: RequestId
    #: An addressed stream: who gets every frame of it — the recipients its
    #: first delta named, then its publisher (whose echo ``echo`` decides).
    to: tuple[str, ...] | None = None
    #: ``to`` as the first delta sent it, which that delta carries unchanged.
    to_field: str | list[str] | None = None


@dataclass(frozen=True, slots=True)
class StreamDone:
    space: str
    stream_id: str
    request_id: RequestId
    to: tuple[str, ...] | None = None  # an addressed stream's audience (StreamDelta.to)


@dataclass(frozen=True, slots=True)
class StreamCancel:
    """The publisher's own stream ends early (by itself or by the hub)."""

    space: str
    stream_id: str
    reason: str
    request_id: RequestId = None
    to: tuple[str, ...] | None = None  # an addressed stream's audience (StreamDelta.to)


@dataclass(frozen=True, slots=True)
class ReadHistory:
    """``space.history`` from a member of the space."""

    space: str
    limit: int
    before_seq: int | None
    request_id: RequestId


@dataclass(frozen=True, slots=True)
class ReceiverCancel:
    """A receiver no longer wants the rest of someone else's stream."""

    space: str
    stream_id: str
    request_id: RequestId


Action = (
    Send
    | Reject
    | Close
    | Register
    | Join
    | Leave
    | Publish
    | Denied
    | ListSpaces
    | ListMembers
    | ListAgents
    | StreamDelta
    | StreamDone
    | StreamCancel
    | ReceiverCancel
    | ReadHistory
    | Refresh
)
