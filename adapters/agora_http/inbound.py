"""HTTP Agora, inbound: an HTTP Agora client talks to the agents of a space.

For every space declared with ``agora_http = true`` the HTTP port serves::

    POST   /agora/{space}                      a request (multiround: true opens a conversation)
    POST   /agora/{space}/conversations/{id}   a follow-up in a conversation
    DELETE /agora/{space}/conversations/{id}   ends the conversation
    GET    /agora/{space}/wellknown            the supported Protocol Documents

A request becomes a ``space.event`` from the shared virtual agent
``agora-http`` (one copy per node, so any node behind a load balancer can
serve it); the first event in the space whose ``data.in_reply_to`` is that
event's ``event_id`` is the answer, a streamed one assembled first. Replies
reach every node's copy; only the node holding the HTTP request answers it.

Who may call: with auth on, a caller with a bearer token (``Authorization:
Bearer``, tokens file or JWT, 401 without) unless the operator sets
``agora_http_public``; its claims and the space's rules (the hub's one
policy) then decide — a space it may not read answers exactly as one that
is not served (404), one it may read but not publish to answers 403. The
request event carries ``caller`` (the token's agent id) when auth is on.

Bounded: request bodies (413), their nesting (400, as deep as a frame may
carry once published), requests waiting for an answer per node (503 with
``Retry-After``; 429 for a caller holding its ``caller_share`` of them; a
request takes a waiting slot only once it has been read whole and found
valid, so idle uploads hold none), the assembled answer, and the wait itself
(``bridge_timeout`` → ``{"status": "failure", "error": "Timeout"}``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from aiohttp import web

from adapters.agora_http.conversations import Conversation, InboundConversations
from adapters.agora_http.protocols import SpaceProtocols
from adapters.kit.asking import AskCancelled, Asker, AskTimeout
from adapters.kit.joined import JoiningMember, NodeNotReady
from adapters.kit.replies import Assembled, ReplyWaiters
from adapters.kit.shares import ShareExceeded, Shares
from hub.adapter_host import (
    AdapterHost,
    AdapterMember,
    AgentIdTaken,
    AuthError,
    BackplaneUnavailable,
    BodyRefused,
    Caller,
    HttpFaces,
    RequestFailed,
    SlotsFull,
    parse_json,
    read_body,
    until_client_gone,
)
from protocol.agora_http import (
    DEFAULT_LIMITS,
    TIMEOUT,
    UNSUPPORTED_PROTOCOL,
    AgoraHttpError,
    AgoraLimits,
    AgoraRequest,
    check_conversation_id,
    check_follow_up,
    failure,
    interpret_reply,
    parse_request,
    success,
)

#: The shared virtual agent HTTP requests come from.
INBOUND_AGENT = "agora-http"

#: Room for the frame around an event's ``data``: type, space, ids, from,
#: timestamp, ``to``, ``seq``.
FRAME_ROOM = 1024

log = structlog.get_logger("adapters.agora_http")


@dataclass(frozen=True, slots=True)
class InboundOptions:
    #: Idle time after which a conversation expires (each follow-up extends it).
    conversation_ttl: float = 300.0
    #: Requests of this node waiting for an answer at once; more → 503.
    max_waiting: int = 256
    #: Largest answer assembled from a streamed reply.
    max_reply_bytes: int = 8 * 1024 * 1024
    #: Members whose registered Protocol Documents are read per space.
    member_scan_limit: int = 200
    limits: AgoraLimits = DEFAULT_LIMITS


class AgoraHttpInbound:
    """The inbound adapter: routes on the HTTP port, the ``agora-http`` member."""

    system_spaces: tuple[str, ...] = ()

    def __init__(
        self,
        spaces: Mapping[str, Mapping[str, str]],
        options: InboundOptions | None = None,
    ):
        """``spaces``: each opted-in space → its declared documents, by hash."""
        self.spaces = {space: dict(docs) for space, docs in spaces.items()}
        self.options = options or InboundOptions()
        self.waiters = ReplyWaiters(self.options.max_reply_bytes, own=INBOUND_AGENT)
        self.joining = JoiningMember(
            INBOUND_AGENT, self.spaces, capabilities=("agora-http",), label="agora-http"
        )
        self.asker = Asker(self.joining, self.waiters)
        self.conversations: InboundConversations | None = None
        self.protocols: SpaceProtocols | None = None
        self.timeout = 30.0
        self.slots = Shares(self.options.max_waiting, 1.0, "requests waiting")
        #: The HTTP port's callers and policy (set at start).
        self._http: HttpFaces | None = None
        self._public = False
        #: What one frame of the hub's may hold (set at start; contract defaults).
        self._max_frame_bytes = 1024 * 1024
        self._stream_threshold = 65536
        self._stream_chunk = 16384

    # ── lifecycle ────────────────────────────────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        self._http, self._public = host.http, host.settings.agora_http_public
        self._max_frame_bytes = host.settings.max_frame_bytes
        self._stream_threshold = host.settings.stream_threshold
        self._stream_chunk = host.settings.stream_chunk
        share = host.settings.caller_share
        self.slots = Shares(self.options.max_waiting, share, "requests waiting")
        if not self.spaces:
            # No space is served, but /agora/* still answers as the spec does:
            # a JSON failure, not the HTTP server's plain-text 404.
            host.http.mount(self._routes())
            return
        s = host.settings
        self.timeout = s.bridge_timeout
        self.conversations = InboundConversations(host.kv, self.options.conversation_ttl)
        self.protocols = SpaceProtocols(
            self.spaces,
            host.spaces.member_records,
            scan_limit=self.options.member_scan_limit,
            exclude=(INBOUND_AGENT,),
        )
        # What cannot be joined now is joined in the background, and by requests.
        retry = min(1.0, s.heartbeat_interval)
        await self.joining.start(host.hosting, self._on_message, retry=retry)
        host.http.mount(self._routes(), on_shutdown=self._on_shutdown)

    def _routes(self) -> list[web.RouteDef]:
        return [
            web.post("/agora/{space}", self._post),
            web.post("/agora/{space}/conversations/{id}", self._post),
            web.delete("/agora/{space}/conversations/{id}", self._delete),
            web.get("/agora/{space}/wellknown", self._wellknown),
            web.route("*", "/agora{tail:.*}", self._no_route),  # last: what the others miss
        ]

    async def aclose(self) -> None:
        await self.asker.aclose()
        await self.joining.aclose()

    @property
    def member(self) -> AdapterMember | None:
        """The shared ``agora-http`` member (on this node)."""
        return self.joining.member

    async def _on_shutdown(self) -> None:
        """The HTTP port is closing: waiting requests are answered 503 now rather
        than cut when the server stops waiting for them."""
        self.waiters.fail_all(AgoraHttpError.transport(503, "Hub shutting down: try again"))

    async def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") == "space.members" and self.protocols is not None:
            self.protocols.invalidate(str(msg.get("space")))
            return
        self.waiters.feed(msg)

    # ── routes ───────────────────────────────────────────────────────────

    async def _caller(self, request: web.Request, space: str) -> Caller | web.Response:
        """Who calls, or the answer refusing it: 401 without a usable token, a
        space it may not read answered as one not served (404)."""
        assert self._http is not None
        try:
            caller = await self._http.caller(request, public=self._public, prefix="agora-caller")
        except AuthError:
            response = _respond(401, failure("Unauthorized: a valid bearer token is required"))
            response.headers["WWW-Authenticate"] = 'Bearer realm="agora-hub"'
            return response
        except AgentIdTaken as exc:
            return _respond(409, failure(str(exc)))
        if space not in self.spaces or not self._http.policy.may_read(caller, space):
            return _unknown_space(space)
        return caller

    async def _post(self, request: web.Request) -> web.Response:
        space = request.match_info["space"]
        caller = await self._caller(request, space)
        if isinstance(caller, web.Response):
            return caller
        assert self._http is not None
        if not self._http.policy.may_publish(caller, space):
            return _respond(403, failure(f"Not allowed to send to the space {space!r}"))
        try:
            agora = await self._read(request)
            with self.slots.hold(caller.share_key):
                conversation_id = request.match_info.get("id")
                gone = until_client_gone(request)
                answer = await self._exchange(agora, space, conversation_id, caller, gone)
                return _respond(*answer)
        except SlotsFull:
            return _respond(503, failure("Too many requests waiting: try again"), retry=True)
        except ShareExceeded as exc:
            return _respond(429, failure(f"{exc}"), retry=True)
        except AgoraHttpError as exc:
            return _respond(*exc.response(), retry=exc.http_status in (429, 503))
        except BackplaneUnavailable:
            return _respond(503, failure("Hub unavailable: try again"), retry=True)

    async def _delete(self, request: web.Request) -> web.Response:
        space = request.match_info["space"]
        caller = await self._caller(request, space)
        if isinstance(caller, web.Response):
            return caller
        assert self.conversations is not None and self._http is not None
        if not self._http.policy.may_publish(caller, space):
            return _respond(403, failure(f"Not allowed to send to the space {space!r}"))
        try:
            conversation_id = check_conversation_id(request.match_info["id"])
            await self.conversations.end(space, conversation_id)
        except AgoraHttpError as exc:
            return _respond(*exc.response())
        except BackplaneUnavailable:
            return _respond(503, failure("Hub unavailable: try again"), retry=True)
        await self._announce_end(space, conversation_id)
        return _respond(200, {"status": "success"})

    async def _wellknown(self, request: web.Request) -> web.Response:
        space = request.match_info["space"]
        caller = await self._caller(request, space)
        if isinstance(caller, web.Response):
            return caller
        assert self.protocols is not None
        try:
            documents = await self.protocols.documents(space)
        except BackplaneUnavailable:
            return _respond(503, failure("Hub unavailable: try again"), retry=True)
        return _respond(200, {digest: [text] for digest, text in sorted(documents.items())})

    async def _no_route(self, request: web.Request) -> web.Response:
        """Anything else under ``/agora``: a JSON failure like every answer here —
        405 (with ``Allow``) for a route of a served space asked with another
        method, else 404."""
        parts = request.match_info["tail"].strip("/").split("/")
        space = parts[0]
        if not space:
            return _respond(404, failure("No such HTTP Agora route"))
        caller = await self._caller(request, space)
        if isinstance(caller, web.Response):
            return caller
        allowed = _allowed_methods(parts)
        if allowed is None:
            return _respond(404, failure("No such HTTP Agora route"))
        response = _respond(405, failure(f"Method {request.method} not allowed here"))
        response.headers["Allow"] = allowed
        return response

    # ── one request ──────────────────────────────────────────────────────

    async def _read(self, request: web.Request) -> AgoraRequest:
        """The whole request, read and checked: 413, or 400 for malformed JSON, for
        nesting deeper than the event it becomes may carry, or for bad fields."""
        limits = self.options.limits
        try:
            obj = parse_json(await read_body(request, limits.max_request_bytes), nesting=1)
        except BodyRefused as exc:
            raise AgoraHttpError.transport(exc.status, exc.message) from None
        agora = parse_request(obj, limits)
        self._check_fits(agora)
        return agora

    def _check_fits(self, agora: AgoraRequest) -> None:
        """413 for a request whose event no member could receive: the largest
        frame the hub sends of it must fit in ``max_frame_bytes``. A string
        body travels twice (``body`` and ``text``); a long ``text`` is streamed
        (contract §5) and every other field — ``body`` too — rides whole in the
        first delta, beside the first chunk of ``text``."""
        data = agora.event_data(None)
        text = data.pop("text", None)
        largest = len(orjson.dumps(data)) + FRAME_ROOM
        if isinstance(text, str):
            raw = text.encode()
            if len(raw) > self._stream_threshold:  # streamed: its first chunk rides along
                text = raw[: self._stream_chunk].decode(errors="ignore")
            largest += len(orjson.dumps(text))  # as written: escapes take up to 6 bytes
        if largest > self._max_frame_bytes:
            raise AgoraHttpError.transport(
                413,
                f"request too large for one hub frame ({self._max_frame_bytes} bytes): "
                "a string body travels as both body and text",
            )

    async def _exchange(
        self,
        agora: AgoraRequest,
        space: str,
        conversation_id: str | None,
        caller: Caller,
        gone: asyncio.Future[None],
    ) -> tuple[int, dict[str, Any]]:
        assert self.conversations is not None and self.protocols is not None
        opened = conversation = None
        if conversation_id is None:
            if not await self.protocols.supports(space, agora):
                raise AgoraHttpError.failure(UNSUPPORTED_PROTOCOL)
            if agora.multiround:
                opened = conversation = await self.conversations.open(space, agora.protocol_hash)
        else:
            check_conversation_id(conversation_id)
            conversation = await self.conversations.resume(space, conversation_id)
            check_follow_up(agora, conversation.protocol_hash)
            agora = dataclasses.replace(
                agora, protocol_hash=conversation.protocol_hash, multiround=True
            )
        data = agora.event_data(conversation and conversation.id)
        if not caller.anonymous:
            data["caller"] = caller.agent_id
        try:
            answer = await self._ask(space, data, gone)
        except BaseException:
            if opened is not None:
                await _quietly(self.conversations.discard(opened))
            raise
        if not answer.ok and opened is not None:
            await _quietly(self.conversations.discard(opened))
            conversation = None
        return 200, _reply(answer, conversation)

    async def _ask(self, space: str, data: dict[str, Any], gone: asyncio.Future[None]) -> Any:
        """Publish the request event and wait for its answer; a caller that goes
        away stops the answering agent (:mod:`adapters.kit.asking`)."""
        try:
            _, whole = await self.asker.ask(space, data, timeout=self.timeout, gone=gone)
        except RequestFailed as exc:
            raise _refused(exc) from None
        except (TimeoutError, NodeNotReady):
            raise AgoraHttpError.transport(503, "Hub unavailable: try again") from None
        except AskTimeout:
            raise AgoraHttpError.failure(TIMEOUT) from None
        except AskCancelled:
            raise AgoraHttpError.transport(499, "Client gone") from None
        return _interpret(whole)

    async def _announce_end(self, space: str, conversation_id: str) -> None:
        """Tell the space a conversation ended, so agents can drop its state."""
        assert self.member is not None
        data = {"via": INBOUND_AGENT, "conversation_id": conversation_id, "end_conversation": True}
        try:
            await self.member.publish(space, data, echo=False)
        except (RequestFailed, TimeoutError) as exc:
            log.info("conversation end not announced", space=space, reason=str(exc))


# ── helpers ──────────────────────────────────────────────────────────────


def _interpret(whole: Assembled) -> Any:
    """The answering event's data → a :class:`~protocol.agora_http.Reply`."""
    if whole.failure is not None:
        return interpret_reply({"status": "failure", "error": f"Reply lost: {whole.failure}"})
    data = whole.data
    if data.get("status") in ("failure", "error"):
        # The agora-protocol library's own habit: ``{status: "error", message}``.
        error = data.get("error")
        if error is None or error == "":
            error = data.get("message")
        return interpret_reply({"status": "failure", "error": error})
    body = data["body"] if "body" in data else data.get("text")
    return interpret_reply({"status": "success", "body": body})


def _reply(answer: Any, conversation: Conversation | None) -> dict[str, Any]:
    if not answer.ok:
        return failure(answer.error)
    if conversation is None:
        return success(answer.body)
    return success(
        answer.body,
        conversation_id=conversation.id,
        conversation_expires=conversation.expires_at,
    )


def _refused(exc: RequestFailed) -> AgoraHttpError:
    """The hub refused the bridge's own request: a transport-level answer."""
    if exc.code == "RATE_LIMITED":
        return AgoraHttpError.transport(429, "Rate limited: try again")
    if exc.code == "UNAVAILABLE":
        return AgoraHttpError.transport(503, "Hub unavailable: try again")
    if exc.code == "INVALID_REQUEST":  # what the client sent cannot be an event
        message = str(exc.error.get("message", ""))[:200]
        return AgoraHttpError.transport(400, f"The request cannot be published: {message}")
    log.warning("agora-http request refused by the hub", code=exc.code, reason=str(exc))
    return AgoraHttpError.transport(503, f"Space refused the request ({exc.code})")


async def _quietly(coro: Any) -> None:
    try:
        await coro
    except BackplaneUnavailable:
        pass  # the key expires by itself


def _allowed_methods(parts: list[str]) -> str | None:
    """The methods of the route ``/agora/{parts…}`` names, None when none does."""
    if len(parts) == 1:
        return "POST"
    if len(parts) == 2 and parts[1] == "wellknown":
        return "GET"
    if len(parts) == 3 and parts[1] == "conversations" and parts[2]:
        return "DELETE, POST"
    return None


def _unknown_space(space: str) -> web.Response:
    return _respond(404, failure(f"No HTTP Agora space {space[:128]!r}"))


def _respond(status: int, body: dict[str, Any], *, retry: bool = False) -> web.Response:
    headers = {"Retry-After": "1"} if retry else None
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )
