"""Helpers for the HTTP Agora bridge tests: hub agents that answer, configs, HTTP calls."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.wsclient import WsClient

Answer = Callable[[dict[str, Any]], "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]

# A Protocol Document in the spec's layout, and one without metadata (the library's examples).
WEATHER_DOC = (
    "name: Weather\n"
    "description: The weather for a city\n"
    "multiround: false\n"
    "---\n"
    'The sender sends {"city": …}; the receiver replies {"forecast": …}.\n'
)
ADDITION_DOC = 'ADDITION PROTOCOL\n\nAlice sends "2 + 2"; Bob replies "4".'


def echo_answer(data: dict[str, Any]) -> dict[str, Any] | None:
    """Answers every request with ``"echo:" + body`` (objects: ``{"echo": body}``)."""
    if data.get("end_conversation"):
        return None
    body = data.get("body")
    return {"body": "echo:" + body if isinstance(body, str) else {"echo": body}}


class Responder:
    """A hub agent over WebSocket that answers the ``agora-http`` requests of a space.

    ``answer(data)`` returns the reply's data (``in_reply_to`` is added) or None
    for no reply. Streamed requests are assembled first. ``to_http`` addresses
    the reply to ``agora-http`` rather than broadcasting it.
    """

    def __init__(
        self,
        url: str,
        agent_id: str,
        space: str,
        answer: Answer = echo_answer,
        *,
        to_http: bool = True,
        metadata: dict[str, Any] | None = None,
    ):
        self.url, self.agent_id, self.space = url, agent_id, space
        self.answer = answer
        self.to_http = to_http
        self.metadata = metadata
        self.seen: list[dict[str, Any]] = []
        self.client: WsClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()
        self._streams: dict[str, dict[str, Any]] = {}

    async def start(self) -> Responder:
        self.client = await WsClient.connect(self.url, self.agent_id, heartbeat=True)
        if self.metadata is not None:
            reply = await self.client.request(
                {
                    "type": "agent.register",
                    "agent": {"id": self.agent_id, "metadata": self.metadata},
                }
            )
            assert reply["type"] == "agent.registered", reply
        await self.client.join(self.space)
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def wait_seen(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.seen) >= count), timeout)
            return list(self.seen)

    async def _loop(self) -> None:
        assert self.client is not None
        while True:
            msg = await self.client.recv(timeout=3600)
            event = self._whole(msg)
            if event is None:
                continue
            async with self._changed:
                self.seen.append(event)
                self._changed.notify_all()
            reply = self.answer(event["data"])
            if asyncio.iscoroutine(reply):
                reply = await reply
            if reply is None:
                continue
            out: dict[str, Any] = {
                "type": "space.publish",
                "space": event["space"],
                "data": {"in_reply_to": event["event_id"], **reply},
            }
            if self.to_http:
                out["to"] = "agora-http"
            await self.client.send(out)

    def _whole(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        if msg.get("from") != "agora-http":
            return None
        kind = msg.get("type")
        if kind == "space.event":
            return msg
        stream_id = msg.get("event_id")
        if kind == "space.event.delta":
            if stream_id not in self._streams:
                self._streams[stream_id] = {**msg, "type": "space.event", "parts": []}
            self._streams[stream_id]["parts"].append(msg["data"]["text"])
        elif kind == "space.event.done" and stream_id in self._streams:
            event = self._streams.pop(stream_id)
            event["data"] = {**event["data"], "text": "".join(event.pop("parts"))}
            return event
        return None

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self.client is not None:
            await self.client.close()


async def call(
    method: str, url: str, body: Any = None, *, raw: bytes | None = None, timeout: float = 30
) -> tuple[int, Any]:
    """One HTTP call; returns (status, decoded JSON or text)."""
    kwargs: dict[str, Any] = {}
    if raw is not None:
        kwargs["data"] = raw
        kwargs["headers"] = {"Content-Type": "application/json"}
    elif body is not None:
        kwargs["json"] = body
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.request(method, url, **kwargs) as resp,
    ):
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
