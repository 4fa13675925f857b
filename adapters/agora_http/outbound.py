"""HTTP Agora, outbound: agents of a space call an HTTP Agora agent elsewhere.

``[[bridges.agora_http]]`` (``space``, ``agent_id``, ``url``, optional
``protocol_document`` and ``timeout``) makes ``agent_id`` a member of
``space``. An event addressed to it (``to``) is POSTed to ``url``; the answer
is published back from ``agent_id``, addressed to the sender::

    {"in_reply_to": <event_id>, "status": "success", "body": …, "conversation_id": …}
    {"in_reply_to": <event_id>, "status": "failure", "error": "…", "conversation_id": …}

``data.body`` (or ``data.text``) is the request body; ``data.multiround: true``
opens a remote conversation and ``data.conversation_id`` continues it (per
space, sender and id); ``data.end_conversation: true`` closes it with DELETE, as
does expiry. Timeouts, refused connections and anything unreadable are failure
answers: a request is never lost silently.

Exactly one node of a cluster holds ``agent_id``; the others stand by and
retry the claim every ``retry_interval``, so when the holder's node dies the
bridge moves; a sender's ``{"cancel": true, "in_reply_to": …}`` abandons the
call (all of it :mod:`adapters.kit.bridge`'s). Only ``url`` (and its
``/conversations/{id}``) is ever called, without following redirects; calls per
bridge, events waiting for a call, and bodies both ways are bounded.
"""

from __future__ import annotations

import asyncio
import heapq
import secrets
import time
from dataclasses import dataclass
from typing import Any

import structlog

from adapters.agora_http.conversations import OutboundConversations, RemoteConversation
from adapters.agora_http.remote import RemoteEndpoint, failed
from adapters.kit.bridge import OutboundBridge
from hub.adapter_host import AdapterHost, BackplaneUnavailable
from protocol.agora_http import (
    CONVERSATION_EXPIRED,
    CONVERSATION_NOT_FOUND,
    DEFAULT_LIMITS,
    TIMEOUT,
    AgoraLimits,
    HashForm,
    Reply,
    encode_source,
    hash_document,
    outbound_request,
)

MAX_CONVERSATION_ID = 256

log = structlog.get_logger("adapters.agora_http")


@dataclass(frozen=True, slots=True)
class OutboundOptions:
    #: HTTP calls in progress at once, per bridge.
    max_concurrency: int = 8
    #: Events waiting for a call slot; one more is answered "Bridge busy".
    max_queued: int = 64
    #: Idle time after which a remote conversation is closed (DELETE).
    conversation_ttl: float = 300.0
    #: How often a standby node retries the claim; ``None``: heartbeat_interval.
    retry_interval: float | None = None
    #: The hash form sent to the remote: base64 is what agora-protocol 0.2.0
    #: verifies; the hub's own inbound side accepts both.
    hash_form: HashForm = HashForm.BASE64
    limits: AgoraLimits = DEFAULT_LIMITS


class AgoraHttpOutbound(OutboundBridge):
    """One ``[[bridges.agora_http]]`` entry: the HTTP Agora mapping of an
    :class:`~adapters.kit.bridge.OutboundBridge`."""

    member_type = "agora-http-bridge"
    label = "agora-http bridge"

    def __init__(
        self,
        space: str,
        agent_id: str,
        url: str,
        *,
        document: str | None = None,
        timeout: float | None = None,
        options: OutboundOptions | None = None,
    ):
        o = self.options = options or OutboundOptions()
        super().__init__(
            space, agent_id, max_request_bytes=o.limits.max_request_bytes,
            max_concurrency=o.max_concurrency, max_queued=o.max_queued,
            retry_interval=o.retry_interval,
        )  # fmt: skip
        self.url = url.rstrip("/")
        self.protocol_hash = None if document is None else hash_document(document)
        self.sources = [] if document is None else [encode_source(document)]
        self.timeout = timeout
        self.conversations: OutboundConversations | None = None
        self._remote: RemoteEndpoint | None = None
        self._calls = asyncio.Semaphore(o.max_concurrency)
        self._expiries: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    # ── the bridge's own resources ──────────────────────────────────────

    async def open(self, host: AdapterHost) -> None:
        self.timeout = self.timeout or host.settings.bridge_timeout
        ttl = self.options.conversation_ttl
        self.conversations = OutboundConversations(host.kv, self.agent_id, ttl)
        self._remote = RemoteEndpoint(
            self.url,
            timeout=self.timeout,
            max_connections=self.options.max_concurrency,
            limits=self.options.limits,
        )
        self.spawn(self._sweep(max(0.05, min(1.0, ttl / 4))))

    async def shut(self) -> None:
        if self._remote is not None:
            await self._remote.aclose()

    def registration(self) -> tuple[tuple[str, ...], dict[str, Any]]:
        return ("agora-http",), {}

    # ── events addressed to the bridge ──────────────────────────────────

    async def serve(self, event: dict[str, Any]) -> None:
        # ``timeout`` counts from the request's arrival, its wait for a call
        # slot included: the sender hears within it, whatever is queued before.
        assert self.timeout is not None
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._calls.acquire()
        except TimeoutError:
            await self._answer(event, failed(TIMEOUT))
            return
        try:
            reply, conversation_id = await self._exchange(event, deadline)
        except BackplaneUnavailable:
            reply, conversation_id = failed("Hub unavailable: try again"), None
        except Exception:
            log.exception("agora-http bridge call failed", agent_id=self.agent_id)
            reply, conversation_id = failed("Bridge error"), None
        finally:
            self._calls.release()
        await self._answer(event, reply, conversation_id)

    async def refuse(self, event: dict[str, Any], why: str) -> None:
        await self._answer(event, failed(why))

    async def _answer(
        self, event: dict[str, Any], reply: Reply, conversation_id: str | None = None
    ) -> None:
        data = {
            "in_reply_to": event.get("event_id"),
            **reply.event_data(),
            "conversation_id": conversation_id,
        }
        await self.answer(event, data)

    # ── one exchange with the remote ────────────────────────────────────

    async def _exchange(self, event: dict[str, Any], deadline: float) -> tuple[Reply, str | None]:
        assert self.conversations is not None
        data = event.get("data")
        data = data if isinstance(data, dict) else {}
        sender = str(event.get("from"))
        conversation_id = data.get("conversation_id")
        if conversation_id is not None and not (
            isinstance(conversation_id, str) and 0 < len(conversation_id) <= MAX_CONVERSATION_ID
        ):
            return failed("conversation_id must be a non-empty string"), None
        has_body = "body" in data or isinstance(data.get("text"), str)
        body = data["body"] if "body" in data else data.get("text")
        if has_body and not isinstance(body, str | dict):
            return failed("body must be a string or an object"), conversation_id
        multiround = data.get("multiround") is True
        end = data.get("end_conversation") is True
        if not has_body and not (end and conversation_id is not None):
            return failed("The event has no body or text"), conversation_id

        remote: RemoteConversation | None = None
        key = None
        if conversation_id is not None:
            key = self.conversations.key(self.space, sender, conversation_id)
            remote = await self.conversations.get(key)
            if remote is not None and self.conversations.expired(remote):
                await self._close(remote)
                return failed(CONVERSATION_EXPIRED), conversation_id
            if remote is None and not (multiround and has_body):
                return failed(CONVERSATION_NOT_FOUND), conversation_id
        elif multiround:
            conversation_id = secrets.token_urlsafe(12)
            key = self.conversations.key(self.space, sender, conversation_id)

        if not has_body:  # only ending the conversation
            assert remote is not None
            await self._close(remote)
            return Reply("success"), conversation_id
        assert self._remote is not None
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return failed(TIMEOUT), conversation_id if remote is not None else None
        if remote is not None:
            reply = await self._remote.post({"body": body}, remote.remote_id, timeout=left)
        else:
            payload = outbound_request(
                body,
                protocol_hash=self.protocol_hash,
                protocol_sources=self.sources,
                multiround=multiround,
                hash_form=self.options.hash_form,
            )
            reply = await self._remote.post(payload, timeout=left)
        if not multiround and remote is None:
            return reply, None
        if reply.ok:
            assert key is not None
            remote_id = reply.conversation_id if remote is None else remote.remote_id
            if remote_id is None:
                return failed("The remote opened no conversation (no conversationId)"), None
            remote = await self.conversations.put(key, remote_id, reply.conversation_expires)
            self._schedule(remote)
        elif remote is None:
            return reply, None  # nothing was opened
        if end and remote is not None:
            await self._close(remote)
        return reply, conversation_id

    async def _close(self, remote: RemoteConversation) -> None:
        """Forget a conversation and DELETE it remotely (best effort)."""
        assert self.conversations is not None and self._remote is not None
        await self.conversations.delete(remote.key)
        self._expiries.pop(remote.key, None)
        await self._remote.delete(remote.remote_id)

    # ── expiry ──────────────────────────────────────────────────────────

    def _schedule(self, remote: RemoteConversation) -> None:
        self._schedule_at(remote.key, remote.expires)

    def _schedule_at(self, key: str, at: float) -> None:
        self._expiries[key] = at
        heapq.heappush(self._heap, (at, key))
        if len(self._heap) > 2 * len(self._expiries) + 64:
            self._heap = [(at, key) for key, at in self._expiries.items()]
            heapq.heapify(self._heap)

    async def _sweep(self, interval: float) -> None:
        """Close the conversations this node knows of once they expire."""
        assert self.conversations is not None
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            while self._heap and self._heap[0][0] <= now:
                at, key = heapq.heappop(self._heap)
                if self._expiries.get(key) != at:
                    continue  # extended or closed since
                del self._expiries[key]
                try:
                    current = await self.conversations.get(key)
                    if current is None:
                        continue
                    if not self.conversations.expired(current):
                        self._schedule(current)  # extended by another holder
                        continue
                    async with self._calls:
                        await self._close(current)
                except BackplaneUnavailable:
                    self._schedule_at(key, now + interval)  # try again later
                    break
