"""The outbound bridge's HTTP client: one remote HTTP Agora endpoint, nothing else.

:class:`RemoteEndpoint` only ever calls its configured ``url`` and
``url/conversations/{id}`` (ids are checked to be plain path segments by
:func:`protocol.agora_http.interpret_reply` before they are kept), never follows
redirects, reads at most ``max_request_bytes`` of a reply, and turns every
outcome — timeouts, refused connections, garbage — into a
:class:`~protocol.agora_http.Reply`: it never raises for what a remote does.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import structlog

from hub.adapter_host import read_at_most
from protocol.agora_http import DEFAULT_LIMITS, TIMEOUT, AgoraLimits, Reply, decode_reply

#: Most of a DELETE's answer read (it is only drained).
_DELETE_REPLY_BYTES = 64 * 1024

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

    async def post(self, payload: dict[str, Any], remote_id: str | None = None) -> Reply:
        """POST to the endpoint, or to a conversation's follow-up URL."""
        url = self.url if remote_id is None else self.conversation_url(remote_id)
        limit = self.limits.max_request_bytes
        raw = orjson.dumps(payload)
        if len(raw) > limit:
            return failed(f"Request exceeds {limit} bytes")
        try:
            async with self._session.post(
                url, data=raw, headers={"Content-Type": "application/json"},
                allow_redirects=False,
            ) as resp:  # fmt: skip
                answer = await read_at_most(resp.content, limit, resp.content_length)
                if answer is None:
                    return failed(f"Reply exceeds {limit} bytes")
                return decode_reply(resp.status, answer, self.limits)
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
