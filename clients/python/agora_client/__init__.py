"""Python client SDK for Agora Hub.

::

    from agora_client import Client

    async with Client("ws://127.0.0.1:8765/ws", "alice") as c:
        await c.join("general")
        await c.publish("general", {"text": "hello"})
        async for event in c.events("general"):
            print(event.sender, event.text)

See ``docs/client.md`` for the full guide: streams, reconnects, errors and
the command-line tools (:mod:`agora_client.cli`). :class:`HubAPI` is the client
of the hub's server API over HTTP (``docs/api.md``).
"""

from typing import Any

from agora_client._version import __version__
from agora_client.assembly import AssembledEvents, StreamAssembler
from agora_client.client import SENDER, Client
from agora_client.errors import (
    AgentExists,
    ConnectionClosed,
    ConnectionFailed,
    HubClientError,
    HubConnectionError,
    HubRejected,
    InternalError,
    InvalidRequest,
    RateLimited,
    ReplyTimeout,
    RequestTimeout,
    SpaceFull,
    SpaceNotFound,
    StreamCancelled,
    Unauthorized,
    Unavailable,
)
from agora_client.keepalive import Backoff
from agora_client.models import (
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
from agora_client.running import run
from agora_client.streams import OutgoingStream
from agora_client.subscriptions import Subscription

__all__ = [
    "SENDER",
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
    "ReplyTimeout",
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
    "__version__",
    "run",
]

_API_NAMES = frozenset({"HubAPI", "NodeInfo", "Published"})


def __getattr__(name: str) -> Any:
    # The HTTP API client needs aiohttp, an optional extra
    # (agora-hub-client[api]): loaded only for those who use it.
    if name in _API_NAMES:
        from agora_client import api

        return getattr(api, name)
    raise AttributeError(f"module 'agora_client' has no attribute {name!r}")
