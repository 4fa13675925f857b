"""Outbound: a remote signed-envelope agent as a member of a space here.

One :class:`EnvelopePeer` per ``[[bridges.envelope]]`` (``space``,
``agent_id``, ``url``, ``protocol``, ``timeout``). It joins ``space`` as
``agent_id``; a verified envelope of its ``protocol`` addressed to it
(``to``) is POSTed to ``url`` exactly as the sender signed it, and the
remote's answer is verified before it is published back, addressed to the
sender. Remote failures become hub-signed ERROR envelopes for the sender:
no answer in time → 408 (agentprotocol: ``TIMEOUT``); unreachable, an HTTP
error without an envelope, an answer that does not verify or is too big →
503. Only the configured URL is called, redirects are not followed,
responses are bounded, and at most ``max_concurrent`` calls are in flight
(one more is answered 429 at once).

In a cluster every node runs the bridge but the agent id is claimed
cluster-wide, so exactly one node holds it; the others stand by and retry
the claim every ``heartbeat_interval``, so the bridge moves to a surviving
node when its holder is lost (its presence lapses or fails a liveness
probe).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
import orjson
import structlog

from adapters.envelope.common import read_bounded, request_of, signed_error
from adapters.envelope.config import EnvelopeBridge
from adapters.kit.holding import Holding
from adapters.kit.takeover import answer_unanswered
from hub.adapter_host import (
    AdapterHost,
    HubSettings,
    RequestFailed,
    VirtualMember,
)
from protocol.envelope import (
    AgoraErrorCode,
    EnvelopeError,
    Format,
    detect,
    parse_json,
    verify,
)

MAX_CONCURRENT = 16
MAX_RESPONSE_BYTES = 1024 * 1024
_REQUESTS = frozenset({"REQUEST", "request"})
_MOVED = (
    "the bridge moved to another hub node while this request was in flight: "
    "it may not have reached the remote agent; send it again"
)
_CLOSING = "the bridge shut down before the remote agent answered: send it again"


class EnvelopePeer:
    """Adapter: one ``[[bridges.envelope]]`` entry."""

    system_spaces: tuple[str, ...] = ()

    def __init__(
        self,
        bridge: EnvelopeBridge,
        settings: HubSettings,
        *,
        max_concurrent: int = MAX_CONCURRENT,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        retry_interval: float | None = None,
    ):
        self.bridge = bridge
        self.settings = settings
        self.format = Format(bridge.protocol)
        self.timeout = bridge.timeout or settings.bridge_timeout
        self.max_concurrent = max_concurrent
        self.max_response_bytes = max_response_bytes
        self.retry_interval = retry_interval or settings.heartbeat_interval
        self.host: AdapterHost | None = None
        self.held = Holding(
            bridge.agent_id, bridge.space, self._on_message, type="envelope-bridge",
            registration=lambda: ((self.format.value,), {}), on_claimed=self._claimed,
            label="envelope bridge",
        )  # fmt: skip
        self._http: aiohttp.ClientSession | None = None
        self._supervisor: asyncio.Task[None] | None = None
        #: Calls in flight → (sender, envelope): answered if the bridge closes.
        self._calls: dict[asyncio.Task[None], tuple[str, dict[str, Any]]] = {}
        self._orphans: asyncio.Task[None] | None = None
        self._log = structlog.get_logger("adapters.envelope").bind(
            adapter="outbound", agent_id=bridge.agent_id, space=bridge.space
        )

    # ── lifecycle: hold the id, or stand by ────────────────────────────

    async def start(self, host: AdapterHost) -> None:
        self.host = host
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={"Content-Type": "application/json"},
        )
        await self.held.claim(host)
        self._supervisor = asyncio.get_running_loop().create_task(
            self.held.keep(host, self.retry_interval)
        )

    @property
    def member(self) -> VirtualMember | None:
        """The bridge's member while this node holds its agent id."""
        return self.held.member

    @property
    def holding(self) -> asyncio.Event:
        """Set whenever this node holds the agent id and is in the space."""
        return self.held.holding

    async def _claimed(self, member: VirtualMember, seq: int) -> None:
        """Requests a lost holder left unanswered get a 503 (:mod:`adapters.kit.takeover`)."""
        fmt = self.format

        async def moved(event: dict[str, Any]) -> None:
            await self._reply_error(
                event["from"], AgoraErrorCode.UNAVAILABLE, _MOVED, event["data"]
            )

        orphans = answer_unanswered(
            member, self.bridge.space, seq, request_keys=lambda e: _request_keys(fmt, e),
            answer_key=lambda e: _answer_key(fmt, e), answer=moved, label="envelope bridge",
        )  # fmt: skip
        self._orphans = asyncio.get_running_loop().create_task(orphans)

    async def aclose(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._orphans is not None:
            self._orphans.cancel()
        in_flight = list(self._calls.values())
        for call in list(self._calls):
            call.cancel()
        if self._calls:
            await asyncio.gather(*self._calls, return_exceptions=True)
        if in_flight:  # their senders get an answer, not silence
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await asyncio.gather(
                        *(
                            self._reply_error(sender, AgoraErrorCode.UNAVAILABLE, _CLOSING, data)
                            for sender, data in in_flight
                        )
                    )
        await self.held.release()
        if self._http is not None:
            await self._http.close()

    # ── events addressed to the bridge ─────────────────────────────────

    async def _on_message(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "space.event" or not _addressed_to(msg, self.bridge.agent_id):
            return
        sender, data = msg.get("from"), msg.get("data")
        if not isinstance(sender, str) or not isinstance(data, dict):
            return
        if detect(data) is not self.format:
            await self._reply_error(
                sender, AgoraErrorCode.BAD_REQUEST, f"this agent takes {self.format.value}", data
            )
        elif msg.get("verified") is not True:
            await self._reply_error(
                sender, AgoraErrorCode.UNAUTHORIZED, "only signed envelopes are forwarded", data
            )
        elif len(self._calls) >= self.max_concurrent:
            await self._reply_error(
                sender, AgoraErrorCode.TOO_MANY_REQUESTS, "the remote agent is busy", data
            )
        else:
            call = asyncio.get_running_loop().create_task(self._forward(sender, data))
            self._calls[call] = (sender, data)
            call.add_done_callback(lambda done: self._calls.pop(done, None))

    async def _forward(self, sender: str, data: dict[str, Any]) -> None:
        try:
            answer = await self._call(data)
        except TimeoutError:
            answer = self._timeout(data)
        except EnvelopeError as exc:
            answer = self._error(AgoraErrorCode.UNAVAILABLE, f"remote answer refused: {exc}", data)
        except (aiohttp.ClientError, OSError) as exc:
            detail = str(exc) or type(exc).__name__
            answer = self._error(
                AgoraErrorCode.UNAVAILABLE, f"remote agent unreachable: {detail}", data
            )
        if answer is not None:
            await self._publish(sender, answer, data)

    async def _call(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """POST the envelope as signed; the remote's verified answer, if any."""
        assert self._http is not None
        async with self._http.post(
            self.bridge.url, data=orjson.dumps(data), allow_redirects=False
        ) as resp:
            body = await read_bounded(resp.content, self.max_response_bytes, resp.content_length)
            status = resp.status
        if not body.strip():
            if 200 <= status < 300 and data.get("type") not in _REQUESTS:
                return None  # accepted, nothing to say
            return self._error(
                AgoraErrorCode.UNAVAILABLE,
                f"remote agent answered HTTP {status} without an envelope",
                data,
            )
        try:
            answer = parse_json(body, max_bytes=self.max_response_bytes)
        except EnvelopeError:
            if 200 <= status < 300:
                raise
            return self._error(
                AgoraErrorCode.UNAVAILABLE, f"remote agent answered HTTP {status}", data
            )
        if detect(answer) is not self.format:
            return self._error(
                AgoraErrorCode.UNAVAILABLE,
                f"remote agent answered HTTP {status} without a {self.format.value} envelope",
                data,
            )
        assert self.host is not None
        check = self.host.envelopes
        verify(answer, now=time.time(), max_age=check.max_age, max_skew=check.max_skew)
        return answer

    async def _publish(self, sender: str, answer: dict[str, Any], about: dict[str, Any]) -> None:
        """Publish back to the sender; if the hub refuses the remote's answer
        (a replay, say), the sender gets an error envelope instead."""
        member = self.member
        if member is None:
            return
        try:
            await member.publish(self.bridge.space, answer, to=sender)
            return
        except RequestFailed as exc:
            if exc.code == "INVALID_REQUEST" and "not members" in str(exc):
                return  # the sender has left the space: nobody to tell
            message = f"remote answer refused: {exc.error.get('message')}"
        except Exception as exc:
            message = f"cannot publish the remote answer: {exc}"
        with contextlib.suppress(Exception):
            fallback = self._error(AgoraErrorCode.UNAVAILABLE, message, about)
            await member.publish(self.bridge.space, fallback, to=sender)

    async def _reply_error(
        self, sender: str, code: AgoraErrorCode, message: str, about: dict[str, Any]
    ) -> None:
        if self.member is None:
            return
        fmt = detect(about) or self.format
        with contextlib.suppress(Exception):
            envelope = self._error(code, message, about, fmt)
            await self.member.publish(self.bridge.space, envelope, to=sender)

    def _error(
        self,
        code: AgoraErrorCode,
        message: str,
        about: dict[str, Any],
        fmt: Format | None = None,
    ) -> dict[str, Any]:
        assert self.host is not None
        return signed_error(
            self.host.identity.signing_key, fmt or self.format, code, message, about=about
        )

    def _timeout(self, about: dict[str, Any]) -> dict[str, Any]:
        return self._error(
            AgoraErrorCode.TIMEOUT,
            f"the remote agent did not answer within {self.timeout:g} s",
            about,
        )


def _request_keys(fmt: Format, event: dict[str, Any]) -> tuple[str, ...]:
    """A request of ``fmt`` in a space event: the ids its answers may refer to
    it by (agora/1.0: the envelope's ``id`` or its ``payload.request_id``)."""
    data, sender = event.get("data"), event.get("from")
    if not isinstance(data, dict) or not isinstance(sender, str) or detect(data) is not fmt:
        return ()
    if data.get("type") not in _REQUESTS:
        return ()
    payload = data.get("payload")
    keys = [request_of(fmt, data)]
    if isinstance(payload, dict):
        keys.append(payload.get("request_id"))
    return tuple(k for k in keys if isinstance(k, str))


def _answer_key(fmt: Format, event: dict[str, Any]) -> str | None:
    """What an envelope the bridge published answers."""
    data = event.get("data")
    if not isinstance(data, dict) or detect(data) is not fmt or data.get("type") in _REQUESTS:
        return None
    return request_of(fmt, data)


def _addressed_to(msg: dict[str, Any], agent_id: str) -> bool:
    to = msg.get("to")
    return to == agent_id or (isinstance(to, list) and agent_id in to)
