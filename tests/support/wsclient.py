"""A raw protocol client for tests that check the wire itself.

Tests of behaviour use the SDK (``hub.client``); this one sends exactly the
frames a test writes (garbage included) and reads frames as dicts.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

DEFAULT_TIMEOUT = 10.0
_ids = itertools.count(1)


class WsClient:
    def __init__(self, ws: ClientConnection, agent_id: str):
        self.ws = ws
        self.agent_id = agent_id
        self.registered: dict[str, Any] | None = None
        self.backlog: list[dict[str, Any]] = []

    @classmethod
    async def connect(
        cls,
        url: str,
        agent_id: str,
        *,
        token: str | None = None,
        registered: bool = True,
        **kwargs: Any,
    ) -> WsClient:
        """Connect to ``url`` (the hub's /ws URL, no query) as ``agent_id``."""
        query = f"agent_id={agent_id}" + (f"&token={token}" if token is not None else "")
        kwargs.setdefault("max_size", None)
        kwargs.setdefault("ping_interval", None)
        kwargs.setdefault("compression", None)
        ws = await connect(f"{url}?{query}", open_timeout=DEFAULT_TIMEOUT, **kwargs)
        client = cls(ws, agent_id)
        if registered:
            client.registered = await client.expect("agent.registered")
        return client

    async def send(self, msg: dict[str, Any] | str | bytes) -> None:
        if isinstance(msg, dict):
            await self.ws.send(orjson.dumps(msg).decode())
        else:
            await self.ws.send(msg)

    async def recv(self, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        if self.backlog:
            return self.backlog.pop(0)
        async with asyncio.timeout(timeout):
            raw = await self.ws.recv()
        return orjson.loads(raw)

    async def expect(self, kind: str, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """The next frame, which must be of type ``kind``."""
        msg = await self.recv(timeout)
        assert msg.get("type") == kind, f"expected {kind}, got {msg}"
        return msg

    async def wait_for(
        self, kind: str, timeout: float = DEFAULT_TIMEOUT, **fields: Any
    ) -> dict[str, Any]:
        """Skip frames until one of type ``kind`` whose fields match; others are kept."""
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self.backlog:
                        msg = self.backlog.pop(0)
                    else:
                        msg = orjson.loads(await self.ws.recv())
                    if msg.get("type") == kind and all(msg.get(k) == v for k, v in fields.items()):
                        return msg
                    skipped.append(msg)
        finally:
            self.backlog[:0] = skipped

    async def request(
        self, msg: dict[str, Any], timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """Send with a fresh ``id``; return the reply or error carrying that id."""
        rid = msg.setdefault("id", f"r{next(_ids)}")
        await self.send(msg)
        skipped: list[dict[str, Any]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    reply = orjson.loads(await self.ws.recv())
                    if reply.get("id") == rid or reply.get("request_id") == rid:
                        if reply.get("type") != "space.event" or reply.get("from") == self.agent_id:
                            return reply
                    skipped.append(reply)
        finally:
            self.backlog.extend(skipped)

    async def join(self, space: str) -> dict[str, Any]:
        reply = await self.request({"type": "space.join", "space": space})
        assert reply["type"] == "space.joined", reply
        return reply

    async def closed(self, timeout: float = DEFAULT_TIMEOUT) -> tuple[int | None, list[dict]]:
        """Read until the hub closes; returns (close code, frames read on the way)."""
        frames = list(self.backlog)
        self.backlog.clear()
        try:
            async with asyncio.timeout(timeout):
                while True:
                    frames.append(orjson.loads(await self.ws.recv()))
        except ConnectionClosed:
            pass
        rcvd = self.ws.close_rcvd
        return (rcvd.code if rcvd is not None else None), frames

    async def close(self) -> None:
        await self.ws.close()
