"""What the node offers the adapters it hosts — and all they may import from ``hub``.

An adapter (``adapters/*``: a bridge or gateway to another protocol) is
built from the settings by :func:`adapters.from_settings`, handed to the node,
started after it with an :class:`AdapterHost` and closed before it, in
reverse order. It acts in spaces only through the virtual members the host
attaches for it (:meth:`AgentHosting.attach`), so seq, order, addressed
delivery, membership events, limits and cluster fan-out hold for it exactly
as for a WebSocket agent. Besides that it may mount HTTP routes on the HTTP
port, keep small shared state in the cluster's key-value store, read who is
in a space, and authenticate HTTP callers as agents.

What a caller may do in a space, every adapter asks the hub's one policy
(:attr:`HttpFaces.policy`, :class:`~hub.core.authz.SpacePolicy`) about the
:class:`Caller` :meth:`HttpFaces.caller` made of the request — never its
own reading of tokens or claims.

Adapters import this module, :mod:`protocol` and their own package — nothing
else of ``hub`` (``tests/unit/repo/test_layers.py``). So everything they need is
named here: the host (:class:`AdapterHost`, a bundle of the small protocols
:class:`AgentHosting`, :class:`HttpFaces`, :class:`SpaceReads` and
:class:`SystemSpaces` with the settings, ``kv``, ``identity`` and
``envelopes``; each part of an adapter is given only the ones it calls), the
member it attaches (:class:`AdapterMember`), the adapter protocol, the errors they
catch, the records they read, and the bounded body reads and waiting slots of
the HTTP port (read the whole body, check it, then take a slot).

The node implements these protocols (:mod:`hub.node.hosting`,
:mod:`hub.node.virtual`) and imports this module; this module imports
nothing of :mod:`hub.node`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from hub.cluster.kvstore import KeyValueStore
from hub.cluster.presence import AgentRecord
from hub.config.hub_identity import HubIdentity
from hub.config.settings import Settings as HubSettings
from hub.core.authz import Act, Grant, SpacePolicy
from hub.errors import AgentIdTaken, AuthError, BackplaneUnavailable, ConfigError
from hub.handlers.envelope_check import EnvelopeCheck
from hub.net.bodies import (
    BodyRefused,
    SlotsFull,
    WaitingSlots,
    check_json,
    parse_json,
    read_at_most,
    read_body,
)
from hub.net.http import client_gone, until_client_gone

__all__ = [
    "ANONYMOUS",
    "Act",
    "Adapter",
    "AdapterHost",
    "AdapterMember",
    "AgentHosting",
    "AgentIdTaken",
    "AgentRecord",
    "AuthError",
    "BackplaneUnavailable",
    "BodyRefused",
    "Caller",
    "ConfigError",
    "EnvelopeCheck",
    "HostSettings",
    "HttpFaces",
    "HubIdentity",
    "HubSettings",
    "KeyValueStore",
    "MessageHandler",
    "RequestFailed",
    "SlotsFull",
    "SpacePolicy",
    "SpaceReads",
    "SystemSpaces",
    "Take",
    "WaitingSlots",
    "check_json",
    "client_gone",
    "parse_json",
    "read_at_most",
    "read_body",
    "until_client_gone",
]


MessageHandler = Callable[[dict[str, Any]], Awaitable[None]]
#: Deals with a message in its delivery (True) or leaves it to the handler
#: (an adapter member's ``take``: see :mod:`hub.node.virtual`).
Take = Callable[[dict[str, Any]], bool]


class RequestFailed(Exception):
    """A virtual member's request was answered with an ``error`` event."""

    def __init__(self, error: dict[str, Any]):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = str(error.get("code"))
        self.error = error


class Closed(Protocol):
    """A one-way flag an adapter may wait for."""

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


class AdapterMember(Protocol):
    """An adapter's agent inside the node (:meth:`AgentHosting.attach`): its
    requests go through the same dispatcher as a WebSocket agent's, what
    reaches it goes to the handler it was attached with."""

    @property
    def agent_id(self) -> str: ...

    @property
    def record(self) -> AgentRecord:
        """What it registered (capabilities, metadata)."""
        ...

    @property
    def closing(self) -> bool: ...

    @property
    def cleaned_up(self) -> Closed:
        """Set once the hub closed it (its id replaced elsewhere) and cleaned up after it."""
        ...

    async def request(self, msg: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Send ``msg`` and return its reply; an ``error`` reply raises :class:`RequestFailed`."""
        ...

    async def send(self, msg: dict[str, Any]) -> None:
        """Send ``msg`` without waiting for a reply (errors reach the handler)."""
        ...

    async def join(self, space: str) -> dict[str, Any]: ...

    async def leave(self, space: str) -> dict[str, Any]: ...

    async def publish(
        self,
        space: str,
        data: dict[str, Any],
        *,
        to: str | list[str] | None = None,
        echo: bool = True,
    ) -> dict[str, Any]:
        """Publish; the ``space.published`` reply (or the event as delivered)."""
        ...

    async def aclose(self) -> None:
        """Leave every space and let go of the agent id. Idempotent."""
        ...


class HostSettings(Protocol):
    """The hub-wide settings adapters read. An adapter's own configuration
    (its ``[[bridges.*]]`` table, its spaces' flags) reaches it through its
    constructor instead."""

    node_id: str
    bridge_timeout: float
    heartbeat_interval: float
    history_ttl: float
    max_frame_bytes: int
    #: ``data.text`` longer than this (bytes) is streamed, in chunks of ``stream_chunk``.
    stream_threshold: int
    stream_chunk: int
    #: Most of a shared per-node bound one caller may hold (a fraction of it).
    caller_share: float
    #: Faces open to callers without a token while auth is on.
    agora_http_public: bool
    a2a_cards_public: bool
    envelope_http_public: bool


#: The agent id of a caller without credentials on a face made public.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls an HTTP gateway, as an agent (a :class:`~hub.core.authz.Principal`):
    the id its bearer token names (or, with auth off, the id it gave or one
    made up; on a public face without a token, :data:`ANONYMOUS`) and what the
    token's claims allow, for :attr:`HttpFaces.policy` to judge.

    ``key`` is what per-caller shares of a node's bounds count against: the
    authenticated agent id, else the client's address (``ip:…``) — an id a
    caller names itself proves nothing. ``anonymous``: no credentials."""

    agent_id: str
    grant: Grant = Grant.unrestricted
    key: str = ""
    anonymous: bool = False

    @property
    def share_key(self) -> str:
        return self.key or self.agent_id


class AgentHosting(Protocol):
    """Where an adapter's agents come from, and whether the node can act."""

    @property
    def ready(self) -> bool:
        """The node is ready (``/readyz``): its cluster link is up and settled.
        Joins and publishes made while it is not fail with ``UNAVAILABLE``."""
        ...

    async def attach(
        self,
        agent_id: str,
        handler: MessageHandler | None = None,
        *,
        shared: bool = False,
        type: str | None = None,
        capabilities: tuple[str, ...] = (),
        metadata: dict[str, Any] | None = None,
        take: Take | None = None,
        own_events: bool = False,
    ) -> AdapterMember:
        """A virtual member for the adapter (an :class:`AdapterMember`).

        ``shared``: every node hosts one under the same id (inbound bridges);
        the id is reserved (connections with it are refused), not claimed.
        Otherwise the id is claimed cluster-wide like a connection's and
        :class:`AgentIdTaken` is raised while a live holder has it.
        ``take``: tried on each message in its delivery, before ``handler``
        (answers for waiting callers; see :mod:`hub.node.virtual`).
        ``own_events``: the handler also gets the member's own events (a shared
        member's copy on another node published them); else they are dropped.
        """
        ...


class HttpFaces(Protocol):
    """The HTTP port, and who calls it as judged by the hub's one policy."""

    def mount(
        self,
        routes: Iterable[web.AbstractRouteDef],
        *,
        on_shutdown: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve ``routes`` on the HTTP port. ``on_shutdown`` runs when the
        port closes (before the adapters), so waiting callers get an answer."""
        ...

    def public_url(self, request: web.Request) -> str:
        """``scheme://host[:port]`` as the client reached ``request``, believing
        ``X-Forwarded-Proto``/``-Host`` only from ``trusted_proxies``."""
        ...

    async def caller(
        self, request: web.Request, *, public: bool = False, prefix: str = "caller"
    ) -> Caller:
        """The caller of an HTTP request. With auth on, its ``Authorization:
        Bearer`` token (tokens file or JWT, as agents use) names it; no token,
        or one that proves nothing, raises :class:`AuthError` — except that
        a face the operator made ``public`` takes a request without a token
        as :data:`ANONYMOUS`. With auth off: ``?agent_id=`` (when valid), else
        ``{prefix}-{random hex}``. An id of the hub's own agents (``mcp``, a
        bridge's virtual agents) raises :class:`~hub.errors.AgentIdTaken`."""
        ...

    @property
    def auth_required(self) -> bool:
        """Whether HTTP callers must present a bearer token (auth is on)."""
        ...

    @property
    def policy(self) -> SpacePolicy:
        """The one policy: may a caller read (:attr:`Act.READ`: join, read,
        discover) or publish (:attr:`Act.PUBLISH`) in a space."""
        ...

    def signer(self, did: str) -> Caller | None:
        """The identity the operator mapped an envelope signer's did:key to
        (``[[signers]]``), or None."""
        ...


class SpaceReads(Protocol):
    """Cluster-wide reads of spaces and agents, without being a member."""

    async def agents(
        self, caller: Caller, *, capability: str | None, space: str | None, limit: int
    ) -> tuple[list[AgentRecord], bool]:
        """The agent directory as ``caller`` may see it (``agent.list``'s
        discovery rule), and whether there are more. Raises
        :class:`BackplaneUnavailable`, ``ValueError`` for a bad filter."""
        ...

    async def space_exists(self, space: str) -> bool:
        """Declared, provided by the hub, or with members somewhere in the cluster."""
        ...

    async def is_member(self, space: str, agent_id: str) -> bool:
        """Is ``agent_id`` a member of ``space``, cluster-wide (one read)?
        Raises :class:`BackplaneUnavailable`."""
        ...

    async def member_records(self, space: str, limit: int) -> list[AgentRecord]:
        """The first ``limit`` members of ``space`` (join order), cluster-wide,
        with what each registered; members whose record is gone are left out.
        Raises :class:`BackplaneUnavailable`."""
        ...

    async def history(self, space: str, limit: int, viewer: str) -> list[dict[str, Any]]:
        """The latest ``limit`` events of ``space`` that ``viewer`` would have
        received (addressed ones only when it is a recipient), oldest first, at
        most about ``max_frame_bytes`` of them — read without being a member. A
        stream that ended with a done is one whole ``space.event``; cancelled,
        unfinished and truncated streams are left out.
        Raises :class:`BackplaneUnavailable`."""
        ...


class SystemSpaces(Protocol):
    """Hub-generated events in the system spaces an adapter provides."""

    async def publish_system(
        self, space: str, data: dict[str, Any], *, to: tuple[str, ...] | None = None
    ) -> None:
        """Publish a hub-generated event into ``space``, a system space this
        adapter provides (:attr:`Adapter.system_spaces`), to all its members
        or only to ``to``. Raises :class:`BackplaneUnavailable`."""
        ...

    def local_members(self, space: str) -> int:
        """Members of ``space`` connected to this node (virtual ones included),
        known at once — a join elsewhere reaches the adapter as ``space.members``."""
        ...

    def show_readers(
        self, space: str, event: dict[str, Any], readers_of: str | None, *, relay: str
    ) -> int:
        """Hand ``event`` (a system event of ``space`` that reached the
        adapter's member ``relay``) to this node's other members of ``space``
        who may read ``readers_of`` (when None: those whose credentials do
        not limit the spaces they may join); how many got it.
        What a system space shows each observer, when that depends on the
        observer (``mcp.calls``), is decided here on every node, where each
        observer's credentials are."""
        ...


class AdapterHost(Protocol):
    """What :meth:`Adapter.start` is handed: the node's parts, each a small
    protocol, for the adapter to pass on — every part of an adapter takes only
    the ones it calls (a bridge's claim :class:`AgentHosting`, a gateway's
    callers :class:`HttpFaces`…), never this bundle."""

    @property
    def settings(self) -> HostSettings: ...

    @property
    def hosting(self) -> AgentHosting:
        """Virtual members for the adapter, and whether the node is ready."""
        ...

    @property
    def http(self) -> HttpFaces:
        """Routes on the HTTP port, its callers and the hub's one policy."""
        ...

    @property
    def spaces(self) -> SpaceReads:
        """Cluster-wide reads of spaces and agents."""
        ...

    @property
    def system(self) -> SystemSpaces:
        """Hub-generated events in the adapter's system spaces."""
        ...

    @property
    def kv(self) -> KeyValueStore:
        """Small shared state with expiry: in memory on one node, in Redis in a cluster."""
        ...

    @property
    def identity(self) -> HubIdentity:
        """The hub's own Ed25519 identity (hub-signed envelopes, ``/identity``)."""
        ...

    @property
    def envelopes(self) -> EnvelopeCheck:
        """Signed-envelope verification rules and the cluster-wide replay cache."""
        ...


class Adapter(Protocol):
    """A bridge hosted by the node: started after the node, closed before it."""

    #: System spaces (``mcp.calls``…) that exist while this adapter is hosted:
    #: agents may join them to observe, never publish.
    system_spaces: tuple[str, ...]

    async def start(self, host: AdapterHost) -> None: ...

    async def aclose(self) -> None: ...
