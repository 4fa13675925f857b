"""What the server API and the status page do, through the hub's own paths.

The API's requests are carried out by the same handlers as an agent's: each
one is an action (``Publish``, ``ListSpaces``, ``ListMembers``,
``ListAgents``) run by the node's dispatcher for an :class:`ApiCaller` — a
peer without a socket that keeps the one reply it gets. So an API publish
takes the space's next ``seq``, is verified when it is a signed envelope,
checked against ``to``, streamed when its text is long, recorded in history
and fanned out cluster-wide exactly like an agent's, and a refusal is the
same refusal an agent would get.

What differs: the API is not a member of the spaces it publishes to (it
needs no ``space.join``; the space must exist), its events come ``from``
``api`` or a service name declared in ``api_services`` (ids no agent may
connect with), and its publishes are rate limited per sender per node with
the connections' ``rate_limit`` / ``rate_burst``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import orjson

from hub.cluster.nodestats import NodeStatsStore
from hub.cluster.presence import AgentClaims, AgentRecord
from hub.config.settings import Settings
from hub.core.actions import Action, ListAgents, ListMembers, ListSpaces, Publish
from hub.core.authz import Act, Grant, Refusal, SpacePolicy
from hub.core.frames import OutFrame
from hub.core.peer import CleanedUp, PeerKind
from hub.core.ratelimit import TokenBucket, Verdict
from hub.ops.api.errors import ApiError, from_error_frame
from hub.ops.api.stats import parse_documents
from protocol import codec
from protocol.envelope import is_envelope
from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.messages import DEFAULT_PAGE, AgentListRequest, SpaceMembersRequest, SpacePublish
from protocol.names import SpaceKind, is_valid_agent_id, space_kind

#: ``from`` of the API's events when no service is named.
API_SENDER = "api"
#: Longest disconnect reason kept (the close frame itself carries at most 120 bytes).
MAX_REASON = 200
#: Connection ids of the hub's own (virtual) members start with this (Node.attach).
VIRTUAL_PREFIX = "vm-"

Run = Callable[[Any, Action], Awaitable[None]]


class ApiCaller:
    """The API as a peer: no socket, no session; keeps the reply it is sent.
    To the hub's policy it is the operator (a trusted grant)."""

    session = None
    record = None
    kind = PeerKind.CALLER
    preframed = False
    grant = Grant.hub

    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        self.connection_id = f"api-{agent_id}"
        self.cleaned_up = CleanedUp()
        self.reply: bytes | None = None

    @property
    def closing(self) -> bool:
        return False

    def push(self, frame: OutFrame) -> bool:
        self.reply = frame.payload
        return True

    def send_frame(self, payload: bytes) -> bool:
        self.reply = payload
        return True

    def close_for(self, code: CloseCode, error: ErrorCode, reason: str) -> None:
        return None

    def abort(self) -> None:
        return None

    async def probe(self, timeout: float) -> bool:
        return True

    def backlog(self) -> int:
        return 0

    async def drain(self) -> None:
        return None

    def answer(self, expected: str) -> dict[str, Any]:
        """The reply of type ``expected``; an ``error`` reply raises ApiError."""
        msg = orjson.loads(self.reply) if self.reply is not None else None
        if not isinstance(msg, dict):
            raise ApiError(ErrorCode.INTERNAL_ERROR, "the hub gave no answer")
        if msg.get("type") == "error":
            raise from_error_frame(msg)
        if msg.get("type") != expected:
            raise ApiError(ErrorCode.INTERNAL_ERROR, f"unexpected answer {msg.get('type')!r}")
        return msg


class Operations:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        run: Run,
        claims: AgentClaims,
        space_exists: Callable[[str], Awaitable[bool]],
        node_stats: NodeStatsStore | None,
        *,
        disconnect_local: Callable[[str, str], bool],
        disconnect_remote: Callable[[AgentRecord, str], Awaitable[bool]],
        own_figures: Callable[[], dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        policy: SpacePolicy | None = None,
        reserved_ids: Collection[str] = (),
    ):
        self.settings = settings
        #: Ids of the hub's own members every node hosts (bridges, the API's
        #: senders): never a connection's, never claimed (the node's live set).
        self.reserved_ids = reserved_ids
        #: The hub's one policy; the operator is trusted, so only its rule
        #: for system spaces (read-only for everyone) refuses the API anything.
        self.policy = policy or SpacePolicy()
        self.node_id = node_id
        self.run = run
        self.claims = claims
        self.space_exists = space_exists
        self.node_stats = node_stats
        self.disconnect_local = disconnect_local
        self.disconnect_remote = disconnect_remote
        #: This node's figures read now (the reporter's ``live``): shown instead
        #: of its last report, so an agent that just connected is counted.
        self.own_figures = own_figures
        self.services = frozenset(settings.api_services)
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}

    # ── publishing ──────────────────────────────────────────────────────

    def sender(self, service: Any) -> str:
        """``api``, or a declared service name."""
        if service is None:
            return API_SENDER
        if not isinstance(service, str) or service not in self.services:
            shown = repr(service)[:80]
            raise ApiError(
                ErrorCode.INVALID_REQUEST,
                f"unknown service {shown}: declare it in the api_services setting",
            )
        return service

    async def publish(
        self, space: Any, data: Any, to: Any = None, service: Any = None
    ) -> dict[str, Any]:
        sender = self.sender(service)
        frame: dict[str, Any] = {"type": "space.publish", "space": space, "data": data}
        if to is not None:
            frame["to"] = to
        msg = _decode(frame)
        assert isinstance(msg, SpacePublish)
        _kind(msg.space)
        caller = ApiCaller(sender)
        refusal = self.policy.refusal(caller, Act.PUBLISH, msg.space)
        if refusal is Refusal.SYSTEM_SPACE:
            raise ApiError(ErrorCode.UNAUTHORIZED, f"system space {msg.space!r} is read-only")
        if refusal is not None:
            raise ApiError(ErrorCode.UNAUTHORIZED, f"not allowed to publish to {msg.space!r}")
        if msg.data.get("from", sender) != sender and not is_envelope(msg.data):
            raise ApiError(
                ErrorCode.INVALID_REQUEST, f"data.from must be the publishing service {sender!r}"
            )
        if not await self.space_exists(msg.space):
            raise ApiError(ErrorCode.SPACE_NOT_FOUND, f"space {msg.space!r} does not exist")
        self._charge(sender)
        if msg.to is None:
            action = Publish(msg.space, msg.data, False, None)
        else:
            recipients = tuple(dict.fromkeys([msg.to] if isinstance(msg.to, str) else msg.to))
            action = Publish(msg.space, msg.data, False, None, recipients, msg.to)
        await self.run(caller, action)
        reply = caller.answer("space.published")
        return {
            "space": reply["space"],
            "event_id": reply["event_id"],
            "seq": reply["seq"],
            "timestamp": reply["timestamp"],
            "from": sender,
        }

    def _charge(self, sender: str) -> None:
        now = self._clock()
        bucket = self._buckets.get(sender)
        if bucket is None:
            s = self.settings
            bucket = self._buckets[sender] = TokenBucket(s.rate_limit, s.rate_burst, math.inf, now)
        if bucket.take(now) is not Verdict.ALLOW:
            raise ApiError(
                ErrorCode.RATE_LIMITED,
                f"more than {self.settings.rate_limit:g} publishes/s from {sender!r}: "
                "not published",
            )

    # ── reading ─────────────────────────────────────────────────────────

    async def spaces(self) -> list[dict[str, Any]]:
        caller = ApiCaller(API_SENDER)
        await self.run(caller, ListSpaces(None))
        return list(caller.answer("space.list")["spaces"])

    async def members(self, space: str, cursor: Any, limit: Any) -> dict[str, Any]:
        msg = _decode(_without_none(type="space.members", space=space, cursor=cursor, limit=limit))
        assert isinstance(msg, SpaceMembersRequest)
        _kind(msg.space)
        caller = ApiCaller(API_SENDER)
        await self.run(caller, ListMembers(msg.space, msg.cursor, msg.limit or DEFAULT_PAGE, None))
        reply = caller.answer("space.members")
        return {k: reply[k] for k in ("space", "members", "member_count", "next_cursor")}

    async def agents(
        self, capability: Any = None, space: Any = None, cursor: Any = None, limit: Any = None
    ) -> dict[str, Any]:
        msg = _decode(
            _without_none(
                type="agent.list", capability=capability, space=space, cursor=cursor, limit=limit
            )
        )
        assert isinstance(msg, AgentListRequest)
        if msg.space is not None:
            _kind(msg.space)
        caller = ApiCaller(API_SENDER)
        action = ListAgents(msg.capability, msg.space, msg.cursor, msg.limit or DEFAULT_PAGE, None)
        await self.run(caller, action)
        reply = caller.answer("agent.list")
        return {"agents": reply["agents"], "next_cursor": reply["next_cursor"]}

    async def node_documents(self) -> list[dict[str, Any]]:
        """Every live node's latest figures (this node's only, in memory mode),
        this node's own read now, the others' as last reported."""
        if self.node_stats is None:
            return []
        docs = parse_documents(await self.node_stats.read_all())
        if self.own_figures is None:
            return docs
        own = self.own_figures()
        others = [doc for doc in docs if doc["id"] != self.node_id]
        return sorted([*others, own], key=lambda doc: str(doc["id"]))

    async def nodes(self) -> list[dict[str, Any]]:
        docs = await self.node_documents()
        return [{k: v for k, v in doc.items() if k != "space_rates"} for doc in docs]

    # ── disconnecting ───────────────────────────────────────────────────

    async def disconnect(self, agent_id: Any, reason: Any = None) -> dict[str, Any]:
        """Close an agent's connection wherever it is: ``error DISCONNECTED``, close 4403."""
        if reason is None:
            reason = ""
        if not isinstance(reason, str):
            raise ApiError(ErrorCode.INVALID_REQUEST, "reason must be a string")
        if len(reason) > MAX_REASON:
            raise ApiError(
                ErrorCode.INVALID_REQUEST, f"reason is longer than {MAX_REASON} characters"
            )
        if not is_valid_agent_id(agent_id):
            raise ApiError("AGENT_NOT_FOUND", f"no agent {str(agent_id)[:130]!r} is connected")
        if agent_id in self.reserved_ids:
            holder = None  # every node hosts it: no claim to look up
        else:
            holder = await self.claims.get_agent(agent_id)
            if holder is None:
                raise ApiError("AGENT_NOT_FOUND", f"no agent {agent_id!r} is connected")
        if holder is None or holder.connection_id.startswith(VIRTUAL_PREFIX):
            raise ApiError(
                "CONFLICT", f"agent {agent_id!r} is the hub's own (a bridge): it cannot be "
                "disconnected",
            )  # fmt: skip
        if holder.node_id == self.node_id:
            if not self.disconnect_local(holder.connection_id, reason):
                raise ApiError("AGENT_NOT_FOUND", f"agent {agent_id!r} is no longer connected")
        elif not await self.disconnect_remote(holder, reason):
            raise ApiError(
                ErrorCode.UNAVAILABLE,
                f"node {holder.node_id!r} of agent {agent_id!r} does not answer: "
                "its agents leave when the cluster reaps it",
            )
        return {
            "agent": agent_id,
            "node": holder.node_id,
            "connection_id": holder.connection_id,
            "reason": reason or None,
        }


def _decode(frame: dict[str, Any]) -> Any:
    """Validate a request as the hub validates an agent's message."""
    try:
        return codec.decode(orjson.dumps(frame).decode())
    except ProtocolError as exc:
        raise ApiError(exc.code, exc.message) from None
    except TypeError as exc:  # not JSON-serialisable: cannot come from a JSON body
        raise ApiError(ErrorCode.INVALID_REQUEST, str(exc)) from None


def _kind(space: str) -> SpaceKind:
    try:
        return space_kind(space)
    except ProtocolError as exc:
        raise ApiError(exc.code, exc.message) from None


def _without_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}
