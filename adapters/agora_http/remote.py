"""The outbound bridge's HTTP client: one remote HTTP Agora endpoint, nothing else.

:class:`RemoteEndpoint` only ever calls its configured ``url`` and
``url/conversations/{id}`` (ids are checked to be plain path segments by
:func:`protocol.agora_http.interpret_reply` before they are kept), never follows
redirects, reads at most ``max_request_bytes`` of a reply, and turns every
outcome — timeouts, refused connections, garbage — into a
:class:`~protocol.agora_http.Reply`: it never raises for what a remote does.

A success the hub could not publish unchanged is a failure saying why: a body
nested deeper than an event may be, or an integer beyond 64 bits (which JSON
parsing would quietly turn into a float) — the hub refuses both in the frames
it receives (:func:`~hub.adapter_host.check_json`).
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import structlog

from hub.adapter_host import BodyRefused, check_json, read_at_most
from protocol.agora_http import (
    DEFAULT_LIMITS,
    TIMEOUT,
    AgoraLimits,
    Reply,
    decode_reply,
    interpret_reply,
)

#: Most of a DELETE's answer read (it is only drained).
_DELETE_REPLY_BYTES = 64 * 1024

#: A success the hub cannot carry unchanged is a failure saying this, then why.
REPLY_REFUSED = "The remote's reply cannot be published: "

log = structlog.get_logger("adapters.agora_http")


def failed(error: str) -> Reply:
    return Reply("failure", error=error)


class RemoteEndpoint:
    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        max_connections: int,
        limits: AgoraLimits = DEFAULT_LIMITS,
    ):
        self.url = url.rstrip("/")
        self.limits = limits
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout),
            connector=aiohttp.TCPConnector(limit=max_connections),
            trust_env=False,  # no proxy from the environment: the URL is what is called
        )

    def conversation_url(self, remote_id: str) -> str:
        return f"{self.url}/conversations/{remote_id}"

    async def post(
        self, payload: dict[str, Any], remote_id: str | None = None, *, timeout: float | None = None
    ) -> Reply:
        """POST to the endpoint, or to a conversation's follow-up URL, for at most
        ``timeout`` seconds (default: the endpoint's)."""
        url = self.url if remote_id is None else self.conversation_url(remote_id)
        limit = self.limits.max_request_bytes
        raw = orjson.dumps(payload)
        if len(raw) > limit:
            return failed(f"Request exceeds {limit} bytes")
        try:
            async with self._session.post(
                url, data=raw, headers={"Content-Type": "application/json"},
                allow_redirects=False,
                timeout=None if timeout is None else aiohttp.ClientTimeout(total=timeout),
            ) as resp:  # fmt: skip
                answer = await read_at_most(resp.content, limit, resp.content_length)
                if answer is None:
                    return failed(f"Reply exceeds {limit} bytes")
                return _decode(resp.status, answer, self.limits)
        except TimeoutError:
            return failed(TIMEOUT)
        except aiohttp.ClientConnectorError:
            return failed("Could not connect to the remote Agora server")
        except aiohttp.ClientError as exc:
            return failed(f"Transport error talking to the remote ({type(exc).__name__})")

    async def delete(self, remote_id: str) -> bool:
        """DELETE a conversation (best effort); whether the remote said 200."""
        url = self.conversation_url(remote_id)
        try:
            async with self._session.delete(url, allow_redirects=False) as resp:
                await read_at_most(resp.content, _DELETE_REPLY_BYTES)
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.info("agora-http conversation not closed remotely", url=url, reason=repr(exc))
            return False

    async def aclose(self) -> None:
        await self._session.close()


def _decode(http_status: int, raw: bytes, limits: AgoraLimits) -> Reply:
    """:func:`~protocol.agora_http.decode_reply`, and a success the hub could not
    publish unchanged is a failure (see the module)."""
    if http_status != 200:
        return decode_reply(http_status, raw, limits)
    try:
        text = raw.decode()
        obj = orjson.loads(text)
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        return decode_reply(http_status, raw, limits)  # its failure
    reply = interpret_reply(obj)
    if reply.ok:
        try:
            # The reply's body sits as deep in the answer's ``data`` as in the
            # reply, and ``data`` one level down in the event.
            check_json(text, obj, nesting=1)
        except BodyRefused as exc:
            return failed(f"{REPLY_REFUSED}{exc.message}")
    return reply
