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
probe). That, the bounded intake of requests (a streamed one assembled),
a sender's ``{"cancel": true, "in_reply_to": …}`` and the takeover are
:mod:`adapters.kit.bridge`'s.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import aiohttp
import orjson
import structlog

from adapters.envelope.common import read_bounded, request_of, signed_error
from adapters.envelope.config import EnvelopeBridge
from adapters.kit.bridge import OutboundBridge
from adapters.kit.intake import BUSY, CLOSING
from hub.adapter_host import (
    AdapterHost,
    EnvelopeCheck,
    HubIdentity,
    HubSettings,
    RequestFailed,
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


class EnvelopePeer(OutboundBridge):
    """Adapter: one ``[[bridges.envelope]]`` entry, the signed-envelope mapping
    of an :class:`~adapters.kit.bridge.OutboundBridge`."""

    member_type = "envelope-bridge"
    label = "envelope bridge"

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
        # Calls in flight are bounded, none waits: one more is answered 429 at once.
        super().__init__(
            bridge.space, bridge.agent_id, max_request_bytes=settings.max_frame_bytes,
            max_concurrency=max_concurrent, max_queued=0,
            retry_interval=retry_interval,
        )  # fmt: skip
        self.timeout = bridge.timeout or settings.bridge_timeout
        self.max_concurrent = max_concurrent
        self.max_response_bytes = max_response_bytes
        self._http: aiohttp.ClientSession | None = None
        self._envelopes: EnvelopeCheck | None = None
        self._identity: HubIdentity | None = None
        self._log = structlog.get_logger("adapters.envelope").bind(
            adapter="outbound", agent_id=bridge.agent_id, space=bridge.space
        )

    # ── the bridge's own resources ──────────────────────────────────────

    async def open(self, host: AdapterHost) -> None:
        self._envelopes, self._identity = host.envelopes, host.identity
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            headers={"Content-Type": "application/json"},
        )

    async def shut(self) -> None:
        if self._http is not None:
            await self._http.close()

    def registration(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        return (self.format.value,), {}

    # ── a lost holder's requests (adapters.kit.takeover) ────────────────

    def request_keys(self, event: dict[str, Any]) -> tuple[str, ...]:
        return _request_keys(self.format, event)

    def answer_key(self, event: dict[str, Any]) -> str | None:
        return _answer_key(self.format, event)

    async def moved(self, event: dict[str, Any]) -> None:
        await self._reply_error(event["from"], AgoraErrorCode.UNAVAILABLE, _MOVED, event["data"])

    # ── events addressed to the bridge ─────────────────────────────────

    async def serve(self, event: dict[str, Any]) -> None:
        sender, data = event.get("from"), event.get("data")
        if not isinstance(sender, str) or not isinstance(data, dict):
            return
        if detect(data) is not self.format:
            await self._reply_error(
                sender, AgoraErrorCode.BAD_REQUEST, f"this agent takes {self.format.value}", data
            )
        elif event.get("verified") is not True:
            await self._reply_error(
                sender, AgoraErrorCode.UNAUTHORIZED, "only signed envelopes are forwarded", data
            )
        else:
            await self._forward(sender, data)

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        sender, data = event.get("from"), event.get("data")
        if not isinstance(sender, str) or not isinstance(data, dict):
            return
        if why == BUSY:
            code, message = AgoraErrorCode.TOO_MANY_REQUESTS, "the remote agent is busy"
        elif why == CLOSING:
            code, message = AgoraErrorCode.UNAVAILABLE, _CLOSING
        else:
            code, message = AgoraErrorCode.BAD_REQUEST, why
        await self._reply_error(sender, code, message, data)

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
        check = self._envelopes
        assert check is not None
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
        assert self._identity is not None
        return signed_error(
            self._identity.signing_key, fmt or self.format, code, message, about=about
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
