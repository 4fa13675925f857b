"""The outbound bridge's HTTP client: one remote A2A agent, nothing else.

:class:`RemoteAgent` calls only the configured ``url``: the card at
``{url}/.well-known/agent-card.json`` and the card's JSON-RPC interface when
it is on the same origin (scheme, host, port) as ``url`` — otherwise ``url``
itself, so a card cannot send the hub anywhere else. Redirects are not
followed, no proxy is taken from the environment, bodies and stream events
are read up to a bound. Whatever the remote does — refuse, time out, answer
garbage or a JSON-RPC error — becomes a :class:`RemoteFailure` with a reason
fit for a failure event; nothing else is raised.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog

from hub.adapter_host import read_at_most
from protocol.a2a import jsonrpc, sse
from protocol.a2a.card import WELL_KNOWN, CardError, RemoteCard, parse_card
from protocol.a2a.jsonrpc import RpcError

log = structlog.get_logger("adapters.a2a")


class RemoteFailure(Exception):
    """A call to the remote agent that did not produce an answer."""

    def __init__(self, reason: str, *, unreachable: bool = False):
        super().__init__(reason)
        self.reason = reason
        #: The remote could not be reached at all (its card is worth re-reading).
        self.unreachable = unreachable


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


class RemoteAgent:
    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        timeout: float,
        max_connections: int,
        max_body_bytes: int,
    ):
        self.base = url.rstrip("/")
        self.card_url = f"{self.base}/{WELL_KNOWN}"
        #: Where JSON-RPC calls go: the card's interface, once read and allowed.
        self.rpc_url = url
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self._headers = {**headers, "A2A-Version": "1.0"}
        self._session = aiohttp.ClientSession(
            # An idle bound, not a total one: a streamed answer may take long.
            timeout=aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout),
            connector=aiohttp.TCPConnector(limit=max_connections),
            trust_env=False,  # no proxy from the environment: the URL is what is called
        )

    async def aclose(self) -> None:
        await self._session.close()

    # ── the card ────────────────────────────────────────────────────────

    async def read_card(self) -> RemoteCard:
        try:
            async with self._session.get(
                self.card_url, headers=self._headers, allow_redirects=False
            ) as resp:
                body = await read_at_most(resp.content, self.max_body_bytes, resp.content_length)
                if resp.status != 200:
                    raise RemoteFailure(f"agent card: HTTP {resp.status}", unreachable=True)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RemoteFailure(f"agent card: {_transport(exc)}", unreachable=True) from None
        if body is None:
            raise RemoteFailure(f"agent card larger than {self.max_body_bytes} bytes")
        try:
            card = parse_card(orjson.loads(body))
        except orjson.JSONDecodeError:
            raise RemoteFailure("agent card: not JSON") from None
        except CardError as exc:
            raise RemoteFailure(f"agent card: {exc.reason}") from None
        if _origin(card.rpc_url) == _origin(self.base):
            self.rpc_url = card.rpc_url
        else:
            self.rpc_url = self.base
            log.warning(
                "a2a remote card names an interface on another origin: calling the configured url",
                url=self.base, interface=card.rpc_url[:200],
            )  # fmt: skip
        return card

    # ── calls ───────────────────────────────────────────────────────────

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """One JSON-RPC call answered with JSON; its ``result``."""
        body = jsonrpc.request_body(method, params, str(uuid.uuid4()))
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            async with self._session.post(
                self.rpc_url, data=body, headers=headers, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:  # fmt: skip
                answer = await read_at_most(resp.content, self.max_body_bytes, resp.content_length)
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RemoteFailure(_transport(exc), unreachable=_unreachable(exc)) from None
        if answer is None:
            raise RemoteFailure(f"The remote's answer exceeds {self.max_body_bytes} bytes")
        return _result(status, answer)

    async def stream(self, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``SendStreamingMessage``: each result as it arrives, until the remote
        ends the response; ``timeout`` without a whole event (comment lines do
        not count) is a failure "Timeout"."""
        body = jsonrpc.request_body("SendStreamingMessage", params, str(uuid.uuid4()))
        headers = {
            **self._headers,
            "Content-Type": "application/json",
            "Accept": sse.CONTENT_TYPE,
        }
        try:
            async with self._session.post(
                self.rpc_url, data=body, headers=headers, allow_redirects=False
            ) as resp:
                if sse.CONTENT_TYPE not in resp.headers.get("Content-Type", ""):
                    limit = self.max_body_bytes
                    answer = await read_at_most(resp.content, limit, resp.content_length)
                    if answer is None:
                        raise RemoteFailure(f"The remote's answer exceeds {limit} bytes")
                    yield _result(resp.status, answer)
                    return
                decoder = sse.SseDecoder(self.max_body_bytes)
                # Silence is measured between events, not bytes: comment lines
                # (keepalives) and half events do not keep a call open.
                loop = asyncio.get_running_loop()
                quiet_until = loop.time() + self.timeout
                while True:
                    async with asyncio.timeout_at(quiet_until):
                        chunk = await resp.content.readany()
                    if not chunk:
                        break
                    events = decoder.feed(chunk)
                    for event in events:
                        yield _result(200, event.data.encode())
                    if events:
                        quiet_until = loop.time() + self.timeout
        except sse.SseError as exc:
            raise RemoteFailure(f"The remote's stream was refused: {exc.message}") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise RemoteFailure(_transport(exc), unreachable=_unreachable(exc)) from None

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await self.call("CancelTask", {"id": task_id})


def _result(status: int, answer: bytes) -> dict[str, Any]:
    try:
        obj = orjson.loads(answer)
    except orjson.JSONDecodeError:
        raise RemoteFailure(f"The remote answered HTTP {status} without JSON") from None
    try:
        return jsonrpc.parse_response(obj)
    except RpcError as exc:
        if status != 200 and exc.rpc_code == jsonrpc.INVALID_AGENT_RESPONSE:
            raise RemoteFailure(f"The remote answered HTTP {status}") from None
        raise RemoteFailure(f"The remote refused: {exc.message} ({exc.rpc_code})") from None


def _unreachable(exc: BaseException) -> bool:
    return isinstance(exc, aiohttp.ClientConnectorError)


def _transport(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "Timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "Could not connect to the remote A2A agent"
    return f"Transport error talking to the remote ({type(exc).__name__})"
