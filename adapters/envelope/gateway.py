"""The HTTP gateway for signed envelopes (contract §9, "Inbound over HTTP").

Routes on the hub's HTTP port, served by every node:

* ``POST /envelope/{space}`` — an agora/1.0 envelope;
* ``POST /agentprotocol/{space}`` — an agentprotocol/0.1 message;
* ``POST /agentprotocol`` — the same, into the space ``agentprotocol_space``.

The body is read whole, parsed strictly (no duplicate keys, no NaN, bounded
size, and nesting that still fits in an event once published) and verified;
then it is published into the space by the shared virtual member
``envelope-gateway``, through the same path as any agent's publish (so it is
verified again there, its id recorded against replays cluster-wide, and
delivered ``verified: true``). Only such a complete, valid REQUEST takes one
of the ``envelope_max_waits`` slots: it waits for the first verified
envelope in the space that answers it and returns it verbatim (200), or a
hub-signed ERROR 408 when none comes in time; a HELLO is answered by the hub
(WELCOME / ``hello``); anything else is answered 202 once delivered.
Refusals are hub-signed error envelopes whose agora code is the HTTP status.

Who may post (contract §18), with auth on: the request's bearer token names
the caller (401 without one, unless ``envelope_http_public``), and the hub's
one policy judges it — a space it may not read is answered exactly like one
that does not exist (404), one it may not publish to is refused (401). The
envelope's signer must be one the operator maps to an identity
(``[[signers]] did, agent_id``) that may read the space (a HELLO) or publish
there (anything else), unless the space is declared ``envelope_public``.
(agora/1.0's codes double as HTTP statuses and have no 403: a caller or
signer that is known but not allowed gets 401.) With auth off, anyone may
post into any existing space. Waits are bounded per node and per caller
(``caller_share``: 429 beyond).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
import structlog
from aiohttp import web

from adapters.envelope.common import (
    CODE_FOR_HUB_ERROR,
    signed_error,
    too_large,
)
from adapters.envelope.waits import Waits
from adapters.kit.shares import ShareExceeded, Shares
from hub.adapter_host import (
    Act,
    AdapterHost,
    AdapterMember,
    AgentHosting,
    AgentIdTaken,
    AuthError,
    BackplaneUnavailable,
    BodyRefused,
    Caller,
    EnvelopeCheck,
    HttpFaces,
    HubIdentity,
    HubSettings,
    RequestFailed,
    SlotsFull,
    SpaceReads,
    check_json,
    client_gone,
    read_body,
)
from protocol.envelope import (
    AgoraErrorCode,
    EnvelopeError,
    Format,
    Reason,
    Verified,
    parse_json,
    timeout_envelope,
    verify,
    welcome_envelope,
)
from protocol.errors import ProtocolError
from protocol.names import SpaceKind, space_kind

GATEWAY_ID = "envelope-gateway"
#: Longest wait a request's own ``timeout`` may ask for (bridge_timeout if longer).
MAX_WAIT = 300.0
#: Members listed in the hub's answer to a HELLO.
HELLO_MEMBERS = 100
_REQUESTS = frozenset({"REQUEST", "request"})
_HELLOS = frozenset({"HELLO", "hello"})


class Refused(Exception):
    """An HTTP answer other than the happy path: a hub-signed error envelope."""

    def __init__(self, error: EnvelopeError | AgoraErrorCode, message: str | None = None):
        super().__init__(message or str(error))
        self.error = error
        self.message = message

    @property
    def status(self) -> int:
        error = self.error
        return int(error.agora_code if isinstance(error, EnvelopeError) else error)


class EnvelopeGateway:
    """Adapter: the inbound HTTP routes, and the member that publishes for them."""

    system_spaces: tuple[str, ...] = ()

    def __init__(self, settings: HubSettings, *, max_wait: float = MAX_WAIT):
        self.settings = settings
        self.body_limit = settings.max_frame_bytes
        self.waits = Waits(
            default_timeout=settings.bridge_timeout,
            max_timeout=max(max_wait, settings.bridge_timeout),
            max_waits=settings.envelope_max_waits,
        )
        #: Waits per caller (the table above bounds them all).
        self.waiting = Shares(settings.envelope_max_waits, settings.caller_share, "waits")
        #: Spaces taking envelopes from any valid signer.
        self.public_spaces = frozenset(d.id for d in settings.spaces if d.envelope_public)
        # The parts of the host it calls (set at start).
        self._hosting: AgentHosting | None = None
        self._http: HttpFaces | None = None
        self._spaces: SpaceReads | None = None
        self._identity: HubIdentity | None = None
        self._envelopes: EnvelopeCheck | None = None
        self.member: AdapterMember | None = None
        self._joined: set[str] = set()
        self._joining: dict[str, asyncio.Lock] = {}
        self._attaching = asyncio.Lock()
        self._closed = False
        self._log = structlog.get_logger("adapters.envelope").bind(adapter="gateway")

    async def start(self, host: AdapterHost) -> None:
        self._hosting, self._http, self._spaces = host.hosting, host.http, host.spaces
        self._identity, self._envelopes = host.identity, host.envelopes
        # The HTTP port closes before the adapters: waiting callers get their
        # answer (503) then, instead of being cut off.
        host.http.mount(
            [
                web.post("/envelope/{space}", self._post_agora),
                web.post("/agentprotocol/{space}", self._post_agentprotocol),
                web.post("/agentprotocol", self._post_agentprotocol),
            ],
            on_shutdown=self._stop_waiting,
        )

    async def _stop_waiting(self) -> None:
        self._closed = True
        self.waits.fail_all(Refused(AgoraErrorCode.UNAVAILABLE, "the hub is shutting down"))

    async def aclose(self) -> None:
        await self._stop_waiting()
        if self.member is not None:
            await self.member.aclose()

    # ── routes ──────────────────────────────────────────────────────────

    async def _post_agora(self, request: web.Request) -> web.Response:
        return await self._serve(request, Format.AGORA, request.match_info["space"])

    async def _post_agentprotocol(self, request: web.Request) -> web.Response:
        space = request.match_info.get("space") or self.settings.agentprotocol_space
        return await self._serve(request, Format.AGENTPROTOCOL, space)

    async def _serve(self, request: web.Request, fmt: Format, space: str | None) -> web.Response:
        assert self._identity is not None
        data: dict[str, Any] = {}
        try:
            if self._closed:
                raise Refused(AgoraErrorCode.UNAVAILABLE, "the hub is shutting down")
            caller = await self._caller(request)
            body = await _read(request, self.body_limit)
            data = parse_json(body, max_bytes=self.body_limit)
            _fits_in_an_event(body, data)
            return await self._handle(fmt, space, data, caller)
        except Refused as refusal:
            envelope = signed_error(
                self._identity.signing_key, fmt, refusal.error, refusal.message, about=data
            )
            return _json(refusal.status, envelope)
        except EnvelopeError as exc:
            envelope = signed_error(self._identity.signing_key, fmt, exc, about=data)
            return _json(int(exc.agora_code), envelope)
        except BackplaneUnavailable as exc:
            code = AgoraErrorCode.UNAVAILABLE
            envelope = signed_error(self._identity.signing_key, fmt, code, str(exc), about=data)
            return _json(int(code), envelope)
        except Exception as exc:
            if isinstance(exc, ConnectionResetError) and client_gone(request):
                raise  # nobody to answer: the HTTP port's middleware ends it quietly
            self._log.exception("envelope request failed", space=space)
            code = AgoraErrorCode.INTERNAL_ERROR
            envelope = signed_error(self._identity.signing_key, fmt, code, about=data)
            return _json(int(code), envelope)

    async def _caller(self, request: web.Request) -> Caller:
        assert self._http is not None
        public = self.settings.envelope_http_public
        try:
            return await self._http.caller(request, public=public, prefix="envelope-caller")
        except AuthError:
            raise Refused(AgoraErrorCode.UNAUTHORIZED, "a valid bearer token is required") from None
        except AgentIdTaken as exc:
            raise Refused(AgoraErrorCode.UNAUTHORIZED, str(exc)) from None

    async def _handle(
        self, fmt: Format, space: str | None, data: dict[str, Any], caller: Caller
    ) -> web.Response:
        assert self._envelopes is not None
        if data.get("protocol") != fmt.value:
            raise Refused(AgoraErrorCode.BAD_REQUEST, f"this route takes {fmt.value} envelopes")
        check = self._envelopes
        verified = verify(data, now=time.time(), max_age=check.max_age, max_skew=check.max_skew)
        if space is None:
            raise Refused(AgoraErrorCode.NOT_FOUND, "no space: agentprotocol_space is not set")
        await self._existing(space, caller)
        hello = verified.type in _HELLOS
        self._allowed(caller, verified, space, Act.READ if hello else Act.PUBLISH)
        if hello:
            return await self._welcome(verified, space)
        if verified.type in _REQUESTS:
            return await self._ask(verified, space, data, caller)
        event = await self._publish(space, data)
        return _json(202, _accepted(verified, event))

    def _allowed(self, caller: Caller, envelope: Verified, space: str, act: Act) -> None:
        """The bearer caller and (auth on) the envelope's signer may ``act``."""
        assert self._http is not None
        policy = self._http.policy
        if not policy.allows(caller, act, space):
            raise Refused(AgoraErrorCode.UNAUTHORIZED, f"you may not {act} in this space")
        if not self._http.auth_required or space in self.public_spaces:
            return
        signer = self._http.signer(envelope.did)
        if signer is None or not policy.allows(signer, act, space):
            raise Refused(
                AgoraErrorCode.UNAUTHORIZED,
                f"the signer {envelope.did[:80]} may not {act} in this space",
            )

    # ── steps ───────────────────────────────────────────────────────────

    async def _existing(self, space: str, caller: Caller) -> None:
        """Only user spaces that exist (declared, or with members) are served,
        and to a caller that may not read one, it does not exist."""
        assert self._http is not None and self._spaces is not None
        try:
            kind = space_kind(space)
        except ProtocolError:
            kind = None
        if (
            kind is not SpaceKind.PUBLIC
            or not self._http.policy.may_read(caller, space)
            or not await self._spaces.space_exists(space)
        ):
            raise Refused(AgoraErrorCode.NOT_FOUND, f"space {space[:128]!r} does not exist")

    async def _publish(self, space: str, data: dict[str, Any]) -> dict[str, Any]:
        """Publish through the gateway's member; the hub's refusal becomes ours."""
        try:
            member = await self._join(space)
            return await member.request(
                {"type": "space.publish", "space": space, "data": data},
                timeout=self.settings.bridge_timeout,
            )
        except RequestFailed as exc:
            raise Refused(*_hub_refusal(exc.code, str(exc.error.get("message", "")))) from None
        except TimeoutError:
            raise Refused(AgoraErrorCode.UNAVAILABLE, "the hub did not answer in time") from None

    async def _join(self, space: str) -> AdapterMember:
        """The gateway's member, in ``space``: attached on first use (a hub
        nobody posts envelopes to has no such member), joined once per space
        and node; it then stays a member (see docs/envelopes.md)."""
        assert self._hosting is not None
        member = self.member
        if member is not None and space in self._joined and not member.closing:
            return member
        async with self._joining.setdefault(space, asyncio.Lock()):
            async with self._attaching:
                if self.member is not None and self.member.closing:
                    self.member, self._joined = None, set()  # closed by the hub: anew
                if self.member is None:
                    self.member = await self._hosting.attach(
                        GATEWAY_ID, self._on_message, shared=True, type="envelope-gateway"
                    )
            member = self.member
            if space not in self._joined:
                await member.join(space)
                self._joined.add(space)
        self._joining.pop(space, None)
        return member

    async def _ask(
        self, request: Verified, space: str, data: dict[str, Any], caller: Caller
    ) -> web.Response:
        """Publish a REQUEST and answer with the first envelope answering it."""
        key = caller.share_key
        try:
            self.waiting.take(key)
        except ShareExceeded as exc:
            raise Refused(AgoraErrorCode.TOO_MANY_REQUESTS, str(exc)) from None
        except SlotsFull:  # every wait is taken: the task table says so, in the protocol's words
            return await self._wait(request, space, data)
        try:
            return await self._wait(request, space, data)
        finally:
            self.waiting.give_back(key)

    async def _wait(self, request: Verified, space: str, data: dict[str, Any]) -> web.Response:
        assert self._identity is not None
        try:
            wait = self.waits.open(request, space, time.time())
        except EnvelopeError as exc:
            raise Refused(exc) from None
        try:
            await self._publish(space, data)
            timeout = None if wait.deadline is None else max(0.0, wait.deadline - time.time())
            try:
                async with asyncio.timeout(timeout):
                    answer = await wait.answer
            except TimeoutError:
                envelope = timeout_envelope(
                    request.format,
                    signing_key=self._identity.signing_key,
                    now=time.time(),
                    request_id=wait.asked.event_id,
                    to=request.signer if request.format is Format.AGENTPROTOCOL else None,
                )
                return _json(int(AgoraErrorCode.TIMEOUT), envelope)
            return _json(200, answer)
        finally:
            self.waits.close(wait)

    async def _welcome(self, hello: Verified, space: str) -> web.Response:
        """The hub answers a HELLO itself: its identity and the space's members."""
        assert self._identity is not None and self._envelopes is not None
        # Not published, but replay-checked like everything else.
        if await self._envelopes.seen_ids.seen(hello.replay_key, hello.replay_ttl):
            raise Refused(hello.replayed())
        members = await self._members(space)
        envelope = welcome_envelope(
            hello,
            signing_key=self._identity.signing_key,
            now=time.time(),
            space=space,
            members=members,
        )
        return _json(200, envelope)

    async def _members(self, space: str) -> list[dict[str, Any]]:
        assert self._spaces is not None
        records = await self._spaces.member_records(space, HELLO_MEMBERS + 1)
        return [
            {"id": record.agent_id, "capabilities": list(record.capabilities)}
            for record in records
            if record.agent_id != GATEWAY_ID
        ][:HELLO_MEMBERS]

    # ── events in the gateway's spaces ─────────────────────────────────

    async def _on_message(self, msg: dict[str, Any]) -> None:
        if len(self.waits) and msg.get("verified") is True:
            self.waits.offer(msg, time.time())


async def _read(request: web.Request, limit: int) -> bytes:
    try:
        return await read_body(request, limit)
    except BodyRefused as exc:
        if exc.status == 413:
            raise too_large(limit) from None
        raise Refused(AgoraErrorCode.BAD_REQUEST, exc.message) from None


def _fits_in_an_event(body: bytes, data: dict[str, Any]) -> None:
    """Published as an event's ``data``, the envelope sits one level down: refuse
    (400) what the hub would refuse then, before anything is verified or waited for."""
    try:
        check_json(body.decode(), data, nesting=1)
    except BodyRefused as exc:
        raise Refused(AgoraErrorCode.BAD_REQUEST, exc.message) from None


def _hub_refusal(code: str, message: str) -> tuple[EnvelopeError | AgoraErrorCode, str]:
    """The hub's ``error`` for a publish, as our refusal: an envelope refusal
    keeps its reason (so agentprotocol/0.1 gets the precise code)."""
    prefix = "envelope refused, "
    if message.startswith(prefix):
        reason, _, rest = message[len(prefix) :].partition(": ")
        with contextlib.suppress(ValueError):
            return EnvelopeError(Reason(reason), rest), rest
    return CODE_FOR_HUB_ERROR.get(code, AgoraErrorCode.INTERNAL_ERROR), message


def _accepted(envelope: Verified, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": "accepted",
        "id": envelope.id,
        "space": event.get("space"),
        "event_id": event.get("event_id"),
        "seq": event.get("seq"),
    }


def _json(status: int, body: Any) -> web.Response:
    # Busy (503) or over the caller's share (429): say when to come back.
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return web.Response(
        status=status, body=orjson.dumps(body), content_type="application/json", headers=headers
    )
