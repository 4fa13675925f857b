"""Python client SDK for Agora Hub.

::

    from hub.client import Client

    async with Client("ws://127.0.0.1:8765/ws", "alice") as c:
        await c.join("general")
        await c.publish("general", {"text": "hello"})
        async for event in c.events("general"):
            print(event.sender, event.text)

See ``docs/client.md`` for the full guide: streams, reconnects, errors and
the command-line tools (:mod:`hub.client.cli`). :class:`HubAPI` is the client
of the hub's server API over HTTP (``docs/api.md``).
"""

from typing import Any

from hub.client.assembly import AssembledEvents, StreamAssembler
from hub.client.client import Client
from hub.client.errors import (
    AgentExists,
    ConnectionClosed,
    ConnectionFailed,
    HubClientError,
    HubConnectionError,
    HubRejected,
    InternalError,
    InvalidRequest,
    RateLimited,
    RequestTimeout,
    SpaceFull,
    SpaceNotFound,
    StreamCancelled,
    Unauthorized,
    Unavailable,
)
from hub.client.keepalive import Backoff
from hub.client.models import (
    AgentEntry,
    AgentPage,
    AssembledEvent,
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
)
from hub.client.streams import OutgoingStream
from hub.client.subscriptions import Subscription

__all__ = [
    "AgentEntry",
    "AgentExists",
    "AgentPage",
    "AssembledEvent",
    "AssembledEvents",
    "Backoff",
    "Client",
    "ConnectionClosed",
    "ConnectionFailed",
    "Event",
    "HistoryPage",
    "HubAPI",
    "HubClientError",
    "HubConnectionError",
    "HubRejected",
    "InternalError",
    "InvalidRequest",
    "JoinResult",
    "MembersChanged",
    "MembersPage",
    "Message",
    "NodeInfo",
    "OutgoingStream",
    "Position",
    "Published",
    "RateLimited",
    "Registration",
    "RequestTimeout",
    "Resumed",
    "SpaceFull",
    "SpaceInfo",
    "SpaceNotFound",
    "StreamAssembler",
    "StreamCancelled",
    "StreamChunk",
    "Subscription",
    "Unauthorized",
    "Unavailable",
]

_API_NAMES = frozenset({"HubAPI", "NodeInfo", "Published"})


def __getattr__(name: str) -> Any:
    # The HTTP API client loads aiohttp: only for those who use it.
    if name in _API_NAMES:
        from hub.client import api

        return getattr(api, name)
    raise AttributeError(f"module 'hub.client' has no attribute {name!r}")
