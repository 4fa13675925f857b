"""The wire's constants, as this client speaks them: message types, error and close codes.

The hub defines the protocol in its own package (``protocol/``), which needs
pydantic; the client is installed without it, so it keeps its own copy of the
few names it sends and reads. The server's test suite checks that every
constant here has the same value as the hub's (``tests/unit/test_client_wire.py``),
so the two cannot drift apart. Plain data: no I/O, nothing imported but the
standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import IntEnum, StrEnum


class MessageType(StrEnum):
    """The ``type`` of every frame this client sends or reads."""

    AGENT_REGISTER = "agent.register"
    AGENT_REGISTERED = "agent.registered"
    AGENT_HEARTBEAT = "agent.heartbeat"
    AGENT_LIST = "agent.list"
    AGENT_REFRESH = "agent.refresh"
    AGENT_REFRESHED = "agent.refreshed"
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
    ERROR = "error"


class ErrorCode(StrEnum):
    """The ``code`` of the hub's ``error`` events that this client tells apart."""

    INVALID_REQUEST = "INVALID_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    AGENT_EXISTS = "AGENT_EXISTS"
    SPACE_NOT_FOUND = "SPACE_NOT_FOUND"
    SPACE_FULL = "SPACE_FULL"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    UNAVAILABLE = "UNAVAILABLE"
    HEARTBEAT_TIMEOUT = "HEARTBEAT_TIMEOUT"
    SLOW_CONSUMER = "SLOW_CONSUMER"
    DISCONNECTED = "DISCONNECTED"


class CloseCode(IntEnum):
    """WebSocket close codes the hub uses (``docs/protocol.md`` has the table)."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    INVALID_DATA = 1007
    MESSAGE_TOO_BIG = 1009
    TRY_AGAIN_LATER = 1013
    SLOW_CONSUMER = 4008
    UNAUTHORIZED = 4401
    DISCONNECTED = 4403
    HEARTBEAT_TIMEOUT = 4408
    AGENT_EXISTS = 4409
    RATE_LIMIT_ABUSE = 4429


#: The system space where the hub reports agents coming and going.
AGENT_STATUS_SPACE = "agent.status"

#: Most agents one addressed publish (``to``) may name.
MAX_RECIPIENTS = 100

#: An agent id: 1-128 characters of ``[A-Za-z0-9._:-]``, starting alphanumeric.
AGENT_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
_AGENT_ID = re.compile(AGENT_ID_PATTERN)


def is_valid_agent_id(agent_id: object) -> bool:
    """Whether the hub accepts ``agent_id`` (checked before connecting, to fail early)."""
    return isinstance(agent_id, str) and _AGENT_ID.fullmatch(agent_id) is not None


def recipients(to: str | Iterable[str]) -> str | list[str]:
    """``to`` for the wire: one agent id, or a list of 1 to :data:`MAX_RECIPIENTS`
    of them. ValueError for anything the hub would refuse, before it is sent."""
    if isinstance(to, str):
        if not is_valid_agent_id(to):
            raise ValueError(f"invalid agent id in to: {to!r}")
        return to
    ids = list(to)
    if not 0 < len(ids) <= MAX_RECIPIENTS:
        raise ValueError(f"to names 1-{MAX_RECIPIENTS} agents, not {len(ids)}")
    bad = [a for a in ids if not is_valid_agent_id(a)]
    if bad:
        raise ValueError(f"invalid agent id in to: {bad[0]!r}")
    return ids
