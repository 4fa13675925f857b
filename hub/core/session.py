"""Per-connection protocol state machine, Sans-I/O.

A :class:`Session` is fed inbound frames (``receive``) and the clock
(``check_liveness``, ``expire_streams``) and answers with *actions*: replies
to send, requests for the node to carry out, or a close. It never touches a
socket, the backplane or the real clock, so it is tested by feeding literal
frames (``tests/unit/core/test_session.py``).

What the session decides on its own: decoding and validation, rate limiting
(one message bucket; the later deltas of open streams are charged to a stream
budget of their own, see :mod:`hub.core.publisher_streams`),
liveness, heartbeat replies, identity checks (``agent.register`` id,
``data.from``), membership and read-only rules for publishing, authorization
(the connection's :class:`~hub.core.authz.Grant`, asked of the hub's one
:class:`~hub.core.authz.SpacePolicy`), the expiry of the connection's token, and the
publisher's side of client streams (open/done/cancel bookkeeping, the per-agent
stream limit). Everything that needs cluster state (space existence,
capacity, member lists, sequencing) is an action for the node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hub.core.actions import (
    Action,
    Close,
    Denied,
    Join,
    Leave,
    ListAgents,
    ListMembers,
    ListSpaces,
    Publish,
    ReadHistory,
    ReceiverCancel,
    Refresh,
    Register,
    Reject,
    RequestId,
    Send,
    StreamCancel,
)
from hub.core.authz import Act, Grant, Refusal, SpacePolicy
from hub.core.publisher_streams import Heard, PublisherStreams, StreamBudget, Unheard
from hub.core.ratelimit import TokenBucket, Verdict
from protocol import codec
from protocol.envelope import has_own_sender
from protocol.errors import CloseCode, ErrorCode, ProtocolError
from protocol.messages import (
    DEFAULT_PAGE,
    AgentListRequest,
    AgentRefresh,
    AgentRegister,
    ClientCancel,
    ClientDelta,
    ClientDone,
    ClientHeartbeat,
    SpaceHistoryRequest,
    SpaceJoin,
    SpaceLeave,
    SpaceListRequest,
    SpaceMembersRequest,
    SpacePublish,
)
from protocol.names import SpaceKind, space_kind


class SessionState(Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class SessionLimits:
    heartbeat_timeout: float = 60.0
    rate_limit: float = 100.0
    rate_burst: float = 200.0
    rate_abuse_seconds: float = 5.0
    #: Later deltas and dones of the connection's open streams, per second and at once.
    stream_rate_limit: float = 1000.0
    stream_rate_burst: float = 2000.0
    max_streams: int = 16
    #: Spaces declared ``require_signed``: no client streams there (a stream
    #: cannot be verified as a whole before it is relayed).
    signed_spaces: frozenset[str] = frozenset()
    #: Who may read or publish where: the hub's one policy (:mod:`hub.core.authz`).
    policy: SpacePolicy = field(default_factory=SpacePolicy)
    #: A grant with ``expires_at`` expires this many seconds after it (``jwt_leeway``).
    token_leeway: float = 0.0
    #: After the "token expired" notice: seconds left to ``agent.refresh``.
    token_refresh_grace: float = 30.0


# ── the state machine ───────────────────────────────────────────────────────


class Session:
    """Protocol state of one agent connection."""

    __slots__ = (
        "_bucket",
        "_expiry_notice",
        "_limits",
        "_restricted",
        "_streams",
        "agent_id",
        "connection_id",
        "echoes",
        "grant",
        "last_seen",
        "messages_in",
        "spaces",
        "state",
    )

    def __init__(
        self,
        agent_id: str,
        connection_id: str,
        limits: SessionLimits,
        now: float,
        grant: Grant = Grant.unrestricted,
    ):
        self.agent_id = agent_id
        self.connection_id = connection_id
        self.state = SessionState.OPEN
        self.last_seen = now
        self.messages_in = 0
        self.spaces: set[str] = set()
        self._limits = limits
        self._bucket = TokenBucket(
            limits.rate_limit, limits.rate_burst, limits.rate_abuse_seconds, now
        )
        self._streams: PublisherStreams | None = None
        #: Per space, the last publish whose echo is on its way back through
        #: the backplane (its seq, or the future of it): a leave lets it
        #: arrive first (hub/handlers/publishing.py). None until a first one.
        self.echoes: dict[str, Any] | None = None
        #: What the connection's credentials allow; ``agent.refresh`` replaces it.
        self.grant = grant
        self._restricted = False
        #: When the "token expired" notice went out (wall clock), else None.
        self._expiry_notice: float | None = None
        self._set_grant(grant)

    # The one place state changes.
    def _transition(self, new: SessionState) -> None:
        if self.state is SessionState.CLOSED or self.state is new:
            return
        self.state = new

    # ── input ────────────────────────────────────────────────────────────

    def receive(self, frame: str | bytes, now: float) -> list[Action]:
        """Handle one inbound frame."""
        if self.state is not SessionState.OPEN:
            return []
        self.last_seen = now
        self.messages_in += 1
        try:
            msg = codec.decode(frame)
        except ProtocolError as exc:
            self._addressed_delta_refused(codec.addressed_delta_id(frame), now)
            return self._refused(exc, self._bucket.take(now))
        verdict = self._charge(msg, now)
        try:
            if verdict is not Verdict.ALLOW:
                raise ProtocolError(
                    ErrorCode.RATE_LIMITED, "rate limit exceeded: message not processed", msg.id
                )
            return self._dispatch(msg, now)
        except ProtocolError as exc:
            if type(msg) is ClientDelta and msg.to is not None:
                self._addressed_delta_refused(msg.event_id, now)
            return self._refused(exc, verdict)

    def _addressed_delta_refused(self, event_id: str | None, now: float) -> None:
        """A delta carrying ``to`` was refused: if it would have opened its
        stream, that stream opens only addressed (contract §5, §18)."""
        if event_id is not None:
            self._publisher_streams(now).refused_addressed(event_id)

    def _charge(self, msg: Any, now: float) -> Verdict:
        """A later delta or the done of an open stream takes from the stream
        budget; every other message, from the message bucket."""
        streams = self._streams
        if streams is not None and type(msg) in (ClientDelta, ClientDone):
            verdict = streams.charge(msg.event_id, now)
            if verdict is not None:
                return verdict
        return self._bucket.take(now)

    def _refused(self, exc: ProtocolError, verdict: Verdict) -> list[Action]:
        if verdict is not Verdict.ALLOW and exc.code is not ErrorCode.RATE_LIMITED:
            exc = ProtocolError(
                ErrorCode.RATE_LIMITED,
                "rate limit exceeded: message not processed",
                exc.request_id,
            )
        if verdict is Verdict.ABUSE:
            # The refused message is answered like any other, then the close.
            return [
                Reject(exc),
                self._close(
                    CloseCode.RATE_LIMIT_ABUSE,
                    ErrorCode.RATE_LIMITED,
                    "sustained rate limit abuse",
                ),
            ]
        return [Reject(exc)]

    def silent(self, now: float) -> bool:
        """Nothing received for longer than the heartbeat timeout."""
        return now - self.last_seen > self._limits.heartbeat_timeout

    def allowance(self, now: float) -> float:
        """Seconds left before silence closes this connection (0 when past)."""
        return max(0.0, self._limits.heartbeat_timeout - (now - self.last_seen))

    def check_liveness(self, now: float) -> Close | None:
        """Close when nothing arrived for ``heartbeat_timeout`` seconds."""
        if (
            self.state is SessionState.OPEN
            and now - self.last_seen > self._limits.heartbeat_timeout
        ):
            return self._close(
                CloseCode.HEARTBEAT_TIMEOUT,
                ErrorCode.HEARTBEAT_TIMEOUT,
                f"no message for {self._limits.heartbeat_timeout:g} s",
            )
        return None

    def expire_streams(self, now: float, idle_timeout: float) -> list[StreamCancel]:
        """Hub-cancel this publisher's streams idle for longer than ``idle_timeout``."""
        if not self._streams:
            return []
        return self._streams.expire(now, idle_timeout)

    def closed(self) -> list[StreamCancel]:
        """The connection is gone: returns hub cancels for its open streams."""
        self._transition(SessionState.CLOSED)
        if not self._streams:
            return []
        return self._streams.cancel_all("publisher_disconnected")

    def begin_close(self) -> None:
        self._transition(SessionState.CLOSING)

    # ── credentials ──────────────────────────────────────────────────────

    def _set_grant(self, grant: Grant) -> None:
        self.grant = grant
        # Unrestricted (no claims, no declared rules): the checks cost one test.
        self._restricted = self._limits.policy.restricts(grant)

    def refreshed(self, grant: Grant) -> None:
        """``agent.refresh`` succeeded: ``grant`` applies from now on and the
        expiry clock starts again from its ``expires_at``."""
        self._set_grant(grant)
        self._expiry_notice = None

    def check_expiry(self, wall: float) -> Reject | Close | None:
        """The token's expiry, checked against the wall clock (epoch seconds).

        Once ``expires_at`` + leeway has passed: a ``token expired`` notice,
        then, ``token_refresh_grace`` seconds after it without a refresh, the
        close (4401)."""
        expires_at = self.grant.expires_at
        if expires_at is None or self.state is not SessionState.OPEN:
            return None
        limits = self._limits
        if self._expiry_notice is None:
            if wall < expires_at + limits.token_leeway:
                return None
            self._expiry_notice = wall
            return Reject(
                ProtocolError(
                    ErrorCode.UNAUTHORIZED,
                    f"token expired: send agent.refresh with a new token within "
                    f"{limits.token_refresh_grace:g} s",
                )
            )
        if wall - self._expiry_notice >= limits.token_refresh_grace:
            return self._close(CloseCode.UNAUTHORIZED, ErrorCode.UNAUTHORIZED, "token expired")
        return None

    def check_read(self, space: str, rid: RequestId) -> None:
        """Reading ``space`` (its members, its history) needs the right to join it.

        Raises ``UNAUTHORIZED`` when the grant or the space's rules refuse."""
        if self._restricted and not self._limits.policy.may_read(self, space):
            raise ProtocolError(ErrorCode.UNAUTHORIZED, f"not allowed to read space {space!r}", rid)

    # ── notifications from the node ─────────────────────────────────────

    def on_joined(self, space: str) -> None:
        self.spaces.add(space)

    def on_left(self, space: str) -> None:
        self.spaces.discard(space)

    def stream_not_opened(self, stream_id: str) -> None:
        """The first delta of ``stream_id`` was answered UNAVAILABLE: not open."""
        if self._streams is not None:
            self._streams.not_opened(stream_id)

    def stream_refused(self, stream_id: str) -> None:
        """The node refused the first delta of ``stream_id`` (its ``to``)."""
        if self._streams is not None:
            self._streams.refused(stream_id)

    def receiver_stopped(self, stream_id: str, receiver: str, left: bool) -> Heard:
        """A receiver of ``stream_id`` cancelled it or ``left`` (contract §19)."""
        if self._streams is None:
            return Heard.NOT_OPEN
        return self._streams.receiver_stopped(stream_id, receiver, left)

    def receivers_gone(self, stream_id: str) -> Unheard | None:
        """Nobody receives ``stream_id`` any more: it ends (None: not open)."""
        if self._streams is None:
            return None
        return self._streams.receivers_gone(stream_id)

    def streams_in(self, space: str) -> list[str]:
        """Hub-side ids of this publisher's open streams in ``space``."""
        return self._streams.open_in(space) if self._streams else []

    @property
    def open_streams(self) -> int:
        return len(self._streams) if self._streams else 0

    # ── dispatch ─────────────────────────────────────────────────────────

    def _dispatch(self, msg: Any, now: float) -> list[Action]:
        rid = msg.id
        match msg:
            case ClientHeartbeat():
                return [Send(codec.heartbeat(rid))]
            case SpacePublish():
                return [self._publish(msg)]
            case ClientDelta():
                action = self._delta(msg, now)
                return [] if action is None else [action]
            case ClientDone():
                return [self._done(msg)]
            case ClientCancel():
                return [self._cancel(msg)]
            case SpaceJoin():
                space = self._checked_space(msg.space, rid)
                if self._restricted and not self._limits.policy.may_read(self, space):
                    raise ProtocolError(
                        ErrorCode.UNAUTHORIZED, f"not allowed to join space {space!r}", rid
                    )
                return [Join(space, rid, msg.since)]
            case SpaceLeave():
                space = self._checked_space(msg.space, rid)
                if space not in self.spaces:
                    raise ProtocolError(
                        ErrorCode.INVALID_REQUEST, f"not a member of space {space!r}", rid
                    )
                cancels = tuple(
                    self._streams.cancel_in(space, "publisher_left_space") if self._streams else ()
                )
                return [Leave(space, rid, cancels)]
            case SpaceListRequest():
                return [ListSpaces(rid)]
            case SpaceHistoryRequest():
                space = self._checked_space(msg.space, rid)
                self.check_read(space, rid)
                if space not in self.spaces:
                    return [Denied(space, rid)]
                return [ReadHistory(space, msg.limit, msg.before_seq, rid)]
            case SpaceMembersRequest():
                space = self._checked_space(msg.space, rid)
                self.check_read(space, rid)
                return [ListMembers(space, msg.cursor, msg.limit or DEFAULT_PAGE, rid)]
            case AgentListRequest():
                space = None if msg.space is None else self._checked_space(msg.space, rid)
                if space is not None:
                    self.check_read(space, rid)
                limit = msg.limit or DEFAULT_PAGE
                return [ListAgents(msg.capability, space, msg.cursor, limit, rid)]
            case AgentRegister():
                if msg.agent.id != self.agent_id:
                    raise ProtocolError(
                        ErrorCode.INVALID_REQUEST,
                        f"agent.id {msg.agent.id[:128]!r} differs from the connection's "
                        f"agent_id {self.agent_id!r}",
                        rid,
                    )
                return [Register(msg.agent, rid)]
            case AgentRefresh():
                return [Refresh(msg.token, rid)]
        raise ProtocolError(ErrorCode.INVALID_REQUEST, "unsupported message", rid)

    def _checked_space(self, space: str, rid: RequestId) -> str:
        self._checked_kind(space, rid)
        return space

    def _may_publish(
        self, space: str, data: dict[str, Any], rid: RequestId, envelope: bool = False
    ) -> Denied | None:
        """Common checks for a publish and for a stream's first delta.

        agentprotocol/0.1's ``from`` is its own (its sender object, checked
        against the signature where one is required): an envelope of it is
        exempt from the ``data.from`` rule. Any other ``from`` — in an
        agora/1.0 envelope too, which has none of its own — must be the
        publisher's id."""
        kind = self._checked_kind(space, rid)
        sender = data.get("from", self.agent_id)
        if sender != self.agent_id and not (envelope and has_own_sender(data)):
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST,
                f"data.from must be the connection's agent_id {self.agent_id!r}",
                rid,
            )
        if space not in self.spaces:
            # A space this agent may not even join is refused alike whether or
            # not it exists (no existence oracle, contract §18); one it may
            # join gets §4's "not a member" or "does not exist".
            if self._restricted and not self._limits.policy.may_read(self, space):
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED, f"not allowed to publish to space {space!r}", rid
                )
            return Denied(space, rid)
        if kind is SpaceKind.SYSTEM or self._restricted:
            refusal = self._limits.policy.refusal(self, Act.PUBLISH, space)
            if refusal is Refusal.SYSTEM_SPACE:
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED, f"system space {space!r} is read-only", rid
                )
            if refusal is not None:
                raise ProtocolError(
                    ErrorCode.UNAUTHORIZED, f"not allowed to publish to space {space!r}", rid
                )
        return None

    @staticmethod
    def _checked_kind(space: str, rid: RequestId) -> SpaceKind:
        try:
            return space_kind(space)
        except ProtocolError as exc:
            raise exc.with_request_id(rid) from None

    def _publish(self, msg: SpacePublish) -> Action:
        denied = self._may_publish(msg.space, msg.data, msg.id, envelope=True)
        if denied:
            return denied
        key = msg.idempotency_key
        if msg.to is None:
            return Publish(msg.space, msg.data, msg.echo, msg.id, idempotency_key=key)
        recipients = tuple(dict.fromkeys([msg.to] if isinstance(msg.to, str) else msg.to))
        return Publish(msg.space, msg.data, msg.echo, msg.id, recipients, msg.to, key)

    # ── publisher side of client streams (hub/core/publisher_streams.py) ───────────

    def _delta(self, msg: ClientDelta, now: float) -> Action | None:
        return self._publisher_streams(now).delta(msg, now, self._may_open_stream)

    def _publisher_streams(self, now: float) -> PublisherStreams:
        if self._streams is None:
            limits = self._limits
            budget = StreamBudget(
                limits.stream_rate_limit, limits.stream_rate_burst, limits.rate_abuse_seconds
            )
            self._streams = PublisherStreams(self.agent_id, limits.max_streams, budget, now)
        return self._streams

    def _may_open_stream(self, space: str, data: dict[str, Any], rid: RequestId) -> Denied | None:
        denied = self._may_publish(space, data, rid)
        if denied is None and space in self._limits.signed_spaces:
            raise ProtocolError(
                ErrorCode.UNAUTHORIZED,
                f"space {space!r} accepts only signed envelopes, not streams",
                rid,
            )
        return denied

    def _done(self, msg: ClientDone) -> Action:
        if self._streams is None:
            raise ProtocolError(
                ErrorCode.INVALID_REQUEST, f"no open stream {msg.event_id[:128]!r}", msg.id
            )
        return self._streams.done(msg)

    def _cancel(self, msg: ClientCancel) -> Action:
        own = self._streams.cancel(msg) if self._streams is not None else None
        if own is not None:
            return own
        return ReceiverCancel(self._checked_space(msg.space, msg.id), msg.event_id, msg.id)

    def _close(self, code: CloseCode, error: ErrorCode, reason: str) -> Close:
        self._transition(SessionState.CLOSING)
        return Close(code, error, reason)
